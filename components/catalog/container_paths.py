"""The paths inside a Ray pod that a volume mount must not take: the image's, Ray's, the kubelet's and tpuray's own.

Pure data. The config's ``MountPath`` (every mount path a stack sets) and the review rule over the planned pods'
``volumeMounts`` (``review.pod_fit``) read :data:`RESERVED_PATHS`, so the list is written once. A mount *at* a
reserved path, or at a directory *above* it, hides what the image or the runtime put there; where ``beneath`` is
set, a mount anywhere inside it does too (Ray's session files, the image's Python).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["RESERVED_PATHS", "SHM_PATH", "ReservedPath", "reserved_path_clash"]


@dataclass(frozen=True)
class ReservedPath:
    path: str
    what: str
    """What lives there and who says so."""
    beneath: bool
    """A mount inside it is refused too (not only at it or above it)."""


SHM_PATH = "/dev/shm"
"""Where every Ray pod mounts its memory-backed emptyDir (planning/kuberay.py), Ray's object store."""

RESERVED_PATHS: tuple[ReservedPath, ...] = (
    ReservedPath(SHM_PATH, "the pod's shared memory, Ray's object store (tpuray's own emptyDir mount)", True),
    # rayproject/ray images run as user ray with HOME=/home/ray and conda's Python in /home/ray/anaconda3
    # (ray-project/ray docker/base-deps/Dockerfile); tpuray's worker image adds its sources in /home/ray/tpuray
    # (workloads/Dockerfile).
    ReservedPath("/home/ray", "the image's home directory (rayproject/ray images)", False),
    ReservedPath("/home/ray/anaconda3", "the image's Python and Ray (rayproject/ray images)", True),
    ReservedPath("/home/ray/tpuray", "tpuray's sources in the worker image (workloads/Dockerfile)", True),
    # Ray 2.60 ray/_common/utils.py: get_default_system_temp_dir() is /tmp on Linux (unless RAY_TMPDIR or TMPDIR),
    # get_default_ray_temp_dir() is <that>/ray: the session directories, sockets and logs of every Ray node.
    ReservedPath("/tmp", "Ray's and Python's system temp dir (Ray 2.60 ray/_common/utils.py)", False),
    ReservedPath("/tmp/ray", "Ray's temp dir: session files, sockets, logs (Ray 2.60 ray/_common/utils.py)", True),
    # Files the kubelet mounts into every container
    # (https://kubernetes.io/docs/tasks/network/customize-hosts-file-for-pods/,
    # https://kubernetes.io/docs/tasks/debug/debug-application/determine-reason-pod-failure/,
    # https://kubernetes.io/docs/concepts/security/service-accounts/).
    ReservedPath("/etc/hosts", "the kubelet's hosts file", True),
    ReservedPath("/etc/hostname", "the kubelet's hostname file", True),
    ReservedPath("/etc/resolv.conf", "the kubelet's DNS config", True),
    ReservedPath("/dev/termination-log", "the kubelet's termination message file", True),
    ReservedPath("/var/run/secrets/kubernetes.io/serviceaccount", "the service account token", True),
    # The image's system directories and the runtime's pseudo-filesystems (Filesystem Hierarchy Standard 3.0).
    ReservedPath("/usr", "the image's programs and libraries", False),
    ReservedPath("/bin", "the image's programs", False),
    ReservedPath("/sbin", "the image's programs", False),
    ReservedPath("/lib", "the image's libraries", False),
    ReservedPath("/lib64", "the image's libraries", False),
    ReservedPath("/proc", "the kernel's process filesystem", True),
    ReservedPath("/sys", "the kernel's sysfs", True),
)


def _norm(path: str) -> str:
    return "/" + "/".join(p for p in path.split("/") if p)


def reserved_path_clash(path: str) -> ReservedPath | None:
    """The reserved path a mount at ``path`` would hide or land in, or None."""
    norm = _norm(path)
    for r in RESERVED_PATHS:
        if norm == r.path or r.path.startswith(norm.rstrip("/") + "/") or (r.beneath and norm.startswith(r.path + "/")):
            return r
    return None
