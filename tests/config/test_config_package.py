"""The config package's own seams: one validation path, the component value types it validates, the Pulumi loader."""

from __future__ import annotations

from typing import Any

import pytest

from tpuray.components.config import (
    CAPACITY_TYPES,
    AuthorizedNetwork,
    ConfigError,
    MaintenanceExclusion,
    MaintenanceWindow,
    StackConfig,
    parse_stack_config,
    pulumi_values,
    rules_of_valid_parts,
    stack_rules,
)
from tpuray.components.gke_cluster import AuthorizedNetwork as ComponentNetwork


def _stack(**extra: Any) -> dict[str, Any]:
    return {
        "project": "my-project-1",
        "region": "us-east5",
        "zone": "us-east5-a",
        "slicePools": [{"name": "a", "generation": "v5p", "topology": "2x2x1"}],
        **extra,
    }


def _problems(values: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(ConfigError) as e:
        parse_stack_config(values, stack="prod")
    return dict(e.value.problems)


def test_the_component_value_types_come_back_from_the_config_as_built_by_hand() -> None:
    cfg = parse_stack_config(
        _stack(
            cluster={"masterAuthorizedNetworks": [{"cidr": "198.51.100.0/24", "name": "ops"}]},
            maintenance={
                "window": {"start": "2026-01-03T02:00:00Z", "end": "2026-01-03T08:00:00Z", "recurrence": "FREQ=DAILY"},
                "exclusions": [{"name": "freeze", "start": "2026-12-20T00:00:00Z", "end": "2026-12-27T00:00:00Z"}],
            },
        )
    )
    assert AuthorizedNetwork is ComponentNetwork  # one declaration
    assert cfg.cluster.master_authorized_networks == [AuthorizedNetwork("198.51.100.0/24", "ops")]
    assert cfg.maintenance.window == MaintenanceWindow("2026-01-03T02:00:00Z", "2026-01-03T08:00:00Z", "FREQ=DAILY")
    assert cfg.maintenance.exclusions == [
        MaintenanceExclusion("freeze", "2026-12-20T00:00:00Z", "2026-12-27T00:00:00Z", "NO_MINOR_OR_NODE_UPGRADES")
    ]


def test_the_config_judges_the_component_value_types_with_paths() -> None:
    found = _problems(
        _stack(
            cluster={"masterAuthorizedNetworks": [{"cidr": "0.0.0.0/0"}, {"cidr": 10, "nmae": "x"}]},
            maintenance={
                "window": {"start": "2026-01-03T02:00:00Z", "end": "2026-01-03T03:00:00Z", "recurrence": "FREQ=DAILY"},
                "exclusions": [{"name": "x", "start": "2026-12-20T00:00:00Z", "end": "2026-12-19T00:00:00Z"}],
            },
        )
    )
    assert "every address" in found["cluster.masterAuthorizedNetworks[0].cidr"]
    assert "string" in found["cluster.masterAuthorizedNetworks[1].cidr"]  # strict: a number is not a CIDR
    assert "did you mean 'name'" in found["cluster.masterAuthorizedNetworks[1].nmae"]
    assert "at least 4 hours" in found["maintenance.window.end"]
    assert "not after start" in found["maintenance.exclusions[0].end"]


def test_an_unknown_key_of_a_capacity_class_names_its_keys() -> None:
    pool = {"name": "a", "generation": "v5p", "topology": "2x2x1", "capacity": {"type": "flex-start", "maxRun": "1h"}}
    found = _problems(_stack(slicePools=[pool]))
    assert "did you mean 'maxRunDuration'" in found["slicePools[0].capacity.maxRun"]
    bad = _problems(_stack(slicePools=[{**pool, "capacity": {"type": "paid"}}]))
    assert bad["slicePools[0].capacity.type"].endswith(", ".join(CAPACITY_TYPES))


def test_an_invalid_stack_runs_the_same_rules_over_its_valid_parts() -> None:
    # the zone rule needs only region and zone; a type error in the workload must not hide it
    values = _stack(zone="europe-west4-a", workload={"steps": "many"})
    with pytest.raises(ConfigError) as e:
        parse_stack_config(values, stack="prod")
    zone = [m for p, m in e.value.problems if p == "zone" and "not in region" in m]
    assert zone and "workload.steps" in dict(e.value.problems)
    assert ("zone", zone[0]) in rules_of_valid_parts(values, "prod")
    valid = parse_stack_config(_stack())
    assert stack_rules(valid.view("dev")) == []
    assert [p.path for p in stack_rules(valid.view("prod"))] == ["cluster.masterAuthorizedNetworks"]


def test_pulumi_values_decode_json_and_name_each_bad_key() -> None:
    raw = {"project": "p", "cluster": '{"name": "c"}', "slicePools": "[{", "network": "nope"}
    with pytest.raises(ConfigError) as e:
        pulumi_values(raw, {"project"}, "stack dev")
    assert [p for p, _ in e.value.problems] == ["slicePools", "network"] and e.value.source == "stack dev"
    assert pulumi_values({"project": "p", "cluster": '{"name": "c"}'}, {"project"}) == {
        "project": "p",
        "cluster": {"name": "c"},
    }


def test_both_views_of_a_valid_stack_are_the_same_and_hold_every_section_the_rules_read() -> None:
    """The view of a valid config and the view of its raw values are built from the same section list, derived
    from StackView's own fields, each section's model the one StackConfig declares."""
    from tpuray.components.config.stack_view import view_of_values, view_sections, view_sections_of

    for name, model in view_sections().items():
        assert StackConfig.model_fields[name].annotation is model, name

    values = _stack()
    cfg = parse_stack_config(values)
    assert set(view_sections_of(cfg)) == {
        "cluster", "network", "checkpoints", "ray", "workload", "kueue", "maintenance", "monitoring", "startup"
    }  # fmt: skip
    assert view_of_values(values, "dev") == cfg.view("dev")
