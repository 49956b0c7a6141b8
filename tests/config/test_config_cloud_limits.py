"""Values nothing knew are refused by name: regions and zones without TPUs (or without the pool's
generation), machine types no CPU series has, a Kueue chart that does not serve the rendered API, maintenance
exclusions longer than GKE allows for their scope, and the GKE Ray add-on under the stack's RayJob. Each rule's
source is cited where it is written (``tpuray.components.catalog.tpu_locations`` and
``tpuray.components.catalog.cloud_limits``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.stacks import minimal_values
from tpuray.components.catalog.cloud_limits import (
    KUEUE_API_FIRST_CHART,
    KUEUE_RENDERED_API,
    env_token_problem,
    ray_addon_problem,
)
from tpuray.components.catalog.topology import GENERATIONS
from tpuray.components.catalog.tpu_locations import TPU_REGIONS, TPU_ZONES, zones_of
from tpuray.components.config import ConfigError, load_stack_file, parse_stack_config
from tpuray.components.planning.kueue import API_VERSION
from tpuray.components.planning.stack_plan import plan_stack

ROOT = Path(__file__).resolve().parents[2]


def problems_of(values: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(ConfigError) as e:
        parse_stack_config(values)
    return {path: message for path, message in e.value.problems}


# ---- regions and zones ------------------------------------------------------------------------------------------
def test_the_shipped_stacks_place_every_pool_where_the_page_offers_its_generation() -> None:
    for stack in ("dev", "prod", "prod-dws"):
        cfg = load_stack_file(ROOT / f"Pulumi.{stack}.yaml")
        for pool in cfg.slice_pools:
            assert pool.generation in TPU_ZONES[str(cfg.pool_zone(pool))], (stack, pool.name)


def test_every_generation_has_a_zone_and_the_table_names_only_known_generations() -> None:
    names = {g.name for g in GENERATIONS}
    assert {g for gens in TPU_ZONES.values() for g in gens} == names
    assert all(zones_of(n) for n in names)


@pytest.mark.parametrize("region", ["us-east9", "mars-north1", "europe-west9"])
def test_a_region_without_tpus_is_refused(region: str) -> None:
    found = problems_of(minimal_values(region=region, zone=None))
    assert "region" in found and "no Cloud TPU zone" in found["region"] and "us-east5" in found["region"]
    assert region not in TPU_REGIONS


def test_a_zone_that_does_not_exist_is_refused_by_name() -> None:
    found = problems_of(minimal_values(zone="us-east5-q"))
    assert "offers no Cloud TPU" in found["zone"] and "us-east5-a" in found["zone"]


def test_a_pool_in_a_zone_without_its_generation_names_the_pool_zone_and_the_zones_that_offer_it() -> None:
    pools = [{"name": "e", "generation": "v5e", "topology": "2x2", "zone": "us-east1-d"}]  # us-east1-d: v6e only
    found = problems_of(minimal_values(region="us-east1", zone="us-east1-d", slicePools=pools))
    assert "does not offer TPU v5e" in found["slicePools[0].zone"]
    assert all(z in found["slicePools[0].zone"] for z in zones_of("v5e"))


def test_a_pool_that_takes_the_stack_zone_is_reported_at_the_zone_with_the_pool() -> None:
    pools = [{"name": "trillium", "generation": "tpu7x", "topology": "2x2x1"}]
    found = problems_of(minimal_values(slicePools=pools))
    assert "TPU tpu7x" in found["zone"] and "slicePools[0] (trillium)" in found["zone"]
    assert "us-central1-c" in found["zone"]


def test_a_pool_in_an_offering_zone_passes() -> None:
    pools = [{"name": "ironwood", "generation": "tpu7x", "topology": "2x2x1"}]
    cfg = parse_stack_config(minimal_values(region="us-central1", zone="us-central1-c", slicePools=pools))
    assert cfg.pool_zone(cfg.slice_pools[0]) == "us-central1-c"


# ---- the system pool's machine type -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("machine", "hint"),
    [
        ("zz9-standard-8", "no Compute Engine machine series"),
        ("e3-standard-8", "no Compute Engine machine series"),
        ("a3-highgpu-8g", "accelerator"),
        ("ct6e-standard-4t", "TPU machine type"),
    ],
)
def test_the_system_pool_takes_cpu_machine_series_only(machine: str, hint: str) -> None:
    found = problems_of(minimal_values(cluster={"systemMachineType": machine}))
    assert hint in found["cluster.systemMachineType"]


@pytest.mark.parametrize("machine", ["e2-standard-8", "n2-highmem-16", "c3-standard-22", "n2-custom-8-32768"])
def test_known_cpu_machine_types_pass(machine: str) -> None:
    assert (
        parse_stack_config(minimal_values(cluster={"systemMachineType": machine})).cluster.system_machine_type
        == machine
    )


# ---- the Kueue chart --------------------------------------------------------------------------------------------
def test_the_rendered_kueue_api_is_the_one_the_chart_floor_is_kept_for() -> None:
    assert API_VERSION == KUEUE_RENDERED_API and KUEUE_RENDERED_API in KUEUE_API_FIRST_CHART


@pytest.mark.parametrize("chart", ["0.14.4", "0.9.0"])
def test_a_kueue_chart_older_than_v1beta2_is_refused(chart: str) -> None:
    found = problems_of(minimal_values(kueue={"enabled": True, "chartVersion": chart}))
    assert (
        "does not serve kueue.x-k8s.io/v1beta2" in found["kueue.chartVersion"]
        and "0.15.0" in found["kueue.chartVersion"]
    )


def test_the_first_chart_serving_v1beta2_passes() -> None:
    assert (
        parse_stack_config(minimal_values(kueue={"enabled": True, "chartVersion": "0.15.0"})).kueue.chart_version
        == "0.15.0"
    )


# ---- maintenance exclusions -------------------------------------------------------------------------------------
def exclusion(scope: str, start: str, end: str) -> dict[str, Any]:
    return {"exclusions": [{"name": "hold", "start": start, "end": end, "scope": scope}]}


@pytest.mark.parametrize("scope", ["NO_MINOR_UPGRADES", "NO_MINOR_OR_NODE_UPGRADES"])
def test_a_minor_exclusion_longer_than_any_support_period_is_refused(scope: str) -> None:
    found = problems_of(minimal_values(maintenance=exclusion(scope, "2026-01-01T00:00:00Z", "2027-03-02T00:00:00Z")))
    assert (
        "14 months" in found["maintenance.exclusions[0].end"] and "2027-03-01" in found["maintenance.exclusions[0].end"]
    )


def test_the_extended_channel_allows_24_months_and_no_more() -> None:
    ok = minimal_values(
        cluster={"releaseChannel": "EXTENDED"},
        maintenance=exclusion("NO_MINOR_UPGRADES", "2026-01-01T00:00:00Z", "2027-12-31T00:00:00Z"),
    )
    assert parse_stack_config(ok).maintenance.exclusions[0].end == "2027-12-31T00:00:00Z"
    too_long = minimal_values(
        cluster={"releaseChannel": "EXTENDED"},
        maintenance=exclusion("NO_MINOR_UPGRADES", "2026-01-01T00:00:00Z", "2028-01-02T00:00:00Z"),
    )
    assert "24 months" in problems_of(too_long)["maintenance.exclusions[0].end"]


def test_a_minor_exclusion_within_standard_support_passes() -> None:
    values = minimal_values(maintenance=exclusion("NO_MINOR_UPGRADES", "2026-01-31T00:00:00Z", "2027-03-31T00:00:00Z"))
    assert parse_stack_config(values).maintenance.exclusions[0].scope == "NO_MINOR_UPGRADES"


# ---- flex-start on tpu7x (settled: refused) ---------------------------------------------------------------------
@pytest.mark.parametrize("capacity", [{"type": "flex-start", "maxRunDuration": "6h"}, {"type": "queued"}])
def test_flex_start_and_queued_provisioning_do_not_serve_tpu7x(capacity: dict[str, Any]) -> None:
    pools = [
        {
            "name": "ironwood",
            "generation": "tpu7x",
            "topology": "2x2x1",
            "capacity": capacity,
            "autoscaling": {"enabled": True, "minSlices": 0},
        }
    ]
    found = problems_of(minimal_values(region="us-central1", zone="us-central1-c", slicePools=pools))
    assert "does not serve TPU tpu7x" in found["slicePools[0].capacity.type"]


# ---- the GKE Ray add-on and the stack's RayJob (refused) --------------------------------------------------------
@pytest.mark.parametrize("auth_options", [None, True, False])
@pytest.mark.parametrize("job_mode", ["shared", "ephemeral"])
def test_the_gke_ray_addon_is_refused_for_the_stacks_rayjob(auth_options: bool | None, job_mode: str) -> None:
    """Every stack renders a training RayJob. On the add-on its status calls get 401 (token in env variables only)
    or the cluster may run open (authOptions on an add-on KubeRay < 1.6, whose version GKE does not publish): the
    refusal names ray.operator, says why, and gives the Helm operator as the fix."""
    ray: dict[str, Any] = {"operator": "addon", "jobMode": job_mode}
    if auth_options is not None:
        ray["authOptions"] = auth_options
    found = problems_of(minimal_values(ray=ray, kueue={"enabled": job_mode == "ephemeral"}))
    message = found["ray.operator"]
    for why in ("401", "RayJob ends Failed", "< 1.6", "does not publish", "drops authOptions", "without auth"):
        assert why in message, why
    assert "set ray.operator: helm" in message and "ray.helmChartVersion" in message


def test_the_helm_operator_is_the_default_and_the_addon_stays_off() -> None:
    cfg = parse_stack_config(minimal_values())
    assert (cfg.ray.operator, cfg.ray.uses_auth_options, cfg.ray.job_api_namespace) == (
        "helm",
        True,
        "kuberay-system",
    )
    plan = plan_stack(cfg, "test")
    assert plan.ray.helm_chart_version == cfg.ray.helm_chart_version  # KubeRay from its chart; the add-on is off
    cluster, job = plan.manifests  # the shared RayCluster carries the token for the job that runs on it
    assert cluster["spec"]["authOptions"] == {"mode": "token", "secretName": "tpuray-ray-auth"}
    assert job["spec"]["clusterSelector"]


def test_the_token_in_env_variables_only_is_refused_for_the_stacks_rayjob() -> None:
    assert "401" in problems_of(minimal_values(ray={"authOptions": False}))["ray.authOptions"]


def test_the_addon_and_the_env_only_token_are_refused_and_helm_with_auth_options_is_not() -> None:
    assert ray_addon_problem("helm") is None
    assert "ray.operator: helm" in (ray_addon_problem("addon") or "")
    assert env_token_problem(auth_options=True) is None
    assert "401" in (env_token_problem(auth_options=False) or "")
    assert "ray.operator" in problems_of(minimal_values(ray={"operator": "addon"}))
