"""The TorchTPU env a rank gets on a tpuray stack, against what torch_tpu 0.2.0's own launcher
(``set_tpu_launch_env``) computes for the same slice, host by host, with only the PCI scan and the device
coordinates faked (launch_env.py).

torch_tpu is given what the cluster gives a host: the webhook's ``TPU_WORKER_HOSTNAMES``, the host's chip
coordinates (hosts numbered Z-major then Y then X, as Ray's ``_get_physical_worker_id_from_coords`` and torch_tpu's
``_get_slice_host_coordinates`` both order them), tpuray's slice topology where it must come from outside (multi-host)
and tpuray's base port. It derives the address list, its devices per host (from the faked PCI count), the node rank
and, on one host, the topology itself. tpuray's side is :func:`tpuray.workloads.torch_tpu.callback.slice_envs`, what
``TorchTpuEnvCallback`` sets, in a Ray rank order that is not host-major.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from tests.support.torch_tpu_venv import PCI_DEVICE_ID, run_launch_env
from tpuray.components.catalog.names import (
    RAY_POD_TYPE_LABEL,
    RAY_SLICE_NAME_LABEL,
    RAY_TOPOLOGY_LABEL,
    RAY_WORKER_ID_LABEL,
)
from tpuray.components.catalog.topology import TpuSlice
from tpuray.workloads.placement.seats import Seat
from tpuray.workloads.placement.worker_env import host_major_seats, torch_tpu_env, torch_tpu_topology
from tpuray.workloads.torch_tpu.callback import slice_envs

# each harness run is a fresh interpreter of the torch_tpu venv importing torch and torch_tpu
pytestmark = [pytest.mark.slow, pytest.mark.beside_clusters]

SPECS = ["v5e:2x2", "v5e:4x4", "v5p:2x2x2", "v6e:4x4", "v6e:2x4:ct6e-standard-4t", "tpu7x:2x2x1", "tpu7x:2x2x2"]
BASE_PORT = 8471


def _runs() -> list[tuple[str, int]]:
    """Each spec on one slice, and each multi-host spec on two (multislice)."""
    return [(spec, n) for spec in SPECS for n in ((1, 2) if TpuSlice.parse(spec).multi_host else (1,))]


def _hosts(s: TpuSlice, k: int) -> list[str]:
    return [f"slice{k}-{w}.tpuray-headless" for w in range(s.hosts)]


def _coords(s: TpuSlice, worker_id: int) -> list[int]:
    """The first chip of host ``worker_id``: hosts Z-major, then Y, then X, each a chips-per-host block."""
    bx, by, _ = s.host_bounds
    cx, cy, cz = s.chips_per_host_bounds
    return [worker_id % bx * cx, worker_id // bx % by * cy, worker_id // (bx * by) * cz]


def _case(s: TpuSlice, k: int, worker_id: int) -> dict[str, Any]:
    env = {"TORCH_TPU_BASE_PORT": str(BASE_PORT)}
    if s.multi_host:
        env |= {"TPU_WORKER_HOSTNAMES": ",".join(_hosts(s, k)), "TORCH_TPU_TOPOLOGY": torch_tpu_topology(s)}
    return {
        "pci_device_id": PCI_DEVICE_ID[s.generation],
        "devices_per_host": s.devices_per_host,
        "env": env,
        "local_device_coords": _coords(s, worker_id) if s.multi_host else None,
        "nproc_per_node": None,
    }


@pytest.fixture(scope="module")
def torch_tpu() -> dict[tuple[str, int, int, int], dict[str, str | None]]:
    """torch_tpu's launch env of every host of every slice of every run, by (spec, slices, slice, host)."""
    keys = [(spec, n, k, w) for spec, n in _runs() for k in range(n) for w in range(TpuSlice.parse(spec).hosts)]
    cases = [_case(TpuSlice.parse(spec), k, w) for spec, _, k, w in keys]
    return dict(zip(keys, run_launch_env(cases), strict=True))


