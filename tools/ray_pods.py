"""Write the pod templates inside rendered RayCluster and RayJob manifests as plain Pod manifests.

    python tools/ray_pods.py OUT_DIR PLAN_MANIFESTS_DIR...

Scanners such as checkov check Pods, Deployments and Jobs but do not look inside KubeRay's custom resources, so
CI (.ci/run) renders the plans, writes every head, worker and submitter template as a Pod (and each plan's
NetworkPolicies beside them, so that the scanner sees what selects the pods), and scans those.
Standard library and PyYAML only.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml


def _cluster_pods(spec: dict[str, Any], prefix: str) -> Iterator[tuple[str, dict[str, Any]]]:
    yield f"{prefix}-head", spec["headGroupSpec"]["template"]
    for group in spec.get("workerGroupSpecs", []):
        yield f"{prefix}-worker-{group['groupName']}", group["template"]


def pod_templates(manifest: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(pod name, pod template) of each pod a RayCluster or RayJob manifest describes."""
    kind, name, spec = manifest.get("kind"), manifest["metadata"]["name"], manifest.get("spec", {})
    if kind == "RayCluster":
        yield from _cluster_pods(spec, f"raycluster-{name}")
    elif kind == "RayJob":
        if "rayClusterSpec" in spec:
            yield from _cluster_pods(spec["rayClusterSpec"], f"rayjob-{name}")
        if "submitterPodTemplate" in spec:
            yield f"rayjob-{name}-submitter", spec["submitterPodTemplate"]


def as_pod(name: str, namespace: str, template: dict[str, Any]) -> dict[str, Any]:
    meta = template.get("metadata", {})
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {**meta, "name": name, "namespace": namespace},
        "spec": template["spec"],
    }


def write_pods(out: Path, manifest_dirs: list[Path]) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for folder in manifest_dirs:
        stack = folder.parent.name
        for path in sorted(folder.glob("*.yaml")):
            manifest = yaml.safe_load(path.read_text(encoding="utf-8"))
            if isinstance(manifest, dict) and manifest.get("kind") == "NetworkPolicy":
                target = out / f"{stack}-{path.name}"
                target.write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
                continue
            if not isinstance(manifest, dict) or manifest.get("kind") not in {"RayCluster", "RayJob"}:
                continue
            for name, template in pod_templates(manifest):
                target = out / f"{stack}-{name}.yaml"
                pod = as_pod(name, manifest["metadata"].get("namespace", "default"), template)
                target.write_text(yaml.safe_dump(pod, sort_keys=False), encoding="utf-8")
                written.append(target)
    return written


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    written = write_pods(Path(argv[0]), [Path(a) for a in argv[1:]])
    if not written:
        print(f"error: no RayCluster or RayJob manifest in {' '.join(argv[1:])}", file=sys.stderr)
        return 1
    print(f"wrote {len(written)} pod(s) to {argv[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
