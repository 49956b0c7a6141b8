"""Serving on TPU slices: a Ray Serve deployment whose every replica owns one whole slice, reserved through Ray's
own ``ray.util.tpu`` (:mod:`.replica`), with one PyTorch/XLA SPMD worker per host driving its chips (:mod:`.worker`);
what a replica asks Ray for and checks of what it got, pure (:mod:`.plan`); and an example app (:mod:`.example`,
imported by name only).

Exports :func:`slice_app`, :class:`SliceReplica`, :class:`SliceLostError` and :func:`slice_request`.
"""

from tpuray.workloads.serving.plan import slice_request
from tpuray.workloads.serving.replica import SliceLostError, SliceReplica, slice_app

__all__ = ["SliceLostError", "SliceReplica", "slice_app", "slice_request"]
