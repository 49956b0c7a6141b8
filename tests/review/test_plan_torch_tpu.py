"""``tpuray plan`` of a TorchTPU stack on tpu7x (tests/fixtures/stacks/Pulumi.torch-tpu.yaml): a Ray worker per
device, the env that Ray's own TorchTPU path needs on the workers, Kueue and cost in chips, and a NetworkPolicy that
admits every port the workers' envs name, per process, and no PyTorch/XLA port."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.plans import ROOT
from tpuray.components.catalog.names import RAY_CLUSTER_POD_LABEL, TORCH_TPU_ENV_CALLBACK, TPU_RESOURCE
from tpuray.components.catalog.topology import TpuSlice
from tpuray.components.config import ConfigError, load_stack_file
from tpuray.components.planning.network_policy import network_policies
from tpuray.components.review.plan import Plan, render_stack

STACK = ROOT / "tests" / "fixtures" / "stacks" / "Pulumi.torch-tpu.yaml"
SLICE = TpuSlice.parse("tpu7x:2x2x2")


@pytest.fixture(scope="module")
def plan() -> Plan:
    return render_stack("torch-tpu", ROOT, stack_file=STACK)


def _one(plan: Plan, kind: str) -> dict[str, Any]:
    (found,) = [r["inputs"] for r in plan.resources if r["type"].endswith(f":{kind}")]
    return dict(found)


def test_eight_ray_workers_per_four_chip_host(plan: Plan) -> None:
    (group,) = _one(plan, "RayCluster")["spec"]["workerGroupSpecs"]
    (container,) = group["template"]["spec"]["containers"]
    assert group["numOfHosts"] == 2 and group["replicas"] == 2
    assert group["resources"] == {"TPU": "8"}  # Ray's TPU resource: one per device
    assert container["resources"]["limits"][TPU_RESOURCE] == "4"  # what the node and Kueue count: chips
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["RAY_TRAIN_CALLBACKS"] == TORCH_TPU_ENV_CALLBACK
    assert env["RAY_TPU_RESOURCE_PER_CHIP"] == "2"
    head = _one(plan, "RayCluster")["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    assert _torch_tpu_env(head) == {"RAY_TRAIN_CALLBACKS": TORCH_TPU_ENV_CALLBACK, "RAY_TPU_RESOURCE_PER_CHIP": "2"}
    (pool,) = plan.pools
    assert (pool.max_ray_workers, pool.max_ray_worker_pods, pool.worker_unit) == (32, 4, "device")


def test_kueue_quota_and_cost_stay_in_chips(plan: Plan) -> None:
    queue = _one(plan, "ClusterQueue")
    quotas = [r for g in queue["spec"]["resourceGroups"] for f in g["flavors"] for r in f["resources"]]
    assert sum(q["nominalQuota"] for q in quotas if q["name"] == TPU_RESOURCE) == 2 * SLICE.chips
    (row,) = plan.cost.pools
    assert (row.min_chips, row.max_chips) == (2 * SLICE.chips, 2 * SLICE.chips)


def _peer_ports(policies: list[dict[str, Any]]) -> tuple[set[int], set[int]]:
    """TCP ports a Ray pod may open on another, and accept from another, by the peers policy."""
    (peers,) = [p["spec"] for p in policies if p["metadata"]["name"].endswith("-ray-peers")]

    def ports(rules: list[dict[str, Any]]) -> set[int]:
        out: set[int] = set()
        for rule in rules:
            for p in rule["ports"]:
                out |= set(range(p["port"], p.get("endPort", p["port"]) + 1))
        return out

    return ports(peers["ingress"]), ports(peers["egress"])


def _env_ports() -> set[int]:
    """Every port the envs of a two-slice run on this stack name: the slice builders of torch_tpu_env, and the two
    multislice ports each process ends with. Ray 2.60 first sets MEGASCALE_PORT = 8081 + LOCAL_RANK
    (``_set_tpu_multislice_env_vars``, called here as each worker would), then torch_tpu 0.2.0 overwrites it
    (``torch_tpu_megascale_ports``: MEGASCALE_PORT and MEGASCALE_DEBUG_PORT from 8080, two per local rank)."""
    import os

    from ray.train.torch.config import _set_tpu_multislice_env_vars
    from ray.util.tpu import get_tpu_coordinator_env_vars

    from tpuray.components.catalog.runtime_ports import torch_tpu_megascale_ports
    from tpuray.workloads.placement.worker_env import host_major_seats, torch_tpu_env

    ports: set[int] = set()
    for k in range(2):
        env = torch_tpu_env(SLICE, host_major_seats(SLICE, [f"10.{k}.0.{w}" for w in range(SLICE.hosts)]))
        ports |= {int(a.rsplit(":", 1)[1]) for a in env["TORCH_TPU_SLICEBUILDER_ADDRESSES"].split(",")}
        for local_rank in range(SLICE.devices_per_host):
            saved = dict(os.environ)
            try:
                os.environ["LOCAL_RANK"] = str(local_rank)
                _set_tpu_multislice_env_vars(get_tpu_coordinator_env_vars("10.0.0.0:8081", 2, k, "8081"))
                assert os.environ["MEGASCALE_PORT"] == str(8081 + local_rank)  # Ray's, before torch_tpu's
            finally:
                os.environ.clear()
                os.environ.update(saved)
            ports |= set(torch_tpu_megascale_ports(local_rank))
    return ports


def test_network_policy_admits_every_port_the_envs_name_and_no_xla_port(plan: Plan) -> None:
    policies = [r["inputs"] for r in plan.resources if r["type"].endswith(":NetworkPolicy")]
    ingress, egress = _peer_ports(policies)
    needed = _env_ports()
    assert needed == set(range(8471, 8479)) | set(range(8080, 8096))
    assert needed <= ingress and needed <= egress
    assert {36423} <= ingress & egress  # torch_tpu's split-compile handshake on the coordinator rank
    assert not ingress & set(range(8476 - 8, 8471)) and 8479 not in ingress and 8096 not in ingress
    # between the right pods: the cluster's own Ray pods, both ways
    (peers,) = [p["spec"] for p in policies if p["metadata"]["name"].endswith("-ray-peers")]
    ours = {"matchLabels": {RAY_CLUSTER_POD_LABEL: "tpuray-torchtpu"}}
    assert peers["podSelector"] == ours
    assert peers["ingress"][0]["from"] == [{"podSelector": ours}] and peers["egress"][0]["to"] == [
        {"podSelector": ours}
    ]


def test_dropping_one_runtime_port_from_the_policy_is_caught(plan: Plan) -> None:
    from tpuray.components.planning.network_policy import NetworkPolicyParams

    dropped = network_policies(
        NetworkPolicyParams(namespace="ray", cluster="tpuray-torchtpu", runtime_ranges=((8080, 8095), (8471, 8477)))
    )
    ingress, _ = _peer_ports(dropped)
    assert _env_ports() - ingress == {8478}


def _with(text: str, *edits: tuple[str, str]) -> str:
    for old, new in edits:
        assert old in text
        text = text.replace(old, new)
    return text


def test_a_torch_tpu_stack_mixing_one_and_two_device_chips_is_refused(tmp_path: Any) -> None:
    text = STACK.read_text()
    mixed = _with(
        text,
        ("    deletionProtection: false", "    deletionProtection: false\n    regional: true"),
        (
            "  tpuray:kueue:",
            "    - name: trillium\n      generation: v6e\n      topology: 2x2\n      zone: us-central1-b\n"
            "      capacity:\n        type: spot\n  tpuray:kueue:",
        ),
    )
    path = tmp_path / "Pulumi.mixed.yaml"
    path.write_text(mixed)
    with pytest.raises(ConfigError) as err:
        load_stack_file(path)
    assert "workload.backend" in str(err.value) and "RAY_TPU_RESOURCE_PER_CHIP" in str(err.value)
    path.write_text(_with(mixed, ("backend: torch_tpu", "backend: xla"), ("-torch-tpu", "-xla")))
    load_stack_file(path)  # per-chip workers: the generations may mix


IMAGE = "us-docker.pkg.dev/tpuray-torchtpu-project/tpuray/worker:0.1.0-torch-tpu"
"""The fixture's one image: head and TPU workers."""


