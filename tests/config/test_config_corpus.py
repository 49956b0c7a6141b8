"""A property-based corpus of invalid stacks, one strategy per validation rule, checked through the CLI.

Every generated stack file is run through ``tpuray config check`` in this process: it must exit 1, name the
offending path, print no traceback and stay under 64 KB of output. The sources of the rules are cited where they
are written (``tpuray.components.config.value_types`` and ``tpuray.components.config``). The derived names (service
account ids, the default bucket, label values) are checked the other way round: every valid input derives a name
the API accepts. ``TPURAY_CORPUS_REPORT=1`` prints the figures (stacks tried, rejected, tracebacks) at the end.
"""

from __future__ import annotations

import codecs
import contextlib
import io
import os
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tpuray.components.catalog.cloud_limits import ACCELERATOR_MACHINE_SERIES, CPU_MACHINE_SERIES
from tpuray.components.catalog.container_paths import RESERVED_PATHS
from tpuray.components.catalog.resource_names import (
    GCP_LABEL_VALUE,
    K8S_LABEL_VALUE,
    SERVICE_ACCOUNT_ID,
    derived_bucket_name,
    label_value,
    service_account_id,
)
from tpuray.components.catalog.tpu_locations import TPU_REGIONS, TPU_ZONES, zones_of
from tpuray.components.cli import main
from tpuray.components.config import load_stack_file
from tpuray.components.config.value_types import bucket_name_problem

ROOT = Path(__file__).resolve().parents[2]
STACK_TEXT = {s: (ROOT / f"Pulumi.{s}.yaml").read_text() for s in ("dev", "prod")}
MAX_OUTPUT = 64 * 1024
FIGURES: Counter[str] = Counter()
# Bounded per rule so the whole corpus stays a few seconds on a shared machine.
CORPUS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])

Mutation = tuple[str, Callable[[dict[str, Any]], None]]
"""The path the error must name, and an edit of the stack's ``config:`` values (``tpuray:`` keys stripped)."""


@pytest.fixture(scope="module", autouse=True)
def report() -> Iterator[None]:
    yield
    if os.environ.get("TPURAY_CORPUS_REPORT"):
        print(f"\nconfig corpus: {dict(sorted(FIGURES.items()))}")


def run_check(text: str | bytes) -> tuple[int, str]:
    """``tpuray config check`` of a stack file holding ``text``: exit code and everything printed."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "Pulumi.corpus.yaml"
        if isinstance(text, bytes):
            path.write_bytes(text)
        else:
            path.write_text(text)
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(["config", "check", str(path)])
            except SystemExit as e:  # argparse
                code = int(e.code or 0)
    return code, out.getvalue() + err.getvalue()


def assert_rejected(text: str | bytes, path: str, hint: str = "") -> None:
    code, output = run_check(text)
    FIGURES["tried"] += 1
    FIGURES["rejected"] += code == 1
    FIGURES["tracebacks"] += "Traceback" in output
    assert "Traceback" not in output, output[-2000:]
    assert code == 1, output[-2000:]
    assert len(output.encode()) < MAX_OUTPUT, len(output)
    assert f"  {path}: " in output or f"  {path}." in output, (path, output[-2000:])
    assert hint in output, (hint, output[-2000:])


def stack_text(stack: str, edit: Callable[[dict[str, Any]], None]) -> str:
    doc = yaml.safe_load(STACK_TEXT[stack])
    values = {k.removeprefix("tpuray:"): v for k, v in doc["config"].items()}
    edit(values)
    doc["config"] = {f"tpuray:{k}": v for k, v in values.items()}
    return yaml.safe_dump(doc, sort_keys=False)


def setter(*path: str | int, value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(values: dict[str, Any]) -> None:
        node: Any = values
        for part in path[:-1]:
            node = node.setdefault(part, {}) if isinstance(part, str) and isinstance(node, dict) else node[part]
        node[path[-1]] = value

    return edit


def check(stack: str, m: Mutation, hint: str = "") -> None:
    path, edit = m
    assert_rejected(stack_text(stack, edit), path, hint)


stacks = st.sampled_from(["dev", "prod"])
junk = st.text(alphabet=st.characters(codec="utf-8"), min_size=0, max_size=80)


def _not(rule: Callable[[str], bool]) -> Callable[[str], bool]:
    return lambda v: not rule(v)


# ---- names ---------------------------------------------------------------------------------------------------
bad_buckets = st.one_of(
    st.sampled_from(["ab", "a" * 64, "Upper-case", "goog-ckpt", "my-google-ckpt", "my-g00gle-x", "-x-", "a..b"]),
    st.sampled_from(["192.168.5.4", "bucket_", "dots.need.verification", "sp ace", "ünï"]),
    junk.filter(lambda v: bucket_name_problem(v) is not None),
)


@CORPUS
@given(stacks, bad_buckets)
def test_bucket_names(stack: str, name: str) -> None:
    check(stack, ("checkpoints.bucket", setter("checkpoints", "bucket", value=name)))


@CORPUS
@given(stacks, st.sampled_from(["google", "g00gle", "goog1e"]), st.text("abcdefgh", max_size=8))
def test_the_derived_bucket_name_is_checked_too(stack: str, word: str, suffix: str) -> None:
    """A cluster name that is fine for GKE but puts 'google' into the default bucket name."""
    name = f"x{word}{suffix}"[:40]
    check(stack, ("checkpoints.bucket", setter("cluster", "name", value=name)), "default name")


@CORPUS
@given(stacks, st.sampled_from(["mars", "US-EAST5-", "us east5", "europe", "nam5x", "u", "us-east5-a "]) | junk)
def test_bucket_locations(stack: str, location: str) -> None:
    from tpuray.components.config.value_types import _bucket_location

    if isinstance(location, str) and _bucket_location(location) is None:
        return  # junk that happens to be a location
    check(stack, ("checkpoints.location", setter("checkpoints", "location", value=location)))


pool_names = st.sampled_from(["Upper", "1abc", "a_b", "ends-", "x" * 38, "with space", "ünï"]) | junk.filter(
    lambda v: not (v[:1].islower() and v.isascii() and v.replace("-", "").isalnum() and v.islower() and len(v) < 38)
)


@CORPUS
@given(stacks, pool_names)
def test_pool_names(stack: str, name: str) -> None:
    def edit(values: dict[str, Any]) -> None:
        values["slicePools"][0]["name"] = name
        values["workload"].pop("slicePool", None)

    check(stack, ("slicePools[0].name", edit))


@CORPUS
@given(st.integers(0, 1))
def test_derived_node_pool_names_collide(i: int) -> None:
    """prod's v5p pool (2 multi-host slices) derives v5p-train-0 and -1; a single-host pool of that name collides."""

    def edit(values: dict[str, Any]) -> None:
        values["slicePools"][1].update({"name": f"v5p-train-{i}", "topology": "2x2", "capacity": {"type": "spot"}})

    check("prod", ("slicePools[1].name", edit), "also used by")


