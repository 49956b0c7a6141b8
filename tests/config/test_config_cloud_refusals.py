"""What the cloud or Kueue would refuse later is refused at config time, by field: a ClusterQueue with more flavors
than Kueue's CRD allows, a cluster larger than GKE's node limit, a model whose training state cannot fit one chip,
display names that would forge the PR comment, a checkpoint bucket in no real location, a system namespace for Ray.
And what Pulumi and GKE take is taken: ``1e3`` as a number, a notification channel named by project number, and a
minor-version alias as ``minMasterVersion``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.crds import crd_folder
from tests.support.slices import kueue_of
from tests.support.stacks import minimal_values, problems_by_path, shipped_values
from tpuray.components.catalog.cloud_limits import GKE_MAX_NODES_PER_CLUSTER, KUEUE_MAX_FLAVORS_PER_RESOURCE_GROUP
from tpuray.components.catalog.gke_versions import gke_version_meets
from tpuray.components.catalog.topology import FLEX_START_MIN_GKE_VERSION
from tpuray.components.catalog.tpu_locations import TPU_REGIONS
from tpuray.components.config import ConfigError, StackConfig, load_stack_file, parse_stack_config
from tpuray.components.config.ray import SYSTEM_NAMESPACES

ROOT = Path(__file__).resolve().parents[2]


def pools(n: int) -> list[dict[str, Any]]:
    """``n`` single-host v5p pools (one node each)."""
    return [{"name": f"p{i}", "generation": "v5p", "topology": "2x2x1"} for i in range(n)]


# ---- Kueue: flavors per resource group ------------------------------------------------------------------------
def _kueue_crd(name: str) -> dict[str, Any]:
    path = crd_folder("kueue-crds") / name
    doc: dict[str, Any] = yaml.safe_load(path.read_text())
    return doc


def test_the_flavor_bound_is_the_one_kueues_clusterqueue_crd_states() -> None:
    crd = _kueue_crd("kueue.x-k8s.io_clusterqueues.yaml")
    for version in crd["spec"]["versions"]:
        spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
        group = spec["resourceGroups"]["items"]["properties"]
        assert group["flavors"]["maxItems"] == KUEUE_MAX_FLAVORS_PER_RESOURCE_GROUP, version["name"]
        # The lists tpuray cannot overflow: it renders one group of 3 covered resources, so these stay far off.
        assert spec["resourceGroups"]["maxItems"] >= 1 and group["coveredResources"]["maxItems"] >= 3


def test_the_clusterqueue_tpuray_renders_has_one_group_and_a_flavor_per_pool_plus_one() -> None:
    """The rule counts what the planner renders: at the largest stack it accepts, exactly the CRD's bound."""
    n = KUEUE_MAX_FLAVORS_PER_RESOURCE_GROUP - 1
    cfg = parse_stack_config(minimal_values(slicePools=pools(n), kueue={"enabled": True}))
    queue = next(o for o in kueue_of(cfg).objects if o["kind"] == "ClusterQueue")
    groups = queue["spec"]["resourceGroups"]
    assert len(groups) == 1 and len(groups[0]["flavors"]) == KUEUE_MAX_FLAVORS_PER_RESOURCE_GROUP
    checks = queue["spec"].get("admissionChecksStrategy", {}).get("admissionChecks", [])
    assert len(checks) <= len(groups[0]["flavors"])


def test_every_capacity_types_flavor_stays_within_the_resourceflavor_crds_bounds() -> None:
    """ResourceFlavor nodeLabels (maxProperties) and tolerations (maxItems) are fixed by tpuray, not the config:
    checked once for every capacity type, so the config needs no rule for them."""
    spec = _kueue_crd("kueue.x-k8s.io_resourceflavors.yaml")["spec"]["versions"]
    bounds = {v["name"]: v["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"] for v in spec}
    auto = {"enabled": True, "minSlices": 0}
    capacities: list[dict[str, Any]] = [
        {"type": "on-demand"},
        {"type": "spot"},
        {"type": "reservation", "name": "r1"},
        {"type": "flex-start", "maxRunDuration": "24h"},
        {"type": "queued"},
    ]
    values = minimal_values(
        slicePools=[
            {"name": f"p{i}", "generation": "v5p", "topology": "2x2x2", "capacity": c, "autoscaling": auto}
            for i, c in enumerate(capacities)
        ],
        kueue={"enabled": True},
        ray={"jobMode": "ephemeral"},
    )
    flavors = [o for o in kueue_of(parse_stack_config(values)).objects if o["kind"] == "ResourceFlavor"]
    assert len(flavors) == len(capacities) + 1
    for props in bounds.values():
        for f in flavors:
            assert len(f["spec"]["nodeLabels"]) <= props["nodeLabels"]["maxProperties"], f
            assert len(f["spec"].get("tolerations", [])) <= props["tolerations"]["maxItems"], f


