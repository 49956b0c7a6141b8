"""``tpuray doctor`` on snapshots a new user or an attacker could hand it: what the stack renders against what the
cluster serves at every path (RayJob included), and inputs that must end in exit 2 naming the file, never in an
internal error or a read that never ends."""

from __future__ import annotations

import functools
import json
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.doctor_snapshots import STACK, STACK_YAML, healthy, write_snapshot, write_stack
from tpuray.components import cli
from tpuray.components.catalog.names import GKE_NODEPOOL_LABEL, TPU_RESOURCE
from tpuray.components.config import StackConfig, load_stack_file
from tpuray.components.doctor.checks import run_checks
from tpuray.components.doctor.crd_schema import crd_problems, pruned_paths
from tpuray.components.doctor.kuberay_checks import check_kuberay_crds
from tpuray.components.doctor.reader import (
    LIST_FILES,
    OPTIONAL_LIST_FILES,
    ClusterObjects,
    ReadError,
    SnapshotReader,
    parse_list,
)


def doctor(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = cli.main(["doctor", *args])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err and "internal error" not in out + err
    return code, out, err


# ---- the rendered objects against the served schema, at every path ---------------------------------------------
def _without_rayjob_cluster_auth(snapshot: Path) -> None:
    """The RayJob CRD of a KubeRay older than 1.6: no spec.rayClusterSpec.authOptions (the RayCluster CRD current)."""
    f = snapshot / LIST_FILES["crds"]
    doc = json.loads(f.read_text())
    crd = next(c for c in doc["items"] if c["metadata"]["name"] == "rayjobs.ray.io")
    for version in crd["spec"]["versions"]:
        spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
        spec["properties"]["rayClusterSpec"]["properties"].pop("authOptions", None)
    f.write_text(json.dumps(doc))


@pytest.mark.parametrize(("job_mode", "status"), [("ephemeral", "fail"), ("shared", "pass")])
def test_an_old_rayjob_crd_fails_where_the_stack_renders_a_rayjob_cluster(
    tmp_path: Path, job_mode: str, status: str
) -> None:
    """jobMode ephemeral renders the job's cluster inside the RayJob, its token auth at
    spec.rayClusterSpec.authOptions: a CRD without that path would prune it and run the cluster unauthenticated.
    A shared-mode RayJob has no rayClusterSpec, so the same CRD drops nothing of it."""
    stack = tmp_path / f"Pulumi.{STACK}.yaml"
    stack.write_text(STACK_YAML.replace("    operator: helm\n", f"    operator: helm\n    jobMode: {job_mode}\n"))
    cfg = load_stack_file(stack, STACK)
    snapshot = write_snapshot(tmp_path / "s", "healthy")
    _without_rayjob_cluster_auth(snapshot)
    result = check_kuberay_crds(cfg, SnapshotReader(snapshot).read())
    assert result.status == status, result.fact
    if status == "fail":
        assert "spec.rayClusterSpec.authOptions" in result.fact and "rayjobs.ray.io" in result.fact


def test_pruning_follows_the_api_servers_rules() -> None:
    schema = {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "properties": {
                    "kept": {"type": "object", "properties": {"a": {"type": "string"}}},
                    "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                    "map": {"type": "object", "additionalProperties": {"type": "object", "properties": {}}},
                    "list": {"type": "array", "items": {"type": "object", "properties": {"x": {"type": "string"}}}},
                    "embedded": {"type": "object", "x-kubernetes-embedded-resource": True, "properties": {}},
                },
            }
        },
    }
    obj = {
        "apiVersion": "v1",
        "kind": "K",
        "metadata": {"name": "n", "labels": {"a": "b"}},
        "spec": {
            "kept": {"a": "1", "b": "2"},
            "free": {"anything": {"deep": 1}},
            "map": {"k": {"gone": 1}},
            "list": [{"x": "1"}, {"y": "2"}],
            "embedded": {"apiVersion": "v1", "kind": "Pod", "metadata": {}, "spec": {}},
            "unknown": 1,
        },
    }
    assert sorted(pruned_paths(obj, schema)) == [
        "spec.embedded.spec",
        "spec.kept.b",
        "spec.list[1].y",
        "spec.map.k.gone",
        "spec.unknown",
    ]


