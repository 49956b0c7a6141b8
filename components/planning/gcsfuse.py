"""The GCS FUSE CSI driver's name and the mount options every tpuray bucket mount starts from."""

from __future__ import annotations

from tpuray.components.planning.pod_security import RAY_GID, RAY_UID

__all__ = ["GCSFUSE_DRIVER", "GCSFUSE_MOUNT_OPTIONS"]

GCSFUSE_DRIVER = "gcsfuse.csi.storage.gke.io"
# Ray images run as uid 1000 (ray) in gid 100 (users); without these the FUSE mount is root-owned.
GCSFUSE_MOUNT_OPTIONS = f"implicit-dirs,uid={RAY_UID},gid={RAY_GID},file-mode=664,dir-mode=775"
