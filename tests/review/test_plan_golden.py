"""``tpuray plan`` on the real program and stacks: golden files, determinism, the CLI's exit codes.

Golden files live in ``tests/review/golden/<stack>/`` (plan.json, topology.md, topology.svg, manifests/).
After an intended change to the components or the stacks, regenerate them and review the diff::

    TPURAY_UPDATE_GOLDEN=1 pytest tests/review/test_plan_golden.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.plans import GOLDEN, ROOT, STACKS
from tpuray.components import cli
from tpuray.components.catalog.pins import KUBERAY_CHART
from tpuray.components.review.plan import Plan, render_stack, write_plan
from tpuray.components.review.plan_dir import MARKER

UPDATE = os.environ.get("TPURAY_UPDATE_GOLDEN") == "1"


def _files(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("stack", STACKS)
def test_matches_golden(plans: dict[str, Plan], stack: str, tmp_path: Path) -> None:
    write_plan(plans[stack], tmp_path)
    golden = GOLDEN / stack
    if UPDATE:  # the marker lists the goldens write_plan wrote: it replaces them and removes stale ones, nothing else
        write_plan(plans[stack], golden)
    got, want = _files(tmp_path), _files(golden)
    assert sorted(got) == sorted(want)
    for name in sorted(want, key=lambda n: n == MARKER):  # the marker lists the others' hashes: a changed file first
        assert got[name] == want[name], f"{stack}/{name} differs from the golden file (see this module's docstring)"


def test_goldens_say_what_the_stacks_say() -> None:
    """The goldens themselves are plausible, so a bad regeneration cannot slip through unread."""
    prod = json.loads((GOLDEN / "prod" / "plan.json").read_text())
    tpu_pools = [
        r
        for r in prod["resources"]
        if r["type"] == "gcp:container/nodePool:NodePool" and "placementPolicy" in r["inputs"]
    ]
    assert sorted(p["inputs"]["placementPolicy"]["tpuTopology"] for p in tpu_pools) == ["4x4", "4x4x4", "4x4x4"]
    assert prod["violations"] == []
    assert (GOLDEN / "prod" / "manifests" / "raycluster-ray-tpuray-prod.yaml").is_file()
    svg = (GOLDEN / "prod" / "topology.svg").read_text()
    assert svg.count('class="slice"') == 3  # two v5p slices, one v6e slice
    assert svg.count('class="host"') == 2 * 16 + 4
    assert svg.count('class="chip"') == 2 * 64 + 16
    assert svg.count('class="ray-worker"') == 2 * 64 + 16  # one Ray worker per chip, not one per host
    md = (GOLDEN / "prod" / "topology.md").read_text()
    assert "| v5p-train | v5p 4x4x4 (v5p-128) | 2-2 | 16 | 4 | 128 | 32 | 128 |" in md
    assert "| v6e-flex | v6e 4x4 (v6e-16) | 0-1 | 4 | 4 | 16 | 4 | 16 |" in md


@pytest.mark.parametrize("stack", STACKS)
def test_golden_stacks_run_the_helm_operator_with_the_ray_addon_off(stack: str) -> None:
    """KubeRay from its chart, the token through authOptions, the GKE Ray add-on declared off."""
    plan = json.loads((GOLDEN / stack / "plan.json").read_text())
    by_type: dict[str, list[dict[str, Any]]] = {}
    for r in plan["resources"]:
        by_type.setdefault(r["type"], []).append(r["inputs"])
    (cluster,) = by_type["gcp:container/cluster:Cluster"]
    assert cluster["addonsConfig"]["rayOperatorConfigs"] == [{"enabled": False}]
    charts = [r for r in by_type["kubernetes:helm.sh/v3:Release"] if r["chart"] == "kuberay-operator"]
    assert [(c["namespace"], c["version"]) for c in charts] == [("kuberay-system", KUBERAY_CHART)]
    clusters = [c["spec"] for c in by_type.get("kubernetes:ray.io/v1:RayCluster", [])]
    clusters += [
        j["spec"]["rayClusterSpec"] for j in by_type["kubernetes:ray.io/v1:RayJob"] if "rayClusterSpec" in j["spec"]
    ]
    assert len(clusters) == 1 and clusters[0]["authOptions"]["mode"] == "token"


def test_same_stack_same_bytes(plans: dict[str, Plan], tmp_path: Path) -> None:
    again = render_stack("prod", ROOT)  # a second run in the same process, after dev and prod
    write_plan(plans["prod"], tmp_path / "a")
    write_plan(again, tmp_path / "b")
    assert _files(tmp_path / "a") == _files(tmp_path / "b")


def _tpuray(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tpuray.components.cli", *args], cwd=cwd, capture_output=True, text=True, check=False
    )


def test_cli_plan_in_a_fresh_process_gives_the_golden_bytes(tmp_path: Path) -> None:
    done = _tpuray("plan", "--stack", "dev", "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert "v5e-dev" in done.stdout and "policy: all rules pass" in done.stdout
    assert (tmp_path / "plan.json").read_bytes() == (GOLDEN / "dev" / "plan.json").read_bytes()


def _tpuray_here(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, *args: str
) -> tuple[int, str, str]:
    """The CLI in this process, from the repository root (a fresh Python importing Pulumi costs seconds; the
    fresh-process run is test_cli_plan_in_a_fresh_process_gives_the_golden_bytes): exit code, stdout, stderr."""
    monkeypatch.chdir(ROOT)
    code = cli.main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_plan_bad_stack_file_prints_the_model_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    bad = tmp_path / "Pulumi.bad.yaml"
    text = (ROOT / "Pulumi.dev.yaml").read_text().replace("topology: 2x2", "topology: 3x3")
    bad.write_text(text.replace("region: us-west4", "region: Nowhere"))
    args = ("plan", "--stack", "bad", "--stack-file", str(bad), "--out", str(tmp_path / "out"))
    code, _, err = _tpuray_here(capsys, monkeypatch, *args)
    assert code == 1
    assert "slicePools[0].topology" in err and "region" in err
    assert not (tmp_path / "out").exists()


def test_cli_plan_fails_on_a_policy_violation(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Production needs deletion protection: a prod stack file that turns it off renders but fails."""
    bad = tmp_path / "Pulumi.prod.yaml"
    bad.write_text(
        (ROOT / "Pulumi.prod.yaml").read_text().replace("deletionProtection: true", "deletionProtection: false")
    )
    args = ("plan", "--stack", "prod", "--stack-file", str(bad), "--out", str(tmp_path / "out"))
    code, _, err = _tpuray_here(capsys, monkeypatch, *args)
    assert code == 1
    assert "gke-deletion-protection-production" in err
    assert (tmp_path / "out" / "plan.json").is_file()  # written anyway, for reading


