"""PyTorch/XLA, one worker per chip: its Ray Train backend (:class:`XlaChipConfig`), its runtime, Ray Train's
portable API on the chip (:mod:`.portable`), Transformers and Lightning (:mod:`.frameworks`, :mod:`.lightning`),
and the patches they need (:mod:`.patches`).

Exports :class:`XlaChipConfig` and :class:`XlaRuntime`.
"""

from tpuray.workloads.xla.backend import XlaChipConfig
from tpuray.workloads.xla.runtime import XlaRuntime

__all__ = ["XlaChipConfig", "XlaRuntime"]
