"""PyTorch Lightning through ``ray.train.lightning`` on a worker's XLA chip, one chip per worker, set up by
:func:`tpuray.workloads.xla.frameworks.install` as ``ray.train.lightning`` is first imported on the worker. The script
stays as Ray's Lightning guide writes it: ``pl.Trainer(accelerator="auto", strategy=RayDDPStrategy(),
plugins=[RayLightningEnvironment()], callbacks=[RayTrainReportCallback()])`` and ``prepare_trainer(trainer)``.

What Lightning 2.6 does with that trainer on an XLA chip, and what is set here to agree with it:

- The accelerator. ``RayDDPStrategy.root_device`` is ``ray.train.torch.get_device()``, the chip's XLA device
  (``ray/train/lightning/_lightning_utils.py``), but no Lightning accelerator takes it with that strategy:
  ``accelerator="auto"`` picks ``XLAAccelerator`` wherever torch_xla finds TPUs
  (``lightning/fabric/utilities/device_parser.py``, ``_select_auto_accelerator``), which Lightning allows only with
  its own ``XLAStrategy``/``SingleDeviceXLAStrategy`` and refuses as the ``Trainer`` is made
  (``lightning/pytorch/trainer/connectors/accelerator_connector.py``, ``_lazy_init_strategy``); those launch their
  own processes (``xmp.spawn``), which a Ray Train worker must not. Elsewhere (the emulated slice) it picks
  ``CPUAccelerator``, whose ``setup_device`` raises ``Device should be CPU, got xla:0`` as ``fit`` starts
  (``lightning/pytorch/accelerators/cpu.py``). So where the trainer's strategy is one of Ray's on an XLA device and
  the script asks for ``accelerator="auto"`` (or ``"tpu"``), the connector takes :class:`XlaChipAccelerator`: this
  process's one chip, no process launching, and not an ``XLAAccelerator`` (which would bring the check above).
- Mixed precision. ``precision="bf16-mixed"`` autocasts on the XLA device, not on ``"cuda"`` (which Lightning picks
  for any accelerator but CPU/MPS, and which torch turns off without CUDA).
- The DDP wrapper. ``DDPStrategy._setup_model`` builds torch's ``DistributedDataParallel`` itself, with
  ``device_ids=[0]`` under a ``torch.cuda.stream`` (``lightning/pytorch/strategies/ddp.py``), not what
  ``ray.train.torch.prepare_model`` builds on the chip. On an XLA device ``RayDDPStrategy`` wraps the module as
  ``prepare_model`` does (``ray/train/torch/train_loop_utils.py``: ``device_ids=[device], output_device=device``)
  with :class:`tpuray.workloads.xla.portable.XlaDDP`: plain DDP over the xla process group on TPUs, the emulated
  slice's gradient-averaging DDP over its gloo-over-XLA group there. Its teardown unwraps that emulated DDP itself:
  Lightning's reads DDP's reducer logs (``_get_ddp_logging_data``), which the emulated DDP has not.
- Means over the chips (``self.log(..., sync_dist=True)``; ``DDPStrategy.reduce``'s default): sums, then
  divided, as Lightning does on gloo; neither the xla group nor the emulated slice's takes ``ReduceOp.AVG``.
- The step's graph. Lightning's automatic optimization calls ``optimizer.step(closure)``, so the portable API's
  optimizer-step hook (:mod:`tpuray.workloads.xla.portable`) ends the step's graph here too: a Lightning step runs the
  graphs a ``prepare_model`` loop's step runs (two on the emulated slice), and compiles none once warm.
- The checkpoint. ``RayTrainReportCallback`` saves with ``trainer.save_checkpoint``; on an XLA device the state is
  copied to the host first, as Lightning's own ``XLAStrategy`` does through ``xm.save``
  (``lightning/pytorch/strategies/xla.py``, ``save_checkpoint``; ``lightning/fabric/plugins/io/xla.py``), so the
  file loads on a CPU machine without torch_xla, and ``trainer.fit(ckpt_path=...)`` resumes from it. Saved as XLA
  tensors it would not: Lightning loads with a callable ``map_location`` (``lightning/fabric/plugins/io/
  torch_io.py``), which torch refuses for a device tensor ("Callable map_location not supported with
  ... _rebuild_device_tensor_from_numpy", ``torch/_utils.py``, ``_get_restore_location``).
- The process group. ``DDPStrategy.setup_distributed`` passes ``device_id=root_device`` with torch >= 2.3
  (``_TORCH_GREATER_EQUAL_2_3``) but Lightning's ``_init_dist_connection`` returns early when the group exists
  (``lightning/fabric/utilities/distributed.py``), and tpuray's backend has made it before the train function, so
  that torch-version-gated path never runs on these workers.

``prepare_trainer`` refuses, before ``fit``, what still cannot run on the chip: Ray's FSDP and DeepSpeed strategies,
and an accelerator other than the chip's (``accelerator="cpu"``, an ``Accelerator`` instance) with the XLA device.
On the emulated slice only, manual optimization (``automatic_optimization = False``) stops at its first
``manual_backward``: Lightning prepares DDP's reducer there (``lightning/pytorch/overrides/distributed.py``,
``prepare_for_backward``), and the emulated DDP refuses ``reducer`` by name (it has none).
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

__all__ = ["ACCELERATOR_REFUSAL", "STRATEGY_REFUSAL", "install"]

STRATEGY_REFUSAL = (
    "ray.train.lightning.prepare_trainer: {strategy} is not supported on this worker's XLA chip ({device}): "
    "tpuray runs Lightning on TPU chips with RayDDPStrategy only (Lightning's FSDPStrategy requires a CUDA "
    "accelerator, and DeepSpeed has no XLA one); pass strategy=RayDDPStrategy()"
)
ACCELERATOR_REFUSAL = (
    "ray.train.lightning.prepare_trainer: {accelerator} cannot train on this worker's XLA chip ({device}), where "
    "RayDDPStrategy puts the model: pass pl.Trainer(accelerator='auto') (or 'tpu'), which on this worker is the chip"
)
_CHIP_FLAGS = ("auto", "tpu")
"""The ``accelerator=`` values that mean this worker's chip when the strategy is one of Ray's on an XLA device."""

Replace = Callable[[Any, str, Any], None]


def install(utils: ModuleType, replace: Replace) -> None:
    """Set Lightning up for this worker's chip (see the module docstring); ``utils`` is Ray's
    ``ray.train.lightning._lightning_utils``, ``replace(owner, name, value)`` sets an attribute until
    :func:`tpuray.workloads.xla.frameworks.uninstall` restores it."""
    pl: Any = utils.pl  # lightning.pytorch, or pytorch_lightning where Ray found only that
    accelerator = _accelerator_class(pl)
    ray_strategies = (utils.RayDDPStrategy, utils.RayFSDPStrategy, utils.RayDeepSpeedStrategy)
    connector: Any = pl.trainer.connectors.accelerator_connector._AcceleratorConnector
    check_flags = connector._check_config_and_set_final_flags

    def check_config_and_set_final_flags(self: Any, *args: Any, **kwargs: Any) -> None:
        check_flags(self, *args, **kwargs)
        strategy = self._strategy_flag
        if isinstance(strategy, ray_strategies) and _on_chip(strategy) and self._accelerator_flag in _CHIP_FLAGS:
            self._accelerator_flag = accelerator()

    init_precision = connector._check_and_init_precision

    def check_and_init_precision(self: Any) -> Any:
        plugin = init_precision(self)
        # Lightning autocasts on "cuda" for any accelerator but CPU/MPS (_check_and_init_precision), which torch
        # turns off with a warning where there is no CUDA: bf16-mixed would train in float32. On the chip it is
        # torch.autocast("xla", dtype=torch.bfloat16), as torch_xla's AMP guide writes it. (16-mixed's GradScaler is
        # refused as it is made, naming bfloat16: tpuray.workloads.xla.portable.)
        if isinstance(self._accelerator_flag, accelerator) and isinstance(plugin, pl.plugins.MixedPrecision):
            plugin.device = "xla"
        return plugin

    replace(connector, "_check_config_and_set_final_flags", check_config_and_set_final_flags)
    replace(connector, "_check_and_init_precision", check_and_init_precision)
    _adapt_ddp_strategy(utils.RayDDPStrategy, replace)
    _guard_prepare_trainer(utils, accelerator, replace)


def _on_chip(strategy: Any) -> bool:
    return bool(strategy.root_device.type == "xla")


def _is_mean(reduce_op: Any) -> bool:
    import torch.distributed as dist

    if isinstance(reduce_op, str):
        return reduce_op.lower() in ("mean", "avg")
    return bool(reduce_op == dist.ReduceOp.AVG)


def _accelerator_class(pl: Any) -> type[Any]:
    import torch

    class XlaChipAccelerator(pl.accelerators.Accelerator):  # type: ignore[misc]
        """This Ray Train worker's one XLA chip (``ray.train.torch.get_device()``), for Ray's strategies: no
        process launching (Ray Train started the workers), and not Lightning's ``XLAAccelerator``, which Lightning
        pairs only with its own XLA strategies."""

        def setup_device(self, device: torch.device) -> None:
            if device.type != "xla":
                raise RuntimeError(f"XlaChipAccelerator trains on this worker's XLA chip, got device {device}")

        def teardown(self) -> None:
            pass

        @staticmethod
        def parse_devices(devices: Any) -> int:
            if devices not in ("auto", 1, "1", [0]):
                raise ValueError(
                    f"pl.Trainer(devices={devices!r}) on a Ray Train worker's XLA chip: each worker has one chip "
                    "(Ray Train starts one worker per chip); pass devices='auto' or 1"
                )
            return 1

        @staticmethod
        def get_parallel_devices(devices: Any) -> list[torch.device]:
            import ray.train.torch

            return [ray.train.torch.get_device()]

        @staticmethod
        def auto_device_count() -> int:
            return 1

        @staticmethod
        def is_available() -> bool:
            return True

        @staticmethod
        def name() -> str:
            return "xla_chip"

        def get_device_stats(self, device: Any) -> dict[str, Any]:
            # torch_xla 2.9's keys (torch_xla/core/xla_model.py, MemoryInfo): Lightning's XLAAccelerator still reads
            # kb_free/kb_total, which it no longer returns (lightning/pytorch/accelerators/xla.py)
            import torch_xla.core.xla_model as xm

            info = xm.get_memory_info(device)
            return {"memory used (B)": int(info["bytes_used"]), "memory limit (B)": int(info["bytes_limit"])}

    return XlaChipAccelerator


def _adapt_ddp_strategy(strategy: type[Any], replace: Replace) -> None:
    setup_model, teardown, save_checkpoint = strategy._setup_model, strategy.teardown, strategy.save_checkpoint
    reduce = strategy.reduce

    def _setup_model(self: Any, model: Any) -> Any:
        if not _on_chip(self):
            return setup_model(self, model)
        from tpuray.workloads.xla import portable

        device = self.root_device
        return portable.XlaDDP(module=model, device_ids=[device], output_device=device, **self._ddp_kwargs)

    def teardown_(self: Any) -> None:
        if getattr(self.model, "_emulated", False):  # the emulated slice's XlaDDP: no reducer logs to read
            self.model = self.lightning_module
        teardown(self)

    def save_checkpoint_(self: Any, checkpoint: dict[str, Any], filepath: Any, storage_options: Any = None) -> None:
        if _on_chip(self):
            import torch
            import torch_xla
            from lightning_utilities.core.apply_func import apply_to_collection

            torch_xla.sync()  # every rank runs its pending step whole before rank 0 reads the tensors
            if self.is_global_zero:  # the one that writes (Strategy.save_checkpoint)
                checkpoint = apply_to_collection(checkpoint, torch.Tensor, lambda t: t.cpu())
        save_checkpoint(self, checkpoint, filepath, storage_options=storage_options)

    def reduce_(self: Any, tensor: Any, group: Any = None, reduce_op: Any = "mean") -> Any:
        import torch
        import torch.distributed as dist

        if not (_on_chip(self) and isinstance(tensor, torch.Tensor) and _is_mean(reduce_op)):
            return reduce(self, tensor, group, reduce_op=reduce_op)
        # Neither group of the chips takes ReduceOp.AVG: torch_xla's raises "Invalid reduce op"
        # (torch_xla/distributed/xla_backend.py, _get_reduce_type), and gloo's writes the float mean into an
        # integer tensor (Lightning's cumulated_batch_size) and fails. Sum and divide, as Lightning does for a
        # group it knows as gloo (lightning/fabric/utilities/distributed.py, _sync_ddp).
        total = reduce(self, tensor, group, reduce_op="sum")
        world = dist.get_world_size(group)
        return total.div_(world) if torch.is_floating_point(total) else total.copy_(total / world)

    replace(strategy, "_setup_model", _setup_model)
    replace(strategy, "reduce", reduce_)
    replace(strategy, "teardown", teardown_)
    replace(strategy, "save_checkpoint", save_checkpoint_)


def _guard_prepare_trainer(utils: ModuleType, accelerator: type[Any], replace: Replace) -> None:
    prepare = utils.prepare_trainer

    def prepare_trainer(trainer: Any) -> Any:
        trainer = prepare(trainer)  # Ray's own checks first: one of its strategies, its cluster environment
        strategy = trainer.strategy
        if not _on_chip(strategy):
            return trainer
        device = strategy.root_device
        if not isinstance(strategy, utils.RayDDPStrategy):
            raise RuntimeError(STRATEGY_REFUSAL.format(strategy=type(strategy).__name__, device=device))
        if not isinstance(strategy.accelerator, accelerator):
            name = type(strategy.accelerator).__name__
            raise RuntimeError(ACCELERATOR_REFUSAL.format(accelerator=name, device=device))
        return trainer

    prepare_trainer.__doc__ = prepare.__doc__
    replace(utils, "prepare_trainer", prepare_trainer)
    package = _package(utils)
    if package is not None and getattr(package, "prepare_trainer", None) is prepare:  # imported before install
        replace(package, "prepare_trainer", prepare_trainer)


def _package(utils: ModuleType) -> ModuleType | None:
    import sys

    return sys.modules.get(utils.__name__.rsplit(".", 1)[0])