def test_a_worker_image_of_the_other_runtime_is_refused(tmp_path: Any) -> None:
    path = tmp_path / "Pulumi.image.yaml"
    text = _with(STACK.read_text(), (f"    image: {IMAGE}", f"    image: {IMAGE}\n    workerImage: {IMAGE}"))
    path.write_text(text.replace("0.1.0-torch-tpu", "0.1.0-xla"))
    with pytest.raises(ConfigError) as err:
        load_stack_file(path)
    assert "ray.workerImage" in str(err.value) and "torch_tpu" in str(err.value)
    path.write_text(_with(STACK.read_text(), ("0.1.0-torch-tpu", "0.1.0-xla")))  # one image for both, of xla
    with pytest.raises(ConfigError) as err:
        load_stack_file(path)
    assert "ray.image" in str(err.value) and "xla image" in str(err.value)


def test_a_head_image_other_than_the_worker_image_is_refused(tmp_path: Any) -> None:
    """The head runs the drivers of jobs that ask for no resources, so it needs the workers' tpuray and torch."""
    path = tmp_path / "Pulumi.head.yaml"
    stock = "rayproject/ray:2.60.0-py311"
    path.write_text(_with(STACK.read_text(), (f"    image: {IMAGE}", f"    image: {stock}\n    workerImage: {IMAGE}")))
    with pytest.raises(ConfigError) as err:
        load_stack_file(path)
    assert "ray.image" in str(err.value) and f"set ray.image to {IMAGE}" in str(err.value)
    path.write_text(_with(STACK.read_text(), (f"    image: {IMAGE}", f"    image: {IMAGE}\n    workerImage: {IMAGE}")))
    load_stack_file(path)  # both named, the same
    xla = _with(
        path.read_text(), ("backend: torch_tpu", "backend: xla"), (f"workerImage: {IMAGE}", "workerImage: w:1-xla")
    )
    path.write_text(_with(xla, (f"    image: {IMAGE}", f"    image: {stock}")))
    load_stack_file(path)  # on xla, tpuray's drivers ask for a CPU (the RayJob): the stock head stays allowed


