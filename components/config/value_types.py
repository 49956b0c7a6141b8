"""Value types of the stack configuration, each validated the way the API that receives it does.

Pure pydantic; imports no Pulumi. Every type is an ``Annotated[str, ...]`` whose validator raises a ``ValueError``
naming the valid form; pydantic puts the field's path in front. Each rule cites the public page it comes from. Types
and validators only: what tpuray derives from values (names, GKE version aliases, quantities, address counts) is in
the catalog modules named for it (``resource_names``, ``gke_versions``, ``quantity``, ``ip_ranges``,
``maintenance_windows``, ``images``), and the tests check each derived name against the rule here.
"""

from __future__ import annotations

import ipaddress
import re
import unicodedata
from collections.abc import Callable
from decimal import Decimal
from typing import Annotated

from pydantic import AfterValidator, BeforeValidator, Field

from tpuray.components.catalog.container_paths import reserved_path_clash
from tpuray.components.catalog.gke_versions import gke_version_key
from tpuray.components.catalog.images import parse_image
from tpuray.components.catalog.ip_ranges import PRIVATE_RANGES
from tpuray.components.catalog.quantity import parse_quantity
from tpuray.components.catalog.text import short_repr as _show
from tpuray.components.config.base import pattern

__all__ = [
    "REGION",
    "BucketLocation",
    "BucketName",
    "Cidr",
    "CpuQuantity",
    "ExclusionName",
    "GceName",
    "GkeVersion",
    "ImageRef",
    "MachineType",
    "MemoryQuantity",
    "MountPath",
    "NetworkDisplayName",
    "ProjectId",
    "RangeName",
    "RayAuthToken",
    "Rrule",
    "RunName",
    "SemVer",
    "UtcTime",
    "Zone",
    "bucket_name_problem",
    "checked_ray_token",
    "prefix_problem",
    "private_range_problem",
    "stack_name_problem",
]


