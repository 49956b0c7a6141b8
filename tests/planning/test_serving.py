"""The RayService of ``tpuray:serving``: valid against KubeRay v1.7.0's CRD, its worker group the training group of
its pool (every TPU fact equal, only the slice counts its own), declared by the program, and absent otherwise."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from tests.support import engine_run as er
from tests.support.kuberay_schema import crd_dir, served_validator, tpu_chip_mismatches
from tests.support.stacks import SERVE_POOL, SERVING, shipped_values
from tpuray.components.catalog.names import KUEUE_QUEUE_NAME_LABEL, RAY_CLUSTER_POD_LABEL, WEBHOOK_POD_LABEL
from tpuray.components.config import StackConfig, parse_stack_config
from tpuray.components.planning.kuberay import ray_cluster_manifest
from tpuray.components.planning.network_policy import allowed_ingress_ports, network_policies
from tpuray.components.planning.serving import ray_service_manifest
from tpuray.components.planning.stack_plan import StackPlan, plan_stack


def config(serving: dict[str, Any] | None = None, **sections: Any) -> StackConfig:
    """The dev stack with the v5e 4x4 pool, and ``serving`` (``SERVING`` when None) unless it is ``{}``."""
    v = shipped_values("dev")
    v["slicePools"].append(copy.deepcopy(SERVE_POOL))
    if serving != {}:
        v["serving"] = {**SERVING, **(serving or {})}
    v.update(sections)
    return parse_stack_config(v, stack="dev")


def service(plan: StackPlan) -> dict[str, Any]:
    assert plan.serving is not None
    return ray_service_manifest(plan.serving)


def schema_errors(manifest: dict[str, Any]) -> list[str]:
    v = served_validator(crd_dir() / "ray.io_rayservices.yaml", "RayService", "v1")
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in v.iter_errors(manifest)]


INCREMENTAL = {"strategy": "NewClusterWithIncrementalUpgrade", "stepSlices": 1, "gatewayClassName": "gke-l7-rilb"}


@pytest.mark.parametrize("upgrade", [{}, {"strategy": "None"}, INCREMENTAL])
def test_the_rayservice_is_valid_against_the_v1_7_crd(upgrade: dict[str, Any]) -> None:
    m = service(plan_stack(config({"upgrade": upgrade}), "dev"))
    assert schema_errors(m) == []
    assert tpu_chip_mismatches(m["spec"]["rayClusterConfig"]) == []
    bad = copy.deepcopy(m)
    bad["spec"]["upgradeStrategy"]["steps"] = 1  # the validator refuses what the CRD does not know
    assert schema_errors(bad)


def test_the_serving_group_is_the_training_group_of_its_pool_but_for_its_slices() -> None:
    """The same pool trained on (a stack without serving, whose RayCluster has a group per pool) and served."""
    training = ray_cluster_manifest(plan_stack(config({}), "dev").ray.params)
    [trained] = [g for g in training["spec"]["workerGroupSpecs"] if g["groupName"] == "v5e-serve"]
    [served] = service(plan_stack(config(), "dev"))["spec"]["rayClusterConfig"]["workerGroupSpecs"]
    counts = ("replicas", "minReplicas", "maxReplicas")
    assert {k: served[k] for k in counts} == {"replicas": 2, "minReplicas": 1, "maxReplicas": 4}
    # the one difference but the counts: the Ray pod label, the network identity of the service's own
    assert served["template"]["metadata"]["labels"].pop(RAY_CLUSTER_POD_LABEL) == "tpuray-dev-chat"
    assert trained["template"]["metadata"]["labels"].pop(RAY_CLUSTER_POD_LABEL) == "tpuray-dev"
    assert {k: v for k, v in served.items() if k not in counts} == {k: v for k, v in trained.items() if k not in counts}
    assert served["numOfHosts"] == 4  # a v5e 4x4 slice: four hosts of four chips
    assert served["template"]["metadata"]["labels"].items() >= WEBHOOK_POD_LABEL.items()


def _selects(obj: dict[str, Any], labels: dict[str, str]) -> bool:
    return bool(obj["spec"]["podSelector"]["matchLabels"].items() <= labels.items())


def test_serving_pods_are_a_network_identity_of_their_own() -> None:
    """Their own PodMonitoring and NetworkPolicies select them; training's do not, and neither lets a serving pod and
    a training pod reach each other's Ray ports."""
    plan = plan_stack(config(), "dev")
    assert plan.serving is not None
    [served] = service(plan)["spec"]["rayClusterConfig"]["workerGroupSpecs"]
    serving_pod = served["template"]["metadata"]["labels"]
    [trained] = ray_cluster_manifest(plan.ray.params)["spec"]["workerGroupSpecs"]
    training_pod = trained["template"]["metadata"]["labels"]
    [own_scrape] = plan.serving.monitoring
    assert own_scrape["metadata"]["name"] == "tpuray-dev-chat-serving-metrics"
    assert own_scrape["spec"]["selector"]["matchLabels"].items() <= serving_pod.items()
    [training_scrape] = plan.ray.monitoring
    assert not training_scrape["spec"]["selector"]["matchLabels"].items() <= serving_pod.items()

    own = {pol["metadata"]["name"]: pol for pol in plan.serving.network_policies}
    assert set(own) == {
        f"tpuray-dev-chat-ray-{kind}" for kind in ("metrics", "peers", "head-job-api", "tpu-device-plugin")
    }
    # KubeRay adds ray.io/node-type to the pods it makes: the head's policy selects the service's head among them
    assert {pol["spec"]["podSelector"]["matchLabels"][RAY_CLUSTER_POD_LABEL] for pol in own.values()} == {
        "tpuray-dev-chat"
    }
    assert not any(_selects(pol, training_pod) for pol in own.values())
    training = network_policies(plan.ray.network)
    peers = next(pol for pol in training if pol["metadata"]["name"].endswith("-ray-peers"))
    assert not _selects(peers, serving_pod)
    [peer] = own["tpuray-dev-chat-ray-peers"]["spec"]["ingress"][0]["from"]
    assert peer["podSelector"]["matchLabels"] == {RAY_CLUSTER_POD_LABEL: "tpuray-dev-chat"}
    # the serving pool's runtime ports (a v5e 4x4 host's four chips) among its own pods
    assert allowed_ingress_ports(plan.serving.network_policies, serving_pod) >= {8471, 8476, 8477, 8478, 8479}
    # only the operator's namespace calls its head's dashboard: no RayJob submitter runs against a RayService
    [operator] = own["tpuray-dev-chat-ray-head-job-api"]["spec"]["ingress"][0]["from"]
    assert operator["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": "kuberay-system"}