# ---- every documented way to submit a TorchTPU job reaches a pod with the env and the image -------------------


@pytest.fixture(scope="module", params=["shared", "ephemeral"])
def manifests(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """The stack's RayCluster and RayJob, in both job modes (ephemeral: the RayJob's own cluster)."""
    from tpuray.components.planning.stack_plan import plan_stack

    path = STACK
    if request.param == "ephemeral":
        path = tmp_path_factory.mktemp("ephemeral") / "Pulumi.torch-tpu.yaml"
        path.write_text(_with(STACK.read_text(), ("  tpuray:ray:\n", "  tpuray:ray:\n    jobMode: ephemeral\n")))
    by_kind = {m["kind"]: m for m in plan_stack(load_stack_file(path), "torch-tpu").manifests}
    job = by_kind["RayJob"]
    cluster = job["spec"]["rayClusterSpec"] if request.param == "ephemeral" else by_kind["RayCluster"]["spec"]
    return {"job": job["spec"], "cluster": cluster, **{f"manifest:{kind}": m for kind, m in by_kind.items()}}


def test_the_planned_manifests_are_valid_kuberay_objects(manifests: dict[str, dict[str, Any]]) -> None:
    """The head's env included, against the KubeRay v1.7.0 CRDs (strict: an unknown field is an error)."""
    from tests.support.kuberay_schema import schema_errors

    planned = [m for key, m in manifests.items() if key.startswith("manifest:")]
    assert planned and all(schema_errors(m) == [] for m in planned)


def _torch_tpu_env(container: dict[str, Any]) -> dict[str, str]:
    env = {e["name"]: e.get("value") for e in container.get("env", [])}
    return {k: v for k, v in env.items() if k in ("RAY_TRAIN_CALLBACKS", "RAY_TPU_RESOURCE_PER_CHIP")}


def _pods(cluster: dict[str, Any]) -> dict[str, tuple[dict[str, Any], dict[str, str]]]:
    """Every Ray pod template of the cluster by group (``head`` and each worker group): its Ray container and
    its rayStartParams."""
    groups = {"head": cluster["headGroupSpec"], **{g["groupName"]: g for g in cluster["workerGroupSpecs"]}}
    return {name: (g["template"]["spec"]["containers"][0], g["rayStartParams"]) for name, g in groups.items()}


def _driver_pods(cluster: dict[str, Any], num_cpus: float, other_resources: bool) -> set[str]:
    """Where Ray 2.60's job manager can run a job's driver (ray/dashboard/modules/job/job_manager.py): pinned to the
    head when the job asks for no resources (``_get_label_selector``); else wherever they fit: a CPU only on a pod
    that advertises CPUs (the head's ``num-cpus``), memory or a label selector on any pod, the head included."""
    pods = _pods(cluster)
    if num_cpus <= 0 and not other_resources:
        return {"head"}
    if other_resources:
        return set(pods)
    return {name for name, (_, params) in pods.items() if float(params.get("num-cpus", "1")) > 0}


def _assert_ready_for_a_driver(cluster: dict[str, Any], where: set[str]) -> None:
    pods = _pods(cluster)
    images = {c["image"] for name, (c, _) in pods.items() if name != "head"}
    assert images == {IMAGE}
    for name in where:
        container, _ = pods[name]
        # what Ray Train reads in the driver and its controller, and the image with tpuray and torch
        assert _torch_tpu_env(container) == {
            "RAY_TRAIN_CALLBACKS": TORCH_TPU_ENV_CALLBACK,
            "RAY_TPU_RESOURCE_PER_CHIP": "2",
        }, name
        assert container["image"] == IMAGE, name


def test_the_stack_s_rayjob_runs_its_driver_on_a_tpu_worker(manifests: dict[str, dict[str, Any]]) -> None:
    """KubeRay v1.7.0's submitter passes entrypointNumCpus as ``ray job submit --entrypoint-num-cpus``
    (ray-operator/controllers/ray/common/job.go, BuildJobSubmitCommand), and the head advertises no CPU."""
    job, cluster = manifests["job"], manifests["cluster"]
    assert job["entrypointNumCpus"] > 0 and job["submissionMode"] == "K8sJobMode"
    where = _driver_pods(cluster, job["entrypointNumCpus"], other_resources=False)
    assert where == set(_pods(cluster)) - {"head"}
    _assert_ready_for_a_driver(cluster, where)


def test_ray_job_submit_asking_for_a_cpu_runs_the_driver_on_a_tpu_worker(manifests: dict[str, dict[str, Any]]) -> None:
    where = _driver_pods(manifests["cluster"], 1.0, other_resources=False)
    assert "head" not in where
    _assert_ready_for_a_driver(manifests["cluster"], where)


def test_ray_job_submit_asking_for_memory_or_labels_may_run_the_driver_anywhere(
    manifests: dict[str, dict[str, Any]],
) -> None:
    where = _driver_pods(manifests["cluster"], 0.0, other_resources=True)
    assert "head" in where
    _assert_ready_for_a_driver(manifests["cluster"], where)


def test_ray_job_submit_asking_for_nothing_runs_the_driver_on_the_head(manifests: dict[str, dict[str, Any]]) -> None:
    """The lead's acceptance run: tests/workloads/torch_tpu/test_torch_tpu_on_emulated_slice.py, on a head set up
    from this."""
    where = _driver_pods(manifests["cluster"], 0.0, other_resources=False)
    assert where == {"head"}
    _assert_ready_for_a_driver(manifests["cluster"], where)


def test_a_driver_started_on_a_worker_pod(manifests: dict[str, dict[str, Any]]) -> None:
    """``kubectl exec`` into a TPU worker pod and ``python train.py``: the container's own env."""
    _assert_ready_for_a_driver(manifests["cluster"], set(_pods(manifests["cluster"])) - {"head"})


def test_an_xla_stack_s_head_carries_no_torch_tpu_env() -> None:
    from tpuray.components.planning.stack_plan import plan_stack

    dev = load_stack_file(ROOT / "Pulumi.dev.yaml")
    assert dev.workload.backend == "xla"
    (cluster,) = [m["spec"] for m in plan_stack(dev, "dev").manifests if m["kind"] == "RayCluster"]
    assert all(not _torch_tpu_env(c) for c, _ in _pods(cluster).values())
