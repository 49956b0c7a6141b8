"""launch_env.py runs torch_tpu's own ``set_tpu_launch_env`` (torch_tpu/_internal/distributed/distributed.py) per
host: these cases check that what it reports is what that code documents, so a comparison against it compares
against torch_tpu and not against a broken harness."""

from __future__ import annotations

import re
import tomllib
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from tests.support.paths import ROOT
from tests.support.torch_tpu_venv import PCI_DEVICE_ID, installed_versions, run_launch_env

V5E_4X4_HOSTS = [f"v5e-{h}" for h in range(4)]
V5P_2X2X2_HOSTS = ["v5p-0", "v5p-1"]

# each harness run is a fresh interpreter of the torch_tpu venv importing torch and torch_tpu
pytestmark = [pytest.mark.slow, pytest.mark.beside_clusters]


def host(generation: str, devices: int, env: dict[str, str], coords: list[int] | None = None) -> dict[str, Any]:
    return {
        "pci_device_id": PCI_DEVICE_ID[generation],
        "devices_per_host": devices,
        "env": env,
        "local_device_coords": coords,
        "nproc_per_node": None,
    }


CASES = {
    # a 4-host slice as an Indexed Job sees it: the hostnames and the host's index, nothing else
    **{
        f"v5e-4x4/{k}": host(
            "v5e", 4, {"TPU_WORKER_HOSTNAMES": ",".join(V5E_4X4_HOSTS), "JOB_COMPLETION_INDEX": str(k)}
        )
        for k in range(4)
    },
    "tpu7x-2x2x1": host("tpu7x", 8, {}),
    # NODE_RANK from the device coordinates within the outside topology, hosts Z-major: (0,0,0) then (0,0,1)
    **{
        f"v5p-2x2x2/{z}": host(
            "v5p", 4, {"TPU_WORKER_HOSTNAMES": ",".join(V5P_2X2X2_HOSTS), "TORCH_TPU_TOPOLOGY": "2,2,2"}, [1, 1, z]
        )
        for z in (0, 1)
    },
    # a multi-host slice with neither coordinates nor an index: torch_tpu must refuse it
    "v5p-2x2x2/no-index": host("v5p", 4, {"TPU_WORKER_HOSTNAMES": ",".join(V5P_2X2X2_HOSTS)}),
}


@pytest.fixture(scope="module")
def results() -> dict[str, dict[str, str | None]]:
    with pytest.MonkeyPatch.context() as mp:
        # launcher variables of the process that starts the harness, which must reach no host
        mp.setenv("TORCH_TPU_BASE_PORT", "9000")
        mp.setenv("TPU_WORKER_HOSTNAMES", "elsewhere-0,elsewhere-1")
        mp.setenv("NODE_RANK", "7")
        # every case in one harness run, which starts the host processes side by side
        return dict(zip(CASES, run_launch_env(list(CASES.values())), strict=True))


def test_the_venv_holds_what_the_torch_tpu_extra_admits() -> None:
    """The facts these tests read are those of releases the ``torch-tpu`` extra installs."""
    extra = [
        Requirement(r)
        for r in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["torch-tpu"]
    ]
    pinned = {r.name: r.specifier for r in extra if r.name in ("torch", "torch-tpu", "libtpu")}
    assert set(pinned) == {"torch", "torch-tpu", "libtpu"}
    versions = installed_versions(*pinned)
    assert all(pinned[d].contains(Version(v).base_version) for d, v in versions.items()), (versions, pinned)


def test_v5e_4x4_one_address_per_device_host_major(results: dict[str, dict[str, str | None]]) -> None:
    want = ",".join(f"{h}:{8070 + i}" for h in V5E_4X4_HOSTS for i in range(4))
    for k in range(4):
        r = results[f"v5e-4x4/{k}"]
        assert r["TORCH_TPU_SLICEBUILDER_ADDRESSES"] == want, r
        assert (r["NNODES"], r["NODE_RANK"], r["MASTER_ADDR"], r["MASTER_PORT"]) == ("4", str(k), "v5e-0", "29500")
        # with no topology from the outside the launcher fills in the host's own (4 chips: "2,2,1"), not the slice's
        assert r["TORCH_TPU_TOPOLOGY"] == "2,2,1"


def test_tpu7x_single_host_runs_a_rank_per_device(results: dict[str, dict[str, str | None]]) -> None:
    r = results["tpu7x-2x2x1"]
    assert r["TORCH_TPU_TOPOLOGY"] == "2,2,1,2"
    addresses = str(r["TORCH_TPU_SLICEBUILDER_ADDRESSES"]).split(",")
    assert len(addresses) == 8 and all(re.fullmatch(r"localhost:\d+", a) for a in addresses), addresses
    assert len(set(addresses)) == 8
    assert r["NNODES"] is r["NODE_RANK"] is r["MASTER_ADDR"] is None


def test_v5p_2x2x2_node_rank_from_device_coordinates(results: dict[str, dict[str, str | None]]) -> None:
    ranks = [results[f"v5p-2x2x2/{z}"]["NODE_RANK"] for z in (0, 1)]
    assert ranks == ["0", "1"]
    for z in (0, 1):
        r = results[f"v5p-2x2x2/{z}"]
        assert r["TORCH_TPU_TOPOLOGY"] == "2,2,2"  # set from the outside: kept
        assert str(r["TORCH_TPU_SLICEBUILDER_ADDRESSES"]).split(",") == [
            f"{h}:{8070 + i}" for h in V5P_2X2X2_HOSTS for i in range(4)
        ]


def test_a_refusal_is_reported_as_the_launchers_error(results: dict[str, dict[str, str | None]]) -> None:
    """A multi-host slice with neither coordinates nor an index: torch_tpu's own ValueError, as the case's result
    (in the harness run of every case, beside hosts it accepts: each case is a process of its own)."""
    r = results["v5p-2x2x2/no-index"]
    assert set(r) == {"error"} and "JOB_COMPLETION_INDEX" in str(r["error"]), r


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"devices_per_host": "4"}, "case 0: devices_per_host"),
        ({"local_device_coords": [0, "1"]}, "case 0: local_device_coords"),
        ({"nproc": 4}, "unknown field(s) ['nproc']"),
        ({"pci_device_id": "0x9999"}, "case 0: pci_device_id: '0x9999' is not a torch_tpu TPU device id"),
    ],
)
def test_bad_cases_name_the_field(change: dict[str, object], named: str) -> None:
    with pytest.raises(RuntimeError, match=re.escape(named)):
        run_launch_env([{**host("v5e", 4, {}), **change}])
