"""One port, one listener: every planned Ray pod's listeners (:mod:`tpuray.components.catalog.listeners`), and no two
at one port.

A stack rule over the RayClusters, the RayJobs' own clusters and the RayServices of one plan; same shape as the other
rule modules (Pulumi wire values, no Pulumi import, types from :mod:`.rule_types`), and :mod:`.rules` adds it to
``STACK_RULES``, so ``tpuray plan`` and the policy pack run it. Each pod's listeners: Ray's from its
``rayStartParams`` (and KubeRay's and Ray's defaults), the TPU runtime's per process from its row and the group's
slice, Serve's on a RayService, the TPU webhook's per TPU container, and the ports its other containers declare.

A pod's runtime is the one its worker image's tag names (``-xla``, ``-torch-tpu``), else TorchTPU where its Ray
container names tpuray's TorchTPU env callback (``RAY_TRAIN_CALLBACKS``), else PyTorch/XLA SPMD on a RayService's
workers (the serving path); otherwise each runtime is checked. A group's processes open their multislice ports
where a job may span slices: the group keeps more than one slice, or another group of the cluster has its shape (never
on a RayService, whose replicas each own one slice).
Also checked: the Ray container's port named ``metrics`` is Ray's metrics export port, since KubeRay v1.7.0 adds
one at 8080 where it has none and the head Service, the PodMonitorings and the NetworkPolicy follow that port.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tpuray.components.catalog.listeners import (
    Listener,
    clashes,
    ray_listeners,
    runtime_listeners,
    serve_listeners,
    webhook_listeners,
)
from tpuray.components.catalog.names import (
    KUBERAY_DEFAULT_METRICS_PORT,
    RAY_METRICS_PORT_NAME,
    RAY_TRAIN_CALLBACKS_ENV,
    TORCH_TPU_ENV_CALLBACK,
    TPU_RESOURCE,
)
from tpuray.components.catalog.runtimes import RUNTIMES, XLA_SPMD, Runtime, runtime_for_tag
from tpuray.components.catalog.slice_labels import slice_from_labels
from tpuray.components.catalog.topology import TopologyError, TpuSlice
from tpuray.components.catalog.wire import as_int, as_list, get_path
from tpuray.components.review.resource_types import RAY_CLUSTER, RAY_JOB, RAY_SERVICE
from tpuray.components.review.rule_types import Resource, RuleContext, StackRule

__all__ = ["LISTENER_STACK_RULES", "PodListeners", "pod_listeners", "port_clash_problems"]


@dataclass(frozen=True)
class PodListeners:
    """One planned pod template and every listener it will have, under one runtime (None: a pod with no TPU)."""

    urn: str
    where: str
    runtime: str | None
    listeners: tuple[Listener, ...]
    problems: tuple[str, ...] = ()
    """What is wrong with the pod's ports apart from a clash (its metrics port; a slice that cannot be read)."""


def _env(container: Mapping[str, Any]) -> dict[str, str]:
    return {
        str(e.get("name")): str(e.get("value", "")) for e in as_list(container.get("env")) if isinstance(e, Mapping)
    }


def _image_tag(image: str) -> str | None:
    ref = image.split("@", 1)[0]
    name_tag = ref.rsplit("/", 1)[-1]
    return name_tag.split(":", 1)[1] if ":" in name_tag else None


def _runtimes(container: Mapping[str, Any], serving: bool) -> list[tuple[str, Runtime]]:
    named = runtime_for_tag(_image_tag(str(container.get("image") or "")))
    if named == "torch_tpu" or TORCH_TPU_ENV_CALLBACK in _env(container).get(RAY_TRAIN_CALLBACKS_ENV, ""):
        return [("torch_tpu", RUNTIMES["torch_tpu"])]
    if serving:
        return [("xla (SPMD)", XLA_SPMD)]
    if named == "xla":
        return [("xla", RUNTIMES["xla"])]
    return [(name, rt) for name, rt in RUNTIMES.items()]


def _container_ports(c: Mapping[str, Any], what: str) -> list[Listener]:
    out = []
    for p in as_list(c.get("ports")):
        port = as_int(get_path(p, "containerPort"))
        if port is not None and str(get_path(p, "protocol") or "TCP") == "TCP":
            out.append(Listener(port, port, f"{what} port {get_path(p, 'name') or port}"))
    return out


def _metrics_problems(ray: Mapping[str, Any], params: Mapping[str, Any]) -> list[str]:
    exported = as_int(params.get("metrics-export-port")) or KUBERAY_DEFAULT_METRICS_PORT
    named = [p for p in as_list(ray.get("ports")) if get_path(p, "name") == RAY_METRICS_PORT_NAME]
    if not named:
        if exported == KUBERAY_DEFAULT_METRICS_PORT:
            return []
        return [
            f"its Ray container has no port named {RAY_METRICS_PORT_NAME!r}: KubeRay v1.7.0 adds one at "
            f"{KUBERAY_DEFAULT_METRICS_PORT} (DefaultMetricsPort), where Ray does not export (metrics-export-port "
            f"{exported}), and the head Service and anything scraping the port by name follow it"
        ]
    declared = as_int(get_path(named[0], "containerPort"))
    if declared != exported:
        return [
            f"its Ray container's port {RAY_METRICS_PORT_NAME!r} is {declared} but Ray exports its metrics on "
            f"{exported} (metrics-export-port)"
        ]
    return []


