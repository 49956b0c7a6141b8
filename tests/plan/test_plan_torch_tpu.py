"""``tpuray plan`` of a TorchTPU stack on tpu7x (tests/fixtures/stacks/Pulumi.torch-tpu.yaml): a Ray worker per
device, the env that Ray's own TorchTPU path needs on the workers, Kueue and cost in chips, and a NetworkPolicy that
admits every port the workers' envs name, per process, and no PyTorch/XLA port."""

from __future__ import annotations

from typing import Any

import pytest

from tests.plan.conftest import ROOT
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
    assert not {e["name"] for e in head.get("env", [])} & {"RAY_TRAIN_CALLBACKS", "RAY_TPU_RESOURCE_PER_CHIP"}
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
    from tpuray.workloads.worker_env import host_major_seats, torch_tpu_env

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


def test_a_worker_image_of_the_other_runtime_is_refused(tmp_path: Any) -> None:
    path = tmp_path / "Pulumi.image.yaml"
    path.write_text(_with(STACK.read_text(), ("0.1.0-torch-tpu", "0.1.0-xla")))
    with pytest.raises(ConfigError) as err:
        load_stack_file(path)
    assert "ray.workerImage" in str(err.value) and "torch_tpu" in str(err.value)
