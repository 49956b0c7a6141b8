"""Benchmark ``tpuray plan``: the prod stack and a generated 64-pool stack, against the bare import of the
Pulumi SDKs the program needs, all in fresh subprocesses (each plan pays its own imports, as in CI), in CPU
seconds (user + system, the process and its children; medians of runs taken in alternation).

Prints one JSON line::

    {"bare_import_s": ..., "used_import_s": ..., "plan_prod_s": ..., "plan_large_s": ..., "large_pools": 64,
     "ratio_large": ..., "ratio_large_vs_used": ..., "per_pool_ms": ..., "target_prod_vs_used": 1.2,
     "target_large_vs_used": 1.3, "ok": ...}

Two baselines, because pulumi-gcp and pulumi-kubernetes load their modules lazily: ``bare_import_s`` is the
literal ``import pulumi, pulumi_gcp.container, pulumi_kubernetes`` (which executes almost none of their code);
``used_import_s`` also touches one class of every SDK module the program's resources come from (read from the
large plan's resource types), the floor for any in-process run of this program.
``per_pool_ms`` is the marginal cost of a slice pool: (large - prod) / (64 - prod's pools).

The ``tpuray`` command runs with Python's cyclic garbage collector off (``cli.run``): the collector walking the
SDKs' objects was half a plan's CPU, and ``used_import_s`` still pays it. So a third baseline,
``used_import_nogc_s``, is the same import with the collector off as the command runs it; ``ratio_*_like_for_like``
compare against it and show what tpuray's own part weighs (``ok_like_for_like``); ``ok`` holds both targets
against ``used_import_s``.
Run from the project root: ``python bench/plan_bench.py [--repeat 3]``.

What a plan pays past ``used_import_nogc_s`` (collector off on both sides; in-process CPU timers and cProfile, on
2 cores): tpuray's own imports (pydantic, the config models, planners and review modules: about 0.2 s); the plan's
run, 0.2 s for prod and 0.7 s at 64 pools, most of it the Pulumi SDK registering each resource (serializing its
inputs, expanding ``depends_on``, asyncio callbacks, the mock monitor's round trip) and the rest tpuray's own work
(the config, the plan, the policy rules, writing the files: about 0.15 s at 64 pools). Cutting the node pools'
~1,800 ``depends_on`` edges to the ~100 that ordering needs saved 5% of the 64-pool plan, within the noise, so the
edges stay. The figures depend on bytecode: with ``PYTHONDONTWRITEBYTECODE`` set and no ``__pycache__``, every
run compiles tpuray's ~80 modules from source (about 0.07 s), while the SDK's come compiled from site-packages.
The used import touches every SDK module a resource type of the plan names (``pulumi_random``,
``pulumi_kubernetes.networking.v1`` and ``helm.v3`` included; before, it missed those, about 0.15 s too little).
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml
from figures import add_record_flag, emit

ROOT = Path(__file__).resolve().parents[1]
BARE_IMPORT = "import pulumi, pulumi_gcp.container, pulumi_kubernetes"
# The targets, against the import of the SDK modules the program uses (the part of a plan that is not ours).
TARGET_PROD_VS_USED = 1.2
TARGET_LARGE_VS_USED = 1.3
# Shapes the large stack cycles through: multi-host and single-host, every compact-placement generation that prod's
# zone (us-east5-a) offers (v4 is only in us-central2-b: https://cloud.google.com/tpu/docs/regions-zones).
SHAPES = (("v5p", "2x2x2"), ("v6e", "4x4"), ("v5e", "4x8"), ("v5p", "2x2x4"), ("v6e", "2x2"), ("v5e", "2x2"))


def large_stack(pools: int) -> dict[str, Any]:
    """The prod stack with ``pools`` slice pools instead of its own."""
    doc: dict[str, Any] = yaml.safe_load((ROOT / "Pulumi.prod.yaml").read_text())
    cfg = doc["config"]
    cfg["tpuray:slicePools"] = [
        {
            "name": f"pool-{i:02d}",
            "generation": gen,
            "topology": topo,
            "slices": 1 + i % 2,
            "capacity": {"type": "spot"} if i % 3 else {"type": "on-demand"},
            "autoscaling": {"enabled": True, "minSlices": 0},
        }
        for i, (gen, topo) in enumerate(SHAPES[i % len(SHAPES)] for i in range(pools))
    ]
    cfg["tpuray:workload"] = {**cfg["tpuray:workload"], "slicePool": "pool-00"}
    return doc


def _k8s_class(group: str, version: str, cls: str) -> str:
    """The pulumi_kubernetes class of a ``kubernetes:<group>/<version>:<Kind>`` resource: the SDK's own module for
    a built-in API group (``core``, ``networking.k8s.io``, ``helm.sh``: the first label of the group), else
    ``CustomResource`` (a CRD such as ``ray.io/v1``)."""
    import importlib

    name = f"pulumi_kubernetes.{group.split('.')[0]}.{version}"
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError:
        return "pulumi_kubernetes.apiextensions.CustomResource"
    return f"{name}.{cls}" if hasattr(module, cls) else "pulumi_kubernetes.apiextensions.CustomResource"


def used_import_code(resource_types: set[str]) -> str:
    """Python that imports the SDK modules those resource types live in and touches one class of each."""
    touches = {"pulumi_kubernetes.Provider"}
    for t in sorted(resource_types):
        pkg, _, rest = t.partition(":")
        module, _, cls = rest.rpartition(":")
        if pkg == "gcp":
            touches.add(f"pulumi_gcp.{module.split('/')[0]}.{cls}")
        elif pkg == "kubernetes":
            group, _, version = module.partition("/")
            touches.add(_k8s_class(group, version, cls))
        elif pkg == "random":
            touches.add(f"pulumi_random.{cls}")
    imports = sorted({".".join(t.split(".")[:-1]) for t in touches} | {"pulumi"})
    return "import " + ", ".join(imports) + "\n" + "\n".join(sorted(touches))


def cpu(cmd: list[str]) -> float:
    """CPU seconds (user + system) of one run of ``cmd`` and its children: unlike wall time, it does not grow when
    other work shares the machine's cores."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{done.stderr[-3000:]}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--repeat", type=int, default=3, help="runs per measurement (the median is reported)")
    parser.add_argument("--pools", type=int, default=64)
    add_record_flag(parser)
    args = parser.parse_args(argv)
    py = sys.executable
    with tempfile.TemporaryDirectory(prefix="tpuray-bench-") as tmp:
        stack_file = Path(tmp) / "Pulumi.large.yaml"
        stack_file.write_text(yaml.safe_dump(large_stack(args.pools), sort_keys=False))
        plan = [py, "-m", "tpuray.components.cli", "plan", "--root", str(ROOT)]
        large_cmd = [*plan, "--stack", "large", "--stack-file", str(stack_file), "--out", f"{tmp}/large"]
        cpu(large_cmd)  # a first run writes the plan the used-import baseline is read from (and warms the caches)
        large_plan = json.loads((Path(tmp) / "large" / "plan.json").read_text())
        resources = len(large_plan["resources"])
        used_code = used_import_code({r["type"] for r in large_plan["resources"]})
        cmds = {
            "bare": [py, "-c", BARE_IMPORT],
            "used": [py, "-c", used_code],
            # as cli.run runs a command: the collector off, and nothing left for the exit's collection to walk
            "used_nogc": [py, "-c", f"import gc\ngc.disable()\n{used_code}\ngc.freeze()"],
            "prod": [*plan, "--stack", "prod", "--out", f"{tmp}/prod"],
            "large": large_cmd,
        }
        # in alternation, so a change in the machine's load touches every measurement alike
        runs: dict[str, list[float]] = {k: [] for k in cmds}
        for _ in range(args.repeat):
            for k, cmd in cmds.items():
                runs[k].append(cpu(cmd))
        bare, used, used_nogc, prod, large = (statistics.median(runs[k]) for k in cmds)
    prod_pools = len(yaml.safe_load((ROOT / "Pulumi.prod.yaml").read_text())["config"]["tpuray:slicePools"])
    result = {
        "bare_import_s": round(bare, 3),
        "used_import_s": round(used, 3),
        "used_import_nogc_s": round(used_nogc, 3),
        "plan_prod_s": round(prod, 3),
        "plan_large_s": round(large, 3),
        "large_pools": args.pools,
        "large_resources": resources,
        "ratio_prod": round(prod / bare, 2),
        "ratio_prod_vs_used": round(prod / used, 2),
        "ratio_large": round(large / bare, 2),
        "ratio_large_vs_used": round(large / used, 2),
        "ratio_prod_like_for_like": round(prod / used_nogc, 2),
        "ratio_large_like_for_like": round(large / used_nogc, 2),
        "per_pool_ms": round(1000 * (large - prod) / (args.pools - prod_pools), 1),
        "target_prod_vs_used": TARGET_PROD_VS_USED,
        "target_large_vs_used": TARGET_LARGE_VS_USED,
        "ok": prod / used <= TARGET_PROD_VS_USED and large / used <= TARGET_LARGE_VS_USED,
        "ok_like_for_like": prod / used_nogc <= TARGET_PROD_VS_USED and large / used_nogc <= TARGET_LARGE_VS_USED,
    }
    emit("plan_bench", result, record_it=args.record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
