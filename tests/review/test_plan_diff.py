"""``tpuray diff`` on prepared pairs of changes to the real prod stack, plus the replacement table itself."""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.plans import GOLDEN, ROOT
from tpuray.components.cli import main
from tpuray.components.review.diff import PlanInputError, diff_plans, render_markdown
from tpuray.components.review.plan import Plan, render_stack, write_plan
from tpuray.components.review.replacement_fields import replacement_reason
from tpuray.components.review.resource_types import CLUSTER, NODE_POOL, RAY_CLUSTER, RAY_JOB


@pytest.mark.parametrize(
    ("type_", "path", "effect"),
    [
        (NODE_POOL, "placementPolicy.tpuTopology", "replace"),
        (NODE_POOL, "placementPolicy.policyName", "replace"),
        (NODE_POOL, "nodeConfig.machineType", "replace"),
        (NODE_POOL, "nodeConfig.reservationAffinity.values", "replace"),
        (NODE_POOL, "queuedProvisioning.enabled", "replace"),
        (NODE_POOL, "initialNodeCount", "replace"),
        (NODE_POOL, "nodeLocations", "recreates-nodes"),
        # a node system configuration (a spot pool's graceful shutdown) is rolled out by recreating the nodes
        (NODE_POOL, "nodeConfig.kubeletConfig.shutdownGracePeriodSeconds", "recreates-nodes"),
        (NODE_POOL, "nodeConfig.labels.team", None),
        (NODE_POOL, "autoscaling.maxNodeCount", None),
        (NODE_POOL, "nodeCount", None),
        (CLUSTER, "location", "replace"),
        (CLUSTER, "network", "replace"),
        (CLUSTER, "privateClusterConfig.masterIpv4CidrBlock", "replace"),
        (CLUSTER, "deletionProtection", None),
        (CLUSTER, "releaseChannel.channel", None),
        # KubeRay updates the object but not its running pods (kuberay#3840), nor a RayJob's run (kuberay#1776)
        (RAY_CLUSTER, "spec.headGroupSpec", "not-rolled-out"),
        (RAY_CLUSTER, "spec.workerGroupSpecs.template.spec.containers.image", "not-rolled-out"),
        (RAY_CLUSTER, "spec.rayVersion", "not-rolled-out"),
        (RAY_CLUSTER, "spec.workerGroupSpecs.replicas", None),
        (RAY_CLUSTER, "spec.workerGroupSpecs.maxReplicas", None),
        (RAY_CLUSTER, "metadata.labels.team", None),
        (RAY_JOB, "spec.entrypoint", "not-rolled-out"),
        (RAY_JOB, "spec.rayClusterSpec.workerGroupSpecs.template.spec.containers.image", "not-rolled-out"),
        (RAY_JOB, "spec.suspend", None),
    ],
)
def test_replacement_table(type_: str, path: str, effect: str | None) -> None:
    assert replacement_reason(type_, path.split(".")) == effect


def test_replace_on_changes_option_counts() -> None:
    assert replacement_reason("kubernetes:ray.io/v1:RayCluster", ["spec", "x"], ["spec"]) == "replace"


def _variant(tmp_path: Path, name: str, *edits: tuple[str, str]) -> Plan:
    text = (ROOT / "Pulumi.prod.yaml").read_text()
    for old, new in edits:
        assert old in text
        text = text.replace(old, new)
    f = tmp_path / f"Pulumi.prod.{name}.yaml"
    f.write_text(text)
    return render_stack("prod", ROOT, stack_file=f)


def _doc(plan: Plan, tmp: Path) -> dict[str, object]:
    write_plan(plan, tmp)
    doc: dict[str, object] = json.loads((tmp / "plan.json").read_text())
    return doc


