"""An example serving application: two replicas, each owning one v5e 2x2 slice, each host worker holding a tiny model
replicated on its chips.

``app`` is Ray Serve's import path ``tpuray.workloads.serving.example:app`` (what ``tpuray:serving``'s
``importPath`` names); run as a module it deploys the app on the cluster ``RAY_ADDRESS`` names, sends a batch,
changes the ``user_config``, sends it again, and shuts Serve down::

    python -m tpuray.workloads.emulate --topology v5e:2x2 --num-slices 2 -- python -m tpuray.workloads.serving.example
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tpuray.workloads.serving.replica import slice_app

if TYPE_CHECKING:
    import torch

__all__ = ["IN_FEATURES", "app", "main", "tiny_model"]

IN_FEATURES = 4


def tiny_model(config: Mapping[str, Any]) -> torch.nn.Module:
    """A two-layer MLP whose weights come from ``config["seed"]`` (default 0): the same on every chip."""
    import torch

    unknown = sorted(set(config) - {"seed"})
    if unknown:
        raise ValueError(f"user_config: unknown key(s) {unknown}; the example model takes only 'seed' (an integer)")
    seed = config.get("seed", 0)
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise ValueError(f"user_config.seed: an integer, got {seed!r}")
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(IN_FEATURES, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))


app = slice_app(tiny_model, "v5e:2x2", num_replicas=2)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tpuray.workloads.serving.example", description=__doc__)
    parser.add_argument("--topology", default="v5e:2x2", help="each replica's slice, GEN:TOPOLOGY")
    parser.add_argument("--replicas", type=int, default=2, help="replicas, one slice each")
    args = parser.parse_args(argv)

    import ray
    from ray import serve

    ray.init(log_to_driver=False)
    try:
        rows = [[float(i + j) / 10 for j in range(IN_FEATURES)] for i in range(8)]
        for seed in (0, 1):
            seeded = slice_app(tiny_model, args.topology, num_replicas=args.replicas, user_config={"seed": seed})
            handle = serve.run(seeded)
            seen: dict[str, set[str]] = {}
            for _ in range(8):
                out = handle.remote(rows).result(timeout_s=60)
                seen.setdefault(out["replica"], set()).update(h["slice_name"] for h in out["hosts"])
            print(json.dumps({"seed": seed, "outputs": out["outputs"][:2], "slices_per_replica": _sorted(seen)}))
    finally:
        serve.shutdown()  # type: ignore[no-untyped-call]
        ray.shutdown()
    return 0


def _sorted(seen: dict[str, set[str]]) -> dict[str, list[str]]:
    return {k: sorted(v) for k, v in sorted(seen.items())}


if __name__ == "__main__":
    raise SystemExit(main())