@CORPUS
@given(stacks)
def test_a_pool_named_like_the_system_pool(stack: str) -> None:
    def edit(values: dict[str, Any]) -> None:
        values["slicePools"][0]["name"] = "system"  # single-host: its node pool is "system" (multi-host: system-0)
        values["slicePools"][0]["topology"] = "2x2x1" if stack == "prod" else "2x2"
        values["workload"]["slicePool"] = "system"

    check(stack, ("slicePools[0].name", edit), "system node pool")


network_names = st.sampled_from(["Net", "9net", "net_1", "n" * 64, "net-", ""]) | junk.filter(
    lambda v: not (v[:1].islower() and v.isascii() and v.replace("-", "").isalnum() and v.islower())
)


@CORPUS
@given(stacks, st.sampled_from(["name", "subnetwork", "podsRangeName", "servicesRangeName"]), network_names)
def test_network_and_range_names(stack: str, key: str, name: str) -> None:
    def edit(values: dict[str, Any]) -> None:
        net = values.setdefault("network", {})
        net.update({"create": False, "name": "shared", "subnetwork": "shared-sub"})
        net[key] = name

    check(stack, (f"network.{key}", edit))


@CORPUS
@given(stacks, st.sampled_from(["Res", "res_1", "r" * 64, "-r", ""]), st.sampled_from([None, "UPPER", "short"]))
def test_reservation_names_and_projects(stack: str, name: str, project: str | None) -> None:
    capacity = {"type": "reservation", "name": name} if project is None else {"type": "reservation", "name": "ok"}
    if project is not None:
        capacity["project"] = project
    where = "slicePools[0].capacity.name" if project is None else "slicePools[0].capacity.project"

    def edit(values: dict[str, Any]) -> None:
        values["slicePools"][0]["capacity"] = capacity
        values["slicePools"][0]["autoscaling"] = {"enabled": True, "minSlices": 0}

    check(stack, (where, edit))


# ---- zones and regions ------------------------------------------------------------------------------------------
@CORPUS
@given(stacks, st.sampled_from([" us-east5-a", "us-east5-a ", "us-east5", "us-east5-ab", "US-EAST5-A", "useast5a"]))
def test_zones(stack: str, zone: str) -> None:
    check(stack, ("zone", setter("zone", value=zone)))


@CORPUS
@given(st.sampled_from(["us-west4-b", "us-west4-c"]))
def test_a_zonal_cluster_keeps_its_pools_in_its_zone(zone: str) -> None:
    check("dev", ("slicePools[0].zone", setter("slicePools", 0, "zone", value=zone)), "zonal cluster")


@CORPUS
@given(st.sampled_from(["2x2", "2x4", "1x1"]))
def test_a_single_host_pool_of_a_regional_cluster_needs_a_zone(topology: str) -> None:
    def edit(values: dict[str, Any]) -> None:
        values["zone"] = ""
        pool = {k: v for k, v in values["slicePools"][1].items() if k != "zone"}
        values["slicePools"] = [{**pool, "topology": topology}]
        values["workload"]["slicePool"] = values["slicePools"][0]["name"]

    check("prod", ("slicePools[0].zone", edit), "zonal")


@CORPUS
@given(stacks, st.sampled_from(["europe-west4-a", "asia-east1-b"]))
def test_pool_zones_in_another_region(stack: str, zone: str) -> None:
    check(stack, ("slicePools[0].zone", setter("slicePools", 0, "zone", value=zone)), "not in region")


