"""Value types of the stack configuration, each validated the way the API that receives it does.

Pure pydantic; imports no Pulumi. Every type is an ``Annotated[str, ...]`` whose validator raises a ``ValueError``
naming the valid form; pydantic puts the field's path in front. Each rule cites the public page it comes from, and
the functions that *derive* names (service accounts, the checkpoint bucket, label values) live here too, so a derived
name is checked by the same rule as a configured one.
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
import unicodedata
from collections.abc import Callable
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Annotated

from pydantic import AfterValidator, BeforeValidator, Field

from tpuray.components.catalog.container_paths import reserved_path_clash
from tpuray.components.catalog.images import parse_image

__all__ = [
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
    "bounded_name",
    "bucket_name_problem",
    "checked_ray_token",
    "derived_bucket_name",
    "gke_alias_for",
    "gke_version_key",
    "gke_version_meets",
    "image_ray_version",
    "label_value",
    "maintenance_availability",
    "parse_quantity",
    "public_addresses",
    "service_account_id",
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


def _show(value: str, limit: int = 80) -> str:
    """``repr`` of a value cut to ``limit`` characters, so an error never echoes a huge input."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 4] + "...'"


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


def bounded_name(base: str, limit: int) -> str:
    """``base`` if it fits, else a prefix plus a short stable hash (GCE names must be unique and <= ``limit``)."""
    if len(base) <= limit:
        return base
    digest = hashlib.sha256(base.encode()).hexdigest()[:8]
    return f"{base[: limit - 9].rstrip('-_.')}-{digest}"


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

# https://cloud.google.com/iam/docs/reference/rest/v1/projects.serviceAccounts/create : accountId "must be 6-30
# characters long, and match the regular expression [a-z]([-a-z0-9]*[a-z0-9])".
SERVICE_ACCOUNT_ID = re.compile(r"^[a-z](?:[-a-z0-9]{4,28}[a-z0-9])$")


def service_account_id(cluster: str, role: str) -> str:
    """The id of a service account tpuray derives from a (valid) cluster name, e.g. ``tpuray-prod-nodes``.

    Always 6-30 characters: a short cluster name gets ``-sa`` appended, a long one is cut with a stable hash.
    """
    base = f"{cluster}-{role}"
    if len(base) < 6:
        base += "-sa"
    return bounded_name(base, 30)


# ---- zones and machine types -------------------------------------------------------------------------------
# https://cloud.google.com/compute/docs/regions-zones : a zone is <region>-<letter>, e.g. us-east5-a.
REGION = re.compile(r"^[a-z]+-[a-z]+\d+$")
_ZONE = re.compile(r"^[a-z]+-[a-z]+\d+-[a-z]$")


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
_GKE_VERSION = re.compile(r"(1)\.(0|[1-9]\d?)(?:\.(0|[1-9]\d*)(?:-gke\.([1-9]\d*))?)?")
_GKE_MINORS = range(24, 46)


def gke_version_key(version: str) -> tuple[int, ...]:
    """Sortable key of a GKE version, e.g. ``1.31.2-gke.1115000`` -> ``(1, 31, 2, 1115000)``.

    https://cloud.google.com/kubernetes-engine/versioning : ``1.X``, ``1.X.Y`` or ``1.X.Y-gke.N``.
    """
    m = _GKE_VERSION.fullmatch(version) if isinstance(version, str) else None
    if not m or int(m.group(2)) not in _GKE_MINORS:
        raise ValueError(f"{_show(str(version))} is not a GKE version like 1.31.2-gke.1115000 (or 1.31, 1.31.2)")
    return tuple(int(x or 0) for x in m.groups())


_NEWEST = 10**18
"""Stands for "the newest" in a version alias's missing parts (above any patch or gke.N GKE has published)."""


def gke_version_meets(version: str, floor: str) -> bool:
    """A cluster given ``version`` (``minMasterVersion``: a full version or an alias) runs at least ``floor``.

    GKE resolves an alias to the newest version it names: "1.X" picks the highest valid patch+gke.N patch in the 1.X
    version, "1.X.Y" the highest valid gke.N patch in 1.X.Y (the ``initialClusterVersion``/``desiredNodeVersion``
    fields of the GKE API, https://cloud.google.com/kubernetes-engine/docs/reference/rest/v1/projects.locations.clusters,
    and https://cloud.google.com/kubernetes-engine/versioning). So "1.33" meets a floor of 1.33.0-gke.1712000: a
    floor is a version GKE has published, and the newest 1.33 patch GKE offers is that one or a later one. The one
    case this cannot see is a floor that is still Rapid-only while the stack's channel offers an older 1.33 patch;
    `tpuray doctor` compares the floor with the version the control plane really runs.
    """
    m = _GKE_VERSION.fullmatch(version)
    if m is None:
        raise ValueError(f"{_show(version)} is not a GKE version")
    have = tuple(_NEWEST if part is None else int(part) for part in m.groups())
    return have >= gke_version_key(floor)


