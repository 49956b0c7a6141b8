"""The start-up section through the real program: the buckets the Ray service account is granted, the node pool
fields pulumi-gcp takes, the plan's startup.md."""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.support.plans import ROOT
from tpuray.components.review.plan import STARTUP_FILE, Plan, render_stack, write_plan
from tpuray.components.review.resource_types import NODE_POOL

BUCKET_IAM = "gcp:storage/bucketIAMMember:BucketIAMMember"


def test_own_cache_and_data_buckets_are_granted_to_the_ray_service_account(tmp_path: Path) -> None:
    doc = yaml.safe_load((ROOT / "Pulumi.prod.yaml").read_text())
    doc["config"]["tpuray:startup"]["compileCache"] = {"bucket": "tpuray-prod-xla-cache"}
    doc["config"]["tpuray:startup"]["dataMount"] = {"bucket": "tpuray-prod-corpus"}
    stack_file = tmp_path / "Pulumi.prod.yaml"
    stack_file.write_text(yaml.safe_dump(doc))
    plan = render_stack("prod", ROOT, stack_file=stack_file)
    grants = {r["inputs"]["bucket"]: r["inputs"]["role"] for r in plan.resources if r["type"] == BUCKET_IAM}
    assert grants["tpuray-prod-xla-cache"] == "roles/storage.objectUser"
    assert grants["tpuray-prod-corpus"] == "roles/storage.objectViewer"


def test_prod_node_pools_declare_streaming_and_dws_pools_a_preloaded_disk(plans: dict[str, Plan]) -> None:
    pools = [r["inputs"]["nodeConfig"] for r in plans["prod"].resources if r["type"] == NODE_POOL]
    tpu_pools = [n for n in pools if n["machineType"].startswith("ct")]  # ct5p-..., ct6e-...: the TPU VMs
    assert len(tpu_pools) == 3  # two v5p slices (a pool each) and the v6e pool
    assert all(n["gcfsConfig"] == {"enabled": True} and n["imageType"] == "COS_CONTAINERD" for n in tpu_pools)
    assert all("gcfsConfig" not in n for n in pools if n not in tpu_pools)  # the system pool pulls as before
    tpu = [r for r in plans["prod-dws"].resources if r["type"] == NODE_POOL and "secondaryBootDisks" in str(r)]
    assert tpu and all(
        r["inputs"]["nodeConfig"]["secondaryBootDisks"]
        == [
            {
                "diskImage": "projects/tpuray-prod-project/global/images/tpuray-worker-0-1-0",
                "mode": "CONTAINER_IMAGE_CACHE",
            }
        ]
        for r in tpu
    )


def test_the_plan_writes_what_each_pool_waits_for(plans: dict[str, Plan], tmp_path: Path) -> None:
    write_plan(plans["prod"], tmp_path / "out", root=tmp_path)
    text = (tmp_path / "out" / STARTUP_FILE).read_text()
    assert "## v5p-train (v5p:4x4x4, 2 slices)" in text and "## v6e-flex" in text
    assert "- image: streamed" in text and "/compile-cache/xla-{runtime}/v5p-128-4x4x4-x2/" in text