def test_64_pools_with_kueue_are_refused_and_without_kueue_pass() -> None:
    found = problems_by_path(minimal_values(slicePools=pools(64), kueue={"enabled": True}))
    assert "65 ResourceFlavors" in found["slicePools"] and "at most 64" in found["slicePools"]
    assert "at most 63 slice pools" in found["slicePools"]
    parse_stack_config(minimal_values(slicePools=pools(64)))  # no ClusterQueue, no bound


# ---- GKE: nodes per cluster -----------------------------------------------------------------------------------
WIDE = {"podsCidr": "10.0.0.0/9", "subnetCidr": "172.16.0.0/20", "servicesCidr": "172.20.0.0/20"}
"""A network whose Pod range holds 32,768 nodes, so GKE's node limit is the only bound in play."""


def test_a_stack_that_can_grow_past_15000_nodes_is_refused() -> None:
    # v5p 16x16x16: 4096 chips on 1024 hosts; 15 slices = 15,360 nodes, plus the system pool
    big = {"name": "big", "generation": "v5p", "topology": "16x16x16", "slices": 15}
    found = problems_by_path(minimal_values(slicePools=[big], network=WIDE))
    assert "15,361 nodes" in found["slicePools"] and "15,000" in found["slicePools"]
    assert "kubernetes-engine/quotas" in found["slicePools"]
    assert "network.podsCidr" not in found  # a /9 holds them: the one problem is GKE's limit


def test_exactly_15000_nodes_pass_and_one_more_is_refused() -> None:
    # 14 slices of 1024 hosts + 13 single-host pools of 51 slices + 1 system node = 14,336 + 663 + 1 = 15,000
    big = {"name": "big", "generation": "v5p", "topology": "16x16x16", "slices": 14}
    small = [{"name": f"s{i}", "generation": "v5p", "topology": "2x2x1", "slices": 51} for i in range(13)]
    values = minimal_values(slicePools=[big, *small], network=WIDE)
    cfg = parse_stack_config(values)
    assert 1 + sum(p.slices * p.tpu_slice.hosts for p in cfg.slice_pools) == GKE_MAX_NODES_PER_CLUSTER
    values["slicePools"][-1]["slices"] += 1
    assert "15,001 nodes" in problems_by_path(values)["slicePools"]


# ---- the model fits one chip ----------------------------------------------------------------------------------
def test_a_model_whose_training_state_exceeds_a_chips_hbm_is_refused_with_both_figures() -> None:
    # 40 blocks of d=8192 (12 d^2 + 13 d each) and the default embeddings: 32,219,152,384 parameters x 16 B = 480.1 GiB
    found = problems_by_path(minimal_values(workload={"model": {"dModel": 8192, "layers": 40, "heads": 16}}))
    assert found["workload.model"].startswith("does not fit: needs 480.1 GiB per chip, a v5p chip has 95 GiB"), found


def test_the_fit_is_judged_on_the_pool_the_job_runs_on() -> None:
    # prod's model: 1.28e9 parameters x 16 B = 19.1 GiB, more than a v5e chip's 16 GiB, far less than a v5p's 95
    model = {"dModel": 2048, "layers": 24, "heads": 16, "vocabSize": 32000}
    v5e = {"name": "small", "generation": "v5e", "topology": "2x2", "zone": "us-east5-a"}
    v5p = {"name": "large", "generation": "v5p", "topology": "2x2x1"}
    values = minimal_values(slicePools=[v5p, v5e], workload={"model": model, "seqLen": 2048, "slicePool": "large"})
    parse_stack_config(values)
    values["workload"]["slicePool"] = "small"
    values["region"], values["zone"] = "us-central1", "us-central1-a"
    values["slicePools"][1]["zone"] = "us-central1-a"
    found = problems_by_path(values)
    assert "a v5e chip has 16 GiB" in found["workload.model"] and "'small'" in found["workload.model"]


def test_every_shipped_stacks_model_fits_its_pool() -> None:
    for stack in ("dev", "prod", "prod-dws"):
        cfg = load_stack_file(ROOT / f"Pulumi.{stack}.yaml")
        assert cfg.workload.training_state_bytes <= cfg.workload_pool().tpu_slice.hbm_bytes_per_chip


# ---- strings that reach the PR comment ------------------------------------------------------------------------
FORGED = ["office\n# Budget: pass", "[click](https://evil.example)", "a|b", "<img src=x>", "`code`", "**bold**", " x"]