def _serve(spec: Mapping[str, Any]) -> list[Listener] | None:
    raw = spec.get("serveConfigV2")
    if raw is None:
        return None
    try:
        doc = json.loads(str(raw))  # tpuray writes JSON, which is YAML
    except ValueError:
        import yaml

        doc = yaml.safe_load(str(raw))
    return serve_listeners(doc if isinstance(doc, Mapping) else {})


def _group_slice(g: Mapping[str, Any], ray: Mapping[str, Any]) -> TpuSlice:
    chips = as_int(get_path(ray, "resources", "limits", TPU_RESOURCE)) or as_int(
        get_path(ray, "resources", "requests", TPU_RESOURCE)
    )
    labels = g.get("labels") or {}
    return slice_from_labels(labels if isinstance(labels, Mapping) else {}, chips_per_host=chips)


def _cluster(urn: str, at: str, spec: Mapping[str, Any], serve: list[Listener] | None) -> list[PodListeners]:
    out = []
    head = get_path(spec, "headGroupSpec") or {}
    groups = [g for g in as_list(spec.get("workerGroupSpecs")) if isinstance(g, Mapping)]
    slices: list[TpuSlice | None] = []
    for g in groups:
        containers = as_list(get_path(g, "template", "spec", "containers"))
        try:
            slices.append(_group_slice(g, containers[0]) if containers else None)
        except TopologyError:
            slices.append(None)
    for i, g in enumerate([head, *groups]):
        is_head = i == 0
        where = f"{at}.headGroupSpec" if is_head else f"{at}.workerGroupSpecs[{g.get('groupName', i - 1)}]"
        containers = [c for c in as_list(get_path(g, "template", "spec", "containers")) if isinstance(c, Mapping)]
        if not containers:
            continue
        ray, sidecars = containers[0], containers[1:]
        params = g.get("rayStartParams") or {}
        base = ray_listeners({str(k): str(v) for k, v in params.items()}, head=is_head) + (serve or [])
        native = [
            c
            for c in as_list(get_path(g, "template", "spec", "initContainers"))
            if isinstance(c, Mapping) and c.get("restartPolicy") == "Always"
        ]
        for c in [*sidecars, *native]:
            base += _container_ports(c, f"container {c.get('name')}")
        problems = _metrics_problems(ray, params)
        s = None if is_head else slices[i - 1]
        tpu = [c for c in containers if get_path(c, "resources", "limits", TPU_RESOURCE)]
        if is_head or not tpu:
            out.append(PodListeners(urn, where, None, tuple(base), tuple(problems)))
            continue
        if s is None:
            problems.append(
                "its slice cannot be read from its labels and google.com/tpu, so its TPU runtime's ports are unknown"
            )
            out.append(PodListeners(urn, where, None, tuple(base), tuple(problems)))
            continue
        replicas = max(as_int(g.get("maxReplicas")) or 0, as_int(g.get("replicas")) or 0)
        # a RayService's slices are Serve replicas, one whole slice each: no job spans them
        multislice = serve is None and (replicas > 1 or slices.count(s) > 1)
        hooked = [w for k, c in enumerate(tpu) for w in webhook_listeners(s, k, _env(c))]
        for name, rt in _runtimes(ray, serve is not None):
            mine = runtime_listeners(rt, s, multislice=multislice)
            out.append(PodListeners(urn, where, name, tuple(base + mine + hooked), tuple(problems)))
    return out


def pod_listeners(resources: Sequence[Resource]) -> list[PodListeners]:
    """Every Ray pod template of the plan with its listeners (a worker group once per runtime it may run)."""
    out: list[PodListeners] = []
    for r in resources:
        spec = r.props.get("spec") or {}
        name = str(get_path(r.props, "metadata", "name") or r.name)
        urn = r.urn or r.name
        if r.type == RAY_CLUSTER:
            out += _cluster(urn, f"RayCluster {name} spec", spec, None)
        elif r.type == RAY_JOB and isinstance(spec.get("rayClusterSpec"), Mapping):
            out += _cluster(urn, f"RayJob {name} spec.rayClusterSpec", spec["rayClusterSpec"], None)
        elif r.type == RAY_SERVICE and isinstance(spec.get("rayClusterConfig"), Mapping):
            out += _cluster(urn, f"RayService {name} spec.rayClusterConfig", spec["rayClusterConfig"], _serve(spec))
    return out


def port_clash_problems(pod: PodListeners) -> list[str]:
    """Two listeners of ``pod`` at one port, each pair named once, and the pod's other port problems."""
    under = f" under {pod.runtime}" if pod.runtime else ""
    found = list(pod.problems)
    for a, b, ports in clashes(pod.listeners):
        at = f"port {ports[0]}" if len(ports) == 1 else f"ports {ports[0]}-{ports[-1]}"
        found.append(f"{a} and {b} both listen on {at}{under}: the second to start cannot bind it")
    return found


def check_listeners(resources: Sequence[Resource], ctx: RuleContext) -> list[tuple[str, str]]:
    seen: set[tuple[str, str]] = set()
    out = []
    for pod in pod_listeners(resources):
        for m in port_clash_problems(pod):
            if (pod.where, m) not in seen:
                seen.add((pod.where, m))
                out.append((pod.urn, f"{pod.where}: {m}"))
    return out


LISTENER_STACK_RULES: tuple[StackRule, ...] = (
    StackRule(
        "one-listener-per-port",
        "No planned Ray pod has two listeners at one port: Ray's (its rayStartParams and defaults), the TPU "
        "runtime's per process (across slices too, where a job may span them), Serve's, the TPU webhook's per TPU "
        "container and its other containers' ports; and its Ray container's port named 'metrics' is Ray's metrics "
        "export port.",
        check_listeners,
    ),
)