def test_a_crd_with_no_schema_is_unknown_and_an_empty_one_prunes_everything() -> None:
    rendered = [{"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": "j"}, "spec": {"entrypoint": "x"}}]

    def crd(version: dict[str, Any]) -> dict[str, Any]:
        entry = {"name": "v1", "served": True, **version}
        return {
            "metadata": {"name": "rayjobs.ray.io"},
            "spec": {"group": "ray.io", "names": {"kind": "RayJob"}, "versions": [entry]},
        }

    (missing,), _ = crd_problems(rendered, [crd({})])
    assert "has no openAPIV3Schema" in missing
    (null,), _ = crd_problems(rendered, [crd({"schema": {"openAPIV3Schema": None}})])
    assert "has no openAPIV3Schema" in null
    (empty,), _ = crd_problems(rendered, [crd({"schema": {"openAPIV3Schema": {}}})])
    assert "has no spec in its schema" in empty


# ---- snapshots that are not what their name says ---------------------------------------------------------------
def _pods_as_nodes(snapshot: Path) -> None:
    (snapshot / LIST_FILES["nodes"]).write_text((snapshot / LIST_FILES["pods"]).read_text())


def _pod_list_kind_as_nodes(snapshot: Path) -> None:
    (snapshot / LIST_FILES["nodes"]).write_text(json.dumps({"kind": "PodList", "items": []}))


def _edit_node(change: Any) -> Any:
    def edit(snapshot: Path) -> None:
        f = snapshot / LIST_FILES["nodes"]
        doc = json.loads(f.read_text())
        change(doc["items"][1]["metadata"])
        f.write_text(json.dumps(doc))

    return edit


def _deep(snapshot: Path) -> None:
    (snapshot / LIST_FILES["pods"]).write_text('{"items": ' + "[" * 50_000 + "]" * 50_000 + "}")


def _dev_zero(snapshot: Path) -> None:
    (snapshot / LIST_FILES["crds"]).unlink()
    (snapshot / LIST_FILES["crds"]).symlink_to("/dev/zero")


def _pods_as_ray_clusters(snapshot: Path) -> None:
    (snapshot / OPTIONAL_LIST_FILES["ray_clusters"]).write_text((snapshot / LIST_FILES["pods"]).read_text())


def _fifo(snapshot: Path) -> None:
    (snapshot / LIST_FILES["deployments"]).unlink()
    os.mkfifo(snapshot / LIST_FILES["deployments"])


