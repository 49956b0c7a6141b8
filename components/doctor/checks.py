"""The doctor's checks: pure functions of the objects read from a cluster and the stack's config.

Each check has a stable id, a result (``pass``, ``warn``, ``fail``), the fact it checked with its public source, and
how to fix it. Every minimum comes from where the stack already keeps it: GKE versions from the catalog
(:mod:`tpuray.components.catalog.topology`) and the config, the Ray and KubeRay floors of token auth from the config,
the rendered objects from the planners; the doctor adds none of its own.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from tpuray.components.catalog.names import (
    GKE_ACCELERATOR_LABEL,
    GKE_NODEPOOL_LABEL,
    GKE_TOPOLOGY_LABEL,
    IMAGE_BACKEND_LABEL,
    IMAGE_LIBTPU_VERSION_LABEL,
    IMAGE_RAY_VERSION_LABEL,
    IMAGE_TORCH_TPU_VERSION_LABEL,
    IMAGE_TORCH_VERSION_LABEL,
    IMAGE_TORCH_XLA_VERSION_LABEL,
    TPU_RESOURCE,
    TPU_WEBHOOK,
    TPU_WEBHOOK_SOURCE,
    WEBHOOK_POD_LABEL,
)
from tpuray.components.catalog.runtime_ports import TORCH_TPU_LIBTPU, TORCH_TPU_TORCH, TORCH_TPU_VERSIONS
from tpuray.components.catalog.topology import MIN_GKE_VERSION, generation
from tpuray.components.catalog.wire import as_list, get_path
from tpuray.components.config import (
    MIN_KUBERAY_AUTH_OPTIONS,
    MIN_RAY_TOKEN_AUTH,
    SlicePoolConfig,
    StackConfig,
)
from tpuray.components.config.value_types import gke_version_key
from tpuray.components.doctor.crd_schema import pruned_paths
from tpuray.components.doctor.reader import ClusterObjects
from tpuray.components.planning.kueue import kueue_spec
from tpuray.components.planning.pool_plan import kueue_entries, pool_plans
from tpuray.components.planning.stack_plan import plan_stack

__all__ = ["CheckResult", "ImageVersions", "Status", "run_checks"]

Status = Literal["pass", "warn", "fail"]

# ---- sources (public pages each fact is read from) --------------------------------------------------------
_SRC_GKE_TPU = "https://cloud.google.com/kubernetes-engine/docs/concepts/plan-tpus"
_SRC_FLEX = "https://cloud.google.com/kubernetes-engine/docs/concepts/flex-start"
_SRC_TPU7X = "https://cloud.google.com/kubernetes-engine/docs/concepts/tpu-ironwood"
_SRC_KUBERAY_AUTH = "https://docs.ray.io/en/latest/cluster/kubernetes/user-guides/kuberay-auth.html"
_SRC_KUBERAY_HELM = "https://github.com/ray-project/kuberay/tree/master/helm-chart/kuberay-operator"
_SRC_CRD_PRUNING = (
    "https://kubernetes.io/docs/tasks/extend-kubernetes/custom-resources/custom-resource-definitions/#field-pruning"
)
_SRC_DEVICE_PLUGIN = "https://cloud.google.com/kubernetes-engine/docs/how-to/tpus"
_SRC_KUEUE = "https://kueue.sigs.k8s.io/docs/installation/"
_SRC_DPV2 = "https://cloud.google.com/kubernetes-engine/docs/concepts/dataplane-v2"
_SRC_NETWORK_POLICY = "https://kubernetes.io/docs/concepts/services-networking/network-policies/"
_SRC_TOKEN_AUTH = "https://docs.ray.io/en/latest/ray-security/token-auth.html"
_SRC_TORCH_XLA = "https://github.com/pytorch/xla#available-docker-images-and-wheels"
_SRC_TORCH_TPU = "https://pypi.org/project/torch-tpu/0.2.0/"

# ---- what the checks look for -------------------------------------------------------------------------------
KUBERAY_OPERATOR_NAME = "kuberay-operator"
"""Deployment (and ``app.kubernetes.io/name``) of the KubeRay Helm chart's operator."""
KUEUE_CONTROLLER_NAME = "kueue-controller-manager"
"""Deployment of Kueue's controller (Helm chart and release manifests)."""
DEVICE_PLUGIN_POD_LABEL = ("k8s-app", "tpu-device-plugin")
"""GKE's TPU device plugin DaemonSet in kube-system (``kubectl -n kube-system get pods -l k8s-app=tpu-device-plugin``
lists its pods)."""
NETWORK_POLICY_AGENTS = {("k8s-app", "cilium"): "Dataplane V2 (anetd)", ("k8s-app", "calico-node"): "Calico"}
"""kube-system pods that enforce NetworkPolicy on GKE: anetd (Dataplane V2, labelled like Cilium) or Calico."""
SYSTEM_NAMESPACE = "kube-system"