def _checked(rule: Callable[[str], str | None]) -> Callable[[object], str]:
    """A validator from ``rule(value) -> problem or None``; non-strings are refused before the rule runs."""

    def validate(value: object) -> str:
        if not isinstance(value, str):
            raise ValueError(f"expected a string, got {type(value).__name__}")
        # A control character (a newline, ESC, ...) is never part of any name or version the cloud takes, and one
        # reaching the PR comment could forge its Markdown: refused here, once, for every value type.
        if any(unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp") for ch in value):
            raise ValueError(f"{_show(value)} contains a control character; use printable characters only")
        problem = rule(value)
        if problem:
            raise ValueError(problem)
        return value

    return validate


# ---- GCE resource names -----------------------------------------------------------------------------------
# https://cloud.google.com/compute/docs/naming-resources : RFC 1035, lowercase letter first, 1-63 characters.
_GCE_NAME = re.compile(r"^[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?$")


def _gce_name(value: str) -> str | None:
    if not _GCE_NAME.fullmatch(value):
        return (
            f"{_show(value)} is not a valid name: 1-63 characters, lowercase letters, digits and '-', starting with a "
            "letter and not ending with '-' (RFC 1035)"
        )
    return None


GceName = Annotated[str, AfterValidator(_checked(_gce_name))]
"""A network, subnetwork, reservation or other Compute Engine resource name."""
RangeName = GceName
"""A subnet secondary range name: the same RFC 1035 rule (https://cloud.google.com/vpc/docs/subnets)."""


# ---- project and service-account ids -----------------------------------------------------------------------
# https://cloud.google.com/resource-manager/docs/creating-managing-projects : 6-30 characters, lowercase letters,
# digits and hyphens, starting with a letter, not ending with a hyphen; must not contain "google".
_PROJECT_ID = re.compile(r"^[a-z][-a-z0-9]{4,28}[a-z0-9]$")


def _project_id(value: str) -> str | None:
    if not _PROJECT_ID.fullmatch(value):
        return (
            f"{_show(value)} is not a GCP project id: 6-30 characters, lowercase letters, digits and '-', starting "
            "with a letter and not ending with '-'"
        )
    if "google" in value:
        return f"{_show(value)}: project ids cannot contain 'google'"
    return None


ProjectId = Annotated[str, AfterValidator(_checked(_project_id))]

# ---- zones and machine types -------------------------------------------------------------------------------
# https://cloud.google.com/compute/docs/regions-zones : a zone is <region>-<letter>, e.g. us-east5-a.
REGION = re.compile(pattern(r"^[a-z]+-[a-z]+[0-9]+$", "a GCP region: lowercase words and a number, e.g. us-central2"))
_ZONE = re.compile(r"^[a-z]+-[a-z]+[0-9]+-[a-z]$")


def _zone(value: str) -> str | None:
    if not _ZONE.fullmatch(value):
        return f"{_show(value)} is not a zone: <region>-<letter>, e.g. us-east5-a (no spaces)"
    return None


Zone = Annotated[str, AfterValidator(_checked(_zone))]

# https://cloud.google.com/compute/docs/machine-resource : <series>-<type>-<vCPUs> (e2-standard-8), custom types
# <series>-custom-<vCPUs>-<MiB>.
_MACHINE_TYPE = re.compile(r"^[a-z][a-z0-9]*-[a-z0-9]+(?:-[a-z0-9]+)*$")


def _machine_type(value: str) -> str | None:
    if not _MACHINE_TYPE.fullmatch(value) or len(value) > 63:
        return f"{_show(value)} is not a machine type like e2-standard-8 or n2-custom-8-32768"
    return None


MachineType = Annotated[str, AfterValidator(_checked(_machine_type))]


# ---- GKE versions ------------------------------------------------------------------------------------------
# https://cloud.google.com/kubernetes-engine/versioning : 1.X, 1.X.Y or 1.X.Y-gke.N, numbers without leading zeros
# (a gke.N belongs to a patch: 1.X-gke.N is no GKE version).
# The major is 1; GKE has never served a minor below 1.24 nor above 1.3x, so a minor outside 24-45 is a typo
# (1.99.0-gke.1), not a version GKE can create.
def _gke_version(value: str) -> str | None:
    gke_version_key(value)
    return None


GkeVersion = Annotated[str, AfterValidator(_checked(_gke_version))]

_SEMVER = re.compile(r"^[0-9]+\.[0-9]+\.[0-9]+$")
SemVer = Annotated[
    str, AfterValidator(_checked(lambda v: None if _SEMVER.fullmatch(v) else f"{_show(v)} is not X.Y.Z"))
]


# ---- Cloud Storage -------------------------------------------------------------------------------------------
# https://cloud.google.com/storage/docs/buckets#naming : lowercase letters, digits, '-', '_' and '.'; start and end
# with a letter or digit; 3-63 characters (dotted names need domain verification, which a stack cannot do, so tpuray
# does not accept dots); not an IP address; must not begin with "goog" nor contain "google" or close misspellings.
_BUCKET = re.compile(r"^[a-z0-9][-_a-z0-9]{1,61}[a-z0-9]$")
_GOOGLE_LIKE = re.compile(r"g[o0]{2}g[l1]e")


def bucket_name_problem(value: str) -> str | None:
    if not _BUCKET.fullmatch(value):
        return (
            f"{_show(value)} is not a bucket name: 3-63 characters, lowercase letters, digits, '-' and '_', starting "
            "and ending with a letter or digit (https://cloud.google.com/storage/docs/buckets#naming)"
        )
    if value.startswith("goog") or _GOOGLE_LIKE.search(value):
        return f"{_show(value)}: bucket names cannot begin with 'goog' or contain 'google' (or look-alikes)"
    return None


BucketName = Annotated[str, AfterValidator(_checked(bucket_name_problem))]


# https://cloud.google.com/storage/docs/locations : a region, a predefined dual-region or a multi-region
# (case-insensitive; configurable dual-regions need a custom placement config tpuray does not declare).
BUCKET_MULTI_REGIONS = ("ASIA", "EU", "US")
BUCKET_DUAL_REGIONS = ("ASIA1", "EUR4", "EUR5", "EUR7", "EUR8", "NAM4")


# A region must be a real one, and one that holds TPUs: the checkpoint bucket belongs with the slices that write
# it (a bucket in another region pays inter-region transfer on every checkpoint and restore), so the regions are
# the TPU catalog's (tpu_locations, from the Cloud TPU regions-and-zones page), not every region GCS offers.
BUCKET_LOCATIONS_SOURCE = "https://cloud.google.com/storage/docs/locations"


def _bucket_location(value: str) -> str | None:
    from tpuray.components.catalog.tpu_locations import tpu_regions  # the catalog, read each time as tpu_locations does

    regions = tpu_regions()
    if value.lower() in regions or value.upper() in (*BUCKET_MULTI_REGIONS, *BUCKET_DUAL_REGIONS):
        return None
    return (
        f"{_show(value)} is not a checkpoint bucket location: a region with Cloud TPUs "
        f"({', '.join(sorted(regions))}), a multi-region ({', '.join(BUCKET_MULTI_REGIONS)}) or a predefined "
        f"dual-region ({', '.join(BUCKET_DUAL_REGIONS)}) ({BUCKET_LOCATIONS_SOURCE})"
    )


BucketLocation = Annotated[str, AfterValidator(_checked(_bucket_location))]


# ---- IP ranges -----------------------------------------------------------------------------------------------
def _cidr(value: object) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected a CIDR block like 10.0.0.0/20, got {type(value).__name__}")
    try:
        net = ipaddress.ip_network(value, strict=True)
    except ValueError as e:
        raise ValueError(f"not a CIDR block like 10.0.0.0/20: {e}") from None
    if net.version != 4:
        raise ValueError(f"{_show(value)}: only IPv4 ranges are supported")
    return str(net)


Cidr = Annotated[str, AfterValidator(_cidr)]
"""An IPv4 network in CIDR notation with no host bits set, e.g. ``10.0.0.0/20``."""


def private_range_problem(cidr: str) -> str | None:
    net = ipaddress.ip_network(cidr)
    if not any(net.subnet_of(p) for p in PRIVATE_RANGES):  # type: ignore[arg-type]
        return (
            f"{cidr} is not inside a private range a VPC subnet accepts (10.0.0.0/8, 172.16.0.0/12, "
            "192.168.0.0/16, 100.64.0.0/10, ...; https://cloud.google.com/vpc/docs/subnets#valid-ranges)"
        )
    return None


def prefix_problem(cidr: str, largest: int, smallest: int, what: str, source: str) -> str | None:
    """``cidr``'s prefix length must lie in ``[largest, smallest]`` (a /``largest`` is the biggest block)."""
    n = ipaddress.ip_network(cidr).prefixlen
    if not largest <= n <= smallest:
        return f"{cidr}: a {what} must be between /{largest} and /{smallest} ({source})"
    return None


# ---- Kubernetes quantities -----------------------------------------------------------------------------------
# https://kubernetes.io/docs/reference/kubernetes-api/common-definitions/quantity/ : <number><suffix>, suffix a
# binary SI (Ki..Ei), decimal SI (n, u, m, "", k, M, G, T, P, E) or an exponent (e3, E-2).
def _quantity(lo: Decimal, hi: Decimal, unit: str, shown: Callable[[Decimal], str]) -> Callable[[object], str]:
    def rule(value: str) -> str | None:
        amount = parse_quantity(value)
        if not lo <= amount <= hi:
            return f"{_show(value)} = {shown(amount)} {unit}; a Ray pod needs between {shown(lo)} and {shown(hi)}"
        return None

    return _checked(rule)


def _as_str(value: object) -> object:
    """YAML reads ``headCpu: 8`` as an int; Kubernetes takes it as the quantity "8"."""
    return str(value) if isinstance(value, int | float) and not isinstance(value, bool) else value


def _cores(d: Decimal) -> str:
    return f"{float(d):.4g}"


def _gib(d: Decimal) -> str:
    return f"{float(d) / 2**30:.4g}"


# Bounds: a pod must fit one node; the largest GCE VMs have a few hundred vCPUs and a few TiB of memory.
CpuQuantity = Annotated[
    str, BeforeValidator(_as_str), AfterValidator(_quantity(Decimal("0.1"), Decimal(1000), "cores", _cores))
]
MemoryQuantity = Annotated[
    str, BeforeValidator(_as_str), AfterValidator(_quantity(Decimal(2**27), Decimal(2**44), "GiB", _gib))
]


# ---- container images and paths -----------------------------------------------------------------------------
def _image(value: str) -> str | None:
    try:
        parse_image(value)  # the one image-reference parser (images.py), which the policy rules use too
    except ValueError as e:
        return str(e).replace(repr(value), _show(value))  # never echo a huge input
    return None


ImageRef = Annotated[str, AfterValidator(_checked(_image))]


def _mount_path(value: str) -> str | None:
    parts = value.split("/")
    if not value.startswith("/") or value == "/" or ".." in parts or ":" in value or any(c.isspace() for c in value):
        return f"{_show(value)} is not a mount path: an absolute path like /checkpoints, without '..', ':' or spaces"
    if len(value) > 4096:
        return "a mount path has at most 4096 characters"
    # the image's, Ray's, the kubelet's and tpuray's own paths (catalog.container_paths cites each)
    if (r := reserved_path_clash(value)) is not None:
        where = "at or in" if r.beneath else "at or above"
        return (
            f"{_show(value)} would hide {r.path}, {r.what}: a mount may not be {where} it; choose a path of its "
            "own, like /checkpoints or /data"
        )
    return None


MountPath = Annotated[str, AfterValidator(_checked(_mount_path))]


# ---- Pulumi stack names ------------------------------------------------------------------------------------
# https://www.pulumi.com/docs/iac/concepts/stacks/ : stack names contain alphanumerics, '-', '_' and '.' (at most
# 100 characters). The name also becomes a file name (Pulumi.<stack>.yaml) and, through label_value, labels.
_STACK_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,100}$")


