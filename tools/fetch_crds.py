"""Fetch the pinned KubeRay, Kueue and Managed Prometheus CRDs that the schema tests validate every rendered
manifest against.

    python tools/fetch_crds.py            # into ../shared (where the tests and CI look), or
    python tools/fetch_crds.py DIR        # into DIR; then export TPURAY_SHARED_DIR=DIR

Each file is checked against its SHA-256 below before it is written, so a moved tag or a changed file fails
loudly instead of silently changing what the tests accept. The versions are the stack's own pins
(components/catalog/pins.py, read from its file so that this runs before tpuray is installed). Standard library only.
The test suite calls :func:`fetch` too (tests/support/crds.py), into a cache outside the checkout, when neither
place holds the files.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType


def _pins() -> ModuleType:
    path = Path(__file__).resolve().parents[1] / "components" / "catalog" / "pins.py"
    spec = importlib.util.spec_from_file_location("tpuray_pins", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the file runs
    spec.loader.exec_module(module)
    return module


_PINS = _pins()
KUBERAY = f"v{_PINS.KUBERAY_CHART}"
KUEUE = f"v{_PINS.KUEUE_CHART}"
GMP = f"v{_PINS.GMP_RELEASE}"
_KUBERAY_BASE = f"https://raw.githubusercontent.com/ray-project/kuberay/{KUBERAY}/ray-operator/config/crd/bases"
_KUEUE_BASE = f"https://raw.githubusercontent.com/kubernetes-sigs/kueue/{KUEUE}/config/components/crd/bases"
_GMP_BASE = f"https://raw.githubusercontent.com/GoogleCloudPlatform/prometheus-engine/{GMP}/charts/operator/crds"

# folder -> (source folder URL, {file: sha256})
FILES: dict[str, tuple[str, dict[str, str]]] = {
    "kuberay-crds": (
        _KUBERAY_BASE,
        {
            "ray.io_rayclusters.yaml": "c44704442eef0c6721ad40c1d66782c8bd3fdab9d3344306a5820910a679baa1",
            "ray.io_rayjobs.yaml": "01a5cf3b17c1769fda44af7e82debcd98722f0c27b9ab84d084681c6649121f5",
            "ray.io_rayservices.yaml": "0a8fc325e6e22b9231c1f282b309555e2ecf94227ca20a03df3d1d9a403907ab",
        },
    ),
    "kueue-crds": (
        _KUEUE_BASE,
        {
            "kueue.x-k8s.io_admissionchecks.yaml": "2bf4003c0a3ea3d6ceab940c7a271ad211372dab59d2739acfa8b2bdb0724acb",
            "kueue.x-k8s.io_clusterqueues.yaml": "e0a5fc9b370c70f3d993d4f599865817338ecf94187b30b15b12ff33c579bd55",
            "kueue.x-k8s.io_localqueues.yaml": "dd10ef8d3578e7212fa52763549e7b6be0949793a5b924495fcd293330109fed",
            "kueue.x-k8s.io_provisioningrequestconfigs.yaml": "0399b2689d7468c64a1ef4e3c8bf9603c261a152f822b6698903b23f69e790dc",  # noqa: E501
            "kueue.x-k8s.io_resourceflavors.yaml": "19e339c47e9ca3fa2c9eeddd27715a512f765c4794ed859733408a9715720173",
            "kueue.x-k8s.io_topologies.yaml": "f703575d3bb64d26f6e839f831e01646367ed41a89b3abf163f8e842ca1c4d2b",
            "kueue.x-k8s.io_workloadpriorityclasses.yaml": "0b755726aab05b8def9a53ee15b201eed3846bcffd1ff5528fed123f4ae03519",  # noqa: E501
        },
    ),
    "gmp-crds": (
        _GMP_BASE,
        {
            "monitoring.googleapis.com_podmonitorings.yaml": "d344029bc7754e0254d7c253db9d6400b344d5837e121b42790946757bc79f1f",  # noqa: E501
            "monitoring.googleapis.com_clusterpodmonitorings.yaml": "9bc1857ded418ef5de06bffa47020d68b2e00eac0f8867ac83a88e16a87bbc28",  # noqa: E501
            "monitoring.googleapis.com_clusternodemonitorings.yaml": "952c4db4f87dae91f2676964217aef2d00ad226f9ba41f8412d2ecf6fc2b60b4",  # noqa: E501
            "monitoring.googleapis.com_rules.yaml": "49c2cfea8d228a96c466ac49c09f4c19f6cb51ebdd258011cb364a97cb24afee",
            "monitoring.googleapis.com_clusterrules.yaml": "5b4aa205ec50844b3e0f6ee2862bccc322757b73345eaef15615db52a07c57e2",  # noqa: E501
        },
    ),
}


VERSIONS = f"kuberay-{KUBERAY}_kueue-{KUEUE}_gmp-{GMP}"
"""The pinned releases in one name, for a cache that must not mix files of two pin sets."""


class CrdFetchError(Exception):
    """A pinned CRD file that could not be fetched or did not match its checksum; nothing of that file is written."""


class Unreachable(CrdFetchError):
    """The source could not be reached (no network, a proxy, a 404 for a moved tag)."""


class ChecksumMismatch(CrdFetchError):
    """The source served bytes whose SHA-256 is not the pinned one."""


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def missing(target: Path) -> list[Path]:
    """The pinned files that ``target`` does not hold with their pinned checksum."""
    return [
        target / folder / name
        for folder, (_, files) in FILES.items()
        for name, sha in files.items()
        if not (target / folder / name).is_file() or sha256_of(target / folder / name) != sha
    ]


def fetch(
    target: Path, bases: Mapping[str, str] | None = None, timeout: float = 60, folders: Sequence[str] | None = None
) -> list[Path]:
    """Put every pinned file (of ``folders``, else of every folder) into ``target/<folder>/`` that is not already
    there with its checksum, and return the paths written. ``bases`` replaces a folder's source URL (a mirror, or a
    local server in the tests). Each body is checked before it is written, and written under a temporary name first,
    so a reader never sees a partial or unverified file. Raises :class:`Unreachable` or :class:`ChecksumMismatch`
    naming the URL."""
    written = []
    for folder in FILES if folders is None else folders:
        base, files = FILES[folder]
        base = (bases or {}).get(folder, base).rstrip("/")
        for name, sha in files.items():
            dest = target / folder / name
            if dest.is_file() and sha256_of(dest) == sha:
                continue
            url = f"{base}/{name}"
            try:
                with urllib.request.urlopen(url, timeout=timeout) as response:
                    body = response.read()
            except (OSError, ValueError) as e:  # URLError, HTTPError and timeouts are OSErrors; a bad URL ValueError
                raise Unreachable(f"could not fetch {url}: {e}") from e
            got = hashlib.sha256(body).hexdigest()
            if got != sha:
                raise ChecksumMismatch(f"{url} has sha256 {got}, expected {sha}")
            dest.parent.mkdir(parents=True, exist_ok=True)
            part = dest.with_name(f".{name}.{os.getpid()}.part")
            part.write_bytes(body)
            os.replace(part, dest)  # atomic: a concurrent reader sees the old file or the verified new one
            written.append(dest)
    return written


def main(argv: list[str]) -> int:
    target = Path(argv[0]) if argv else Path(__file__).resolve().parents[2] / "shared"
    try:
        for dest in fetch(target):
            print(f"wrote {dest}")
    except CrdFetchError as e:
        print(f"error: {e}; nothing written for that file", file=sys.stderr)
        return 1
    print(f"KubeRay {KUBERAY}, Kueue {KUEUE} and GMP {GMP} CRDs are in {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
