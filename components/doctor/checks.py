"""The doctor's checks: pure functions of the objects read from a cluster and the stack's config.

Each check has a stable id, a result (``pass``, ``warn``, ``fail``), the fact it checked with its public source, and
how to fix it. Every minimum comes from where the stack already keeps it: GKE versions from the catalog
(:mod:`tpuray.components.catalog.topology`) and the config, the Ray and KubeRay floors of token auth from the config,
the rendered objects from the planners; the doctor adds none of its own.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from tpuray.components.catalog.gke_versions import gke_version_key
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
from tpuray.components.catalog.runtimes import (
    RUNTIMES,
    TORCH_TPU_LIBTPU,
    TORCH_TPU_TORCH,
    TORCH_TPU_VERSIONS,
    runtime_for_tag,
)
from tpuray.components.catalog.topology import MIN_GKE_VERSION, generation
from tpuray.components.catalog.wire import as_list, get_path
from tpuray.components.config import (
    MIN_KUBERAY_AUTH_OPTIONS,
    MIN_RAY_TOKEN_AUTH,
    SlicePoolConfig,
    StackConfig,
)
from tpuray.components.doctor.crd_schema import pruned_paths
from tpuray.components.doctor.objects import (
    FieldError,
    container_named,
    container_names,
    deployment_ready,
    find_deployment,
    image_tag,
    item_paths,
    labels,
    mapping_at,
    meta,
    name,
    pod_ready,
    running_tpu_pods,
    short,
    strings_at,
    text_at,
    tpu_containers,
    version,
    where,
)
from tpuray.components.doctor.reader import ClusterObjects
from tpuray.components.doctor.result import Check, CheckResult, Status
from tpuray.components.doctor.torch_tpu_checks import runtime_checks
from tpuray.components.planning.kueue import kueue_spec
from tpuray.components.planning.pool_plan import kueue_entries, pool_plans
from tpuray.components.planning.stack_plan import plan_stack

__all__ = ["CheckResult", "ImageVersions", "Status", "run_checks"]

# ---- sources (public pages each fact is read from) --------------------------------------------------------
_SRC_GKE_TPU = "https://cloud.google.com/kubernetes-engine/docs/concepts/plan-tpus"
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
_SRC_API_OBJECTS = "https://kubernetes.io/docs/reference/kubernetes-api/"

# ---- what the checks look for -------------------------------------------------------------------------------
KUBERAY_OPERATOR_NAME = "kuberay-operator"
"""Deployment (and ``app.kubernetes.io/name``) of the KubeRay Helm chart's operator, and its container's name
(``{{ .Chart.Name }}`` in ``helm-chart/kuberay-operator/templates/deployment.yaml``; ``kuberay-operator`` in the
kustomize ``ray-operator/config/manager/manager.yaml`` too, v1.7.0)."""
KUEUE_CONTROLLER_NAME = "kueue-controller-manager"
"""Deployment of Kueue's controller (Helm chart and release manifests)."""
KUEUE_CONTAINER = "manager"
"""The controller's container (``charts/kueue/templates/manager/manager.yaml``)."""
DEVICE_PLUGIN_POD_LABEL = ("k8s-app", "tpu-device-plugin")
"""GKE's TPU device plugin DaemonSet in kube-system (``kubectl -n kube-system get pods -l k8s-app=tpu-device-plugin``
lists its pods)."""
NETWORK_POLICY_AGENTS = {("k8s-app", "cilium"): "Dataplane V2 (anetd)", ("k8s-app", "calico-node"): "Calico"}
"""kube-system pods that enforce NetworkPolicy on GKE: anetd (Dataplane V2, labelled like Cilium) or Calico."""
SYSTEM_NAMESPACE = "kube-system"


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
    tag_backend: str | None = None
    """The runtime the pod's image tag names (``...-xla``, ``...-torch-tpu``: catalog/images.py), where it does."""

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


def _gke_key(git_version: str) -> tuple[int, ...] | None:
    try:
        return gke_version_key(git_version.removeprefix("v").split("+", 1)[0])
    except ValueError:
        return None


