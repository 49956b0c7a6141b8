"""torch_tpu's own launcher, ``set_tpu_launch_env``, run for one host of a TPU slice per process.

Runs under the python of the torch_tpu environment (``.venv-torch-tpu``, which .ci/run makes: torch 2.13 and
torch-tpu 0.2.0 cannot share the main venv's torch 2.9); it imports nothing of tpuray. Reads a JSON list of cases on
stdin, one host each::

    {"pci_device_id": "0x0063", "devices_per_host": 4, "env": {"TPU_WORKER_HOSTNAMES": "h0,h1"},
     "local_device_coords": [0, 0, 0], "nproc_per_node": null}

and writes a JSON list on stdout, one object per case, in order: the launch variables the call left set (``null``
when unset), or ``{"error": "<exception>"}`` when it raised. Bad input exits with status 2 and names the field.

Only what needs a TPU is faked, and only in the functions ``set_tpu_launch_env`` calls for it:
``hardware._scan_pci_tpus`` (torch_tpu/_internal/utils/hardware.py) finds ``devices_per_host`` devices with the
real topology map of ``pci_device_id`` (``_TOPOLOGY_BY_TPU_PCI_DEVICE_ID``), and
``distributed._query_local_device_coords`` (torch_tpu/_internal/distributed/distributed.py), which would start
PJRT in a child, returns ``local_device_coords``. Each case runs in its own process: torch_tpu reads its
variables once per process (``env.get_*_env_once``, a C++ memo, and ``env_utils._resolved_values``), so two hosts
in one process would see the first host's values. The processes are forks of one interpreter that has imported
torch_tpu with every launcher variable unset and called nothing of it: importing torch once per host cost seconds
each, minutes for a few dozen hosts.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import traceback
from collections.abc import Mapping
from typing import Any, TypeGuard

RESULT_VARS = (
    "TORCH_TPU_SLICEBUILDER_ADDRESSES",
    "TORCH_TPU_TOPOLOGY",
    "NNODES",
    "NODE_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
)
"""What ``set_tpu_launch_env`` decides for a host (its docstring and body), reported for each case."""

CLEARED_PREFIXES = ("TORCH_TPU_", "TPU_", "MASTER_")
CLEARED_NAMES = frozenset({"NNODES", "NODE_RANK", "JOB_COMPLETION_INDEX"})
"""Removed from the child's environment before the case's own ``env`` is set: everything the launcher reads or
writes, so nothing of this machine's (or an earlier case's) environment leaks into a host."""

CASE_FIELDS = ("pci_device_id", "devices_per_host", "env", "local_device_coords", "nproc_per_node")
_BAD_INPUT = 2


class CaseError(ValueError):
    """A case that is not of the documented form."""


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def check_case(index: int, case: object) -> dict[str, Any]:
    """The case with its optional fields filled in, or :class:`CaseError` naming the field and its valid form."""
    where = f"case {index}"
    if not isinstance(case, dict):
        raise CaseError(f"{where}: expected an object with fields {', '.join(CASE_FIELDS)}, got {case!r}")
    unknown = sorted(set(case) - set(CASE_FIELDS))
    if unknown:
        raise CaseError(f"{where}: unknown field(s) {unknown}; the fields are {', '.join(CASE_FIELDS)}")
    pci = case.get("pci_device_id")
    if not isinstance(pci, str):
        raise CaseError(f"{where}: pci_device_id: expected a PCI device id string like '0x0063', got {pci!r}")
    devices = case.get("devices_per_host")
    if not _is_int(devices) or devices < 0:
        raise CaseError(f"{where}: devices_per_host: expected a whole number >= 0, got {devices!r}")
    env = case.get("env", {})
    if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        raise CaseError(f"{where}: env: expected an object of string names to string values, got {env!r}")
    coords = case.get("local_device_coords")
    if coords is not None and (not isinstance(coords, list) or not all(_is_int(c) and c >= 0 for c in coords)):
        raise CaseError(f"{where}: local_device_coords: expected null or a list of whole numbers, got {coords!r}")
    nproc = case.get("nproc_per_node")
    if nproc is not None and (not _is_int(nproc) or nproc < 1):
        raise CaseError(f"{where}: nproc_per_node: expected null or a whole number >= 1, got {nproc!r}")
    return {
        "pci_device_id": pci,
        "devices_per_host": devices,
        "env": env,
        "local_device_coords": coords,
        "nproc_per_node": nproc,
    }


def host_environment(base: Mapping[str, str], case_env: Mapping[str, str]) -> dict[str, str]:
    """``base`` without any launcher variable, then the case's own."""
    kept = {k: v for k, v in base.items() if not k.startswith(CLEARED_PREFIXES) and k not in CLEARED_NAMES}
    return {**kept, **case_env}


