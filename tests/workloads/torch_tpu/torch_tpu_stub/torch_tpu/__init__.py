"""A stand-in for torch_tpu on the emulated slice, where the real one cannot start (it registers its device only when
it finds a TPU). It registers the ``tpu`` device name as torch_tpu does, so that Ray's TorchTPU path runs up to the
point where torch_tpu would initialise its runtime: ``_loader.load()``, called as Ray creates the ``tpu_dist``
process group. There it records the worker's environment and stops."""

from torch.utils.backend_registration import rename_privateuse1_backend

rename_privateuse1_backend("tpu")
