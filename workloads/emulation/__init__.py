"""The emulated slice: a local Ray cluster with one node per TPU host, carrying what Ray and the GKE TPU webhook
give a TPU VM, its chips run as XLA on CPU (:mod:`.cluster`), and each host's emulated device plugin metrics
(:mod:`.device_plugin`); TorchTPU runs there on its stand-in (:mod:`.torch_tpu_standin`, :mod:`.standin_mesh`),
which TorchTPU's env callback installs. ``python -m tpuray.workloads.emulate`` is its CLI.

Exports :class:`EmulatedCluster` and :func:`emulate`.
"""

from tpuray.workloads.emulation.cluster import EmulatedCluster, emulate

__all__ = ["EmulatedCluster", "emulate"]
