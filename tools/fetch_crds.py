"""Fetch the pinned KubeRay and Kueue CRDs that the schema tests validate every rendered manifest against.

    python tools/fetch_crds.py            # into ../shared (where the tests and CI look), or
    python tools/fetch_crds.py DIR        # into DIR; then export TPURAY_SHARED_DIR=DIR

Each file is checked against its SHA-256 below before it is written, so a moved tag or a changed file fails
loudly instead of silently changing what the tests accept. Standard library only.
"""

from __future__ import annotations

import hashlib
import sys
import urllib.request
from pathlib import Path

KUBERAY = "v1.7.0"
KUEUE = "v0.19.2"
_KUBERAY_BASE = f"https://raw.githubusercontent.com/ray-project/kuberay/{KUBERAY}/ray-operator/config/crd/bases"
_KUEUE_BASE = f"https://raw.githubusercontent.com/kubernetes-sigs/kueue/{KUEUE}/config/components/crd/bases"

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
}


def main(argv: list[str]) -> int:
    target = Path(argv[0]) if argv else Path(__file__).resolve().parents[2] / "shared"
    for folder, (base, files) in FILES.items():
        for name, sha in files.items():
            dest = target / folder / name
            if dest.is_file() and hashlib.sha256(dest.read_bytes()).hexdigest() == sha:
                continue
            try:
                with urllib.request.urlopen(f"{base}/{name}", timeout=60) as response:
                    body = response.read()
            except OSError as e:
                print(f"error: could not fetch {base}/{name}: {e}; nothing written", file=sys.stderr)
                return 1
            got = hashlib.sha256(body).hexdigest()
            if got != sha:
                print(f"error: {base}/{name} has sha256 {got}, expected {sha}; nothing written", file=sys.stderr)
                return 1
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(body)
            print(f"wrote {dest}")
    print(f"KubeRay {KUBERAY} and Kueue {KUEUE} CRDs are in {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