# ---- ranges -----------------------------------------------------------------------------------------------------
bad_ranges = st.sampled_from(
    [
        ("subnetCidr", "10.0.0.0/30", "between"),
        ("subnetCidr", "8.8.8.0/24", "private range"),
        ("podsCidr", "10.16.0.0/25", "between"),
        ("podsCidr", "10.0.0.0/8", "between"),
        ("podsCidr", "34.0.0.0/14", "private range"),
        ("servicesCidr", "10.20.0.0/28", "between"),
        ("servicesCidr", "10.20.0.0/15", "between"),
        ("servicesCidr", "10.0.0.0/20", "overlaps"),
        ("podsCidr", "10.0.0.1/14", "host bits"),
        ("subnetCidr", "fd00::/64", "IPv4"),
        ("podsCidr", "10.16.0.0/22", "holds"),
    ]
)


@CORPUS
@given(stacks, bad_ranges)
def test_subnet_and_secondary_ranges(stack: str, bad: tuple[str, str, str]) -> None:
    key, cidr, hint = bad
    if hint == "holds" and stack == "dev":
        cidr = "10.16.0.0/24"  # dev grows to 2 nodes: one /24 holds 1
    check(stack, (f"network.{key}", setter("network", key, value=cidr)), hint)


@CORPUS
@given(stacks, st.sampled_from(["pods", "services"]))
def test_range_names_differ(stack: str, name: str) -> None:
    def edit(values: dict[str, Any]) -> None:
        values["network"] = {"podsRangeName": name, "servicesRangeName": name}

    check(stack, ("network.servicesRangeName", edit))


@CORPUS
@given(stacks, st.integers(51, 120))
def test_master_authorized_networks_limit(stack: str, n: int) -> None:
    private = stack == "prod"
    n = n if not private else n + 50
    nets = [{"cidr": f"203.0.{i // 256}.{i % 256}/32"} for i in range(n)]

    def edit(values: dict[str, Any]) -> None:
        values["cluster"]["masterAuthorizedNetworks"] = nets
        values["cluster"]["privateNodes"] = private

    check(stack, ("cluster.masterAuthorizedNetworks", edit), "at most")


# ---- Kubernetes values --------------------------------------------------------------------------------------------
bad_quantities = st.sampled_from(["", "four", "4 cores", "-1", "0", "1e100", "4x", "64GB", "0.01", "1Ti0"]) | junk


@CORPUS
@given(stacks, st.sampled_from(["headCpu", "workerCpu", "headMemory", "workerMemory"]), bad_quantities)
def test_kubernetes_quantities(stack: str, key: str, value: str) -> None:
    from decimal import Decimal

    from tpuray.components.catalog.quantity import parse_quantity

    try:  # skip junk that is a valid quantity in range
        amount = parse_quantity(value)
        if ("Cpu" in key and Decimal("0.1") <= amount <= 1000) or ("Memory" in key and 2**27 <= amount <= 2**44):
            return
    except ValueError:
        pass
    check(stack, (f"ray.{key}", setter("ray", key, value=value)))


bad_images = st.sampled_from(
    ["", "Ray:2.60", "rayproject/ray:", "ray project/ray", "rayproject/ray@sha256:xyz", "ray/UPPER", "ray:tag:two"]
)


@CORPUS
@given(stacks, st.sampled_from(["image", "workerImage"]), bad_images)
def test_container_images(stack: str, key: str, image: str) -> None:
    check(stack, (f"ray.{key}", setter("ray", key, value=image)))


@CORPUS
@given(stacks, st.integers(max_value=-1) | st.integers(min_value=86401) | st.sampled_from(["60", 1.5, True, None]))
def test_job_ttl_out_of_range_or_not_an_int(stack: str, ttl: Any) -> None:
    def edit(values: dict[str, Any]) -> None:
        values.setdefault("ray", {})["jobMode"] = "ephemeral"
        values["ray"]["ttlSecondsAfterFinished"] = ttl
        values.setdefault("kueue", {})["enabled"] = True

    if ttl is None:  # an explicit null is "unset": the default applies
        return
    check(stack, ("ray.ttlSecondsAfterFinished", edit))


@CORPUS
@given(stacks, st.integers(0, 86400))
def test_job_ttl_on_a_shared_cluster(stack: str, ttl: int) -> None:
    """The ttl deletes the job's own cluster: on the shared cluster it would do nothing, so it is refused."""
    check(stack, ("ray.ttlSecondsAfterFinished", setter("ray", "ttlSecondsAfterFinished", value=ttl)), "ephemeral")


@CORPUS
@given(stacks, st.sampled_from(["checkpoints", "/", "/dev/shm", "/dev/shm/x", "/dev", "/a/../b", "/c:d", " /x"]))
def test_mount_paths(stack: str, path: str) -> None:
    check(stack, ("checkpoints.mountPath", setter("checkpoints", "mountPath", value=path)))


reserved_mounts = st.sampled_from(RESERVED_PATHS).flatmap(
    lambda r: st.sampled_from(
        [r.path, *("/".join(r.path.split("/")[:i]) for i in range(2, r.path.count("/") + 1))]
        + ([f"{r.path}/x", f"{r.path}/a/b"] if r.beneath else [])
    )
)


