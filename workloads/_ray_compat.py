"""Every use of Ray's private modules in tpuray.workloads, in one place, with the Ray versions it was read from.

Ray Train's portable API (``ray.train.torch.get_device``/``prepare_model``/``prepare_data_loader``) asks a
"torch device manager" for the worker's device. Ray picks the manager from the worker's accelerator ids, and on a
worker holding a ``TPU`` it is the torch_tpu one, which fails without torch_tpu. There is no public registry, so
:func:`install_torch_device_manager` sets the per-process manager Ray caches, and the by-device-type lookup its
data loader wrapper uses. Every hook here is checked at start (:func:`require_hooks`): a Ray release without one
fails with a message naming that Ray version instead of running the train function on the host CPU.

Read from the ray 2.60.0 wheel (files under ``site-packages/ray/``, named at each function).
"""

from __future__ import annotations

import importlib
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from tpuray.components.catalog.names import RAY_TRAIN_CALLBACKS_ENV

__all__ = [
    "TESTED_RAY_VERSIONS",
    "TRAIN_CALLBACKS_ENV",
    "RayHookMissing",
    "asked_scaling_config",
    "check_trainer_configs",
    "chips_per_host",
    "disable_outward_cluster",
    "draining_nodes",
    "guard_prepare_model",
    "install_iter_torch_batches_device",
    "install_torch_device_manager",
    "is_node_start_timeout",
    "live_node_ids",
    "megascale_coordinator_port",
    "normalize_torchtpu_topology",
    "quiet_train_report_log",
    "raylet_pid",
    "ready_train_autoscaling_coordinator",
    "released_on_failure",
    "require_hooks",
    "set_torch_distributed_env_vars",
    "torch_device_manager_base",
    "tpu_resource_per_chip",
    "uninstall_iter_torch_batches_device",
    "uninstall_torch_device_manager",
    "versioned_deployment",
    "worker_group_callback_base",
]

TESTED_RAY_VERSIONS = ("2.60",)
"""Ray releases (major.minor) whose private modules this file was read from and tested against."""


class RayHookMissing(RuntimeError):
    """This Ray release lacks a private hook tpuray relies on."""


def _ray_version() -> str:
    import ray

    return str(ray.__version__)


def _missing(what: str, source: str) -> RayHookMissing:
    return RayHookMissing(
        f"Ray {_ray_version()} has no {what} (read from {source} in Ray {', '.join(TESTED_RAY_VERSIONS)}); "
        f"tpuray.workloads is tested with Ray {', '.join(TESTED_RAY_VERSIONS)}: install one of those"
    )


# ---- the torch device manager (ray/air/_internal/device_manager/__init__.py, torch_device_manager.py;
#      ray/train/torch/train_loop_utils.py) ---------------------------------------------------------------

_DEVICE_MANAGER_MODULE = "ray/air/_internal/device_manager/__init__.py"
_LOADER_MODULE = "ray/train/torch/train_loop_utils.py"
# Each Ray Train has its own prepare_model: Ray Train V2's (what ray.train.torch.prepare_model is with V2 on) and V1's.
_PREPARE_MODEL_MODULES = ("ray.train.v2.torch.train_loop_utils", "ray.train.torch.train_loop_utils")


def torch_device_manager_base() -> type[Any]:
    """Ray's ``TorchDeviceManager`` base class (``ray/air/_internal/device_manager/torch_device_manager.py``)."""
    try:
        from ray.air._internal.device_manager.torch_device_manager import TorchDeviceManager
    except ImportError as e:
        raise _missing("TorchDeviceManager", "ray/air/_internal/device_manager/torch_device_manager.py") from e
    return TorchDeviceManager