@pytest.mark.parametrize("name", FORGED)
def test_authorized_network_and_exclusion_names_are_plain_text(name: str) -> None:
    net = {"cidr": "203.0.113.0/24", "name": name}
    exclusion = {"name": name, "start": "2026-12-20T00:00:00Z", "end": "2026-12-27T00:00:00Z"}
    found = problems_by_path(
        minimal_values(cluster={"masterAuthorizedNetworks": [net]}, maintenance={"exclusions": [exclusion]})
    )
    for path in ("cluster.masterAuthorizedNetworks[0].name", "maintenance.exclusions[0].name"):
        assert "control character" in found[path] or "no Markdown or HTML" in found[path], found


def test_plain_names_pass() -> None:
    nets = [{"cidr": "203.0.113.0/24", "name": "corp-vpn (Zürich), office_2"}, {"cidr": "198.51.100.0/24"}]
    exclusion = {"name": "holiday freeze 2026", "start": "2026-12-20T00:00:00Z", "end": "2026-12-27T00:00:00Z"}
    parse_stack_config(
        minimal_values(cluster={"masterAuthorizedNetworks": nets}, maintenance={"exclusions": [exclusion]})
    )


# ---- real locations and own namespaces ------------------------------------------------------------------------
@pytest.mark.parametrize("location", ["mars-central1", "us-mars1", "europe-west99", "NAM9"])
def test_a_checkpoint_location_that_is_no_real_one_is_refused(location: str) -> None:
    found = problems_by_path(minimal_values(checkpoints={"location": location}))
    assert "storage/docs/locations" in found["checkpoints.location"] and "us-east5" in found["checkpoints.location"]


@pytest.mark.parametrize("location", ["us-east5", "US-EAST5", "US", "eu", "ASIA", "NAM4", *sorted(TPU_REGIONS)])
def test_tpu_regions_multi_and_dual_regions_are_bucket_locations(location: str) -> None:
    parse_stack_config(minimal_values(checkpoints={"location": location}))


@pytest.mark.parametrize("ns", ["cert-manager", "gmp-system", "gmp-public", "gke-gmp-system", "kuberay-system"])
def test_ray_and_kueue_stay_out_of_the_namespaces_the_stack_installs_into(ns: str) -> None:
    assert "system namespace" in problems_by_path(minimal_values(ray={"namespace": ns}))["ray.namespace"]
    assert "system namespace" in problems_by_path(minimal_values(kueue={"namespace": ns}))["kueue.namespace"]


def test_ray_in_kueues_namespace_is_refused() -> None:
    assert "kueue.namespace" in problems_by_path(
        minimal_values(ray={"namespace": "queues"}, kueue={"namespace": "queues"})
    )
    assert "cert-manager" in SYSTEM_NAMESPACES


# ---- what Pulumi and GKE accept --------------------------------------------------------------------------------
@pytest.mark.parametrize(("text", "steps"), [("1e3", 1000), ("1E+3", 1000), ("2.5e2", 250), ("60.0", 60)])
def test_a_number_pulumis_yaml_reads_is_one_here(tmp_path: Path, text: str, steps: int) -> None:
    path = tmp_path / "Pulumi.dev.yaml"
    path.write_text((ROOT / "Pulumi.dev.yaml").read_text().replace("steps: 60", f"steps: {text}"))
    assert f"steps: {text}\n" in path.read_text()
    assert load_stack_file(path).workload.steps == steps


def test_a_quoted_number_stays_a_string_as_in_pulumi(tmp_path: Path) -> None:
    path = tmp_path / "Pulumi.dev.yaml"
    path.write_text((ROOT / "Pulumi.dev.yaml").read_text().replace("steps: 60", 'steps: "1e3"'))
    with pytest.raises(ConfigError) as e:
        load_stack_file(path)
    assert [p for p, _ in e.value.problems] == ["workload.steps"]


def test_a_learning_rate_in_exponent_form(tmp_path: Path) -> None:
    path = tmp_path / "Pulumi.dev.yaml"
    path.write_text((ROOT / "Pulumi.dev.yaml").read_text().replace("steps: 60", "steps: 60\n    learningRate: 1e-3"))
    assert load_stack_file(path).workload.learning_rate == 1e-3


@pytest.mark.parametrize("project", ["123456789012", "1", "my-project-1"])
def test_notification_channels_by_project_id_or_number(project: str) -> None:
    channel = f"projects/{project}/notificationChannels/42"
    parse_stack_config(minimal_values(monitoring={"idleAlert": {"notificationChannels": [channel]}}))