@CORPUS
@given(stacks, reserved_mounts, st.sampled_from(["checkpoints", "data"]))
def test_mount_paths_the_image_or_ray_use(stack: str, path: str, which: str) -> None:
    """Every path catalog.container_paths reserves, a directory above it, and (where it says so) one inside."""
    if which == "checkpoints":
        check(stack, ("checkpoints.mountPath", setter("checkpoints", "mountPath", value=path)), "would hide")
    else:
        mount = {"bucket": "tpuray-corpus-data", "mountPath": path}
        check(stack, ("startup.dataMount.mountPath", setter("startup", "dataMount", value=mount)), "would hide")


@CORPUS
@given(stacks, st.from_regex(r"(/[a-z][a-z0-9]{0,6}){0,2}", fullmatch=True))
def test_a_data_mount_at_or_inside_the_checkpoint_mount(stack: str, tail: str) -> None:
    def edit(values: dict[str, Any]) -> None:
        base = values.get("checkpoints", {}).get("mountPath", "/checkpoints")
        values.setdefault("startup", {})["dataMount"] = {"bucket": "tpuray-corpus-data", "mountPath": base + tail}

    check(stack, ("startup.dataMount.mountPath", edit))


@CORPUS
@given(stacks, st.integers(min_value=28, max_value=1 << 20) | st.just(-1))
def test_a_memory_file_cache_larger_than_its_node(stack: str, gib: int) -> None:
    """More than any e2-standard-8 system node offers its pods (27999Mi), so the head cannot hold it."""
    mount = {"fileCacheCapacity": "-1" if gib == -1 else f"{gib}Gi", "fileCacheMedium": "memory"}
    path = "startup.checkpointMount.fileCacheCapacity"
    check(stack, (path, setter("startup", "checkpointMount", value=mount)), "fileCacheMedium: disk")


@CORPUS
@given(stacks, st.sampled_from(["headCpu", "headMemory"]), st.integers(min_value=8, max_value=512))
def test_a_head_larger_than_its_system_node(stack: str, key: str, amount: int) -> None:
    value = str(amount) if key == "headCpu" else f"{amount * 4}Gi"
    check(stack, (f"ray.{key}", setter("ray", key, value=value)), "cluster.systemMachineType")


@CORPUS
@given(stacks, st.sampled_from(["Ray", "ray_ns", "r" * 64, "-ray"]))
def test_namespaces(stack: str, ns: str) -> None:
    check(stack, ("ray.namespace", setter("ray", "namespace", value=ns)))


# ---- versions and machine types ---------------------------------------------------------------------------------
@CORPUS
@given(stacks, st.sampled_from(["latest", "1.31.2-gke", " 1.31.2", "1.31.2-gke.1 ", "v1.31", "1", "1.31.2.4"]))
def test_gke_version_strings(stack: str, version: str) -> None:
    check(stack, ("cluster.minMasterVersion", setter("cluster", "minMasterVersion", value=version)))


@CORPUS
@given(stacks, st.sampled_from(["1.30", "1.32.9", "1.32"]))
def test_gke_versions_that_cannot_serve_the_pools(stack: str, version: str) -> None:
    if stack == "dev":
        version = "1.29.9"  # dev's v5e needs only tpuray's floor, 1.30.0-gke.1747000 (topology.MIN_GKE_VERSION)
    check(stack, ("cluster.minMasterVersion", setter("cluster", "minMasterVersion", value=version)), "older than")


@CORPUS
@given(stacks, st.sampled_from(["E2-standard-8", "e2 standard", "e2_standard_8", "ct5lp-hightpu-4t", "x" * 70]))
def test_system_machine_types(stack: str, machine: str) -> None:
    check(stack, ("cluster.systemMachineType", setter("cluster", "systemMachineType", value=machine)))


# ---- capacity facts -----------------------------------------------------------------------------------------------
@CORPUS
@given(st.sampled_from([{"type": "flex-start", "maxRunDuration": "6h"}, {"type": "queued"}]))
def test_flex_start_does_not_serve_v4(capacity: dict[str, Any]) -> None:
    def edit(values: dict[str, Any]) -> None:
        pool = values["slicePools"][0]
        pool.update({"generation": "v4", "topology": "2x2x2", "capacity": capacity})
        pool["autoscaling"] = {"enabled": True, "minSlices": 0}

    check("prod", ("slicePools[0].capacity.type", edit), "v4")


# ---- sane bounds ------------------------------------------------------------------------------------------------
@CORPUS
@given(
    stacks,
    st.sampled_from(
        [
            ("learningRate", float("inf")),
            ("learningRate", float("nan")),
            ("learningRate", 1e6),
            ("learningRate", -0.1),
            ("steps", 10**12),
            ("batchSizePerChip", 10**7),
            ("seqLen", 10**9),
            ("dataset", ""),
            ("dataset", " padded "),
        ]
    ),
)
def test_values_that_deploy_but_cannot_run(stack: str, kv: tuple[str, Any]) -> None:
    key, value = kv
    check(stack, (f"workload.{key}", setter("workload", key, value=value)))