def require_hooks() -> None:
    """Raise :class:`RayHookMissing` unless every private hook used here exists in the installed Ray."""
    import ray

    torch_device_manager_base()
    try:
        import ray.air._internal.device_manager as dm
        import ray.train.torch.train_loop_utils as loop
    except ImportError as e:
        raise _missing("torch device manager registry", _DEVICE_MANAGER_MODULE) from e
    # Ray caches the worker's manager in the module global _torch_device_manager, guarded by
    # _torch_device_manager_lock, and fills it in get_torch_device_manager_by_context().
    for name in ("_torch_device_manager", "_torch_device_manager_lock", "get_torch_device_manager_by_context"):
        if not hasattr(dm, name):
            raise _missing(f"ray.air._internal.device_manager.{name}", _DEVICE_MANAGER_MODULE)
    # _WrappedDataLoader (prepare_data_loader) looks its manager up by device type through this module global.
    if not hasattr(loop, "get_torch_device_manager_by_device_type"):
        raise _missing("train_loop_utils.get_torch_device_manager_by_device_type", _LOADER_MODULE)
    for name in _PREPARE_MODEL_MODULES:  # what prepare_model wraps the model in
        source = name.replace(".", "/") + ".py"
        try:
            module = importlib.import_module(name)
        except ImportError as e:
            raise _missing(name, source) from e
        if not hasattr(module, "DistributedDataParallel"):
            raise _missing(f"{name}.DistributedDataParallel", source)
    if ".".join(ray.__version__.split(".")[:2]) not in TESTED_RAY_VERSIONS:
        import warnings

        warnings.warn(
            f"tpuray.workloads was tested with Ray {', '.join(TESTED_RAY_VERSIONS)}, this is Ray {ray.__version__}",
            stacklevel=2,
        )


_installed_lock = threading.Lock()


def _loader_module() -> Any:
    return importlib.import_module("ray.train.torch.train_loop_utils")


def install_torch_device_manager(manager: Any, device_type: str, ddp_class: type[Any]) -> None:
    """Make ``manager`` this process's torch device manager for Ray Train's portable API, and ``ddp_class`` (a
    ``DistributedDataParallel`` subclass) the wrapper its ``prepare_model`` builds.

    Sets the manager Ray caches per process (so ``get_device()``/``get_devices()``/``prepare_model`` use it
    whatever accelerator the worker holds) and routes the data loader wrapper's by-type lookup for
    ``device_type`` to it (Ray 2.60 raises "Device type xla cannot be recognized" there). ``prepare_model``
    calls the ``DistributedDataParallel`` its module imported (``train_loop_utils.DistributedDataParallel``, in Ray
    Train V2's module and V1's).
    """
    require_hooks()
    import ray.air._internal.device_manager as dm

    loop = _loader_module()
    with dm._torch_device_manager_lock:
        dm._torch_device_manager = manager
    with _installed_lock:
        current: Callable[[str], Any] = loop.get_torch_device_manager_by_device_type
        original = getattr(current, "__wrapped__", current)

        def by_device_type(kind: str) -> Any:
            return manager if kind == device_type else original(kind)

        by_device_type.__wrapped__ = original  # type: ignore[attr-defined]
        loop.get_torch_device_manager_by_device_type = by_device_type
        for name in _PREPARE_MODEL_MODULES:
            setattr(importlib.import_module(name), "DistributedDataParallel", ddp_class)  # noqa: B010


def uninstall_torch_device_manager() -> None:
    """Undo :func:`install_torch_device_manager` (when the worker leaves the run)."""
    import ray.air._internal.device_manager as dm

    loop = _loader_module()
    with dm._torch_device_manager_lock:
        dm._torch_device_manager = None
    with _installed_lock:
        current = loop.get_torch_device_manager_by_device_type
        loop.get_torch_device_manager_by_device_type = getattr(current, "__wrapped__", current)
        from torch.nn.parallel import DistributedDataParallel

        for name in _PREPARE_MODEL_MODULES:
            setattr(importlib.import_module(name), "DistributedDataParallel", DistributedDataParallel)  # noqa: B010


