"""``python -m tpuray.workloads.train``: the example GPT trainer's CLI (:mod:`tpuray.workloads.gpt.cli`). The path
stays: every shipped RayJob's entrypoint names it, and old worker images and live manifests run it."""

from tpuray.workloads.gpt.cli import build_parser, main, settings

__all__ = ["build_parser", "main", "settings"]

if __name__ == "__main__":
    raise SystemExit(main())
