"""Cross-field rules in the config model: each names the field path and the valid form."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.stacks import minimal_values
from tpuray.components.config import ConfigError, parse_stack_config


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"cluster": {"masterAuthorizedNetworks": [{"cidr": "0.0.0.0/1"}, {"cidr": "128.0.0.0/1"}]}}, "masterAuth"),
        ({"cluster": {"masterAuthorizedNetworks": [{"cidr": "8.0.0.0/6"}]}}, "masterAuthorizedNetworks"),
        ({"ray": {"image": "rayproject/ray:2.51.0-py311"}}, "ray.image"),
        ({"ray": {"workerImage": "rayproject/ray:2.59.0"}}, "ray.workerImage"),
        ({"ray": {"operatorNamespace": "default"}}, "ray.operatorNamespace"),
        ({"ray": {"operatorNamespace": "ray"}}, "ray.operatorNamespace"),
        ({"kueue": {"namespace": "ray"}}, "kueue.namespace"),
        ({"kueue": {"namespace": "kube-system"}}, "kueue.namespace"),
        (
            {
                "maintenance": {
                    "window": {
                        "start": "2026-01-03T01:00:00Z",
                        "end": "2026-01-03T05:00:00Z",
                        "recurrence": "FREQ=WEEKLY;BYDAY=SA",
                    }
                }
            },
            "maintenance.window.recurrence",
        ),
        (
            {
                "maintenance": {
                    "window": {
                        "start": "2026-01-03T01:00:00Z",
                        "end": "2026-01-03T07:00:00Z",
                        "recurrence": "FREQ=WEEKLY;BYDAY=XX",
                    }
                }
            },
            "maintenance.window.recurrence",
        ),
        ({"zone": "us-east5-a\n"}, "zone"),
    ],
)
def test_refused(overrides: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse_stack_config(minimal_values(**overrides))
    assert field in str(e.value), str(e.value)


@pytest.mark.parametrize(
    "overrides",
    [
        {"cluster": {"masterAuthorizedNetworks": [{"cidr": "203.0.113.0/24"}, {"cidr": "10.0.0.0/8"}]}},
        {"ray": {"image": "rayproject/ray:2.60.0-py311", "workerImage": "us-docker.pkg.dev/p/r/worker:0.1.0"}},
        {"ray": {"image": "rayproject/ray@sha256:" + "a" * 64}},
        {"ray": {"operatorNamespace": "kuberay-system"}},
        {
            "maintenance": {
                "window": {
                    "start": "2026-01-03T01:00:00Z",
                    "end": "2026-01-03T07:00:00Z",
                    "recurrence": "FREQ=WEEKLY;BYDAY=SA,SU",
                }
            }
        },
    ],
)
def test_accepted(overrides: dict[str, Any]) -> None:
    parse_stack_config(minimal_values(**overrides))