def answer_tpu_device_manager(devices: Callable[[], list[Any]], register_backend: Callable[[], None]) -> None:
    """Make Ray's TPU device manager (``ray/air/_internal/device_manager/tpu.py``) answer with ``devices()`` and
    register the ``tpu_dist`` backend through ``register_backend()`` instead of importing torch_tpu: its
    ``is_available``, ``get_devices`` and ``register_custom_torch_dist_backend`` (which
    ``ray/train/torch/config.py`` ``_setup_torch_process_group`` calls before ``init_process_group("tpu_dist")``).
    For the emulated slice's TorchTPU stand-in only."""
    try:
        from ray.air._internal.device_manager.tpu import TPUTorchDeviceManager
    except ImportError as e:
        raise _missing("TPUTorchDeviceManager", "ray/air/_internal/device_manager/tpu.py") from e
    for name in ("is_available", "get_devices", "register_custom_torch_dist_backend"):
        if not hasattr(TPUTorchDeviceManager, name):
            raise _missing(f"TPUTorchDeviceManager.{name}", "ray/air/_internal/device_manager/tpu.py")
    TPUTorchDeviceManager.is_available = lambda self: True  # type: ignore[method-assign]
    TPUTorchDeviceManager.get_devices = lambda self: devices()  # type: ignore[method-assign]
    TPUTorchDeviceManager.register_custom_torch_dist_backend = classmethod(  # type: ignore[assignment]
        lambda cls: register_backend()
    )


# ---- prepare_model itself (ray/train/torch/__init__.py, ray/train/v2/torch/train_loop_utils.py,
#      ray/train/torch/train_loop_utils.py) ---------------------------------------------------------------------

# Where a train function finds prepare_model: the package (which re-exports V2's or V1's) and both modules.
_PREPARE_MODEL_OWNERS = ("ray.train.torch", *_PREPARE_MODEL_MODULES)


def guard_prepare_model(check: Callable[[str | None], None], patches: Any) -> None:
    """Have ``prepare_model`` call ``check(parallel_strategy)`` before Ray's own body, so a strategy this worker
    cannot run is refused at ``prepare_model`` time by tpuray's message. Ray 2.60's FSDP branch tests
    ``torch.cuda.is_available()`` and tells a TPU worker to set ``use_gpu=True``; with one worker it wraps
    nothing. ``patches`` (a :class:`tpuray.workloads.xla.patches.Patches`) records each replacement to undo it."""
    for name in _PREPARE_MODEL_OWNERS:
        module = importlib.import_module(name)
        original = module.prepare_model
        if getattr(original, "__wrapped__", None) is not None:
            continue

        def guarded(*args: Any, __original: Any = original, **kwargs: Any) -> Any:
            strategy = kwargs.get("parallel_strategy", args[2] if len(args) > 2 else "ddp")
            check(strategy)
            return __original(*args, **kwargs)

        guarded.__wrapped__ = original  # type: ignore[attr-defined]
        guarded.__doc__ = original.__doc__
        patches.replace(module, "prepare_model", guarded)


# ---- Ray Train V2's worker group (ray/train/v2/_internal/execution/worker_group/worker_group.py) -------------


def asked_scaling_config(worker_group: Any) -> Any:
    """The ``ScalingConfig`` the run asked for, read the way Ray's own ``_TorchBackend`` reads it (the worker
    group's ``_train_run_context``; Ray 2.60 has no public accessor). ``None`` if absent."""
    return getattr(getattr(worker_group, "_train_run_context", None), "scaling_config", None)


def asked_process_group(worker_group: Any) -> str | None:
    """The ``torch.distributed`` backend the run's ``TorchConfig`` names (``tpu_dist`` on Ray's TorchTPU path,
    where ``TorchTrainer`` fills it in for ``use_tpu``; ``ray/train/v2/torch/torch_trainer.py``), from the worker
    group's ``_train_run_context``; ``None`` if absent."""
    config = getattr(getattr(worker_group, "_train_run_context", None), "backend_config", None)
    backend = getattr(config, "backend", None)
    return backend if isinstance(backend, str) else None


# ---- Ray Train V2's trainer (ray/train/v2/api/data_parallel_trainer.py) ------------------------------------

