"""tpuray.components.doctor: ``tpuray doctor``, read-only checks of a cluster against what a stack needs.

A reader (:mod:`.reader`: a live cluster through the Kubernetes client, or a directory of saved ``kubectl -o json``
output) yields :class:`ClusterObjects`; the checks (:mod:`.checks`) are pure functions of those objects and the
stack's config; :mod:`.report` prints them. Review tooling like :mod:`tpuray.components.review`: the Pulumi program
never imports it.
"""

from tpuray.components.doctor.checks import CheckResult, Status, run_checks
from tpuray.components.doctor.image_checks import ImageVersions
from tpuray.components.doctor.reader import (
    SNAPSHOT_FILES,
    ClusterObjects,
    ClusterReader,
    LiveReader,
    ReadError,
    SnapshotReader,
)
from tpuray.components.doctor.report import exit_code, render_json, render_text

__all__ = [
    "SNAPSHOT_FILES",
    "CheckResult",
    "ClusterObjects",
    "ClusterReader",
    "ImageVersions",
    "LiveReader",
    "ReadError",
    "SnapshotReader",
    "Status",
    "exit_code",
    "render_json",
    "render_text",
    "run_checks",
]