@CORPUS
@given(stacks, st.sampled_from([("vocabSize", 10**9), ("layers", 10**5), ("dModel", 10**7), ("heads", 4096)]))
def test_model_sizes(stack: str, kv: tuple[str, int]) -> None:
    key, value = kv
    check(stack, (f"workload.model.{key}", setter("workload", "model", key, value=value)))


@CORPUS
@given(stacks, st.sampled_from([-1, 10**6]))
def test_retention_days(stack: str, days: int) -> None:
    check(stack, ("checkpoints.retentionDays", setter("checkpoints", "retentionDays", value=days)))


# ---- keys ---------------------------------------------------------------------------------------------------------
@CORPUS
@given(
    stacks,
    st.sampled_from(
        [
            ("slice_pools", "slicePools"),
            ("slicepools", "slicePools"),
            ("checkpoint", "checkpoints"),
            ("clustr", "cluster"),
            ("workloads", "workload"),
        ]
    ),
)
def test_unknown_keys_name_the_nearest(stack: str, keys: tuple[str, str]) -> None:
    wrong, right = keys

    def edit(values: dict[str, Any]) -> None:
        values[wrong] = values.pop(right, {})

    check(stack, (wrong, edit), f"did you mean '{right}'")


# ---- YAML as Pulumi reads it --------------------------------------------------------------------------------------
def _bomb(levels: int) -> str:
    lines = ["config:", "  tpuray:project: tpuray-dev-project", '  tpuray:bomb0: &a0 ["lol","lol","lol","lol"]']
    for i in range(1, levels):
        lines.append(f"  tpuray:bomb{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]")
    return "\n".join(lines) + "\n"


@CORPUS
@given(
    st.one_of(
        st.integers(6, 12).map(_bomb),
        st.integers(70, 3000).map(lambda n: "config:\n  tpuray:project: " + "[" * n + "]" * n + "\n"),
        st.sampled_from(["dev", "prod"]).map(lambda s: STACK_TEXT[s] + "  tpuray:region: us-east1\n"),
        st.binary(min_size=1, max_size=40).map(lambda b: STACK_TEXT["dev"].encode() + b"\n# \xff\xfe" + b),
        st.just("config: [unclosed\n"),
        st.just("- a list\n- not a stack\n"),
    )
)
def test_yaml_pulumi_would_refuse(text: str | bytes) -> None:
    not_a_stack = isinstance(text, str) and text.startswith("- ")
    assert_rejected(text, "config" if not_a_stack else "(file)")


@CORPUS
@given(stacks, st.sampled_from([(codecs.BOM_UTF16_LE, "utf-16-le"), (codecs.BOM_UTF16_BE, "utf-16-be")]), junk)
def test_a_stack_saved_as_utf16_is_named_so(stack: str, encoding: tuple[bytes, str], tail: str) -> None:
    """PowerShell's ``>`` saves UTF-16 with a byte order mark: the one reader (data_file) names the encoding."""
    bom, codec = encoding
    text = STACK_TEXT[stack] + "# " + " ".join(tail.split()) + "\n"
    assert_rejected(bom + text.encode(codec, errors="surrogatepass"), "(file)", "UTF-16")


@CORPUS
@given(stacks, st.sampled_from(["project", "region", "cluster", "slicePools"]))
def test_a_key_with_and_without_its_namespace(stack: str, key: str) -> None:
    """``cluster`` and ``tpuray:cluster`` are one Pulumi config key: giving both is ambiguous."""
    doc = yaml.safe_load(STACK_TEXT[stack])
    doc["config"][key] = doc["config"][f"tpuray:{key}"]
    assert_rejected(yaml.safe_dump(doc, sort_keys=False), key, "given twice")


# ---- any edit at any place: an answer, never a crash --------------------------------------------------------------
def _places(node: Any, prefix: tuple[str | int, ...] = ()) -> list[tuple[str | int, ...]]:
    out = [prefix] if prefix else []
    if isinstance(node, dict):
        for k, v in node.items():
            out += _places(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _places(v, (*prefix, i))
    return out


anything = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stacks, st.data())
def test_any_value_anywhere_is_answered_without_a_traceback(stack: str, data: st.DataObject) -> None:
    doc = yaml.safe_load(STACK_TEXT[stack])
    place = data.draw(st.sampled_from(_places(doc["config"])))
    node: Any = doc["config"]
    for part in place[:-1]:
        node = node[part]
    node[place[-1]] = data.draw(anything)
    code, output = run_check(yaml.safe_dump(doc))
    FIGURES["random edits"] += 1
    assert code in (0, 1) and "Traceback" not in output and len(output.encode()) < MAX_OUTPUT, output[-2000:]


# ---- derived names: every valid input derives an accepted name ---------------------------------------------------
cluster_names = st.from_regex(r"\A[a-z](?:[-a-z0-9]{0,38}[a-z0-9])?\Z", fullmatch=True)
project_ids = st.from_regex(r"\A[a-z][-a-z0-9]{4,28}[a-z0-9]\Z", fullmatch=True).filter(lambda p: "google" not in p)


@settings(max_examples=200, deadline=None)
@given(cluster_names, st.sampled_from(["nodes", "ray"]))
def test_service_account_ids_are_6_to_30(cluster: str, role: str) -> None:
    assert SERVICE_ACCOUNT_ID.match(service_account_id(cluster, role))