_TRAINER_MODULE = "ray/train/v2/api/data_parallel_trainer.py"
_trainer_checks: list[Callable[[Any, Any], None]] = []


def lead_callbacks_with(trainer: Any, callback: Any) -> Any:
    """Have ``trainer`` (a Ray Train V2 ``DataParallelTrainer``) run ``callback`` first among its callbacks, where
    ``RAY_TRAIN_CALLBACKS`` puts the callbacks it names (``_create_default_callbacks``, called by ``fit()``), unless
    that variable names one of its class already; ``RunConfig.callbacks`` run after Ray's own, its backend's start
    among them. Only this trainer: no process env is changed."""
    create = getattr(trainer, "_create_default_callbacks", None)
    if create is None:
        raise _missing("DataParallelTrainer._create_default_callbacks", _TRAINER_MODULE)

    def leading() -> list[Any]:
        callbacks: list[Any] = create()
        if any(type(c) is type(callback) for c in callbacks):
            return callbacks
        return [callback, *callbacks]

    trainer._create_default_callbacks = leading
    return trainer


def check_trainer_configs(check: Callable[[Any, Any], None]) -> None:
    """Have every Ray Train V2 trainer call ``check(backend_config, scaling_config)`` as it is constructed, after
    Ray's own checks: a config error is then raised by ``TorchTrainer(...)`` itself, before ``fit()`` starts a
    controller or reserves a placement group. Ray 2.60 has no hook for a backend to see the scaling config
    before the worker group starts, so this wraps ``DataParallelTrainer._validate_configs`` (called at the end
    of its ``__init__``), once per process; adding the same ``check`` again does nothing."""
    try:
        from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer
    except ImportError as e:
        raise _missing("DataParallelTrainer", _TRAINER_MODULE) from e
    original = getattr(DataParallelTrainer, "_validate_configs", None)
    if original is None:
        raise _missing("DataParallelTrainer._validate_configs", _TRAINER_MODULE)
    with _installed_lock:
        if check not in _trainer_checks:
            _trainer_checks.append(check)
        if getattr(original, "__wrapped__", None) is not None:
            return

        def validate_configs(self: Any) -> None:
            original(self)
            for c in list(_trainer_checks):
                c(self.backend_config, self.scaling_config)

        validate_configs.__wrapped__ = original  # type: ignore[attr-defined]
        DataParallelTrainer._validate_configs = validate_configs  # type: ignore[method-assign]


# ---- Ray Train's torch backend and its report log (ray/train/torch/config.py;
#      ray/train/v2/_internal/execution/context.py) ---------------------------------------------------------


@contextmanager
def released_on_failure(worker_group: Any) -> Iterator[None]:
    """Shut ``worker_group`` down if a backend's start fails: Ray 2.60 marks the group started before it runs the
    backend's ``on_start`` (``ray/train/v2/_internal/execution/worker_group/worker_group.py``), and would keep its
    slice placement group reserved."""
    try:
        yield
    except BaseException:
        shutdown = getattr(worker_group, "shutdown", None)
        if shutdown is not None:
            shutdown()
        raise


def quiet_train_report_log() -> None:
    """Silence Ray 2.60's INFO line per ``ray.train.report`` (its whole metrics dict), logged by a logger named by
    its file's path (``logging.getLogger(__file__)`` in ``ray/train/v2/_internal/execution/context.py``), which
    ``LoggingConfig(log_level=...)`` does not reach."""
    import logging

    try:
        import ray.train.v2._internal.execution.context as train_context
    except ImportError as e:
        raise _missing("the train context module", "ray/train/v2/_internal/execution/context.py") from e
    logging.getLogger(train_context.__file__).setLevel(logging.WARNING)


# ---- Ray Train V2's callbacks (ray/train/v2/_internal/execution/callback.py,
#      ray/train/v2/_internal/callbacks/env_callback.py, ray/train/v2/api/data_parallel_trainer.py) -------------

