"""The example GPT trainer, apart from the library: its model (:mod:`.model`), data (:mod:`.data`), FLOPs and
parameter counts (:mod:`.metrics`), the training loop (:mod:`.loop`, only the public API of
:mod:`tpuray.workloads`) and its CLI (:mod:`.cli`, run as ``python -m tpuray.workloads.train``).
"""