@settings(max_examples=200, deadline=None)
@given(project_ids, cluster_names.filter(lambda c: "goog" not in c and "g00g" not in c and "goo" not in c))
def test_the_default_bucket_is_a_bucket_name(project: str, cluster: str) -> None:
    name = derived_bucket_name(project, cluster)
    assert len(name) <= 63
    assert bucket_name_problem(name) is None or "google" in name.replace("0", "o").replace("1", "l")


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=150))
def test_stack_names_become_valid_label_values(stack: str) -> None:
    value = label_value(stack)
    assert GCP_LABEL_VALUE.match(value) and K8S_LABEL_VALUE.match(value)


def test_the_shipped_stacks_still_pass() -> None:
    for text in STACK_TEXT.values():
        code, output = run_check(text)
        assert code == 0, output


def test_the_rejected_copy_keeps_everything_else_valid() -> None:
    """The corpus edits one thing: the unedited copy of each stack passes, so a rejection is the edit's."""
    for stack in STACK_TEXT:
        code, output = run_check(stack_text(stack, lambda values: None))
        assert code == 0, output


# ---- strings, versions, networks, images, namespaces, maintenance --------------------------------------
control_chars = st.sampled_from(["\n", "\r", "\t", "\x1b", "\x00", "\u2028", "\u202e", "\x7f"])


@CORPUS
@given(stacks, st.sampled_from([("zone",), ("cluster", "systemMachineType"), ("ray", "image")]), control_chars)
def test_control_characters_anywhere(stack: str, path: tuple[str, ...], ch: str) -> None:
    doc = yaml.safe_load(STACK_TEXT[stack])
    values = {k.removeprefix("tpuray:"): v for k, v in doc["config"].items()}
    node: Any = values
    for part in path[:-1]:
        node = node.setdefault(part, {})
    good = node.get(path[-1]) or {"zone": "us-east5-a", "systemMachineType": "e2-standard-8"}.get(
        path[-1], "rayproject/ray:2.60.0-py311"
    )
    check(stack, (".".join(path), setter(*path, value=good + ch)))


@CORPUS
@given(
    stacks,
    st.sampled_from(["1.99.0-gke.1", "01.031", "2.31", "1.31.02", "1.31.2-gke.0", "1.3"])
    | st.from_regex(r"[02-9]\.[0-9]{1,2}\.[0-9]", fullmatch=True),
)
def test_impossible_gke_versions(stack: str, version: str) -> None:
    check(stack, ("cluster.minMasterVersion", setter("cluster", "minMasterVersion", value=version)))


@CORPUS
@given(stacks, st.integers(1, 7))
def test_authorized_networks_whose_union_is_too_public(stack: str, prefix: int) -> None:
    # 2**prefix pieces of prefix length `prefix`: the union is the whole internet whatever the split
    nets = [
        {"cidr": f"{i << (32 - prefix) >> 24 & 255}.{i << (32 - prefix) >> 16 & 255}.0.0/{prefix}"}
        for i in range(2**prefix)
    ]
    edit = setter("cluster", "masterAuthorizedNetworks", value=nets[:50])
    if 2**prefix > 50:
        edit = setter("cluster", "masterAuthorizedNetworks", value=[{"cidr": "0.0.0.0/1"}, {"cidr": "128.0.0.0/1"}])
    check(stack, ("cluster.masterAuthorizedNetworks", edit))


@CORPUS
@given(
    stacks, st.sampled_from(["image", "workerImage"]), st.from_regex(r"2\.(5[0-9]|[1-4][0-9])\.[0-9]", fullmatch=True)
)
def test_image_tags_that_disagree_with_ray_version(stack: str, key: str, version: str) -> None:
    check(stack, (f"ray.{key}", setter("ray", key, value=f"rayproject/ray:{version}-py311")))


@CORPUS
@given(stacks, st.sampled_from(["default", "ray"]), st.sampled_from(["operatorNamespace", "kueue"]))
def test_namespaces_shared_with_ray_or_the_system(stack: str, ns: str, which: str) -> None:
    if which == "kueue":
        check(stack, ("kueue.namespace", setter("kueue", "namespace", value=ns)))
    else:
        check(stack, ("ray.operatorNamespace", setter("ray", "operatorNamespace", value=ns)))


rrules = st.sampled_from(
    [
        "FREQ=WEEKLY;BYDAY=XX",
        "FREQ=DAILY;INTERVAL=0",
        "FREQ=WEEKLY;FOO=1",
        "FREQ=WEEKLY;BYDAY=SA;BYDAY=SU",
        "FREQ=WEEKLY;BYDAY=SA",
        "FREQ=MONTHLY;BYDAY=1SA",
        "weekly",
    ]
)


@CORPUS
@given(stacks, rrules)
def test_maintenance_recurrences_gke_refuses(stack: str, rule: str) -> None:
    window = {"start": "2026-01-03T01:00:00Z", "end": "2026-01-03T06:00:00Z", "recurrence": rule}
    check(stack, ("maintenance.window.recurrence", setter("maintenance", "window", value=window)))


# ---- values nothing knew (tpu_locations, cloud_limits) --------------------------------------------------
no_tpu_regions = st.from_regex(r"[a-z]{2,10}-[a-z]{4,9}[1-9]", fullmatch=True).filter(lambda r: r not in TPU_REGIONS)


