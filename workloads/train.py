"""``python -m tpuray.workloads.train``: the example GPT trainer's CLI (:mod:`tpuray.workloads.gpt.cli`). The path
stays: every shipped RayJob's entrypoint names it, and old worker images and live manifests run it."""

from tpuray.workloads.gpt.cli import main

__all__ = ["main"]

if __name__ == "__main__":
    raise SystemExit(main())