@dataclass(frozen=True)
class CheckResult:
    id: str
    status: Status
    fact: str
    """What was checked and what was found."""
    source: str
    """Public page of the requirement."""
    fix: str

    def as_json(self) -> dict[str, str]:
        return {"id": self.id, "status": self.status, "fact": self.fact, "source": self.source, "fix": self.fix}


@dataclass(frozen=True)
class ImageVersions:
    """Versions a worker image reports (its ``tpuray.io/*-version`` labels); None where it says nothing."""

    ray: str | None
    torch: str | None
    torch_xla: str | None
    where: str
    torch_tpu: str | None = None
    libtpu: str | None = None
    backend: str | None = None
    """The image's runtime (``tpuray.io/backend``: ``xla`` or ``torch_tpu``, one workloads/Dockerfile target each)."""

    @classmethod
    def from_labels(cls, labels: Mapping[str, Any], where: str) -> ImageVersions:
        def get(key: str) -> str | None:
            value = labels.get(key)
            return value if isinstance(value, str) and value else None

        return cls(
            get(IMAGE_RAY_VERSION_LABEL),
            get(IMAGE_TORCH_VERSION_LABEL),
            get(IMAGE_TORCH_XLA_VERSION_LABEL),
            where,
            get(IMAGE_TORCH_TPU_VERSION_LABEL),
            get(IMAGE_LIBTPU_VERSION_LABEL),
            get(IMAGE_BACKEND_LABEL),
        )


# ---- small readers of API objects ---------------------------------------------------------------------------
def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    m = obj.get("metadata")
    return m if isinstance(m, Mapping) else {}