def gke_alias_for(floor: str) -> str:
    """The version alias to request for at least ``floor`` (``1.35.1-gke.1616000`` -> ``1.35.1``): GKE resolves it to
    the newest ``1.35.1-gke.N`` it offers, which is the floor or a later patch (see :func:`gke_version_meets`)."""
    return floor.split("-gke.")[0]


def _gke_version(value: str) -> str | None:
    gke_version_key(value)
    return None


GkeVersion = Annotated[str, AfterValidator(_checked(_gke_version))]

_SEMVER = re.compile(r"^\d+\.\d+\.\d+$")
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


def derived_bucket_name(project: str, cluster: str) -> str:
    """The default checkpoint bucket, ``<project>-<cluster>-ckpt``, cut with a stable hash to 63 characters."""
    return bounded_name(f"{project}-{cluster}-ckpt", 63)


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

# https://cloud.google.com/vpc/docs/subnets#valid-ranges : the private ranges a subnet (and its secondary ranges)
# may use without privately-used-public-IP configuration, which tpuray does not declare.
PRIVATE_RANGES = tuple(
    ipaddress.ip_network(n)
    for n in (
        "10.0.0.0/8",
        "172.16.0.0/12",
        "192.168.0.0/16",
        "100.64.0.0/10",
        "192.0.0.0/24",
        "192.0.2.0/24",
        "198.18.0.0/15",
        "198.51.100.0/24",
        "203.0.113.0/24",
        "240.0.0.0/4",
    )
)


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
_QUANTITY = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?\d+)?$")
_SUFFIX: dict[str, int | Decimal] = {
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": 1,
    "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
}  # fmt: skip


def parse_quantity(value: str) -> Decimal:
    """A Kubernetes quantity as a number (``"500m"`` -> 0.5, ``"16Gi"`` -> 17179869184)."""
    m = _QUANTITY.fullmatch(value)
    if not m:
        raise ValueError(f"{_show(value)} is not a Kubernetes quantity like '8', '500m', '64Gi' or '1e3'")
    number, suffix = m.group(1), m.group(2) or ""
    try:
        if suffix in _SUFFIX:
            return Decimal(number) * Decimal(_SUFFIX[suffix])
        return Decimal(number) * Decimal(10) ** int(suffix[1:])  # a decimal exponent, e.g. 1e3
    except (ArithmeticError, ValueError):
        raise ValueError(f"{_show(value)} is out of range for a Kubernetes quantity") from None


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


