"""Value types (``config.value_types``): RRULE parsing, GKE's maintenance availability, the Ray token, the
authorized networks' union, the Ray version an image tag names, and strings and GKE versions the cloud refuses."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

from tpuray.components.catalog.images import image_ray_version
from tpuray.components.catalog.ip_ranges import MAX_PUBLIC_AUTHORIZED_ADDRESSES, public_addresses
from tpuray.components.catalog.maintenance_windows import MIN_MAINTENANCE_HOURS, maintenance_availability
from tpuray.components.config.value_types import (
    GceName,
    GkeVersion,
    ImageRef,
    MachineType,
    ProjectId,
    RayAuthToken,
    Rrule,
    SemVer,
    Zone,
)

_SAT = datetime(2026, 1, 3, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    "good", ["FREQ=WEEKLY;BYDAY=SA,SU", "FREQ=DAILY", "FREQ=MONTHLY;BYDAY=1SA", "FREQ=DAILY;INTERVAL=2"]
)
def test_rrules_gke_takes(good: str) -> None:
    assert TypeAdapter(Rrule).validate_python(good) == good


@pytest.mark.parametrize(
    "bad",
    [
        "FREQ=WEEKLY;BYDAY=XX",
        "FREQ=WEEKLY;FOO=1",
        "FREQ=DAILY;INTERVAL=0",
        "FREQ=WEEKLY;BYDAY=SA;BYDAY=SU",
        "FREQ=HOURLY",
        "BYDAY=SA;FREQ=WEEKLY",
        "FREQ=WEEKLY;BYDAY=",
        "FREQ=MONTHLY;BYMONTHDAY=32",
    ],
)
def test_rrules_that_are_errors(bad: str) -> None:
    with pytest.raises(ValidationError):
        TypeAdapter(Rrule).validate_python(bad)


@given(st.sampled_from(["MO", "TU", "WE", "TH", "FR", "SA", "SU", "XX", "S", "SAT", "1SA", "0SA"]))
def test_byday_values(day: str) -> None:
    ok = day in {"MO", "TU", "WE", "TH", "FR", "SA", "SU", "1SA"}
    try:
        TypeAdapter(Rrule).validate_python(f"FREQ=WEEKLY;BYDAY={day}")
        assert ok
    except ValidationError:
        assert not ok


def test_weekly_four_hour_window_gives_too_little_availability() -> None:
    weekly = maintenance_availability(_SAT, _SAT + timedelta(hours=4), "FREQ=WEEKLY;BYDAY=SA")
    assert weekly == timedelta(hours=16)  # four Saturdays in the worst 32 days
    assert weekly < timedelta(hours=MIN_MAINTENANCE_HOURS)
    weekend = maintenance_availability(_SAT, _SAT + timedelta(hours=6), "FREQ=WEEKLY;BYDAY=SA,SU")
    assert weekend >= timedelta(hours=MIN_MAINTENANCE_HOURS)  # the prod stack's window
    daily = maintenance_availability(_SAT, _SAT + timedelta(hours=4), "FREQ=DAILY")
    assert daily == timedelta(hours=4 * 32)


def test_ray_token_length() -> None:
    adapter = TypeAdapter(RayAuthToken)
    assert adapter.validate_python("a" * 32)
    for bad in ("", "short", "a" * 31, " " + "a" * 40, "a" * 40 + "\n"):
        with pytest.raises(ValidationError) as e:
            adapter.validate_python(bad)
        assert "aaaa" not in e.value.errors()[0]["msg"]  # the message never echoes the secret


@pytest.mark.parametrize(
    ("cidrs", "opened"),
    [
        (["0.0.0.0/1", "128.0.0.0/1"], True),
        (["0.0.0.0/0"], True),
        (["8.0.0.0/7"], True),
        (["10.0.0.0/8", "192.168.0.0/16", "172.16.0.0/12"], False),
        (["203.0.113.0/24", "198.51.100.7/32"], False),
        (["64.0.0.0/8"], False),
    ],
)
def test_authorized_networks_are_judged_by_their_union(cidrs: list[str], opened: bool) -> None:
    assert (public_addresses(cidrs) > MAX_PUBLIC_AUTHORIZED_ADDRESSES) == opened


def test_public_addresses_count_overlaps_once() -> None:
    assert public_addresses(["203.0.113.0/24", "203.0.113.0/25"]) == 256


@pytest.mark.parametrize(
    ("image", "version"),
    [
        ("rayproject/ray:2.60.0-py311", "2.60.0"),
        ("rayproject/ray:2.51.1", "2.51.1"),
        ("rayproject/ray:latest", None),
        ("us-docker.pkg.dev/p/r/worker:0.1.0", None),
        ("rayproject/ray@sha256:" + "a" * 64, None),
    ],
)
def test_image_ray_version(image: str, version: str | None) -> None:
    assert image_ray_version(image) == version


def test_the_configured_secret_token_is_checked_without_echo() -> None:
    from tpuray.components.config.value_types import checked_ray_token

    assert checked_ray_token("x" * 40) == "x" * 40
    for bad in ("", "tooshort"):
        with pytest.raises(ValueError, match="tpuray:rayAuthToken: the Ray token must be at least 32") as e:
            checked_ray_token(bad)
        assert bad == "" or bad not in str(e.value)


@pytest.mark.parametrize(
    ("kind", "good"),
    [
        (Zone, "us-east5-a"),
        (GceName, "net-1"),
        (ProjectId, "tpuray-proj"),
        (MachineType, "e2-standard-8"),
        (GkeVersion, "1.31.2-gke.1115000"),
        (ImageRef, "rayproject/ray:2.60.0-py312"),
    ],
)
@pytest.mark.parametrize("suffix", ["\n", "\r", "\x1b[0m", "\u2028", "\x00"])
def test_value_types_refuse_trailing_newlines_and_control_characters(kind: Any, good: str, suffix: str) -> None:
    adapter = TypeAdapter(kind)
    assert adapter.validate_python(good) == good
    with pytest.raises(ValidationError):
        adapter.validate_python(good + suffix)
    with pytest.raises(ValidationError):
        adapter.validate_python(good[:3] + suffix + good[3:])


@pytest.mark.parametrize("bad", ["1.99.0-gke.1", "01.031", "2.31", "1.031.2", "1.31.02", "1.31.2-gke.0", "1.3"])
def test_impossible_gke_versions_are_refused(bad: str) -> None:
    with pytest.raises(ValidationError, match="GKE version"):
        TypeAdapter(GkeVersion).validate_python(bad)


# A digit outside ASCII: Python's \d and str.isdigit take it (and int() reads "٣" as 3), the cloud does not.
@pytest.mark.parametrize(
    ("kind", "value", "said"),
    [
        (Zone, "us-east\u0665-a", "not a zone"),
        (SemVer, "1.\u0662.3", "not X.Y.Z"),
        (Rrule, "FREQ=MONTHLY;BYMONTHDAY=1\u0661", "BYMONTHDAY"),  # int() reads it as 11
        (Rrule, "FREQ=MONTHLY;BYDAY=1\u0661SA", "BYDAY"),
        (Rrule, "FREQ=DAILY;INTERVAL=\u0663", "INTERVAL must be a positive integer"),
        (Rrule, "FREQ=DAILY;INTERVAL=\u00b2", "INTERVAL must be a positive integer"),  # isdigit, yet int() fails
    ],
)
def test_a_digit_outside_ascii_is_refused_naming_the_form(kind: Any, value: str, said: str) -> None:
    with pytest.raises(ValidationError) as e:
        TypeAdapter(kind).validate_python(value)
    assert said in str(e.value)