def stack_name_problem(name: str) -> str | None:
    if not _STACK_NAME.fullmatch(name) or set(name) == {"."}:
        return (
            f"{_show(name)} is not a stack name: 1-100 letters, digits, '-', '_' or '.' (not only dots), as Pulumi "
            "names stacks"
        )
    return None


# ---- training run names -------------------------------------------------------------------------------------
# Ray Train keeps a run's results and checkpoints in <storage_path>/<RunConfig.name>/ ("The experiment results will
# be saved to: storage_path/name", https://docs.ray.io/en/latest/train/user-guides/configuration-overview.html),
# and the trainer writes its goodput log there too: a run name is one
# directory level under the checkpoint directory, so '/', '..', '.', an empty name and a leading '-' (read as a
# flag) are refused, by a rule that also fits a Kubernetes object name the RayJob derives it from.
_RUN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")


def _run_name(value: str) -> str | None:
    if not _RUN_NAME.fullmatch(value):
        return (
            f"{_show(value)} is not a run name: 1-128 letters, digits, '-', '_' or '.', starting with a letter or "
            "digit (it is one directory under the checkpoint directory: no '/' or '..')"
        )
    return None


RunName = Annotated[str, AfterValidator(_checked(_run_name))]


# ---- maintenance recurrence --------------------------------------------------------------------------------
# GKE takes an RFC 5545 RRULE (https://cloud.google.com/kubernetes-engine/docs/how-to/maintenance-windows-and-
# exclusions); RFC 5545 section 3.3.10: each rule part at most once, INTERVAL a positive integer, BYDAY weekdays
# MO..SU with an optional signed ordinal.
_RRULE_KEYS = frozenset({"FREQ", "INTERVAL", "BYDAY", "BYMONTHDAY", "BYMONTH", "BYSETPOS", "WKST", "COUNT", "UNTIL"})
_RRULE_FREQS = frozenset({"DAILY", "WEEKLY", "MONTHLY"})
_WEEKDAY = re.compile(r"[+-]?(?:[1-9]|[1-4][0-9]|5[0-3])?(?:MO|TU|WE|TH|FR|SA|SU)")
_SIGNED_INT = re.compile(r"[+-]?[1-9][0-9]{0,2}")
_DIGITS = re.compile(r"[0-9]+")
"""ASCII digits only, as RFC 5545 spells DIGIT: ``str.isdigit`` and ``\\d`` take any Unicode digit."""