# ---- GKE version --------------------------------------------------------------------------------------------
def _gke_minimums(cfg: StackConfig) -> list[tuple[str, str, str, str]]:
    """(check id, what needs it, minimum, source) for everything the stack runs."""
    out: list[tuple[str, str, str, str]] = []
    for gen in dict.fromkeys(p.generation for p in cfg.slice_pools):
        need = generation(gen).min_gke_version or MIN_GKE_VERSION
        out.append((f"gke-version.{gen}", f"TPU {gen}", need, _SRC_TPU7X if gen == "tpu7x" else _SRC_GKE_TPU))
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
def _running_version(dep: Mapping[str, Any], container: str) -> tuple[str | None, str]:
    """(the version a Deployment runs, what was read): its container ``container``'s image tag, by name."""
    path = container_named(dep, container)
    if path is None:
        return None, f"no container {container} (containers: {', '.join(container_names(dep)) or 'none'})"
    image, tag = image_tag(dep, path)
    return tag, f"image {image}" if image else f"container {container} has no image"


def check_kuberay_operator(cfg: StackConfig, objs: ClusterObjects) -> CheckResult:
    # The config refuses every stack without the Helm operator and authOptions (cloud_limits.ray_addon_problem).
    ray = cfg.ray
    floor = MIN_KUBERAY_AUTH_OPTIONS
    needs = f"KubeRay >= {floor} (token auth through authOptions)"
    dep = find_deployment(objs, KUBERAY_OPERATOR_NAME, ray.job_api_namespace)
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
    text, read = _running_version(dep, KUBERAY_OPERATOR_NAME)
    text = labels(dep).get("app.kubernetes.io/version") or text
    have = version(text)
    fact = f"the stack needs {needs}; {meta(dep).get('namespace', '?')}/{name(dep)} runs {text or 'an unknown version'}"
    if not deployment_ready(dep):
        return CheckResult(
            "kuberay-operator",
            "fail",
            f"{fact}, with no ready replica",
            src,
            f"see kubectl -n {meta(dep).get('namespace')} describe deployment {name(dep)}",
        )
    if have is None:
        return CheckResult("kuberay-operator", "warn", f"{fact} ({read}: unknown)", src, fix_install)
    if have < Version(floor):
        return CheckResult("kuberay-operator", "fail", fact, src, f"upgrade KubeRay (its chart and CRDs) to {floor}+")
    if have != version(ray.helm_chart_version):
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
    dep = find_deployment(objs, KUBERAY_OPERATOR_NAME, admitted)
    if dep is None:
        found = f"{fact}; no kuberay-operator Deployment found"
        return CheckResult("kuberay-operator-namespace", "fail", found, _SRC_NETWORK_POLICY, fix)
    runs_in = str(meta(dep).get("namespace", "?"))
    if runs_in != admitted:
        return CheckResult(
            "kuberay-operator-namespace", "fail", f"{fact}; it runs in {runs_in}: refused", _SRC_NETWORK_POLICY, fix
        )
    return CheckResult("kuberay-operator-namespace", "pass", f"{fact}; it runs there", _SRC_NETWORK_POLICY, fix)