def test_head_token_and_autoscaling_are_the_stacks() -> None:
    plan = plan_stack(config(), "dev")
    spec = service(plan)["spec"]["rayClusterConfig"]
    shared = ray_cluster_manifest(plan.ray.params)["spec"]
    for head in (spec["headGroupSpec"], shared["headGroupSpec"]):
        del head["template"]["metadata"]["labels"][RAY_CLUSTER_POD_LABEL]  # the network identity: its own
    assert spec["headGroupSpec"] == shared["headGroupSpec"]
    assert spec["authOptions"] == shared["authOptions"] == {"mode": "token", "secretName": "tpuray-dev-ray-auth"}
    assert spec["enableInTreeAutoscaling"] is True  # minSlices < maxSlices


def test_the_shared_raycluster_leaves_the_serving_pool_to_the_rayservice() -> None:
    plan = plan_stack(config(), "dev")
    groups = [g.name for g in plan.ray.params.groups]
    assert groups == ["v5e-dev"]
    kinds = [m["kind"] for m in plan.manifests]
    assert kinds == ["RayCluster", "RayJob", "RayService"]
    assert plan_stack(config({}), "dev").serving is None


def test_serve_config_and_upgrade_strategy() -> None:
    m = service(plan_stack(config({"upgrade": INCREMENTAL}), "dev"))
    assert m["metadata"]["name"] == "tpuray-dev-chat"
    serve = json.loads(m["spec"]["serveConfigV2"])  # JSON is YAML: what KubeRay parses
    assert serve["applications"] == [{"name": "chat", "import_path": "chat.app:app", "route_prefix": "/"}]
    assert serve["http_options"]["port"] == 8000
    assert m["spec"]["upgradeStrategy"] == {
        "type": "NewClusterWithIncrementalUpgrade",
        "clusterUpgradeOptions": {
            "maxSurgePercent": 50,  # one slice of two replicas
            "stepSizePercent": 50,
            "intervalSeconds": 60,
            "gatewayClassName": "gke-l7-rilb",
        },
    }
    assert service(plan_stack(config(), "dev"))["spec"]["upgradeStrategy"] == {"type": "NewCluster"}


def test_kueue_labels_only_where_the_stack_has_kueue() -> None:
    assert KUEUE_QUEUE_NAME_LABEL not in service(plan_stack(config(), "dev"))["metadata"]["labels"]
    labels = service(plan_stack(config(kueue={"enabled": True}), "dev"))["metadata"]["labels"]
    assert labels[KUEUE_QUEUE_NAME_LABEL] == "tpu"


def _program_config(serving: bool) -> dict[str, str]:
    cfg = er.cli_config("dev")
    pools = json.loads(cfg["tpuray:slicePools"])
    cfg["tpuray:slicePools"] = json.dumps([*pools, SERVE_POOL])
    if serving:
        cfg["tpuray:serving"] = json.dumps(SERVING)
    return cfg


def test_the_program_declares_the_rayservice_as_a_child_of_its_component() -> None:
    run = er.run(er.ROOT / "infra" / "__main__.py", stack="dev", config=_program_config(serving=True))[0]
    [component] = [r for r in run.resources if r["type"] == "tpuray:index:RayTpuService"]
    assert component["name"] == "serve"
    children = er.children_of(run, "RayTpuService")
    [svc] = [c for c in children if c["type"] == "kubernetes:ray.io/v1:RayService"]
    assert svc["name"] == "serve-rayservice"
    # its own NetworkPolicies and PodMonitoring, which the RayService waits for
    policies = [c["name"] for c in children if c["type"] == "kubernetes:networking.k8s.io/v1:NetworkPolicy"]
    assert sorted(policies) == sorted(
        f"serve-netpol-tpuray-dev-chat-ray-{k}" for k in ("metrics", "peers", "head-job-api", "tpu-device-plugin")
    )
    assert [c["type"] for c in children if c not in [svc] and c["name"] not in policies] == [
        "kubernetes:monitoring.googleapis.com/v1:PodMonitoring"
    ]
    assert {u for u in er.depends_on(svc) if "NetworkPolicy" in u} != set()
    # it waits for the Ray token, namespace and operator, and for the node pools, as the RayCluster does
    waits = er.depends_on(svc)
    assert any("ray-ray-auth" in u for u in waits) and any("NodePool" in u for u in waits)
    without = er.run(er.ROOT / "infra" / "__main__.py", stack="dev", config=_program_config(serving=False))[0]
    assert "tpuray:index:RayTpuService" not in without.types()