def _ray_seats(s: TpuSlice, slices: int, seed: int) -> list[Seat]:
    """A Ray rank order: slice by slice (Ray sorts by TPU_NAME), the slice's ranks in actor-creation order."""
    out: list[Seat] = []
    for k in range(slices):
        seats = host_major_seats(s, _hosts(s, k))
        random.Random(seed + k).shuffle(seats)
        for x in seats:
            labels = {
                RAY_POD_TYPE_LABEL: s.pod_type,
                RAY_TOPOLOGY_LABEL: s.topology,
                RAY_SLICE_NAME_LABEL: f"slice{k}",
                RAY_WORKER_ID_LABEL: str(x.worker_id),
            }
            out.append(Seat(len(out), k, f"slice{k}", x.worker_id, -1, x.host, labels=labels))
    return out


@pytest.mark.parametrize(("spec", "slices"), _runs())
def test_every_rank_agrees_with_torch_tpu(
    torch_tpu: dict[tuple[str, int, int, int], dict[str, str | None]], spec: str, slices: int
) -> None:
    s = TpuSlice.parse(spec)
    seats = _ray_seats(s, slices, seed=len(spec) + slices)
    envs = slice_envs(seats)
    for k in range(slices):
        theirs = [torch_tpu[(spec, slices, k, w)] for w in range(s.hosts)]
        assert all("error" not in t for t in theirs), theirs
        their_lists = {t["TORCH_TPU_SLICEBUILDER_ADDRESSES"] for t in theirs}
        assert len(their_lists) == 1  # torch_tpu too gives every host of the slice one list
        their = str(their_lists.pop()).split(",")
        assert len(their) == s.devices  # one address per device, devices per host from the PCI count
        if s.multi_host:
            # the list, in torch_tpu's own host-major order, is tpuray's host-major list
            assert their == torch_tpu_env(s, host_major_seats(s, _hosts(s, k)))[
                "TORCH_TPU_SLICEBUILDER_ADDRESSES"
            ].split(",")
            # torch_tpu ranks each host from its coordinates in tpuray's topology: the host's worker id
            assert [t["NODE_RANK"] for t in theirs] == [str(w) for w in range(s.hosts)]
            assert {t["NNODES"] for t in theirs} == {str(s.hosts)}
        else:
            # on one host torch_tpu detects the topology itself, and picks free local ports
            assert theirs[0]["TORCH_TPU_TOPOLOGY"] == torch_tpu_topology(s)
            assert all(a.startswith("localhost:") for a in their)
        ours_idx = [i for i, x in enumerate(seats) if x.slice_name == f"slice{k}"]
        ours = {envs[i]["TORCH_TPU_SLICEBUILDER_ADDRESSES"] for i in ours_idx}
        assert len(ours) == 1
        our = ours.pop().split(",")
        assert len(our) == len(their) == len(set(our))
        if s.multi_host:
            assert sorted(our) == sorted(their)  # the same addresses, in the ranks' order
        for r, i in enumerate(ours_idx):  # address[RANK] is on the rank's own host
            assert our[r].rsplit(":", 1)[0] == (seats[i].address if s.multi_host else "localhost")
        assert {envs[i]["TORCH_TPU_TOPOLOGY"] for i in ours_idx} == {torch_tpu_topology(s)}


def test_in_host_major_rank_order_the_list_is_torch_tpus_exactly(
    torch_tpu: dict[tuple[str, int, int, int], dict[str, str | None]],
) -> None:
    s = TpuSlice.parse("tpu7x:2x2x2")
    seats = [
        Seat(
            i,
            0,
            "slice0",
            x.worker_id,
            -1,
            x.host,
            labels={
                RAY_POD_TYPE_LABEL: s.pod_type,
                RAY_TOPOLOGY_LABEL: s.topology,
                RAY_WORKER_ID_LABEL: str(x.worker_id),
            },
        )
        for i, x in enumerate(host_major_seats(s, _hosts(s, 0)))
    ]
    (env,) = {e["TORCH_TPU_SLICEBUILDER_ADDRESSES"] for e in slice_envs(seats)}
    assert env == torch_tpu[("tpu7x:2x2x2", 1, 0, 0)]["TORCH_TPU_SLICEBUILDER_ADDRESSES"]