def _rrule(value: str) -> str | None:
    form = "an RRULE like FREQ=WEEKLY;BYDAY=SA,SU (RFC 5545: FREQ first, each key once)"
    parts: dict[str, str] = {}
    for part in value.split(";"):
        key, eq, val = part.partition("=")
        if not eq or not val:
            return f"{_show(value)}: {_show(part)} is not KEY=VALUE; expected {form}"
        if key not in _RRULE_KEYS:
            return f"{_show(value)}: unknown key {key!r} (known: {', '.join(sorted(_RRULE_KEYS))}); expected {form}"
        if key in parts:
            return f"{_show(value)}: {key} given twice; expected {form}"
        parts[key] = val
    if parts.get("FREQ") not in _RRULE_FREQS or not value.startswith("FREQ="):
        return f"{_show(value)}: FREQ must come first and be DAILY, WEEKLY or MONTHLY"
    interval = parts.get("INTERVAL")
    if interval is not None and not (_DIGITS.fullmatch(interval) and 1 <= int(interval) <= 999):
        return f"{_show(value)}: INTERVAL must be a positive integer"
    if "BYDAY" in parts and not all(_WEEKDAY.fullmatch(d) for d in parts["BYDAY"].split(",")):
        return f"{_show(value)}: BYDAY takes MO, TU, WE, TH, FR, SA, SU (optionally with an ordinal, e.g. 1SA)"
    for key, lo, hi in (("BYMONTHDAY", 1, 31), ("BYMONTH", 1, 12), ("BYSETPOS", 1, 366)):
        for v in parts.get(key, "").split(",") if key in parts else ():
            if not _SIGNED_INT.fullmatch(v) or not lo <= abs(int(v)) <= hi:
                return f"{_show(value)}: {key} value {v!r} is not an integer in +-{lo}..{hi}"
    return None