# ---- label values ---------------------------------------------------------------------------------------------
# GCP labels (https://cloud.google.com/compute/docs/labeling-resources): values <= 63 characters of lowercase
# letters, digits, '_' and '-'. Kubernetes label values
# (https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#syntax-and-character-set): <= 63
# characters, alphanumeric at both ends. A value written to both must satisfy both.
GCP_LABEL_VALUE = re.compile(r"^[a-z0-9_-]{0,63}$")
K8S_LABEL_VALUE = re.compile(r"^(?:(?:[A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def label_value(text: str) -> str:
    """``text`` as a value valid both as a GCP label and a Kubernetes label (e.g. a Pulumi stack name)."""
    value = re.sub(r"[^a-z0-9_-]", "-", text.lower())[:63]
    return value.strip("-_")


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
_WEEKDAY = re.compile(r"[+-]?(?:[1-9]|[1-4]\d|5[0-3])?(?:MO|TU|WE|TH|FR|SA|SU)")
_SIGNED_INT = re.compile(r"[+-]?[1-9]\d{0,2}")


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
    if "INTERVAL" in parts and not (parts["INTERVAL"].isdigit() and 1 <= int(parts["INTERVAL"]) <= 999):
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
        pattern=r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$", description="RFC 3339 UTC time, e.g. 2026-01-03T02:00:00Z"
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


# https://cloud.google.com/kubernetes-engine/docs/concepts/maintenance-windows-and-exclusions : "the maintenance
# window must allow at least 48 hours of availability in a 32-day rolling window", counting only contiguous
# stretches of at least 4 hours.
MIN_MAINTENANCE_HOURS = 48
MAINTENANCE_PERIOD = timedelta(days=32)
MIN_MAINTENANCE_STRETCH = timedelta(hours=4)


def maintenance_availability(start: datetime, end: datetime, recurrence: str) -> timedelta:
    """The least maintenance time any 32-day rolling window gets from a recurring window (stretches >= 4 h)."""
    from dateutil.rrule import rrulestr  # type: ignore[import-untyped]  # no stubs in the shared venv

    length = end - start
    horizon = start + timedelta(days=400)  # a year and more: every weekly and monthly pattern repeats within it
    rule = rrulestr(recurrence, dtstart=start.replace(tzinfo=None))
    spans: list[list[datetime]] = []
    for occ in rule.between(start.replace(tzinfo=None), horizon.replace(tzinfo=None), inc=True):
        s = occ.replace(tzinfo=start.tzinfo)
        if spans and s <= spans[-1][1]:
            spans[-1][1] = max(spans[-1][1], s + length)
        else:
            spans.append([s, s + length])
    stretches = [(s, e) for s, e in spans if e - s >= MIN_MAINTENANCE_STRETCH]
    if not stretches:
        return timedelta(0)
    last = stretches[-1][1] - MAINTENANCE_PERIOD
    worst: timedelta | None = None
    for _, t in stretches:  # the worst window starts right after a stretch ends
        if t > last:
            break
        got = sum(
            (min(e, t + MAINTENANCE_PERIOD) - max(s, t) for s, e in stretches if e > t and s < t + MAINTENANCE_PERIOD),
            timedelta(0),
        )
        worst = got if worst is None else min(worst, got)
    return worst if worst is not None else timedelta(0)


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


# ---- authorized networks -----------------------------------------------------------------------------------
# Judge the union, not each literal: 0.0.0.0/1 plus 128.0.0.0/1 opens the control plane as surely as 0.0.0.0/0.
# A public range wider than a /8's 16.7 million addresses is no "authorized network"
# (https://cloud.google.com/kubernetes-engine/docs/concepts/network-overview#limit-access-to-control-plane).
MAX_PUBLIC_AUTHORIZED_ADDRESSES = 2**24
_NON_PUBLIC = tuple(
    ipaddress.ip_network(n)
    for n in (
        "0.0.0.0/8",
        "10.0.0.0/8",
        "100.64.0.0/10",
        "127.0.0.0/8",
        "169.254.0.0/16",
        "172.16.0.0/12",
        "192.168.0.0/16",
        "224.0.0.0/4",
        "240.0.0.0/4",
    )
)


def public_addresses(cidrs: list[str]) -> int:
    """How many public IPv4 addresses the union of ``cidrs`` covers (overlaps counted once)."""
    nets = [ipaddress.ip_network(c, strict=False) for c in cidrs]
    union = list(ipaddress.collapse_addresses(n for n in nets if isinstance(n, ipaddress.IPv4Network)))
    total = 0
    for net in union:
        hidden = sum(
            min(int(net.broadcast_address), int(p.broadcast_address))
            - max(int(net.network_address), int(p.network_address))
            + 1
            for p in _NON_PUBLIC
            if net.overlaps(p)
        )
        total += net.num_addresses - hidden
    return total


# ---- the Ray version an image carries ----------------------------------------------------------------------
_RAY_IMAGES = ("rayproject/ray", "rayproject/ray-ml", "anyscale/ray")
"""Images whose tags name the Ray release they carry (https://hub.docker.com/r/rayproject/ray)."""
_RAY_TAG = re.compile(r"(\d+\.\d+\.\d+)(?:[-.].*)?")


def image_ray_version(image: str) -> str | None:
    """The Ray version a ``rayproject/ray``-style tag names (``2.60.0-py311`` -> ``2.60.0``); None when the tag does
    not say (a digest, ``latest``, a custom tag)."""
    ref = parse_image(image)
    if ref.registry not in (None, "docker.io") or ref.path not in _RAY_IMAGES or ref.digest is not None:
        return None  # a custom image's tag is its own version, not Ray's
    m = _RAY_TAG.fullmatch(ref.tag or "")
    return m.group(1) if m else None