TRAIN_CALLBACKS_ENV = RAY_TRAIN_CALLBACKS_ENV
"""Ray Train V2 builds every trainer's callbacks from this variable first, a comma list of ``module.Class`` names
of ``RayTrainCallback`` subclasses (``_initialize_env_callbacks``, called by ``_create_default_callbacks`` before
its own ``BackendSetupCallback``): a cluster can add a callback to scripts that import nothing of it."""


@contextmanager
def megascale_coordinator_port(port: int) -> Iterator[None]:
    """Within the block, Ray's TorchTPU backend gives a multislice group ``port`` as its MegaScale coordinator's.

    Ray 2.60's ``_TorchBackend._setup_tpu_multislice`` (``ray/train/torch/config.py``) runs in the Train controller,
    after the worker group callbacks' ``after_worker_group_start``, and reads the port from that process's
    ``MEGASCALE_PORT`` (default ``DEFAULT_MEGASCALE_PORT``, 8081): it writes ``MEGASCALE_COORDINATOR_ADDRESS =
    <rank 0's host>:<port>`` into every worker with ``os.environ.update``, overwriting whatever a callback set there,
    and each worker's ``MEGASCALE_PORT = port + LOCAL_RANK``. So the port is set in the controller, for the start
    only, and the controller's own value is put back after."""
    key = "MEGASCALE_PORT"
    saved = os.environ.get(key)
    os.environ[key] = str(port)
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = saved


def worker_group_callback_base() -> type[Any]:
    """Ray's ``WorkerGroupCallback``: its ``after_worker_group_start(worker_group)`` runs once the workers have
    their ranks and train context, and, for a callback named in :data:`TRAIN_CALLBACKS_ENV`, before the
    ``BackendSetupCallback`` creates the process group (``WorkerGroup._start`` calls them in list order)."""
    try:
        from ray.train.v2._internal.execution.callback import WorkerGroupCallback
    except ImportError as e:
        raise _missing("WorkerGroupCallback", "ray/train/v2/_internal/execution/callback.py") from e
    return WorkerGroupCallback


# ---- TPU facts Ray computes (ray/_private/accelerators/tpu.py) --------------------------------------------


def tpu_resource_per_chip() -> int:
    """Ray's ``TPU`` resources per chip in this process (``get_tpu_resource_per_chip``: 1 unless
    ``RAY_TPU_RESOURCE_PER_CHIP`` says otherwise); ``ScalingConfig`` and ``SlicePlacementGroup`` size by it."""
    try:
        from ray._private.accelerators.tpu import get_tpu_resource_per_chip
    except ImportError as e:
        raise _missing("get_tpu_resource_per_chip", "ray/_private/accelerators/tpu.py") from e
    return int(get_tpu_resource_per_chip())


def set_torch_distributed_env_vars() -> None:
    """Set torchrun's variables on this worker as Ray's torch backend does on every worker before the train function
    (``_set_torch_distributed_env_vars`` in ``ray/train/torch/config.py``: ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``,
    ``NODE_RANK``, ``RANK``, ``WORLD_SIZE`` from the train context, and ``ACCELERATE_TORCH_DEVICE``)."""
    try:
        from ray.train.torch.config import _set_torch_distributed_env_vars
    except ImportError as e:
        raise _missing("_set_torch_distributed_env_vars", "ray/train/torch/config.py") from e
    _set_torch_distributed_env_vars()  # type: ignore[no-untyped-call]


def chips_per_host(topology: str, pod_type_prefix: str) -> int:
    """How many chips Ray 2.60 counts per VM for ``topology`` (``get_chips_per_host``)."""
    try:
        from ray._private.accelerators.tpu import get_chips_per_host
    except ImportError as e:
        raise _missing("get_chips_per_host", "ray/_private/accelerators/tpu.py") from e
    return int(get_chips_per_host(topology, pod_type_prefix))