def test_topology_and_zone_changes_are_flagged(plans: dict[str, Plan], tmp_path: Path) -> None:
    new = _variant(
        tmp_path,
        "bigger",
        ("topology: 4x4x4", "topology: 4x4x8"),
        ("zone: us-east5-b", "zone: us-east5-a"),  # both offer v6e (Cloud TPU regions and zones page)
    )
    d = diff_plans(_doc(plans["prod"], tmp_path / "a"), _doc(new, tmp_path / "b"))
    replaced = {c.name for c in d.changed if c.replaced}
    assert {"v5p-train-v5p-train-0", "v5p-train-v5p-train-1"} <= replaced
    v5p = next(c for c in d.changed if c.name == "v5p-train-v5p-train-0")
    topo = next(f for f in v5p.fields if f.dotted == "placementPolicy.tpuTopology")
    assert (topo.old, topo.new, topo.effect) == ("4x4x4", "4x4x8", "replace")
    v6e = next(c for c in d.changed if c.name == "v6e-flex-v6e-flex-0")
    assert any(f.dotted.startswith("nodeLocations") for f in v6e.fields)
    assert d.chips_base["v5p"] == 128 and d.chips_new["v5p"] == 256
    assert d.chips_base["v6e"] == d.chips_new["v6e"] == 16
    md = render_markdown([d], "main", "pr")
    assert "[!WARNING]" in md
    assert "node pool `v5p-train-v5p-train-0` will be REPLACED" in md
    assert "`placementPolicy.tpuTopology`" in md
    assert "| v5p | 128 | 256 | +128 |" in md
    assert "| v6e | 16 | 16 | +0 |" in md


def test_a_harmless_change_warns_nothing(plans: dict[str, Plan], tmp_path: Path) -> None:
    new = _variant(tmp_path, "image", ("worker@sha256:ba7308ec", "worker@sha256:0a7308ec"))  # a new build
    d = diff_plans(_doc(plans["prod"], tmp_path / "a"), _doc(new, tmp_path / "b"))
    assert d.changed and not d.added and not d.removed
    assert d.warnings == []
    assert not any(c.replaced for c in d.changed if c.type in (NODE_POOL, CLUSTER))
    md = render_markdown([d])
    assert "[!WARNING]" not in md and "tpuray/worker@sha256:" in md  # the digest is shortened in the table


def test_a_change_kubernetes_will_not_roll_out_is_flagged(plans: dict[str, Plan], tmp_path: Path) -> None:
    """A new worker image and a new workload on the shared cluster: the RayCluster and the RayJob objects change,
    but KubeRay neither recreates the running pods nor runs the job again; the diff says so."""
    new = _variant(
        tmp_path, "rollout", ("worker@sha256:ba7308ec", "worker@sha256:0a7308ec"), ("steps: 10000", "steps: 30000")
    )
    d = diff_plans(_doc(plans["prod"], tmp_path / "a"), _doc(new, tmp_path / "b"))
    cluster = next(c for c in d.changed if c.type == RAY_CLUSTER)
    job = next(c for c in d.changed if c.type == RAY_JOB)
    assert not cluster.replaced and not job.replaced
    assert any(f.dotted.endswith("containers[0].image") for f in cluster.not_rolled_out)
    assert [f.dotted for f in job.not_rolled_out] == ["spec.entrypoint"]
    assert len(d.not_rolled_out) == 2 and d.warnings == []  # not a replacement: --fail-on-replace is unchanged
    md = render_markdown([d])
    assert "[!IMPORTANT]" in md and "KubeRay will not roll out" in md and "KubeRay will not apply" in md
    assert "**(not rolled out)**" in md


def test_removing_a_pool_warns_about_deletion(plans: dict[str, Plan], tmp_path: Path) -> None:
    base = _doc(plans["prod"], tmp_path / "a")
    new = json.loads(json.dumps(base))
    new["resources"] = [r for r in new["resources"] if "v6e-flex" not in r["urn"]]
    d = diff_plans(base, new)
    assert any("v6e-flex-v6e-flex-0" in w and "DELETED" in w for w in d.warnings)
    assert d.chips_new.get("v6e", 0) == 0 and d.chips_base["v6e"] == 16