@CORPUS
@given(stacks, no_tpu_regions)
def test_regions_without_tpus(stack: str, region: str) -> None:
    def edit(values: dict[str, Any]) -> None:
        values["region"] = region
        values["zone"] = f"{region}-a"

    check(stack, ("region", edit), "no Cloud TPU zone")


@CORPUS
@given(st.sampled_from(sorted(set(TPU_ZONES) - set(zones_of("v5e")))))
def test_zones_that_do_not_offer_the_pool_generation(zone: str) -> None:
    """dev's v5e pool takes the stack's zone: a TPU zone without v5e is refused at ``zone``, naming the pool."""

    def edit(values: dict[str, Any]) -> None:
        values["region"], values["zone"] = zone.rsplit("-", 1)[0], zone

    check("dev", ("zone", edit), "does not offer TPU v5e")


@CORPUS
@given(stacks, st.from_regex(r"[a-z]{1,3}[0-9]?-standard-8", fullmatch=True))
def test_system_machine_series_that_do_not_exist(stack: str, machine: str) -> None:
    if machine.split("-", 1)[0] in CPU_MACHINE_SERIES | ACCELERATOR_MACHINE_SERIES:
        return
    check(stack, ("cluster.systemMachineType", setter("cluster", "systemMachineType", value=machine)), "series")


@CORPUS
@given(stacks, st.integers(0, 14), st.integers(0, 9))
def test_kueue_charts_that_do_not_serve_v1beta2(stack: str, minor: int, patch: int) -> None:
    version = f"0.{minor}.{patch}"
    check(stack, ("kueue.chartVersion", setter("kueue", "chartVersion", value=version)), "v1beta2")


@CORPUS
@given(stacks, st.sampled_from(["NO_MINOR_UPGRADES", "NO_MINOR_OR_NODE_UPGRADES"]), st.integers(1, 400))
def test_minor_exclusions_longer_than_any_support(stack: str, scope: str, extra_days: int) -> None:
    end = datetime(2027, 3, 3, tzinfo=UTC) + timedelta(days=extra_days)  # 14 months after 2026-01-03, and more
    exclusion = {"name": "hold", "start": "2026-01-03T00:00:00Z", "end": f"{end:%Y-%m-%dT%H:%M:%SZ}", "scope": scope}
    check(stack, ("maintenance.exclusions[0].end", setter("maintenance", "exclusions", value=[exclusion])), "months")


@CORPUS
@given(stacks, st.sampled_from([None, True, False]), st.sampled_from(["shared", "ephemeral"]))
def test_the_gke_ray_addon_with_the_stacks_rayjob(stack: str, auth_options: bool | None, job_mode: str) -> None:
    """Every stack renders a training RayJob (shared or ephemeral), whose status KubeRay reads with the
    token only through authOptions, which an add-on KubeRay older than 1.6 drops: the add-on is refused at
    ``ray.operator`` whatever ``authOptions`` says (ephemeral stacks get Kueue, which that mode needs)."""

    def edit(values: dict[str, Any]) -> None:
        ray = values.setdefault("ray", {})
        ray.update({"operator": "addon", "jobMode": job_mode})
        if auth_options is not None:
            ray["authOptions"] = auth_options
        if job_mode == "ephemeral":
            values["kueue"] = {"enabled": True}

    check(stack, ("ray.operator", edit), "ray.operator: helm")


@CORPUS
@given(stacks, st.sampled_from(["1.6.0", "1.7.0", "1.7.1"]))
def test_the_token_in_env_variables_only(stack: str, chart: str) -> None:
    """The Helm operator without authOptions: the RayJob's status calls carry no token either."""

    def edit(values: dict[str, Any]) -> None:
        values.setdefault("ray", {}).update({"authOptions": False, "helmChartVersion": chart})

    check(stack, ("ray.authOptions", edit), "401")


@CORPUS
@given(st.sampled_from([{"type": "flex-start", "maxRunDuration": "6h"}, {"type": "queued"}]))
def test_flex_start_does_not_serve_tpu7x(capacity: dict[str, Any]) -> None:
    """Settled: GKE's and Cloud TPU's flex-start pages list no TPU7x (topology.py cites them)."""

    def edit(values: dict[str, Any]) -> None:
        values["region"], values["zone"] = "us-central1", "us-central1-c"
        pool = values["slicePools"][0]
        pool.update({"generation": "tpu7x", "topology": "2x2x1", "capacity": capacity})
        pool["autoscaling"] = {"enabled": True, "minSlices": 0}

    check("dev", ("slicePools[0].capacity.type", edit), "tpu7x")


# ---- what the cloud or Kueue refuses later, and what Pulumi and GKE take ---------------------------------
def dev_pools(n: int) -> Callable[[dict[str, Any]], None]:
    """``n`` copies of dev's single-host pool (one v5e node each), the workload on the first."""

    def edit(values: dict[str, Any]) -> None:
        pool = values["slicePools"][0]
        values["slicePools"] = [{**pool, "name": f"v5e-{i}"} for i in range(n)]
        values["workload"]["slicePool"] = "v5e-0"
        values["kueue"] = {"enabled": True}

    return edit


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(64, 80))
def test_more_kueue_flavors_than_a_resource_group_holds(n: int) -> None:
    check("dev", ("slicePools", dev_pools(n)), "spec.resourceGroups[].flavors maxItems")