def normalize_torchtpu_topology(topology: str, pod_type: str) -> str | None:
    """Ray's own ``TORCH_TPU_TOPOLOGY`` form where the release ships it (after 2.60); ``None`` in Ray 2.60."""
    try:
        from ray._private.accelerators import tpu as ray_tpu
    except ImportError:  # pragma: no cover - ray is in the workload extra
        return None
    normalize = getattr(ray_tpu, "normalize_torchtpu_topology", None)
    if normalize is None:
        return None
    return str(normalize(topology, accelerator_type=pod_type))  # pragma: no cover - not in Ray 2.60


# ---- the GCS (ray/_private/state.py) ----------------------------------------------------------------------


def draining_nodes() -> dict[str, int]:
    """Node id -> drain deadline (ms since the epoch; 0 if none) of every draining node, from the GCS
    (``GcsClient.get_draining_nodes`` through ``ray._private.state.state``, as ``ray drain-node`` shows it)."""
    import ray._private.state

    return dict(ray._private.state.state.get_draining_nodes())


# ---- the local test cluster (ray/_private/ray_constants.py, ray/cluster_utils.py) ---------------------------


def disable_outward_cluster() -> None:
    """Bind this already-imported driver to the loopback (``ray_constants.ENABLE_RAY_CLUSTER``; child processes
    read ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``)."""
    import ray._private.ray_constants as ray_constants

    ray_constants.ENABLE_RAY_CLUSTER = False


def raylet_pid(node: Any) -> int:
    """The raylet process id of a ``ray.cluster_utils.Cluster`` node."""
    import ray._private.ray_constants as ray_constants

    return int(node.all_processes[ray_constants.PROCESS_TYPE_RAYLET][0].process.pid)


def is_node_start_timeout(error: BaseException) -> bool:
    """Whether ``error`` is Ray giving up on a node it started: its raylet had not registered with the GCS 30 s
    later (``_private/node.py``, ``Node.__init__``: ``raylet_start_wait_time_s = 30``, a constant, and a bare
    ``Exception`` naming only the timeout). A busy machine can hit it (https://github.com/ray-project/ray/issues/47087);
    seen here once, with a fresh install's first cluster on 2 cores."""
    return type(error) is Exception and str(error).startswith("The current node timed out during startup")


def live_node_ids(cluster: Any) -> list[str]:
    """Node ids (hex) the GCS counts alive, through a ``ray.cluster_utils.Cluster``'s ``global_state``."""
    return [str(n) for n in cluster.global_state._live_node_ids()]


def ready_train_autoscaling_coordinator(timeout_s: float = 120.0) -> None:
    """Start Ray Train V2's AutoscalingCoordinator actor and wait until it answers.

    The controller creates that actor with its first resource request and gives the call 5 s
    (``AUTOSCALING_REQUESTS_GET_TIMEOUT_S``, ray/train/v2/_internal/execution/scaling_policy/
    autoscaling_coordinator_client.py, Ray 2.60). On an emulated slice whose few cores are busy starting the workers,
    creating the actor can take longer, and Ray then logs "Failed to send resource request" (harmless by its own
    words, but an error-looking line in a healthy run). The actor is named and detached with ``get_if_exists``
    (ray/data/_internal/cluster_autoscaler/default_autoscaling_coordinator.py, Ray 2.60): created here first, the
    controller finds it ready.
    """
    import ray

    source = "ray/data/_internal/cluster_autoscaler/default_autoscaling_coordinator.py"
    try:
        module = importlib.import_module("ray.data._internal.cluster_autoscaler.default_autoscaling_coordinator")
        create = module.get_or_create_autoscaling_coordinator
    except (ImportError, AttributeError):
        raise _missing("get_or_create_autoscaling_coordinator", source) from None
    ray.get(create().__ray_ready__.remote(), timeout=timeout_s)


# ---- Ray Data's torch batches (ray/data/iterator.py; ray/data/_internal/block_batching/util.py) -------------

_DATA_ITERATOR_MODULE = "ray/data/iterator.py"


