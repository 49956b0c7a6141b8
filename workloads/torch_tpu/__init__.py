"""TorchTPU (``torch_tpu``), one worker per runtime device through Ray Train's own TPU path: the env callback a
stack names in ``RAY_TRAIN_CALLBACKS`` (this package's path, ``tpuray.workloads.torch_tpu.TorchTpuEnvCallback``,
is what deployed stacks name: it stays) and its runtime.

Exports :class:`TorchTpuEnvCallback`, :data:`CALLBACK_PATH`, :func:`slice_envs` and
:class:`TorchTpuRuntime`.
"""

from tpuray.workloads.torch_tpu.callback import CALLBACK_PATH, TorchTpuEnvCallback, slice_envs
from tpuray.workloads.torch_tpu.runtime import TorchTpuRuntime

__all__ = ["CALLBACK_PATH", "TorchTpuEnvCallback", "TorchTpuRuntime", "slice_envs"]