def test_identical_plans_have_no_changes(plans: dict[str, Plan], tmp_path: Path) -> None:
    doc = _doc(plans["dev"], tmp_path)
    d = diff_plans(doc, doc)
    assert d.empty
    assert "No changes." in render_markdown([d])


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


@pytest.mark.slow  # three fresh interpreters: the CLI and one plan per ref
@pytest.mark.beside_clusters
def test_diff_of_two_git_refs(tmp_path: Path) -> None:
    """A throwaway repo with this project's program: commit, change the prod topology, commit, diff the refs."""
    repo = tmp_path / "repo"
    repo.mkdir()
    for name in ("components", "workloads", "infra"):
        shutil.copytree(ROOT / name, repo / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("Pulumi.yaml", "Pulumi.prod.yaml", "pyproject.toml"):
        shutil.copyfile(ROOT / name, repo / name)
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", ".")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", "base")
    stack = repo / "Pulumi.prod.yaml"
    stack.write_text(stack.read_text().replace("topology: 4x4x4", "topology: 4x4x8"))
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qam", "bigger v5p")
    out = tmp_path / "comment.md"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tpuray.components.cli",
            "diff",
            "HEAD~1",
            "HEAD",
            "--root",
            str(repo),
            "--out",
            str(out),
            "--fail-on-replace",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 3, done.stderr
    md = out.read_text()
    assert "### stack `prod`" in md and "will be REPLACED" in md and "| v5p | 128 | 256 | +128 |" in md


def test_kueue_quota_changes_show_next_to_the_chip_delta(plans: dict[str, Plan], tmp_path: Path) -> None:
    """Growing the reserved v5p pool of prod-dws grows its Kueue quota with it; both show in the chips table (its
    queued v6e pool stays one slice: one ProvisioningRequest is only known to fill one)."""
    text = (ROOT / "Pulumi.prod-dws.yaml").read_text()
    one = "      topology: 4x4x4\n      slices: 1\n"
    assert one in text
    f = tmp_path / "Pulumi.prod-dws.yaml"
    f.write_text(text.replace(one, one.replace("slices: 1", "slices: 2")))
    new = render_stack("prod-dws", ROOT, stack_file=f)
    d = diff_plans(_doc(plans["prod-dws"], tmp_path / "a"), _doc(new, tmp_path / "b"))
    assert (d.chips_base["v5p"], d.chips_new["v5p"]) == (64, 128)
    assert (d.quota_base["v5p"], d.quota_new["v5p"]) == (64, 128)
    assert d.quota_base["v6e"] == d.quota_new["v6e"] == 16
    md = render_markdown([d])
    assert "| generation | base chips | new chips | change | base Kueue quota | new Kueue quota | quota change |" in md
    assert "| v5p | 64 | 128 | +64 | 64 | 128 | +64 |" in md
    cq = next(c for c in d.changed if c.type.endswith(":ClusterQueue"))
    assert any(f.dotted.endswith("nominalQuota") and (f.old, f.new) == (64, 128) for f in cq.fields)
    # without Kueue on either side the table keeps its four columns
    no_kueue = diff_plans(
        _doc(plans["prod"], tmp_path / "c"),
        _doc(_variant(tmp_path, "keep", ("retentionDays: 90", "retentionDays: 60")), tmp_path / "d"),
    )
    assert no_kueue.quota_base == no_kueue.quota_new == {}
    assert "Kueue quota" not in render_markdown([no_kueue]) and "| v5p | 128 | 128 | +0 |" in render_markdown(
        [no_kueue]
    )


