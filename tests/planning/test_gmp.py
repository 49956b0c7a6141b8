"""The Managed Prometheus objects the stacks declare: present in the plans, valid against the pinned GMP v0.17.2
CRDs (schema and the CEL rules jsonschema cannot run), and keeping exactly the training job's series where the Ray
add-on's monitoring already collects Ray's own."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.support.gmp_schema import cel_problems, schema_errors
from tpuray.components.catalog import metric_names as mn
from tpuray.components.planning.gmp import (
    GMP_API_VERSION,
    KUEUE_METRICS_READER_ROLE,
    kueue_monitoring,
    ray_pod_monitoring,
)

GOLDEN = Path(__file__).resolve().parents[1] / "review" / "golden"
PODMONITORING = f"kubernetes:{GMP_API_VERSION}:PodMonitoring"


def _plan_objects(stack: str, type_token: str) -> list[dict[str, Any]]:
    plan = json.loads((GOLDEN / stack / "plan.json").read_text())
    return [r["inputs"] for r in plan["resources"] if r["type"] == type_token]


@pytest.mark.parametrize(("stack", "kueue"), [("prod", False), ("prod-dws", True)])
def test_the_production_plans_hold_valid_monitoring_objects(stack: str, kueue: bool) -> None:
    found = _plan_objects(stack, PODMONITORING)
    names = sorted(o["metadata"]["name"] for o in found)
    assert any(n.endswith("-training-metrics") for n in names)
    assert ("kueue-controller-metrics" in names) == kueue
    for obj in found:
        assert schema_errors(obj) == [], obj["metadata"]["name"]
        assert cel_problems(obj) == [], obj["metadata"]["name"]


def test_schema_and_cel_checks_catch_bad_objects() -> None:
    good = ray_pod_monitoring("c", "ray", {})
    bad = copy.deepcopy(good)
    bad["spec"]["endpoints"][0]["scheme"] = "ftp"
    bad["spec"]["endpoints"][0]["bogus"] = 1
    del bad["spec"]["selector"]
    assert len(schema_errors(bad)) == 3
    bad = copy.deepcopy(good)
    bad["spec"]["endpoints"][0] |= {"port": 0, "timeout": "1m", "interval": "30s"}
    (kueue_pm,) = [o for o in kueue_monitoring("kueue-system", {}) if o["kind"] == "PodMonitoring"]
    kueue_pm["spec"]["endpoints"][0]["basicAuth"] = {"username": "x"}
    assert len(cel_problems(bad)) == 2 and len(cel_problems(kueue_pm)) == 1


def _kept(obj: dict[str, Any], name: str) -> bool:
    rules = obj["spec"]["endpoints"][0].get("metricRelabeling", [])
    return all(re.fullmatch(r["regex"], name) for r in rules if r["action"] == "keep")


def test_training_and_ray_series_are_all_kept() -> None:
    """No add-on collects Ray's series (the stacks declare it off), so the PodMonitoring drops none of them."""
    monitoring = ray_pod_monitoring("c", "ray", {})
    for name in (*mn.TRAIN_METRICS, *mn.RAY_TPU_METRICS, "node_cpu_utilization"):
        assert _kept(monitoring, mn.ray_exported(name))


def test_kueue_scrape_credentials_hang_together() -> None:
    objs = {o["kind"]: o for o in kueue_monitoring("kueue-system", {"a": "b"})}
    secret = objs["Secret"]["metadata"]["name"]
    creds = objs["PodMonitoring"]["spec"]["endpoints"][0]["authorization"]["credentials"]["secret"]
    assert creds["name"] == secret and creds["namespace"] == "kueue-system"
    assert (
        objs["Secret"]["metadata"]["annotations"]["kubernetes.io/service-account.name"]
        == (objs["ServiceAccount"]["metadata"]["name"])
    )
    assert objs["ClusterRoleBinding"]["roleRef"]["name"] == KUEUE_METRICS_READER_ROLE
    assert objs["Role"]["rules"][0]["resourceNames"] == [secret]
    assert objs["RoleBinding"]["subjects"] == [
        {"kind": "ServiceAccount", "name": "collector", "namespace": "gmp-system"}
    ]
    assert objs["PodMonitoring"]["spec"]["endpoints"][0]["port"] == mn.KUEUE_METRICS_PORT
