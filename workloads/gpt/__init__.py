"""The example GPT trainer, apart from the library: its model (:mod:`.model`), data (:mod:`.data`), FLOPs and
parameter counts (:mod:`.metrics`), the training loop (:mod:`.loop`: the per-worker API of :mod:`tpuray.workloads`,
and the compile cache and compile counts of its ``api`` and ``_ray_compat``), its global batch through resizes
(:mod:`.elastic`), the GPT sharded over the slice (:mod:`.sharded` on PyTorch/XLA SPMD, :mod:`.fsdp2_loop` on
TorchTPU) and its CLI (:mod:`.cli`, run as ``python -m tpuray.workloads.train``).

Exports nothing: an example to read and run, not an API.
"""