def test_dws_golden_holds_the_kueue_objects_and_the_queued_job() -> None:
    """The production DWS variant: every Kueue object, quota = chips, the RayJob labelled for the queue."""
    doc = json.loads((GOLDEN / "prod-dws" / "plan.json").read_text())
    kinds = sorted(r["type"].rsplit(":", 1)[-1] for r in doc["resources"] if "kueue.x-k8s.io" in r["type"])
    assert kinds == [
        "AdmissionCheck",
        "ClusterQueue",
        "LocalQueue",
        "ProvisioningRequestConfig",
        "ResourceFlavor",
        "ResourceFlavor",
        "ResourceFlavor",
        "WorkloadPriorityClass",
        "WorkloadPriorityClass",
        "WorkloadPriorityClass",
    ]
    assert doc["violations"] == []
    manifests = GOLDEN / "prod-dws" / "manifests"
    assert not list(manifests.glob("raycluster-*.yaml"))  # ephemeral mode: no long-lived cluster
    job = (manifests / "rayjob-ray-tpuray-dws-train.yaml").read_text()
    assert "kueue.x-k8s.io/queue-name: tpu" in job and "suspend: true" in job
    cq = (manifests / "clusterqueue-tpuray-dws.yaml").read_text()
    assert "onFlavors:\n      - tpuray-dws-v6e-dws" in cq
    md = (GOLDEN / "prod-dws" / "topology.md").read_text()
    assert "admission: Kueue + ProvisioningRequest: flavor `tpuray-dws-v6e-dws`" in md and "16 chips of quota" in md
    assert "| v6e-dws | v6e 4x4 (v6e-16) | 0-1 | 4 | 4 | 16 | 4 | 16 | queued |" in md  # one slice per request


def test_manifests_are_the_bytes_of_yaml_safe_dump() -> None:
    """manifest_files may use libyaml's emitter: it must write what yaml.safe_dump writes, for the values that
    differ most between emitters (unicode, long and multi-line strings, quoting, empty and nested collections)."""
    import yaml

    from tpuray.components.review.render import manifest_files

    obj = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "m", "labels": {"a/b": "yes", "n": "012", "e": ""}},
        "data": {
            "long": "word " * 40,
            "lines": "first\nsecond\n  indented\n",
            "unicode": "chips × hosts — ✓",
            "quoted": "a: b # c",
            "nums": [1, 2.5, True, None, [], {}],
        },
    }
    files = manifest_files([{"type": "kubernetes:core/v1:ConfigMap", "name": "m", "inputs": obj}])
    assert files == {
        "configmap-m.yaml": yaml.safe_dump(obj, sort_keys=True, default_flow_style=False, allow_unicode=True)
    }
