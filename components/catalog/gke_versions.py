"""GKE versions: parsed for comparison, compared with a floor as GKE resolves an alias, and the alias to request.

Pure Python. https://cloud.google.com/kubernetes-engine/versioning : 1.X, 1.X.Y or 1.X.Y-gke.N, numbers without
leading zeros (a gke.N belongs to a patch: 1.X-gke.N is no GKE version). The major is 1; GKE has never served a
minor below 1.24 nor above 1.3x, so a minor outside 24-45 is a typo (1.99.0-gke.1), not a version GKE can create.
"""

from __future__ import annotations

import re

from tpuray.components.catalog.text import short_repr

__all__ = ["gke_alias_for", "gke_version_key", "gke_version_meets"]

_GKE_VERSION = re.compile(r"(1)\.(0|[1-9]\d?)(?:\.(0|[1-9]\d*)(?:-gke\.([1-9]\d*))?)?")
_GKE_MINORS = range(24, 46)


def gke_version_key(version: str) -> tuple[int, ...]:
    """Sortable key of a GKE version, e.g. ``1.31.2-gke.1115000`` -> ``(1, 31, 2, 1115000)``.

    https://cloud.google.com/kubernetes-engine/versioning : ``1.X``, ``1.X.Y`` or ``1.X.Y-gke.N``.
    """
    m = _GKE_VERSION.fullmatch(version) if isinstance(version, str) else None
    if not m or int(m.group(2)) not in _GKE_MINORS:
        raise ValueError(f"{short_repr(str(version))} is not a GKE version like 1.31.2-gke.1115000 (or 1.31, 1.31.2)")
    return tuple(int(x or 0) for x in m.groups())


_NEWEST = 10**18
"""Stands for "the newest" in a version alias's missing parts (above any patch or gke.N GKE has published)."""


def gke_version_meets(version: str, floor: str) -> bool:
    """A cluster given ``version`` (``minMasterVersion``: a full version or an alias) runs at least ``floor``.

    GKE resolves an alias to the newest version it names: "1.X" picks the highest valid patch+gke.N patch in the 1.X
    version, "1.X.Y" the highest valid gke.N patch in 1.X.Y (the ``initialClusterVersion``/``desiredNodeVersion``
    fields of the GKE API, https://cloud.google.com/kubernetes-engine/docs/reference/rest/v1/projects.locations.clusters,
    and https://cloud.google.com/kubernetes-engine/versioning). So "1.33" meets a floor of 1.33.0-gke.1712000: a
    floor is a version GKE has published, and the newest 1.33 patch GKE offers is that one or a later one. The one
    case this cannot see is a floor that is still Rapid-only while the stack's channel offers an older 1.33 patch;
    `tpuray doctor` compares the floor with the version the control plane really runs.
    """
    m = _GKE_VERSION.fullmatch(version)
    if m is None:
        raise ValueError(f"{short_repr(version)} is not a GKE version")
    have = tuple(_NEWEST if part is None else int(part) for part in m.groups())
    return have >= gke_version_key(floor)


def gke_alias_for(floor: str) -> str:
    """The version alias to request for at least ``floor`` (``1.35.1-gke.1616000`` -> ``1.35.1``): GKE resolves it to
    the newest ``1.35.1-gke.N`` it offers, which is the floor or a later patch (see :func:`gke_version_meets`)."""
    return floor.split("-gke.")[0]