@pytest.mark.parametrize("project", ["0123", "12345678901234567890", "-1", "My-Project"])
def test_notification_channels_by_no_project(project: str) -> None:
    channel = f"projects/{project}/notificationChannels/42"
    found = problems_by_path(minimal_values(monitoring={"idleAlert": {"notificationChannels": [channel]}}))
    assert "monitoring.idleAlert.notificationChannels[0]" in found


def _prod() -> dict[str, Any]:
    from tpuray.components.config import stack_values

    return stack_values(yaml.safe_load((ROOT / "Pulumi.prod.yaml").read_text())["config"])


@pytest.mark.parametrize("version", ["1.33", "1.33.0", "1.34", "1.33.1"])
def test_a_minor_or_patch_alias_meets_a_floor_of_its_own_series(version: str) -> None:
    """prod's flex-start pool needs 1.33.0-gke.1712000: GKE resolves "1.33" and "1.33.0" to their newest patch."""
    values = _prod()
    values["cluster"]["minMasterVersion"] = version
    cfg = parse_stack_config(values, stack="prod")
    assert cfg.master_version == version


@pytest.mark.parametrize("version", ["1.32", "1.32.9"])
def test_an_alias_below_the_floor_is_refused_naming_the_alias_to_give(version: str) -> None:
    values = _prod()
    values["cluster"]["minMasterVersion"] = version
    found = problems_by_path(values, "prod")["cluster.minMasterVersion"]
    assert "older than 1.33.0-gke.1712000" in found and "give 1.33.0 or a later alias" in found


@pytest.mark.parametrize("version", ["1.33.0-gke.1712000", "1.35.1-gke.1616000", "1.30.0-gke.1747000"])
def test_an_exact_patch_is_refused_naming_its_aliases(version: str) -> None:
    """GKE creates a cluster only at a version it offers now, and withdraws patches: a stack asks for an alias."""
    values = _prod()
    values["cluster"]["minMasterVersion"] = version
    found = problems_by_path(values, "prod")["cluster.minMasterVersion"]
    patch, minor = version.split("-gke.")[0], ".".join(version.split(".")[:2])
    assert "exact GKE patch" in found and f"give an alias, {patch} or {minor}" in found


def test_an_unset_version_requests_none_and_keeps_the_floor() -> None:
    """Unset, the cluster is created at its channel's default (nothing sent); the floor stays what config checks."""
    cfg = parse_stack_config(_prod(), stack="prod")
    assert cfg.cluster.min_master_version is None and cfg.master_version == FLEX_START_MIN_GKE_VERSION


def test_alias_comparison() -> None:
    assert gke_version_meets("1.33", "1.33.9-gke.9") and gke_version_meets("1.33.9", "1.33.9-gke.9")
    assert not gke_version_meets("1.33.8", "1.33.9-gke.1") and not gke_version_meets("1.32", "1.33.0-gke.1")
    with pytest.raises(ValueError):
        gke_version_meets("1.33-gke.5", "1.33.0-gke.1")  # a gke.N belongs to a patch


def test_the_shipped_stacks_still_load() -> None:
    for stack in ("dev", "prod", "prod-dws"):
        assert isinstance(load_stack_file(ROOT / f"Pulumi.{stack}.yaml"), StackConfig)


@pytest.mark.parametrize("version", ["1.34", "1.35.0"])
def test_a_spot_pools_longer_shutdown_needs_its_gke_floor_named_at_the_pool(version: str) -> None:
    """A spot pool asks for the 120 s graceful shutdown by default, which GKE gives from 1.35.0-gke.1171000: an older
    minMasterVersion is refused naming the pool's capacity and what needs the version; GKE's 30 s needs nothing."""
    values = shipped_values("dev")
    values["cluster"]["minMasterVersion"] = version
    if version == "1.35.0":  # the alias counts as its newest patch, past the floor
        assert parse_stack_config(values, stack="dev").master_version == version
        return
    found = problems_by_path(values, "dev")["cluster.minMasterVersion"]
    assert "older than 1.35.0-gke.1171000" in found and "give 1.35.0 or a later alias" in found
    assert "slicePools[0].capacity: a 120 s graceful shutdown of Spot VMs from 1.35.0-gke.1171000" in found
    values["slicePools"][0]["capacity"]["shutdownGracePeriod"] = 30
    assert parse_stack_config(values, stack="dev").master_version == version


@pytest.mark.parametrize("period", [0, 60, 121, "120"])
def test_a_spot_shutdown_period_is_gkes_30_or_its_longer_120(period: object) -> None:
    values = shipped_values("dev")
    values["slicePools"][0]["capacity"]["shutdownGracePeriod"] = period
    found = problems_by_path(values, "dev")
    assert "slicePools[0].capacity.shutdownGracePeriod" in found, found