def _crd_problems(rendered: Sequence[Mapping[str, Any]], crds: Sequence[Mapping[str, Any]]) -> tuple[list[str], str]:
    """Problems of the installed CRDs against the rendered custom resources, and what was found."""
    problems: list[str] = []
    found: list[str] = []
    for kind, api_version, objects in _rendered_kinds(rendered):
        group, _, served_as = api_version.rpartition("/")
        crd = next(
            (c for c in crds if get_path(c, "spec", "group") == group and get_path(c, "spec", "names", "kind") == kind),
            None,
        )
        if crd is None:
            problems.append(f"no CRD for {kind} ({api_version})")
            continue
        versions = [v for v in as_list(get_path(crd, "spec", "versions")) if isinstance(v, Mapping)]
        served = [str(v.get("name")) for v in versions if v.get("served")]
        entry = next((v for v in versions if v.get("name") == served_as and v.get("served")), None)
        found.append(f"{name(crd)} serves {', '.join(served) or 'nothing'}")
        if entry is None:
            problems.append(f"{name(crd)} does not serve {served_as} (serves {', '.join(served) or 'nothing'})")
            continue
        # every path of every rendered object against the served schema (crd_schema: the API server's pruning)
        schema = get_path(entry, "schema", "openAPIV3Schema")
        if not isinstance(schema, Mapping):
            problems.append(f"{name(crd)} {served_as} has no openAPIV3Schema: unknown what it keeps")
            continue
        dropped = list(dict.fromkeys(p for obj in objects for p in pruned_paths(obj, schema)))
        if dropped:
            problems.append(
                f"{name(crd)} {served_as} has no {short(dropped, 4)} in its schema: the API server would drop "
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
def _mutates_pod_create(cfg_obj: Mapping[str, Any], hook: tuple[str | int, ...]) -> bool:
    """A webhook (at ``hook`` of its MutatingWebhookConfiguration) with a rule on pod CREATE."""
    for rule in item_paths(cfg_obj, *hook, "rules"):
        ops, groups, resources = (set(strings_at(cfg_obj, *rule, k)) for k in ("operations", "apiGroups", "resources"))
        if ({"CREATE", "*"} & ops) and ({"", "*"} & groups) and ({"pods", "*"} & resources):
            return True
    return False


def _selects_ray_pods(cfg_obj: Mapping[str, Any], hook: tuple[str | int, ...]) -> bool:
    selector = mapping_at(cfg_obj, *hook, "objectSelector", "matchLabels")
    return bool(selector) and all(selector.get(k) == v for k, v in WEBHOOK_POD_LABEL.items())


def check_tpu_webhook(cfg: StackConfig, objs: ClusterObjects) -> CheckResult:
    found = []
    for cfg_obj in objs.webhooks:
        for hook in item_paths(cfg_obj, "webhooks"):
            said = f"{name(cfg_obj)}/{text_at(cfg_obj, *hook, 'name')}"
            selects, creates = _selects_ray_pods(cfg_obj, hook), _mutates_pod_create(cfg_obj, hook)
            if creates and ("tpu" in said.lower() or selects):
                found.append(said)
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
            "tpu-webhook", "fail", f"{fact} ({short(multi_host)}); none registered", TPU_WEBHOOK_SOURCE, fix
        )
    return CheckResult("tpu-webhook", "pass", f"{fact}; found {short(found)}", TPU_WEBHOOK_SOURCE, fix)


# ---- TPU nodes ----------------------------------------------------------------------------------------------
def _pool_nodes(pool: SlicePoolConfig, objs: ClusterObjects) -> list[dict[str, Any]]:
    """The pool's nodes, each once (a snapshot may list a node twice; the API server never does)."""
    names = set(pool.node_pool_names)
    unique = {name(n): n for n in reversed(objs.nodes) if labels(n).get(GKE_NODEPOOL_LABEL) in names}
    return list(reversed(unique.values()))


def _listed_twice(pool: SlicePoolConfig, objs: ClusterObjects) -> list[str]:
    names = set(pool.node_pool_names)
    counts = Counter(name(n) for n in objs.nodes if labels(n).get(GKE_NODEPOOL_LABEL) in names)
    return sorted(name for name, count in counts.items() if count > 1)