def _labels(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    labels = _meta(obj).get("labels")
    return labels if isinstance(labels, Mapping) else {}


def _name(obj: Mapping[str, Any]) -> str:
    return str(_meta(obj).get("name", "?"))


def _pod_ready(pod: Mapping[str, Any]) -> bool:
    conditions = as_list(get_path(pod, "status", "conditions"))
    return any(isinstance(c, Mapping) and c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _deployment_ready(dep: Mapping[str, Any]) -> bool:
    ready = get_path(dep, "status", "readyReplicas")
    return isinstance(ready, int) and ready >= 1


def _image_tag_version(dep: Mapping[str, Any]) -> str | None:
    """The version a Deployment runs: its first container's image tag (``quay.io/kuberay/operator:v1.7.0``)."""
    for c in as_list(get_path(dep, "spec", "template", "spec", "containers")):
        image = c.get("image") if isinstance(c, Mapping) else None
        if isinstance(image, str) and ":" in image.rsplit("/", 1)[-1]:
            return image.rsplit(":", 1)[1].split("@", 1)[0]
    return None


def _version(text: str | None) -> Version | None:
    if text is None:
        return None
    try:
        return Version(text.removeprefix("v"))
    except InvalidVersion:
        return None


def _gke_key(git_version: str) -> tuple[int, ...] | None:
    try:
        return gke_version_key(git_version.removeprefix("v").split("+", 1)[0])
    except ValueError:
        return None


def _short(names: Iterable[str], limit: int = 5) -> str:
    names = sorted(names)
    more = f" and {len(names) - limit} more" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more


# ---- GKE version --------------------------------------------------------------------------------------------
def _gke_minimums(cfg: StackConfig) -> list[tuple[str, str, str, str]]:
    """(check id, what needs it, minimum, source) for everything the stack runs."""
    out: list[tuple[str, str, str, str]] = []
    for name in dict.fromkeys(p.generation for p in cfg.slice_pools):
        need = generation(name).min_gke_version or MIN_GKE_VERSION
        out.append((f"gke-version.{name}", f"TPU {name}", need, _SRC_TPU7X if name == "tpu7x" else _SRC_GKE_TPU))
    for m in dict.fromkeys(p.capacity.gke_minimum for p in cfg.slice_pools if p.capacity.gke_minimum):
        out.append((f"gke-version.{m.feature}", m.what, m.version, m.source))
    return out


def check_gke_version(cfg: StackConfig, objs: ClusterObjects) -> list[CheckResult]:
    have = _gke_key(objs.server_version)
    results = []
    for check_id, what, need, source in _gke_minimums(cfg):
        fact = f"{what} needs GKE >= {need}; the control plane runs {objs.server_version}"
        fix = f"upgrade the control plane and node pools to {need} or later (gcloud container clusters upgrade)"
        if have is None:
            results.append(CheckResult(check_id, "warn", f"{fact} (not a GKE version: unknown)", source, fix))
        else:
            ok = have >= gke_version_key(need)
            results.append(CheckResult(check_id, "pass" if ok else "fail", fact, source, fix))
    return results


# ---- KubeRay ------------------------------------------------------------------------------------------------
def _find_deployment(objs: ClusterObjects, name: str, namespace: str | None = None) -> dict[str, Any] | None:
    for dep in objs.deployments:
        if namespace is not None and _meta(dep).get("namespace") != namespace:
            continue
        if _name(dep) == name or _labels(dep).get("app.kubernetes.io/name") == name:
            return dep
    return None


def check_kuberay_operator(cfg: StackConfig, objs: ClusterObjects) -> CheckResult:
    # The config refuses every stack without the Helm operator and authOptions (cloud_limits.ray_addon_problem).
    ray = cfg.ray
    floor = MIN_KUBERAY_AUTH_OPTIONS
    needs = f"KubeRay >= {floor} (token auth through authOptions)"
    dep = _find_deployment(objs, KUBERAY_OPERATOR_NAME)
    fix_install = f"install the kuberay-operator Helm chart {ray.helm_chart_version} (pulumi up installs it)"
    src = _SRC_KUBERAY_AUTH
    if dep is None:
        return CheckResult(
            "kuberay-operator",
            "fail",
            f"the stack needs {needs}; no kuberay-operator Deployment found",
            src,
            fix_install,
        )
    where = f"{_meta(dep).get('namespace', '?')}/{_name(dep)}"
    text = _labels(dep).get("app.kubernetes.io/version") or _image_tag_version(dep)
    have = _version(text if isinstance(text, str) else None)
    fact = f"the stack needs {needs}; {where} runs {text or 'an unknown version'}"
    if not _deployment_ready(dep):
        return CheckResult(
            "kuberay-operator",
            "fail",
            f"{fact}, with no ready replica",
            src,
            f"see kubectl -n {_meta(dep).get('namespace')} describe deployment {_name(dep)}",
        )
    if have is None:
        return CheckResult("kuberay-operator", "warn", fact + " (unknown)", src, fix_install)
    if have < Version(floor):
        return CheckResult("kuberay-operator", "fail", fact, src, f"upgrade KubeRay (its chart and CRDs) to {floor}+")
    if have != _version(ray.helm_chart_version):
        return CheckResult(
            "kuberay-operator",
            "warn",
            f"{fact}; the stack pins chart {ray.helm_chart_version}",
            _SRC_KUBERAY_HELM,
            "pulumi up to install the pinned chart, or pin ray.helmChartVersion to what runs",
        )
    return CheckResult("kuberay-operator", "pass", fact, src, fix_install)


def check_operator_namespace(cfg: StackConfig, objs: ClusterObjects) -> CheckResult:
    """The operator calls the head's job API for RayJob status; the stack's NetworkPolicy admits that port from one
    namespace (``ray.operatorNamespace``, default the Helm chart's; planning/network_policy.py), so an operator
    elsewhere is refused and every RayJob stays unknown."""
    admitted = cfg.ray.job_api_namespace
    fact = f"the job-API NetworkPolicy of namespace {cfg.ray.namespace} admits the KubeRay operator from {admitted}"
    fix = f"run the operator in {admitted}, or set ray.operatorNamespace to where it runs and pulumi up"
    dep = _find_deployment(objs, KUBERAY_OPERATOR_NAME)
    if dep is None:
        found = f"{fact}; no kuberay-operator Deployment found"
        return CheckResult("kuberay-operator-namespace", "fail", found, _SRC_NETWORK_POLICY, fix)
    where = str(_meta(dep).get("namespace", "?"))
    if where != admitted:
        return CheckResult(
            "kuberay-operator-namespace", "fail", f"{fact}; it runs in {where}: refused", _SRC_NETWORK_POLICY, fix
        )
    return CheckResult("kuberay-operator-namespace", "pass", f"{fact}; it runs there", _SRC_NETWORK_POLICY, fix)


def _crd_problems(rendered: Sequence[Mapping[str, Any]], crds: Sequence[Mapping[str, Any]]) -> tuple[list[str], str]:
    """Problems of the installed CRDs against the rendered custom resources, and what was found."""
    problems: list[str] = []
    found: list[str] = []
    for kind, api_version, objects in _rendered_kinds(rendered):
        group, _, version = api_version.rpartition("/")
        crd = next(
            (c for c in crds if get_path(c, "spec", "group") == group and get_path(c, "spec", "names", "kind") == kind),
            None,
        )
        if crd is None:
            problems.append(f"no CRD for {kind} ({api_version})")
            continue
        versions = [v for v in as_list(get_path(crd, "spec", "versions")) if isinstance(v, Mapping)]
        served = [str(v.get("name")) for v in versions if v.get("served")]
        entry = next((v for v in versions if v.get("name") == version and v.get("served")), None)
        found.append(f"{_name(crd)} serves {', '.join(served) or 'nothing'}")
        if entry is None:
            problems.append(f"{_name(crd)} does not serve {version} (serves {', '.join(served) or 'nothing'})")
            continue
        # every path of every rendered object against the served schema (crd_schema: the API server's pruning)
        schema = get_path(entry, "schema", "openAPIV3Schema")
        if not isinstance(schema, Mapping):
            problems.append(f"{_name(crd)} {version} has no openAPIV3Schema: unknown what it keeps")
            continue
        dropped = list(dict.fromkeys(p for obj in objects for p in pruned_paths(obj, schema)))
        if dropped:
            problems.append(
                f"{_name(crd)} {version} has no {_short(dropped, 4)} in its schema: the API server would drop "
                f"{'it' if len(dropped) == 1 else 'them'}"
            )
    return problems, "; ".join(dict.fromkeys(found))


def _rendered_kinds(
    rendered: Sequence[Mapping[str, Any]],
) -> list[tuple[str, str, list[Mapping[str, Any]]]]:
    """(kind, apiVersion, the objects) of the rendered custom resources, one entry per kind."""
    kinds: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for obj in rendered:
        kinds.setdefault((str(obj["kind"]), str(obj["apiVersion"])), []).append(obj)
    return [(k, v, objects) for (k, v), objects in kinds.items()]


def check_kuberay_crds(cfg: StackConfig, objs: ClusterObjects) -> CheckResult:
    # The stack's name only sets label values, which no CRD schema check reads.
    manifests = plan_stack(cfg, cfg.cluster.name).manifests
    problems, found = _crd_problems(manifests, objs.crds)
    fact = "the stack renders " + ", ".join(f"{k} ({v})" for k, v, _ in _rendered_kinds(manifests))
    fix = (
        f"install the KubeRay {cfg.ray.helm_chart_version} CRDs (Helm does not upgrade CRDs: kubectl apply "
        "--server-side -k 'github.com/ray-project/kuberay/ray-operator/config/crd?ref=v"
        f"{cfg.ray.helm_chart_version}')"
    )
    if problems:
        return CheckResult("kuberay-crds", "fail", f"{fact}; {'; '.join(problems)}", _SRC_CRD_PRUNING, fix)
    return CheckResult("kuberay-crds", "pass", f"{fact}; {found}", _SRC_CRD_PRUNING, fix)


# ---- the TPU webhook ----------------------------------------------------------------------------------------
def _mutates_pod_create(hook: Mapping[str, Any]) -> bool:
    for rule in as_list(hook.get("rules")):
        if not isinstance(rule, Mapping):
            continue
        ops, groups, resources = (as_list(rule.get(k)) for k in ("operations", "apiGroups", "resources"))
        if ({"CREATE", "*"} & set(ops)) and ({"", "*"} & set(groups)) and ({"pods", "*"} & set(resources)):
            return True
    return False


def _selects_ray_pods(hook: Mapping[str, Any]) -> bool:
    selector = get_path(hook, "objectSelector", "matchLabels")
    return isinstance(selector, Mapping) and all(selector.get(k) == v for k, v in WEBHOOK_POD_LABEL.items())


def check_tpu_webhook(cfg: StackConfig, objs: ClusterObjects) -> CheckResult:
    found = [
        f"{_name(cfg_obj)}/{hook.get('name')}"
        for cfg_obj in objs.webhooks
        for hook in as_list(cfg_obj.get("webhooks"))
        if isinstance(hook, Mapping)
        and _mutates_pod_create(hook)
        and ("tpu" in f"{_name(cfg_obj)} {hook.get('name')}".lower() or _selects_ray_pods(hook))
    ]
    multi_host = sorted(p.name for p in cfg.slice_pools if p.tpu_slice.multi_host)
    fact = (
        "multi-host Ray TPU pods need the KubeRay TPU webhook (TPU_WORKER_ID, TPU_WORKER_HOSTNAMES): a mutating "
        f"webhook on pod CREATE for {', '.join(f'{k}={v}' for k, v in WEBHOOK_POD_LABEL.items())}"
    )
    # The KubeRay Helm chart does not bundle it (the GKE Ray add-on did; the config refuses the add-on). A
    # single-host pod is its slice's only worker: the workload reads worker 0 without it (workloads/backend.py).
    fix = f"install the {TPU_WEBHOOK} Helm chart ({TPU_WEBHOOK_SOURCE})"
    if not found and not multi_host:
        return CheckResult(
            "tpu-webhook", "pass", f"{fact}; none registered, and no pool is multi-host", TPU_WEBHOOK_SOURCE, fix
        )
    if not found:
        return CheckResult(
            "tpu-webhook", "fail", f"{fact} ({_short(multi_host)}); none registered", TPU_WEBHOOK_SOURCE, fix
        )
    return CheckResult("tpu-webhook", "pass", f"{fact}; found {_short(found)}", TPU_WEBHOOK_SOURCE, fix)


# ---- TPU nodes ----------------------------------------------------------------------------------------------
def _pool_nodes(pool: SlicePoolConfig, objs: ClusterObjects) -> list[dict[str, Any]]:
    """The pool's nodes, each once (a snapshot may list a node twice; the API server never does)."""
    names = set(pool.node_pool_names)
    unique = {_name(n): n for n in reversed(objs.nodes) if _labels(n).get(GKE_NODEPOOL_LABEL) in names}
    return list(reversed(unique.values()))


def _listed_twice(pool: SlicePoolConfig, objs: ClusterObjects) -> list[str]:
    names = set(pool.node_pool_names)
    counts = Counter(_name(n) for n in objs.nodes if _labels(n).get(GKE_NODEPOOL_LABEL) in names)
    return sorted(name for name, count in counts.items() if count > 1)


def _not_schedulable(node: Mapping[str, Any]) -> str | None:
    """Why the scheduler would not place a pod on ``node`` (NotReady, cordoned), or None.
    https://kubernetes.io/docs/concepts/architecture/nodes/#condition, kubectl cordon sets spec.unschedulable."""
    if get_path(node, "spec", "unschedulable") is True:
        return "cordoned"
    if not _pod_ready(node):  # the same Ready condition, on a node
        return "NotReady"
    return None


def check_pool_nodes(pool: SlicePoolConfig, objs: ClusterObjects) -> list[CheckResult]:
    s = pool.tpu_slice
    nodes = _pool_nodes(pool, objs)
    pools = ", ".join(pool.node_pool_names)
    fix_pool = f"recreate node pool(s) {pools} from the stack (pulumi up); GKE sets these labels from the pool's shape"
    results = []

    want = {GKE_ACCELERATOR_LABEL: s.gke_accelerator, GKE_TOPOLOGY_LABEL: s.topology}
    wrong = [
        f"{_name(n)} has {k}={_labels(n).get(k, '(none)')}"
        for n in nodes
        for k, v in want.items()
        if _labels(n).get(k) != v
    ]
    fact = f"pool {pool.name} ({s}) nodes carry {', '.join(f'{k}={v}' for k, v in want.items())}"
    results.append(_nodes_result(f"tpu-node-labels.{pool.name}", nodes, wrong, fact, _SRC_GKE_TPU, fix_pool))

    # capacity is what the scheduler can use: a NotReady or cordoned host leaves its slice short
    unusable = {_name(n): why for n in nodes if (why := _not_schedulable(n))}
    per_pool = Counter(str(_labels(n).get(GKE_NODEPOOL_LABEL)) for n in nodes)
    usable = Counter(str(_labels(n).get(GKE_NODEPOOL_LABEL)) for n in nodes if _name(n) not in unusable)
    problems = [
        f"node pool {name} has {usable[name]} usable of {s.hosts} hosts"
        for name in sorted(per_pool)
        if s.multi_host and usable[name] != s.hosts
    ]
    slices = sum(1 for c in usable.values() if c == s.hosts) if s.multi_host else sum(usable.values())
    if not problems and not pool.min_slices <= slices <= pool.slices:
        problems.append(f"{slices} slice(s) up, the pool keeps {pool.min_slices} to {pool.slices}")
    twice = _listed_twice(pool, objs)
    fact = (
        f"pool {pool.name}: {pool.min_slices}-{pool.slices} slice(s) of {s.hosts} node(s) each; "
        f"found {len(nodes)} node(s) in {len(per_pool)} node pool(s)"
        + (f" ({_short(twice)} listed more than once, counted once)" if twice else "")
        + (f"; not counted: {_short(f'{n} ({why})' for n, why in unusable.items())}" if unusable else "")
    )
    fix = f"see the node pools' events (gcloud container node-pools describe {pools}); quota, capacity or repair"
    if unusable:
        fix += "; kubectl uncordon a cordoned node, kubectl describe node a NotReady one"
    status: Status = "fail" if problems else "pass"
    results.append(
        CheckResult(f"tpu-node-count.{pool.name}", status, f"{fact}; {'; '.join(problems) or 'ok'}", _SRC_GKE_TPU, fix)
    )

    wrong = [
        f"{_name(n)} has {get_path(n, 'status', 'allocatable', TPU_RESOURCE) or 'none'}"
        for n in nodes
        if str(get_path(n, "status", "allocatable", TPU_RESOURCE)) != str(s.chips_per_host)
    ]
    fact = f"pool {pool.name} nodes ({s.machine_type}) allocate {TPU_RESOURCE}={s.chips_per_host}"
    fix = "check the TPU device plugin on those nodes (tpu-device-plugin check), then repair or recreate them"
    results.append(_nodes_result(f"tpu-allocatable.{pool.name}", nodes, wrong, fact, _SRC_DEVICE_PLUGIN, fix))
    return results


def _nodes_result(check_id: str, nodes: list[Any], wrong: list[str], fact: str, source: str, fix: str) -> CheckResult:
    if not nodes:
        return CheckResult(check_id, "warn", f"{fact}; no nodes up (the pool is at zero): not checked", source, fix)
    if wrong:
        return CheckResult(check_id, "fail", f"{fact}; {_short(wrong)}", source, fix)
    return CheckResult(check_id, "pass", f"{fact}; {len(nodes)} node(s) ok", source, fix)


def check_device_plugin(cfg: StackConfig, objs: ClusterObjects) -> CheckResult:
    tpu_nodes = {_name(n) for p in cfg.slice_pools for n in _pool_nodes(p, objs)}
    key, value = DEVICE_PLUGIN_POD_LABEL
    ready = {
        str(get_path(pod, "spec", "nodeName"))
        for pod in objs.pods
        if _meta(pod).get("namespace") == SYSTEM_NAMESPACE and _labels(pod).get(key) == value and _pod_ready(pod)
    }
    fact = f"every TPU node runs a ready {SYSTEM_NAMESPACE} pod {key}={value}"
    fix = "GKE manages the plugin: check kubectl -n kube-system get pods -l k8s-app=tpu-device-plugin -o wide"
    missing = tpu_nodes - ready
    if not tpu_nodes:
        return CheckResult(
            "tpu-device-plugin", "warn", f"{fact}; no TPU nodes up: not checked", _SRC_DEVICE_PLUGIN, fix
        )
    if missing:
        return CheckResult(
            "tpu-device-plugin", "fail", f"{fact}; none ready on {_short(missing)}", _SRC_DEVICE_PLUGIN, fix
        )
    return CheckResult("tpu-device-plugin", "pass", f"{fact}; {len(tpu_nodes)} node(s) ok", _SRC_DEVICE_PLUGIN, fix)


# ---- Kueue --------------------------------------------------------------------------------------------------
def check_kueue(cfg: StackConfig, objs: ClusterObjects) -> list[CheckResult]:
    k = cfg.kueue
    fix = f"pulumi up installs Kueue {k.chart_version} in {k.namespace} (kueue.enabled: true)"
    dep = _find_deployment(objs, KUEUE_CONTROLLER_NAME, k.namespace)
    fact = f"the stack admits jobs through Kueue {k.chart_version}: {k.namespace}/{KUEUE_CONTROLLER_NAME}"
    if dep is None:
        controller = CheckResult("kueue-controller", "fail", f"{fact}; not found", _SRC_KUEUE, fix)
    else:
        version = _image_tag_version(dep)
        fact = f"{fact} runs {version or 'an unknown version'}"
        if not _deployment_ready(dep):
            controller = CheckResult("kueue-controller", "fail", f"{fact}, with no ready replica", _SRC_KUEUE, fix)
        elif _version(version) != _version(k.chart_version):
            controller = CheckResult(
                "kueue-controller",
                "warn",
                fact,
                _SRC_KUEUE,
                f"pulumi up to install the pinned {k.chart_version}, or pin what runs",
            )
        else:
            controller = CheckResult("kueue-controller", "pass", fact, _SRC_KUEUE, fix)
    rendered = kueue_spec(cfg, kueue_entries(pool_plans(cfg))).objects
    problems, found = _crd_problems(rendered, objs.crds)
    fact = "the stack renders " + ", ".join(f"{kind} ({v})" for kind, v, _ in _rendered_kinds(rendered))
    status: Status = "fail" if problems else "pass"
    crds = CheckResult("kueue-crds", status, f"{fact}; {'; '.join(problems) or found}", _SRC_KUEUE, fix)
    return [controller, crds]


# ---- NetworkPolicy enforcement ------------------------------------------------------------------------------
def check_network_policy(cfg: StackConfig, objs: ClusterObjects) -> CheckResult:
    found = Counter(
        agent
        for pod in objs.pods
        if _meta(pod).get("namespace") == SYSTEM_NAMESPACE and _pod_ready(pod)
        for (key, value), agent in NETWORK_POLICY_AGENTS.items()
        if _labels(pod).get(key) == value
    )
    fact = (
        f"the stack's NetworkPolicies in namespace {cfg.ray.namespace} only hold where an agent enforces them: "
        "Dataplane V2 (anetd pods, k8s-app=cilium) or Calico (k8s-app=calico-node) in kube-system"
    )
    fix = "create the cluster with Dataplane V2 (datapathProvider ADVANCED_DATAPATH, as the stack does)"
    if not found:
        return CheckResult(
            "network-policy", "fail", f"{fact}; no ready agent pod: the policies are not enforced", _SRC_DPV2, fix
        )
    agents = ", ".join(f"{a} ({n} ready pod(s))" for a, n in sorted(found.items()))
    return CheckResult("network-policy", "pass", f"{fact}; found {agents}", _SRC_DPV2, fix)


# ---- the worker image ---------------------------------------------------------------------------------------
def _requests_tpu(pod: Mapping[str, Any]) -> bool:
    for c in as_list(get_path(pod, "spec", "containers")):
        resources = get_path(c, "resources")
        if any(TPU_RESOURCE in (get_path(resources, part) or {}) for part in ("limits", "requests")):
            return True
    return False


def worker_image_versions(cfg: StackConfig, objs: ClusterObjects) -> list[ImageVersions]:
    """The versions each TPU worker pod of the Ray namespace reports through its annotations."""
    out = []
    for pod in objs.pods:
        if _meta(pod).get("namespace") == cfg.ray.namespace and _requests_tpu(pod):
            annotations = _meta(pod).get("annotations")
            where = f"pod {cfg.ray.namespace}/{_name(pod)}"
            out.append(ImageVersions.from_labels(annotations if isinstance(annotations, Mapping) else {}, where))
    return out


def _runtime_seen(r: ImageVersions, torch_tpu: bool) -> str:
    backend = f"{r.backend} image, " if r.backend else ""
    if torch_tpu:
        return f"{r.where}: {backend}torch {r.torch or '?'}, torch_tpu {r.torch_tpu or '?'}, libtpu {r.libtpu or '?'}"
    return f"{r.where}: {backend}torch {r.torch or '?'}, torch_xla {r.torch_xla or '?'}"


def _torch_xla_ok(r: ImageVersions) -> bool:
    torch, xla = _version(r.torch), _version(r.torch_xla)
    return torch is not None and xla is not None and torch.release[:2] == xla.release[:2]


def _in(version: str | None, spec: str) -> bool:
    v = _version(version)
    return v is not None and SpecifierSet(spec).contains(v.base_version)


def _torch_tpu_ok(r: ImageVersions) -> bool:
    return (
        _in(r.torch_tpu, TORCH_TPU_VERSIONS)
        and _in(r.torch, TORCH_TPU_TORCH)
        and _in(r.libtpu, TORCH_TPU_LIBTPU)
        and r.torch_xla is None
    )


def check_worker_image(cfg: StackConfig, objs: ClusterObjects, image: ImageVersions | None) -> list[CheckResult]:
    reports = [image] if image is not None else [v for v in worker_image_versions(cfg, objs) if v.ray or v.torch]
    torch_tpu = cfg.workload.backend == "torch_tpu"
    runtime = (
        (IMAGE_TORCH_TPU_VERSION_LABEL, IMAGE_LIBTPU_VERSION_LABEL) if torch_tpu else (IMAGE_TORCH_XLA_VERSION_LABEL,)
    )
    how = (
        f"build the worker from workloads/Dockerfile (it stamps {IMAGE_RAY_VERSION_LABEL}, "
        f"{IMAGE_TORCH_VERSION_LABEL}, {', '.join(runtime)}, {IMAGE_BACKEND_LABEL}) and pass its docker inspect output "
        "with --image-inspect, or annotate the worker pods with those keys"
    )
    if not reports:
        fact = "no running TPU worker pod and no image inspect output reports its versions: unknown"
        pair = ("worker-torch-tpu", _SRC_TORCH_TPU) if torch_tpu else ("worker-torch-pair", _SRC_TORCH_XLA)
        return [
            CheckResult(pair[0], "warn", fact, pair[1], how),
            CheckResult("worker-ray-version", "warn", fact, _SRC_TOKEN_AUTH, how),
        ]
    pair_bad, pair_seen, ray_bad, ray_seen = [], [], [], []
    for r in reports:
        pair_seen.append(_runtime_seen(r, torch_tpu))
        if (r.backend is not None and r.backend != cfg.workload.backend) or not (
            _torch_tpu_ok(r) if torch_tpu else _torch_xla_ok(r)
        ):
            pair_bad.append(pair_seen[-1])
        ray = _version(r.ray)
        ray_seen.append(f"{r.where}: Ray {r.ray or '?'}")
        if ray is None or ray < Version(MIN_RAY_TOKEN_AUTH) or ray != _version(cfg.ray.version):
            ray_bad.append(ray_seen[-1])
    if torch_tpu:
        pair_id, pair_src = "worker-torch-tpu", _SRC_TORCH_TPU
        pair_fact = (
            f"backend torch_tpu: a torch_tpu image (torch_tpu {TORCH_TPU_VERSIONS}, torch {TORCH_TPU_TORCH}, libtpu "
            f"{TORCH_TPU_LIBTPU}, torch_tpu 0.2.0's own requirements)"
        )
        fix = "build the worker-torch-tpu target of workloads/Dockerfile (tpuray[torch-tpu])"
    else:
        pair_id, pair_src = "worker-torch-pair", _SRC_TORCH_XLA
        pair_fact = "backend xla: torch_xla loads only with the torch of its own release (same major.minor)"
        fix = "rebuild the worker image with torch and torch_xla of one release (workloads/Dockerfile pins both)"
    results = [
        CheckResult(pair_id, "fail", f"{pair_fact}; {_short(pair_bad, 3)}", pair_src, fix)
        if pair_bad
        else CheckResult(pair_id, "pass", f"{pair_fact}; {_short(pair_seen, 3)}", pair_src, fix)
    ]
    ray_fact = (
        f"workers run Ray >= {MIN_RAY_TOKEN_AUTH} (token auth) and the head's Ray {cfg.ray.version} (one version per "
        "cluster)"
    )
    fix = f"rebuild the worker image on rayproject/ray:{cfg.ray.version} (ARG RAY_VERSION in workloads/Dockerfile)"
    src = _SRC_TOKEN_AUTH
    results.append(
        CheckResult("worker-ray-version", "fail", f"{ray_fact}; {_short(ray_bad, 3)}", src, fix)
        if ray_bad
        else CheckResult("worker-ray-version", "pass", f"{ray_fact}; {_short(ray_seen, 3)}", src, fix)
    )
    return results


# ---- all of them --------------------------------------------------------------------------------------------
def run_checks(cfg: StackConfig, objs: ClusterObjects, image: ImageVersions | None = None) -> list[CheckResult]:
    """Every check that applies to this stack, in a stable order."""
    results = check_gke_version(cfg, objs)
    results += [check_kuberay_operator(cfg, objs), check_kuberay_crds(cfg, objs), check_tpu_webhook(cfg, objs)]
    results.append(check_operator_namespace(cfg, objs))
    for pool in cfg.slice_pools:
        results += check_pool_nodes(pool, objs)
    results.append(check_device_plugin(cfg, objs))
    if cfg.kueue.enabled:
        results += check_kueue(cfg, objs)
    results.append(check_network_policy(cfg, objs))
    results += check_worker_image(cfg, objs, image)
    from tpuray.components.doctor.torch_tpu_checks import runtime_checks  # it imports this module's helpers

    results += runtime_checks(cfg, objs)
    return results