HOSTILE = {
    "pods-saved-as-nodes": (_pods_as_nodes, LIST_FILES["nodes"], "items[0] is a Pod; expected Node objects"),
    "pod-list-as-nodes": (_pod_list_kind_as_nodes, LIST_FILES["nodes"], "a PodList; expected a list of Node"),
    "label-value-list": (
        _edit_node(lambda m: m["labels"].update({GKE_NODEPOOL_LABEL: ["v6e-train-0"]})),
        LIST_FILES["nodes"],
        f"items[1].metadata.labels['{GKE_NODEPOOL_LABEL}'] is a JSON array, not a string",
    ),
    "label-value-object": (
        _edit_node(lambda m: m["labels"].update({"x": {"y": 1}})),
        LIST_FILES["nodes"],
        "labels['x'] is a JSON object, not a string",
    ),
    "labels-a-list": (_edit_node(lambda m: m.update(labels=[])), LIST_FILES["nodes"], "labels is not an object"),
    "name-a-number": (_edit_node(lambda m: m.update(name=5)), LIST_FILES["nodes"], "name is not a string"),
    "deep-json": (_deep, LIST_FILES["pods"], "nested deeper than"),
    "dev-zero": (_dev_zero, LIST_FILES["crds"], "not a regular file"),
    "fifo": (_fifo, LIST_FILES["deployments"], "not a regular file"),
    "pods-saved-as-rayclusters": (
        _pods_as_ray_clusters,
        OPTIONAL_LIST_FILES["ray_clusters"],
        "items[0] is a Pod; expected RayCluster objects",
    ),
}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", list(HOSTILE))
def test_a_hostile_snapshot_is_exit_2_naming_the_file(
    name: str, project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    change, file, complaint = HOSTILE[name]
    snapshot = write_snapshot(tmp_path / "s", "healthy")
    change(snapshot)
    code, out, err = doctor(capsys, "--stack", STACK, "--root", str(project), "--snapshot", str(snapshot))
    assert (code, out) == (2, "")
    assert len(err.strip().splitlines()) == 1
    assert str(snapshot / file) in err and complaint in err, err


def test_the_api_servers_lists_without_item_kinds_are_read() -> None:
    """The API server leaves out each item's kind in a NodeList; kubectl writes it. Both are Node lists."""
    items = [{"metadata": {"name": "n"}}]
    assert parse_list({"kind": "NodeList", "items": items}, "x", "Node") == tuple(items)
    assert parse_list({"kind": "List", "items": [{"kind": "Node", **items[0]}]}, "x", "Node")


# ---- the hypothesis corpus: any JSON in a node's metadata -------------------------------------------------------
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63) | st.text(max_size=4),
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=4), c, max_size=3),
    max_leaves=10,
)


@functools.cache
def _healthy() -> dict[str, Any]:
    """The healthy snapshot, built once, when the first test needs it (it skips without the pinned CRDs)."""
    return healthy()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(key=st.sampled_from(["name", "namespace", "labels", "annotations", "one label"]), value=JSON)
def test_any_node_metadata_is_refused_naming_the_field_or_checked(key: str, value: Any, tmp_path: Path) -> None:
    """Whatever JSON a node's metadata field (or its node-pool label) holds, the reader refuses it naming items[1]
    of the nodes file, or the checks run to a result: never a TypeError inside a check."""
    doc = json.loads(json.dumps(_healthy()[LIST_FILES["nodes"]]))
    meta = doc["items"][1]["metadata"]
    if key == "one label":
        meta["labels"][GKE_NODEPOOL_LABEL] = value
    else:
        meta[key] = value
    try:
        nodes = parse_list(doc, "nodes.json", "Node")
    except ReadError as e:
        assert str(e).startswith("nodes.json: items[1].metadata.")
        return
    results = run_checks(_cfg(tmp_path), replace(_objects(tmp_path), nodes=nodes))
    assert {r.status for r in results} <= {"pass", "warn", "fail"}


_CACHE: dict[str, Any] = {}


def _cfg(tmp_path: Path) -> StackConfig:
    if "cfg" not in _CACHE:
        root = tmp_path / "cfg"
        root.mkdir(exist_ok=True)
        _CACHE["cfg"] = load_stack_file(write_stack(root), STACK)
    cfg: StackConfig = _CACHE["cfg"]
    return cfg


def _objects(tmp_path: Path) -> ClusterObjects:
    if "objects" not in _CACHE:
        _CACHE["objects"] = SnapshotReader(write_snapshot(tmp_path / "objs", "healthy")).read()
    objects: ClusterObjects = _CACHE["objects"]
    return objects