Rrule = Annotated[str, AfterValidator(_checked(_rrule))]
"""A maintenance window's recurrence, parsed key by key."""

UtcTime = Annotated[
    str,
    Field(
        pattern=pattern(
            r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z$",
            "an RFC 3339 UTC time to the second, e.g. 2026-01-03T02:00:00Z",
        ),
        description="RFC 3339 UTC time, e.g. 2026-01-03T02:00:00Z",
    ),
]
# Display names reach the PR comment (plan.md, the diff) and the dashboard as text: plain words only. Besides the
# control characters every value type refuses (a newline ends a table row), Markdown and HTML markup characters are
# refused, so a name can neither forge a heading, a link or a table cell nor hide text in a tag.
_DISPLAY_NAME = re.compile(r"[\w .,:/()@+-]*")
_DISPLAY_NAME_FORM = (
    "letters, digits, spaces and - _ . , : / ( ) @ + (no Markdown or HTML characters such as # * ` [ ] < > |)"
)


def _display_name(limit: int, allow_empty: bool) -> Callable[[str], str | None]:
    def rule(value: str) -> str | None:
        if not value and allow_empty:
            return None
        if not value or len(value) > limit or value.strip() != value or not _DISPLAY_NAME.fullmatch(value):
            return (
                f"{_show(value)} is not a display name: {0 if allow_empty else 1}-{limit} characters, "
                f"{_DISPLAY_NAME_FORM}, without a "
                "leading or trailing space"
            )
        return None

    return rule


ExclusionName = Annotated[str, AfterValidator(_checked(_display_name(63, allow_empty=False)))]
"""A maintenance exclusion's name (GKE's map key for it, also shown in the plan)."""
NetworkDisplayName = Annotated[str, AfterValidator(_checked(_display_name(100, allow_empty=True)))]
"""An authorized network's display name ("" for none; GKE's ``displayName``, at most 100 characters here)."""


# ---- the Ray token -----------------------------------------------------------------------------------------
# A bearer token guards the GCS, the dashboard and the job API (https://docs.ray.io/en/latest/ray-security/
# token-auth.html); Ray's own generated token is 32 random bytes. A short one can be guessed.
MIN_RAY_TOKEN_LENGTH = 32


def _ray_token(value: str) -> str | None:
    if len(value) < MIN_RAY_TOKEN_LENGTH or value.strip() != value or " " in value:
        return (
            f"the Ray token must be at least {MIN_RAY_TOKEN_LENGTH} printable characters without spaces "
            "(e.g. `openssl rand -hex 32`)"
        )
    return None


def _ray_token_checked(value: object) -> str:
    # never echo a secret: the checks here name no part of the value
    if not isinstance(value, str) or any(unicodedata.category(ch)[0] in "CZ" and ch != " " for ch in value):
        raise ValueError("the Ray token must be a string of printable characters")
    problem = _ray_token(value)
    if problem:
        raise ValueError(problem)
    return value


RayAuthToken = Annotated[str, AfterValidator(_ray_token_checked)]


def checked_ray_token(value: str) -> str:
    """``value`` if it is a usable Ray token, else a ValueError naming ``tpuray:rayAuthToken`` and the valid form
    (never the value). For the secret the program reads with ``Config.get_secret``."""
    try:
        return _ray_token_checked(value)
    except ValueError as e:
        raise ValueError(f"tpuray:rayAuthToken: {e}") from None