# ---- aliases ------------------------------------------------------------------------------------------------------
def _golden(stack: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((GOLDEN / stack / "plan.json").read_text())
    return doc


def _tpu_pool(doc: dict[str, Any]) -> dict[str, Any]:
    pool: dict[str, Any] = next(
        r for r in doc["resources"] if r["type"] == NODE_POOL and "tpu" in r["inputs"]["nodeConfig"]["machineType"]
    )
    return pool


@pytest.mark.parametrize(
    "new_type",
    [
        "kubernetes:core/v1:ConfigMap",  # another provider: Pulumi replaces it
        "gcp:storage/bucket:Bucket",  # the same provider: the bucket's provider would be handed the pool's ID
        "tpuray:index:TpuSlicePool",  # a component: no provider at all
    ],
)
def test_an_alias_across_types_never_hides_a_node_pools_deletion(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, new_type: str
) -> None:
    base = _golden("prod")
    new = copy.deepcopy(base)
    pool = _tpu_pool(new)
    new["resources"].remove(pool)
    stand_in = {
        "urn": f"urn:pulumi:prod::tpuray::{new_type}::innocent",
        "type": new_type,
        "name": "innocent",
        "custom": True,
        "inputs": {},
        "options": {"aliasURNs": [pool["urn"]]},
    }
    new["resources"].append(stand_in)
    d = diff_plans(base, new)
    assert [r["urn"] for r in d.removed] == [pool["urn"]]
    assert [r["urn"] for r in d.added] == [stand_in["urn"]]
    assert any(pool["name"] in w and "DELETED" in w for w in d.warnings)
    assert [(r.old_type, r.new_type) for r in d.retyped] == [(NODE_POOL, new_type)]
    md = render_markdown([d])
    assert "1 to delete" in md and "alias(es) across resource types" in md and "counted as a delete and a create" in md
    for side, doc in (("a", base), ("b", new)):
        (tmp_path / side).mkdir()
        (tmp_path / side / "plan.json").write_text(json.dumps(doc))
    code = main(["diff", str(tmp_path / "a"), str(tmp_path / "b"), "--fail-on-replace", "--out", str(tmp_path / "c")])
    assert code == 3, capsys.readouterr().err


def test_an_alias_within_its_type_is_the_same_resource(tmp_path: Path) -> None:
    """A renamed node pool that names its old URN is updated in place, as Pulumi does: nothing deleted."""
    base = _golden("prod")
    new = copy.deepcopy(base)
    pool = _tpu_pool(new)
    old_urn = pool["urn"]
    pool["urn"], pool["name"] = old_urn + "-renamed", pool["name"] + "-renamed"
    pool["options"] = {**pool["options"], "aliasURNs": [old_urn]}
    pool["inputs"]["nodeConfig"]["labels"]["team"] = "ml"
    d = diff_plans(base, new)
    assert not d.removed and not d.added and not d.retyped and not d.warnings
    assert [c.urn for c in d.changed] == [old_urn + "-renamed"]


def test_an_alias_is_not_used_when_the_resource_keeps_its_urn() -> None:
    """The engine looks a resource's own URN up first: an alias of a resource that still has its own URN in the
    base plan does not take over another base resource, whose deletion stays in view."""
    base = _golden("prod")
    new = copy.deepcopy(base)
    pools = [
        r for r in new["resources"] if r["type"] == NODE_POOL and "tpu" in r["inputs"]["nodeConfig"]["machineType"]
    ]
    keeper, gone = pools[0], pools[1]
    new["resources"].remove(gone)
    keeper["options"] = {**keeper["options"], "aliasURNs": [gone["urn"]]}
    d = diff_plans(base, new)
    assert [r["urn"] for r in d.removed] == [gone["urn"]]
    assert any(gone["name"] in w and "DELETED" in w for w in d.warnings)


def test_two_resources_claiming_one_alias_are_refused_naming_the_field() -> None:
    base = _golden("prod")
    new = copy.deepcopy(base)
    pool = _tpu_pool(new)
    new["resources"].remove(pool)
    twins = [
        {**copy.deepcopy(pool), "urn": pool["urn"] + f"-{i}", "options": {"aliasURNs": [pool["urn"]]}} for i in (1, 2)
    ]
    new["resources"] += twins
    with pytest.raises(PlanInputError) as err:
        diff_plans(base, new, "the base plan a", "the new plan b")
    index = len(new["resources"]) - 1
    assert err.value.plan == "the new plan b" and err.value.field == f"resources[{index}].options.aliasURNs[0]"
    assert "already claimed by" in str(err.value) and "Pulumi refuses" in str(err.value)