# ---- the hypothesis corpus: any JSON where the checks read a field of a Deployment, a Pod or a webhook ----------
_C0 = ("spec", "template", "spec", "containers", 0)
_HOOK = "kuberay-tpu-mutating-webhook-cfg"
FIELDS: dict[str, tuple[str, str, tuple[str | int, ...], type]] = {
    "operator image": ("deployments", "kuberay-operator", (*_C0, "image"), str),
    "operator args": ("deployments", "kuberay-operator", (*_C0, "args"), list),
    "operator command": ("deployments", "kuberay-operator", (*_C0, "command"), list),
    "operator container name": (
        "deployments", "kuberay-operator", (*_C0, "name"), str
    ),
    "operator containers": ("deployments", "kuberay-operator", ("spec", "template", "spec", "containers"), list),
    "webhook image": ("deployments", "kuberay-tpu-webhook", (*_C0, "image"), str),
    "webhook ready replicas": ("deployments", "kuberay-tpu-webhook", ("status", "readyReplicas"), int),
    "kueue image": ("deployments", "kueue-controller-manager", (*_C0, "image"), str),
    "worker phase": ("pods", "ray-worker-0", ("status", "phase"), str),
    "worker limits": ("pods", "ray-worker-0", ("spec", "containers", 0, "resources", "limits"), dict),
    "worker image": ("pods", "ray-worker-0", ("spec", "containers", 0, "image"), str),
    "plugin node": ("pods", "tpu-device-plugin-0", ("spec", "nodeName"), str),
    "plugin conditions": ("pods", "tpu-device-plugin-0", ("status", "conditions"), list),
    "hook name": ("webhooks", _HOOK, ("webhooks", 0, "name"), str),
    "hook operations": ("webhooks", _HOOK, ("webhooks", 0, "rules", 0, "operations"), list),
    "hook selector": (
        "webhooks", _HOOK, ("webhooks", 0, "objectSelector", "matchLabels"), dict
    ),
    "node allocatable chips": ("nodes", "gke-v6e-train-0-0", ("status", "allocatable", TPU_RESOURCE), str),
    "node spec": ("nodes", "gke-v6e-train-0-0", ("spec",), dict),
    "crd group": ("crds", "rayjobs.ray.io", ("spec", "group"), str),
    "crd versions": ("crds", "rayjobs.ray.io", ("spec", "versions"), list),
    "crd schema": ("crds", "rayjobs.ray.io", ("spec", "versions", 0, "schema", "openAPIV3Schema"), dict),
}  # fmt: skip
"""Field -> (list, the item's name, its path in the item, the type the Kubernetes API gives it)."""


def _json_path(path: tuple[str | int, ...]) -> str:
    return "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in path).removeprefix(".")


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(field=st.sampled_from(sorted(FIELDS)), value=JSON)
def test_any_json_where_a_check_reads_a_field_fails_that_check_naming_it_or_is_checked(
    field: str, value: Any, tmp_path: Path
) -> None:
    """Whatever JSON a field the checks read holds, they run to results, never an internal error; a value of a
    type the API never returns there (a string where an array belongs, an object where a string does) fails a
    check whose fact names the object and the field."""
    file, item, path, want = FIELDS[field]
    objects = _objects(tmp_path)
    items = json.loads(json.dumps(getattr(objects, file)))
    target = next(i for i in items if i["metadata"]["name"] == item)
    parent = target
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = value
    edited: Any = replace(objects, **{file: tuple(items)})  # type: ignore[arg-type]  # file names a list field
    results = run_checks(_cfg(tmp_path), edited)
    assert {r.status for r in results} <= {"pass", "warn", "fail"}
    wrong = value is not None and not (isinstance(value, want) and not (want is int and isinstance(value, bool)))
    if wrong:
        named = f"{item}: {_json_path(path)} is a JSON"
        assert any(r.status == "fail" and named in r.fact for r in results), [r.fact for r in results]


