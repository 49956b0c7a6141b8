"""The doctor's checks: pure functions of the objects read from a cluster and the stack's config.

Each check has a stable id, a result (``pass``, ``warn``, ``fail``), the fact it checked with its public source, and
how to fix it. Every minimum comes from where the stack already keeps it: GKE versions from the catalog
(:mod:`tpuray.components.catalog.topology`) and the config, the Ray and KubeRay floors of token auth from the config,
the rendered objects from the planners; the doctor adds none of its own.
"""

from __future__ import annotations

from functools import partial

from tpuray.components.config import StackConfig
from tpuray.components.doctor.gateway_checks import check_serving_gateway_api, check_serving_gateway_class
from tpuray.components.doctor.gke_checks import check_gke_version
from tpuray.components.doctor.image_checks import ImageVersions, check_worker_image
from tpuray.components.doctor.kuberay_checks import (
    check_kuberay_crds,
    check_kuberay_operator,
    check_operator_namespace,
)
from tpuray.components.doctor.kueue_checks import check_kueue
from tpuray.components.doctor.network_checks import check_network_policy
from tpuray.components.doctor.node_checks import check_device_plugin, check_pool_nodes
from tpuray.components.doctor.objects import FieldError
from tpuray.components.doctor.reader import ClusterObjects
from tpuray.components.doctor.result import Check, CheckResult, Status
from tpuray.components.doctor.serving_checks import check_serving_pools_apart, check_serving_upgrade_gate
from tpuray.components.doctor.sources import SRC_API_OBJECTS
from tpuray.components.doctor.torch_tpu_checks import check_torch_tpu_env
from tpuray.components.doctor.webhook_checks import check_tpu_webhook, check_tpu_webhook_version

__all__ = ["CheckResult", "ImageVersions", "Status", "run_checks"]


def _guarded(check_id: str, run: Check) -> list[CheckResult]:
    """What ``run`` finds; a field of the wrong type in an object it read fails check ``check_id``, naming both
    (the API server never returns it, so the object was edited or the snapshot is not what kubectl saved)."""
    try:
        found = run()
    except FieldError as e:
        return [
            CheckResult(
                check_id,
                "fail",
                f"{e.fact}: cannot tell what it runs",
                SRC_API_OBJECTS,
                "save the object again with kubectl get -o json (a snapshot), or repair it on the cluster",
            )
        ]
    return [] if found is None else [found] if isinstance(found, CheckResult) else found


def run_checks(cfg: StackConfig, objs: ClusterObjects, image: ImageVersions | None = None) -> list[CheckResult]:
    """Every check that applies to this stack, in a stable order."""
    pair = "worker-torch-tpu" if cfg.workload.backend == "torch_tpu" else "worker-torch-pair"
    checks: list[tuple[str, Check]] = [
        ("gke-version", partial(check_gke_version, cfg, objs)),
        ("kuberay-operator", partial(check_kuberay_operator, cfg, objs)),
        ("kuberay-crds", partial(check_kuberay_crds, cfg, objs)),
        ("tpu-webhook", partial(check_tpu_webhook, cfg, objs)),
        ("kuberay-operator-namespace", partial(check_operator_namespace, cfg, objs)),
        *((f"tpu-node-labels.{pool.name}", partial(check_pool_nodes, pool, objs)) for pool in cfg.slice_pools),
        ("tpu-device-plugin", partial(check_device_plugin, cfg, objs)),
        *([("kueue-controller", partial(check_kueue, cfg, objs))] if cfg.kueue.enabled else []),
        ("network-policy", partial(check_network_policy, cfg, objs)),
        (pair, partial(check_worker_image, cfg, objs, image)),
        ("tpu-webhook-version", partial(check_tpu_webhook_version, cfg, objs)),
        ("torch-tpu-env", partial(check_torch_tpu_env, cfg, objs)),
        ("serving-upgrade-gate", partial(check_serving_upgrade_gate, cfg, objs)),
        ("serving-pools-apart", partial(check_serving_pools_apart, cfg, objs)),
        ("serving-gateway-api", partial(check_serving_gateway_api, cfg, objs)),
        ("serving-gateway-class", partial(check_serving_gateway_class, cfg, objs)),
    ]
    return [r for check_id, run in checks for r in _guarded(check_id, run)]