def install_iter_torch_batches_device(device_for: Callable[[Any], Any], boundary: Callable[[], Any]) -> None:
    """Have ``DataIterator.iter_torch_batches`` (what ``get_dataset_shard(...)`` returns and
    ``Dataset.iter_torch_batches`` calls) build every batch on the host and move it to an XLA device on the thread
    that consumes it, inside ``boundary()``; ``device_for(device)`` is that XLA device for the call's ``device``
    argument (``"auto"`` included), or ``None`` to leave the call as Ray makes it.

    Ray 2.60 moves each batch to the device in its batch-prefetch thread (``_finalize_batch`` calls the finalize
    function ``DataIterator._get_finalize_fn`` returns, from ``iter_batches.py``'s threaded pipeline), and
    ``concat_tensors_to_device`` writes each block into a slice of a tensor it allocated there. A torch_xla tensor
    is not safe to build on one thread while another cuts the graph (``torch_xla.sync()`` collects every live
    device tensor): the cut fails the prefetch thread's next write with ``Check failed: data()->tensor_data``.
    The same finalize function runs here, on the consuming thread."""
    try:
        from ray.data.iterator import DataIterator
    except ImportError as e:
        raise _missing("DataIterator", _DATA_ITERATOR_MODULE) from e
    for name in ("iter_torch_batches", "_get_finalize_fn"):
        if not hasattr(DataIterator, name):
            raise _missing(f"DataIterator.{name}", _DATA_ITERATOR_MODULE)
    with _installed_lock:
        current = DataIterator.iter_torch_batches
        original: Callable[..., Any] = getattr(current, "__wrapped__", current)

        def iter_torch_batches(self: Any, *, device: Any = "auto", **kwargs: Any) -> Any:
            target = device_for(device)
            if target is None:
                return original(self, device=device, **kwargs)
            return _MovedOnConsumingThread(original(self, device="cpu", **kwargs), self, target, boundary)

        iter_torch_batches.__wrapped__ = original  # type: ignore[attr-defined]
        iter_torch_batches.__doc__ = original.__doc__
        DataIterator.iter_torch_batches = iter_torch_batches  # type: ignore[method-assign]


def uninstall_iter_torch_batches_device() -> None:
    """Undo :func:`install_iter_torch_batches_device`."""
    from ray.data.iterator import DataIterator

    with _installed_lock:
        current = DataIterator.iter_torch_batches
        DataIterator.iter_torch_batches = getattr(current, "__wrapped__", current)  # type: ignore[method-assign]


class _MovedOnConsumingThread:
    """An iterable of Ray Data batches made on the host, each moved to ``device`` as it is handed out, by the
    iterator's own finalize function (``DataIterator._get_finalize_fn``: ``DefaultFinalizeFn`` in Ray 2.60)."""

    def __init__(self, batches: Any, iterator: Any, device: Any, boundary: Callable[[], Any]) -> None:
        self._batches = batches
        self._finalize = iterator._get_finalize_fn(device=device)
        self._boundary = boundary

    def __iter__(self) -> Any:
        for batch in self._batches:
            with self._boundary():
                done = self._finalize(batch)  # a FinalizedData (ray/data/_internal/block_batching/interfaces.py)
            if done.on_consume is not None:
                done.on_consume()
            yield done.data


# ---- a Serve deployment's code version (ray/serve/deployment.py, Deployment.options) ---------------------------------
def versioned_deployment(deployment: Any, version: str) -> Any:
    """``deployment`` with the code version ``version``. Serve 2.60 refuses a public ``version`` ("Removed.
    Specifying this argument raises a ValueError": ``Deployment.options``), and its imperative deploy gives a
    deployment without one a random code version on every ``serve.run`` (``ray/serve/_private/client.py``,
    ``deployment._version or get_random_string()``), which replaces every replica even for a ``user_config`` change;
    the private ``_internal=True`` still takes one, and a ``user_config`` change then only calls ``reconfigure``
    (``ray/serve/_private/version.py``)."""
    import inspect

    if "_internal" not in inspect.signature(deployment.options).parameters:
        raise _missing("Deployment.options(_internal=...)", "ray/serve/deployment.py")
    return deployment.options(version=version, _internal=True)