GATE_TOKENS = st.sampled_from(
    [
        "--feature-gates=RayMultiHostIndexing=false",
        "--feature-gates=RayMultiHostIndexing=true",
        "-feature-gates=RayCronJob=true,RayMultiHostIndexing=F",
        "--feature-gates= RayMultiHostIndexing = False ,",
        "--feature-gates=RayMultiHostIndexing=tRUE",  # strconv.ParseBool refuses it: the operator exits
        "--feature-gates=AllBeta=false",
        "--feature-gates=NoSuchGate=true",
        "--feature-gates=RayMultiHostIndexing",
        "--feature-gates",
        "RayMultiHostIndexing=TRUE",
        "RayMultiHostIndexing=false",
        "=",
        "--feature-gates=",
        "--",  # Go's terminator: nothing after it is a flag
        "-",
        "positional",
        "--enable-metrics",  # boolean: never takes the next argument
        "--enable-metrics=maybe",
        "--watch-namespace",  # takes the next argument, even one that looks like a flag
        "-zap-devel",
        "--no-such-flag",
        "---feature-gates=RayMultiHostIndexing=false",
        "-=x",
    ]
)
GATE_ARGS = st.lists(st.one_of(GATE_TOKENS, GATE_TOKENS, GATE_TOKENS, st.text(max_size=12)), max_size=6)
"""Operator command lines: mostly what Go and featuregate read differently from a naive scan, now and then any text."""
_GO_TRUE, _GO_FALSE = {"1", "t", "T", "TRUE", "true", "True"}, {"0", "f", "F", "FALSE", "false", "False"}
_V17_GATES = {
    "RayClusterStatusConditions", "RayJobDeletionPolicy", "RayMultiHostIndexing", "RayServiceIncrementalUpgrade",
    "RayCronJob", "SidecarSubmitterRestart", "RayClusterNetworkPolicy", "GCSFaultToleranceEmbeddedStorage",
    "RayClusterMTLS", "RayClusterHistoryServer", "KubernetesWAS", "AllAlpha", "AllBeta",
}  # fmt: skip
"""The gates KubeRay v1.7.0 registers (ray-operator/pkg/features/features.go), and featuregate's own two."""


def _go_reads(args: list[str]) -> bool | str:
    """RayMultiHostIndexing as KubeRay v1.7.0 runs with ``args``, written out from Go's flag documentation and
    featuregate's Set: True or False, or "exits"."""
    from tpuray.components.doctor.operator_gates import OPERATOR_FLAGS

    value, i = None, 0
    while i < len(args) and args[i] != "--" and args[i].startswith("-") and args[i] != "-":
        body = args[i][2:] if args[i].startswith("--") else args[i][1:]
        i += 1
        if body[:1] in ("-", "="):
            return "exits"
        flag, has, said = body.partition("=")
        if flag not in OPERATOR_FLAGS:
            return "exits"
        if OPERATOR_FLAGS[flag]:
            if has and said not in _GO_TRUE | _GO_FALSE:
                return "exits"
            continue
        if not has:
            if i == len(args):
                return "exits"
            said, i = args[i], i + 1
        if flag == "feature-gates":
            value = said
    gates = {}
    for item in filter(None, (value or "").split(",")):
        if "=" not in item:
            return "exits"
        key, said = (part.strip() for part in item.split("=", 1))
        if said not in _GO_TRUE | _GO_FALSE or key not in _V17_GATES:
            return "exits"
        gates[key] = said in _GO_TRUE
    return gates.get("RayMultiHostIndexing", gates.get("AllBeta", True))  # Beta in 1.7, and on by default


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(args=GATE_ARGS, command=st.sampled_from([None, ["/manager"], ["manager"], ["/bin/sh", "-c"]]))
def test_any_operator_args_are_read_as_go_reads_them(
    args: list[str], command: list[str] | None, tmp_path: Path
) -> None:
    """The gate the doctor reads from the operator's command line is the one Go's flag package and KubeRay's
    featuregate would set: parsing stops at ``--`` or the first non-flag argument, a non-boolean flag takes the next
    argument, the last --feature-gates wins and in it the last RayMultiHostIndexing (AllBeta where it is not named),
    without one v1.7.0's default; arguments the operator exits on, or a command that is not /manager, are unknown."""
    from tpuray.components.catalog.pins import MULTI_HOST_INDEXING
    from tpuray.components.doctor.operator_gates import operator_gate

    objects = _objects(tmp_path)
    deployments = json.loads(json.dumps(objects.deployments))
    operator = next(d for d in deployments if d["metadata"]["name"] == "kuberay-operator")
    container = operator["spec"]["template"]["spec"]["containers"][0]
    container["args"] = args
    if command is not None:
        container["command"] = command
    on, how = operator_gate(_cfg(tmp_path), replace(objects, deployments=tuple(deployments)), MULTI_HOST_INDEXING)
    if command == ["/bin/sh", "-c"]:
        assert on is None and "not /manager" in how
        return
    expected = _go_reads(args)
    if expected == "exits":
        assert on is None and "exits on its arguments" in how, how
    else:
        assert on is expected, how


