"""The config model's security rules: each bad value is refused naming the field and the valid form."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tpuray.components.config import (
    ConfigError,
    is_production_stack,
    load_stack_file,
    parse_stack_config,
    stack_values,
)

ROOT = Path(__file__).resolve().parents[2]


def values(env: str = "prod") -> dict[str, Any]:
    return stack_values(yaml.safe_load((ROOT / f"Pulumi.{env}.yaml").read_text())["config"])


def problems_of(v: dict[str, Any], stack: str | None = "prod") -> dict[str, str]:
    with pytest.raises(ConfigError) as err:
        parse_stack_config(v, "test", stack)
    return dict(err.value.problems)


@pytest.mark.parametrize("namespace", ["kube-system", "default", "kube-public", "gke-managed-system", "kuberay-system"])
def test_a_system_namespace_is_refused(namespace: str) -> None:
    v = values()
    v["ray"] = {**v["ray"], "namespace": namespace}
    found = problems_of(v)
    assert "system namespace" in found["ray.namespace"] and "'ray'" in found["ray.namespace"]


@pytest.mark.parametrize("cidr", ["0.0.0.0/0"])
def test_an_authorized_network_of_everyone_is_refused_on_every_stack(cidr: str) -> None:
    for env in ("dev", "prod"):
        v = values(env)
        v["cluster"] = {**v["cluster"], "masterAuthorizedNetworks": [{"cidr": cidr}]}
        found = problems_of(v, env)
        assert "every address" in found["cluster.masterAuthorizedNetworks[0].cidr"]


def test_a_production_control_plane_open_to_all_is_refused() -> None:
    v = values()
    v["cluster"] = {**v["cluster"], "masterAuthorizedNetworks": []}
    for stack in ("prod", "production", "prod-eu", "PROD"):
        found = problems_of(v, stack)
        assert "[gke-control-plane-not-public]" in found["cluster.masterAuthorizedNetworks"]
    assert parse_stack_config(v, "test", "dev").cluster.master_authorized_networks == []  # not production
    for endpoint in ("private", "dns"):
        v["cluster"]["controlPlaneEndpoint"] = endpoint
        assert parse_stack_config(v, "test", "prod").cluster.control_plane_endpoint == endpoint
    assert not is_production_stack("preprod") and is_production_stack("prod-us")


def test_the_production_rule_runs_beside_other_problems() -> None:
    v = values()
    v["cluster"] = {**v["cluster"], "masterAuthorizedNetworks": []}
    v["ray"] = {**v["ray"], "headCpu": "lots"}  # a bad value elsewhere must not hide it
    found = problems_of(v)
    assert "cluster.masterAuthorizedNetworks" in found and "ray.headCpu" in found


def test_the_stack_name_comes_from_the_file_name(tmp_path: Path) -> None:
    doc = yaml.safe_load((ROOT / "Pulumi.prod.yaml").read_text())
    doc["config"]["tpuray:cluster"]["masterAuthorizedNetworks"] = []
    for name, refused in (("Pulumi.prod.yaml", True), ("Pulumi.staging.yaml", False)):
        path = tmp_path / name
        path.write_text(yaml.safe_dump(doc))
        if refused:
            with pytest.raises(ConfigError, match="gke-control-plane-not-public"):
                load_stack_file(path)
        else:
            assert load_stack_file(path).cluster.master_authorized_networks == []


def test_a_private_endpoint_needs_private_nodes() -> None:
    v = values()
    v["cluster"] = {**v["cluster"], "controlPlaneEndpoint": "private", "privateNodes": False}
    assert "privateNodes" in problems_of(v)["cluster.controlPlaneEndpoint"]
    v["cluster"]["controlPlaneEndpoint"] = "public-ish"
    assert "valid choices" in problems_of(v)["cluster.controlPlaneEndpoint"]


@pytest.mark.parametrize(("days", "ok"), [(6, False), (7, True), (90, True), (91, False)])
def test_soft_delete_retention_is_what_gcs_allows(days: int, ok: bool) -> None:
    v = values()
    v["checkpoints"] = {"softDeleteDays": days, "versioning": True}
    if ok:
        cfg = parse_stack_config(v, "test", "prod")
        assert (cfg.checkpoints.soft_delete_days, cfg.checkpoints.versioning) == (days, True)
    else:
        assert "checkpoints.softDeleteDays" in problems_of(v)


def test_images_by_tag_or_digest_are_accepted_and_malformed_ones_named() -> None:
    v = values()
    digest = "sha256:" + "0" * 64
    for image in ("rayproject/ray:2.60.0-py311", f"rayproject/ray@{digest}", f"rayproject/ray:2.60.0@{digest}"):
        v["ray"] = {**v["ray"], "image": image}
        assert parse_stack_config(v, "test", "prod").ray.image == image
    v["ray"] = {**v["ray"], "image": "rayproject/ray@sha256:short", "workerImage": "Not An Image"}
    found = problems_of(v)
    assert "@sha256" in found["ray.image"] and "image reference" in found["ray.workerImage"]


def test_the_secret_token_key_is_never_part_of_the_model() -> None:
    raw = {"tpuray:rayAuthToken": "s3cret", **{f"tpuray:{k}": v for k, v in values().items()}}
    v = stack_values(raw)
    assert "rayAuthToken" not in v
    assert "s3cret" not in parse_stack_config(v, "test", "prod").model_dump_json()


def test_token_auth_needs_a_ray_and_kuberay_that_have_it() -> None:
    v = values()
    v["ray"] = {**v["ray"], "version": "2.51.0"}
    assert "no token authentication" in problems_of(v)["ray.version"]
    v["ray"] = {**v["ray"], "version": "2.60.0", "operator": "helm", "helmChartVersion": "1.5.0"}
    assert "chart 1.6.0 or later" in problems_of(v)["ray.helmChartVersion"]
    # the token only in env variables would pass through any KubeRay, but the RayJob's status calls then get 401
    v["ray"]["authOptions"] = False
    assert "401" in problems_of(v)["ray.authOptions"]