def _launcher() -> tuple[Any, Any]:
    """torch_tpu's hardware probe and launcher modules, imported (a fork inherits them)."""
    hardware = importlib.import_module("torch_tpu._internal.utils.hardware")
    distributed = importlib.import_module("torch_tpu._internal.distributed.distributed")
    return hardware, distributed


def _run_host(case: dict[str, Any]) -> dict[str, str | None]:
    """In the host's process: fake the TPU probes, call the real launcher, read back what it set."""
    hardware, distributed = _launcher()
    topology_map = hardware._TOPOLOGY_BY_TPU_PCI_DEVICE_ID.get(case["pci_device_id"])
    if topology_map is None:
        known = sorted(hardware._TOPOLOGY_BY_TPU_PCI_DEVICE_ID)
        raise CaseError(f"pci_device_id: {case['pci_device_id']!r} is not a torch_tpu TPU device id; one of {known}")
    scan = (case["devices_per_host"], topology_map)
    coords = case["local_device_coords"]
    hardware._scan_pci_tpus = lambda: scan
    distributed._query_local_device_coords = lambda: None if coords is None else list(coords)
    try:
        distributed.set_tpu_launch_env(nproc_per_node=case["nproc_per_node"])
    except Exception as exc:  # the launcher's refusal is a result to report, whatever its type
        return {"error": f"{type(exc).__name__}: {exc}"}
    return {name: os.environ.get(name) for name in RESULT_VARS}


def _host_outcome(case: dict[str, Any], env: Mapping[str, str]) -> dict[str, Any]:
    """In the forked host: the case's environment, then the launcher; what happened, as one JSON object."""
    os.environ.clear()  # os.environ's own writes also unset and set the C environment torch_tpu reads
    os.environ.update(env)
    try:
        return {"result": _run_host(case)}
    except CaseError as exc:
        return {"bad_input": str(exc)}
    except BaseException:  # anything else is the harness's failure: report it whole to the parent
        return {"crash": traceback.format_exc()}


def _fork_host(index: int, case: dict[str, Any], base: Mapping[str, str]) -> dict[str, str | None]:
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the host: never returns into the parent's code
        os.close(read_end)
        code = 0
        try:
            with os.fdopen(write_end, "w") as out:
                json.dump(_host_outcome(case, host_environment(base, case["env"])), out)
        except BaseException:
            code = 1
        os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end) as pipe:
        raw = pipe.read()
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0 or not raw:
        raise RuntimeError(f"case {index}: the host process exited with {os.waitstatus_to_exitcode(status)}")
    outcome: dict[str, Any] = json.loads(raw)
    if "bad_input" in outcome:
        raise CaseError(f"case {index}: {outcome['bad_input']}")
    if "crash" in outcome:
        raise RuntimeError(f"case {index}: {outcome['crash']}")
    result: dict[str, str | None] = outcome["result"]
    return result


def run_cases(raw: object) -> list[dict[str, str | None]]:
    """Every case in its own fork, one after another (each takes milliseconds), results in case order."""
    if not isinstance(raw, list):
        raise CaseError(f"expected a JSON list of cases, got {type(raw).__name__}")
    cases = [check_case(i, c) for i, c in enumerate(raw)]
    base = host_environment(os.environ, {})
    os.environ.clear()  # torch_tpu is imported with no launcher variable set, as each host then sets its own
    os.environ.update(base)
    _launcher()
    return [_fork_host(i, case, base) for i, case in enumerate(cases)]


def main() -> int:
    # stdout carries the results alone: importing torch_tpu prints to it too (``libtpu not found.``), so until
    # then the process's stdout is its stderr
    results_out = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    sys.stdout.flush()
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    try:
        results = run_cases(json.loads(sys.stdin.read()))
    except (CaseError, json.JSONDecodeError) as exc:
        print(f"launch_env: {exc}", file=sys.stderr)
        return _BAD_INPUT
    with results_out:
        json.dump(results, results_out)
        results_out.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
