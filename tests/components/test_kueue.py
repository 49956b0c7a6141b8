"""The ``KueueQueues`` component under the plan engine: the pinned Kueue chart, and every Kueue object after it
(the objects themselves are tests/planning/test_kueue.py)."""

from __future__ import annotations

from typing import Any

from tests.support import engine_run as er
from tests.support.kueue_schema import schema_errors
from tests.support.slices import kueue_of
from tests.support.stacks import shipped_config
from tpuray.components.kueue import KUEUE_CHART, KueueQueues, KueueQueuesArgs
from tpuray.components.planning.component_args import KueuePlan


def test_component_declares_the_pinned_chart_and_every_object_after_it() -> None:
    plan = kueue_of(shipped_config("prod-dws"))

    def build() -> dict[str, Any]:
        KueueQueues("kueue", KueueQueuesArgs(KueuePlan(spec=plan, chart_version="0.19.2", namespace="kueue-system")))
        return {}

    rec, _ = er.run(build)
    release = rec.one("kubernetes:helm.sh/v3:Release")["inputs"]
    assert release["chart"] == KUEUE_CHART and release["version"] == "0.19.2"
    assert release["namespace"] == "kueue-system"
    objs = [r for r in rec.resources if r["type"].startswith("kubernetes:kueue.x-k8s.io/")]
    assert len(objs) == len(plan.objects)
    for r in objs:
        assert r["parent"].endswith("tpuray:index:KueueQueues::kueue")
        assert any(d.endswith("::kueue-kueue") for d in er.depends_on(r)), r["name"]  # waits for the chart
        assert schema_errors(dict(r["inputs"])) == [], r["name"]
    cq = next(r for r in objs if r["type"].endswith(":ClusterQueue"))
    flavor_names = {r["name"] for r in objs if r["type"].endswith(":ResourceFlavor")}
    assert {d.rsplit("::", 1)[-1] for d in er.depends_on(cq)} >= flavor_names
    wpc = next(r for r in objs if r["type"].endswith(":WorkloadPriorityClass"))
    assert isinstance(wpc["inputs"]["value"], int | float) and "spec" not in wpc["inputs"]
