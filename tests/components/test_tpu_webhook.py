"""The stack installs the KubeRay TPU webhook (and cert-manager) where a slice pool is multi-host, before any Ray
pod: Ray finds a multi-host slice's hosts only through the variables the webhook injects."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.support.plans import ROOT
from tpuray.components.catalog.pins import TPU_WEBHOOK
from tpuray.components.review.plan import Plan, render_stack
from tpuray.components.tpu_webhook import CERT_MANAGER_REPO, TPU_WEBHOOK_CHART

RELEASE = "kubernetes:helm.sh/v3:Release"


def _releases(plan: Plan) -> dict[str, dict[str, Any]]:
    return {r["inputs"]["name"]: r for r in plan.resources if r["type"] == RELEASE}


def test_multi_host_stack_installs_webhook_after_cert_manager_and_before_ray(plans: dict[str, Plan]) -> None:
    prod = plans["prod"]
    releases = _releases(prod)
    cert, hook = releases["cert-manager"], releases["kuberay-tpu-webhook"]
    assert cert["inputs"]["repositoryOpts"] == {"repo": CERT_MANAGER_REPO}
    assert cert["inputs"]["values"]["crds"]["enabled"] is True
    assert (hook["inputs"]["chart"], hook["inputs"]["version"]) == (TPU_WEBHOOK_CHART, TPU_WEBHOOK.chart)
    assert cert["urn"] in hook["options"]["dependsOn"]
    (cluster,) = [r for r in prod.resources if r["type"] == "kubernetes:ray.io/v1:RayCluster"]
    assert hook["urn"] in cluster["options"]["dependsOn"]
    assert all(r["parent"].endswith("::tpu-webhook") for r in (cert, hook))


def test_single_host_stack_and_opt_outs(tmp_path: Path) -> None:
    assert "kuberay-tpu-webhook" not in _releases(render_stack("dev", ROOT))
    text = (ROOT / "Pulumi.prod.yaml").read_text()
    assert "  tpuray:ray:\n" in text
    variant = tmp_path / "Pulumi.prod.yaml"
    variant.write_text(
        text.replace("  tpuray:ray:\n", "  tpuray:ray:\n    tpuWebhook:\n      certManager:\n        install: false\n")
    )
    releases = _releases(render_stack("prod", ROOT, stack_file=variant))
    assert "cert-manager" not in releases and "kuberay-tpu-webhook" in releases
    variant.write_text(text.replace("  tpuray:ray:\n", "  tpuray:ray:\n    tpuWebhook:\n      enabled: false\n"))
    assert "kuberay-tpu-webhook" not in _releases(render_stack("prod", ROOT, stack_file=variant))