def _not_schedulable(node: Mapping[str, Any]) -> str | None:
    """Why the scheduler would not place a pod on ``node`` (NotReady, cordoned), or None.
    https://kubernetes.io/docs/concepts/architecture/nodes/#condition, kubectl cordon sets spec.unschedulable."""
    if get_path(node, "spec", "unschedulable") is True:
        return "cordoned"
    if not pod_ready(node):  # the same Ready condition, on a node
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
        f"{name(n)} has {k}={labels(n).get(k, '(none)')}"
        for n in nodes
        for k, v in want.items()
        if labels(n).get(k) != v
    ]
    fact = f"pool {pool.name} ({s}) nodes carry {', '.join(f'{k}={v}' for k, v in want.items())}"
    results.append(_nodes_result(f"tpu-node-labels.{pool.name}", nodes, wrong, fact, _SRC_GKE_TPU, fix_pool))

    # capacity is what the scheduler can use: a NotReady or cordoned host leaves its slice short
    unusable = {name(n): why for n in nodes if (why := _not_schedulable(n))}
    per_pool = Counter(str(labels(n).get(GKE_NODEPOOL_LABEL)) for n in nodes)
    usable = Counter(str(labels(n).get(GKE_NODEPOOL_LABEL)) for n in nodes if name(n) not in unusable)
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
        + (f" ({short(twice)} listed more than once, counted once)" if twice else "")
        + (f"; not counted: {short(f'{n} ({why})' for n, why in unusable.items())}" if unusable else "")
    )
    fix = f"see the node pools' events (gcloud container node-pools describe {pools}); quota, capacity or repair"
    if unusable:
        fix += "; kubectl uncordon a cordoned node, kubectl describe node a NotReady one"
    status: Status = "fail" if problems else "pass"
    results.append(
        CheckResult(f"tpu-node-count.{pool.name}", status, f"{fact}; {'; '.join(problems) or 'ok'}", _SRC_GKE_TPU, fix)
    )

    wrong = [
        f"{name(n)} has {get_path(n, 'status', 'allocatable', TPU_RESOURCE) or 'none'}"
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
        return CheckResult(check_id, "fail", f"{fact}; {short(wrong)}", source, fix)
    return CheckResult(check_id, "pass", f"{fact}; {len(nodes)} node(s) ok", source, fix)


def check_device_plugin(cfg: StackConfig, objs: ClusterObjects) -> CheckResult:
    tpu_nodes = {name(n) for p in cfg.slice_pools for n in _pool_nodes(p, objs)}
    key, value = DEVICE_PLUGIN_POD_LABEL
    ready = {
        text_at(pod, "spec", "nodeName")
        for pod in objs.pods
        if meta(pod).get("namespace") == SYSTEM_NAMESPACE and labels(pod).get(key) == value and pod_ready(pod)
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
            "tpu-device-plugin", "fail", f"{fact}; none ready on {short(missing)}", _SRC_DEVICE_PLUGIN, fix
        )
    return CheckResult("tpu-device-plugin", "pass", f"{fact}; {len(tpu_nodes)} node(s) ok", _SRC_DEVICE_PLUGIN, fix)


# ---- Kueue --------------------------------------------------------------------------------------------------
def check_kueue(cfg: StackConfig, objs: ClusterObjects) -> list[CheckResult]:
    k = cfg.kueue
    fix = f"pulumi up installs Kueue {k.chart_version} in {k.namespace} (kueue.enabled: true)"
    dep = find_deployment(objs, KUEUE_CONTROLLER_NAME, k.namespace, only_there=True)
    fact = f"the stack admits jobs through Kueue {k.chart_version}: {k.namespace}/{KUEUE_CONTROLLER_NAME}"
    if dep is None:
        controller = CheckResult("kueue-controller", "fail", f"{fact}; not found", _SRC_KUEUE, fix)
    else:
        runs, _ = _running_version(dep, KUEUE_CONTAINER)
        fact = f"{fact} runs {runs or 'an unknown version'}"
        if not deployment_ready(dep):
            controller = CheckResult("kueue-controller", "fail", f"{fact}, with no ready replica", _SRC_KUEUE, fix)
        elif version(runs) != version(k.chart_version):
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
        if meta(pod).get("namespace") == SYSTEM_NAMESPACE and pod_ready(pod)
        for (key, value), agent in NETWORK_POLICY_AGENTS.items()
        if labels(pod).get(key) == value
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
def _tag_backend(pod: Mapping[str, Any]) -> str | None:
    """The runtime the image tag of the pod's TPU container names (``...-xla``), or None where it names none."""
    for path in tpu_containers(pod):
        _, tag = image_tag(pod, path)
        found = runtime_for_tag(tag)
        if found is not None:
            return found
    return None


def worker_image_versions(cfg: StackConfig, objs: ClusterObjects) -> list[ImageVersions]:
    """The versions each running TPU worker pod of the Ray namespace reports through its annotations, and the
    runtime its image's tag names."""
    out = []
    for pod in running_tpu_pods(objs, cfg.ray.namespace):
        annotations = meta(pod).get("annotations")
        found = ImageVersions.from_labels(annotations if isinstance(annotations, Mapping) else {}, where(pod))
        out.append(replace(found, tag_backend=_tag_backend(pod)))
    return out


def _runtime_seen(r: ImageVersions, torch_tpu: bool) -> str:
    backend = f"{r.backend} image, " if r.backend else ""
    if r.tag_backend is not None and r.tag_backend != r.backend:
        backend += f"tagged {r.tag_backend}, "
    if torch_tpu:
        return f"{r.where}: {backend}torch {r.torch or '?'}, torch_tpu {r.torch_tpu or '?'}, libtpu {r.libtpu or '?'}"
    return f"{r.where}: {backend}torch {r.torch or '?'}, torch_xla {r.torch_xla or '?'}"


def _torch_xla_ok(r: ImageVersions) -> bool:
    torch, xla = version(r.torch), version(r.torch_xla)
    return torch is not None and xla is not None and torch.release[:2] == xla.release[:2]


def _in(text: str | None, spec: str) -> bool:
    v = version(text)
    return v is not None and SpecifierSet(spec).contains(v.base_version)


def _torch_tpu_ok(r: ImageVersions) -> bool:
    return (
        _in(r.torch_tpu, TORCH_TPU_VERSIONS)
        and _in(r.torch, TORCH_TPU_TORCH)
        and _in(r.libtpu, TORCH_TPU_LIBTPU)
        and r.torch_xla is None
    )


def check_worker_image(cfg: StackConfig, objs: ClusterObjects, image: ImageVersions | None) -> list[CheckResult]:
    reports = (
        [image]
        if image is not None
        else [v for v in worker_image_versions(cfg, objs) if v.ray or v.torch or v.tag_backend]
    )
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
        backends = {b for b in (r.backend, r.tag_backend) if b is not None}
        if backends - {cfg.workload.backend} or not (_torch_tpu_ok(r) if torch_tpu else _torch_xla_ok(r)):
            pair_bad.append(pair_seen[-1])
        ray = version(r.ray)
        ray_seen.append(f"{r.where}: Ray {r.ray or '?'}")
        if ray is None or ray < Version(MIN_RAY_TOKEN_AUTH) or ray != version(cfg.ray.version):
            ray_bad.append(ray_seen[-1])
    if torch_tpu:
        pair_id, pair_src = "worker-torch-tpu", _SRC_TORCH_TPU
        pair_fact = (
            f"backend torch_tpu: a torch_tpu image (torch_tpu {TORCH_TPU_VERSIONS}, torch {TORCH_TPU_TORCH}, libtpu "
            f"{TORCH_TPU_LIBTPU}, torch_tpu 0.2.0's own requirements)"
        )
        tpu = RUNTIMES["torch_tpu"]
        fix = f"build the {tpu.image_target} target of workloads/Dockerfile (tpuray[{tpu.extra}])"
    else:
        pair_id, pair_src = "worker-torch-pair", _SRC_TORCH_XLA
        pair_fact = "backend xla: torch_xla loads only with the torch of its own release (same major.minor)"
        fix = "rebuild the worker image with torch and torch_xla of one release (workloads/Dockerfile pins both)"
    results = [
        CheckResult(pair_id, "fail", f"{pair_fact}; {short(pair_bad, 3)}", pair_src, fix)
        if pair_bad
        else CheckResult(pair_id, "pass", f"{pair_fact}; {short(pair_seen, 3)}", pair_src, fix)
    ]
    ray_fact = (
        f"workers run Ray >= {MIN_RAY_TOKEN_AUTH} (token auth) and the head's Ray {cfg.ray.version} (one version per "
        "cluster)"
    )
    fix = f"rebuild the worker image on rayproject/ray:{cfg.ray.version} (ARG RAY_VERSION in workloads/Dockerfile)"
    src = _SRC_TOKEN_AUTH
    results.append(
        CheckResult("worker-ray-version", "fail", f"{ray_fact}; {short(ray_bad, 3)}", src, fix)
        if ray_bad
        else CheckResult("worker-ray-version", "pass", f"{ray_fact}; {short(ray_seen, 3)}", src, fix)
    )
    return results


# ---- all of them --------------------------------------------------------------------------------------------
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
                _SRC_API_OBJECTS,
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
        *runtime_checks(cfg, objs),
    ]
    return [r for check_id, run in checks for r in _guarded(check_id, run)]