# ---- the hypothesis corpus: any JSON where serving-pools-apart reads whose cluster a pod is ---------------------
OWNER_FIELDS: dict[str, tuple[tuple[str | int, ...], type]] = {
    "owner references": (("metadata", "ownerReferences"), list),
    "owner reference": (("metadata", "ownerReferences", 0), dict),
    "owner kind": (("metadata", "ownerReferences", 0, "kind"), str),
    "owner name": (("metadata", "ownerReferences", 0, "name"), str),
    "owner apiVersion": (("metadata", "ownerReferences", 0, "apiVersion"), str),
    "owner controller": (("metadata", "ownerReferences", 0, "controller"), bool),
}
"""Field of the RayService's RayCluster -> (its path, the type the Kubernetes API gives it)."""


@settings(max_examples=80, deadline=None)
@given(field=st.sampled_from(sorted(OWNER_FIELDS)), value=JSON)
def test_any_json_in_a_ray_cluster_s_owner_is_checked_or_fails_naming_it(field: str, value: Any) -> None:
    """Whatever JSON a RayCluster's owner reference holds, serving-pools-apart runs to a result: a value of a type
    the API never returns there fails it naming the RayCluster and the field; any other value that is not KubeRay's
    own controller reference to the RayService makes the cluster another's, so sharing the pool fails."""
    from tests.support.stacks import serving_values
    from tpuray.components.config import parse_stack_config

    cfg = parse_stack_config(serving_values({"replicas": 2, "minSlices": 1, "maxSlices": 3}), stack="dev")
    assert cfg.serving is not None
    ns, service = cfg.ray.namespace, cfg.serving.service_name(cfg.cluster.name)
    ref = {"apiVersion": "ray.io/v1", "kind": "RayService", "name": service, "uid": "u", "controller": True}
    owned = {"kind": "RayCluster", "metadata": {"namespace": ns, "name": f"{service}-x7k2p", "ownerReferences": [ref]}}
    edited = json.loads(json.dumps(owned))
    path, want = OWNER_FIELDS[field]
    parent = edited
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = value
    pods = []
    for i, cluster in enumerate((f"{service}-x7k2p", f"{service}-b9m4q")):  # the owned one, then the edited one
        pods.append(
            {
                "metadata": {"namespace": ns, "name": f"p{i}", "labels": {"ray.io/cluster": cluster}},
                "spec": {"nodeName": "n", "containers": [{"name": "w", "resources": {"limits": {TPU_RESOURCE: "4"}}}]},
                "status": {"phase": "Running"},
            }
        )
    edited["metadata"]["name"] = f"{service}-b9m4q"
    nodes = ({"metadata": {"name": "n", "labels": {GKE_NODEPOOL_LABEL: "serve-pool"}}},)
    objs = ClusterObjects(nodes, tuple(pods), (), (), (), "v1.34.1-gke.1829001", "t", None, (owned, edited))
    [result] = [r for r in run_checks(cfg, objs) if r.id == "serving-pools-apart"]
    wrong = not isinstance(value, want) and (value is not None or isinstance(path[-1], int))  # null: missing
    still_owned = edited["metadata"]["ownerReferences"] == [ref]
    if wrong:
        assert result.status == "fail" and f"{service}-b9m4q: {_json_path(path)} is a JSON" in result.fact
    elif still_owned:
        assert result.status == "pass", result.fact
    else:  # another's cluster, or a nested field of a type the API never returns there, named
        named = f"p1 (RayCluster {service}-b9m4q)" in result.fact or (
            f"{service}-b9m4q: metadata.ownerReferences" in result.fact and "is a JSON" in result.fact
        )
        assert result.status == "fail" and named, result.fact