@CORPUS
@given(stacks, st.integers(15, 64))
def test_stacks_larger_than_a_gke_cluster(stack: str, slices: int) -> None:
    """v5p 16x16x16 slices (1,024 hosts each): 15 of them are past GKE's 15,000 nodes per cluster."""

    def edit(values: dict[str, Any]) -> None:
        values["region"], values["zone"] = "us-east5", "us-east5-a"
        pool = {"name": "big", "generation": "v5p", "topology": "16x16x16", "slices": slices}
        values["slicePools"] = [pool]
        values["workload"]["slicePool"] = "big"

    check(stack, ("slicePools", edit), "15,000")


@CORPUS
@given(stacks, st.integers(20, 1000), st.sampled_from([8192, 16384, 65_536]))
def test_models_whose_training_state_cannot_fit_a_chip(stack: str, layers: int, d_model: int) -> None:
    model = {"layers": layers, "dModel": d_model, "heads": 16}
    check(stack, ("workload.model", setter("workload", "model", value=model)), "does not fit: needs")


markup = st.sampled_from(["\n# Budget: pass", "[x](https://e.example)", "|", "<b>", "`", "*", "#", "\\", "!["])


@CORPUS
@given(stacks, st.text("abc -", min_size=1, max_size=8).map(str.strip).filter(bool), markup, st.booleans())
def test_display_names_that_would_forge_the_pr_comment(stack: str, word: str, mark: str, network: bool) -> None:
    name = f"{word}{mark}"
    if network:
        net = {"cidr": "203.0.113.0/24", "name": name}
        check(
            stack,
            ("cluster.masterAuthorizedNetworks[0].name", setter("cluster", "masterAuthorizedNetworks", value=[net])),
        )
    else:
        exclusion = {"name": name, "start": "2026-12-20T00:00:00Z", "end": "2026-12-27T00:00:00Z"}
        check(stack, ("maintenance.exclusions[0].name", setter("maintenance", "exclusions", value=[exclusion])))


@CORPUS
@given(stacks, st.from_regex(r"(mars|venus|us|europe|asia)-[a-z]{4,9}[1-9]{1,2}", fullmatch=True))
def test_bucket_locations_that_are_no_real_place_for_checkpoints(stack: str, location: str) -> None:
    if location in TPU_REGIONS:
        return
    check(stack, ("checkpoints.location", setter("checkpoints", "location", value=location)), "storage/docs/locations")


@CORPUS
@given(stacks, st.sampled_from(["cert-manager", "gmp-system", "gmp-public", "gke-gmp-system", "kuberay-system"]))
def test_namespaces_the_stack_installs_into_are_not_rays(stack: str, ns: str) -> None:
    check(stack, ("ray.namespace", setter("ray", "namespace", value=ns)), "system namespace")


def assert_accepted(text: str) -> None:
    code, output = run_check(text)
    FIGURES["accepted"] += code == 0
    assert code == 0, output[-2000:]


@CORPUS
@given(
    stacks,
    st.integers(1, 9),
    st.integers(0, 3),
    st.sampled_from(["e", "E", "e+", "E+"]),
)
def test_numbers_in_exponent_form_are_numbers(stack: str, mantissa: int, exponent: int, e: str) -> None:
    """yaml.v3, which Pulumi reads stack files with, takes 4e2 and 4E+2 as numbers (PyYAML alone would not)."""
    text = stack_text(stack, setter("workload", "steps", value=123456789))
    assert_accepted(text.replace("steps: 123456789", f"steps: {mantissa}{e}{exponent}"))


@CORPUS
@given(stacks, st.integers(1, 10**18), st.integers(0, 10**12))
def test_notification_channels_named_by_project_number(stack: str, number: int, channel: int) -> None:
    name = f"projects/{number}/notificationChannels/{channel}"
    assert_accepted(stack_text(stack, setter("monitoring", "idleAlert", "notificationChannels", value=[name])))


FLOOR_MINOR = {"dev": 35, "prod": 33}
"""Each stack's GKE floor's minor: dev's spot pool's 120 s shutdown needs 1.35.0-gke.1171000, prod's flex-start pool
1.33.0-gke.1712000 (``StackConfig.required_master_version``, checked below)."""


def test_the_floor_minors_are_the_stacks_own() -> None:
    for stack, minor in FLOOR_MINOR.items():
        required = load_stack_file(ROOT / f"Pulumi.{stack}.yaml").required_master_version
        assert required.startswith(f"1.{minor}.0-gke."), (stack, required)


@CORPUS
@given(stacks, st.integers(0, 10), st.booleans())
def test_minor_and_patch_aliases_at_or_above_the_floor(stack: str, above: int, patch: bool) -> None:
    """GKE resolves 1.X and 1.X.Y to their newest patch, so each alias from the stack's floor's minor up (to the
    version pattern's 1.45) is accepted."""
    minor = FLOOR_MINOR[stack] + above
    version = f"1.{minor}.0" if patch else f"1.{minor}"
    assert_accepted(stack_text(stack, setter("cluster", "minMasterVersion", value=version)))
