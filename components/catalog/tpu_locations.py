"""Where each TPU generation can be created: the zones of the public Cloud TPU "regions and zones" page, as data.

Pure Python; imports no Pulumi. Source: https://cloud.google.com/tpu/docs/regions-zones (also served as
https://docs.cloud.google.com/tpu/docs/regions-zones), "You can create TPU VMs in the zones shown in the following
table", read 2026-12-01. The page lists, per generation:

- North America: TPU7x us-central1-c; v6e us-central1-b, us-east1-d, us-east5-a, us-east5-b; v5p us-central1-a,
  us-east5-a; v5e us-central1-a, us-south1-a, us-west1-c, us-west4-a; v4 us-central2-b. The page also lists zones
  that offer a generation as single-tenant capacity (reservations): v6e us-east5-c, us-east4-a, us-east4-b,
  us-west1-c; v5p us-east5-b, us-east5-c, us-south1-a; v5e us-east5-a, us-east5-b, us-east5-c. They are kept: a
  stack on a reservation there is valid, and this table refuses zones that do not offer the generation at all.
- Europe: v6e europe-west4-a; v5p europe-west4-b; v5e europe-west4-b.
- Asia Pacific: v6e asia-northeast1-b; v5e asia-southeast1-b.

Left out on purpose: the AI zones the page also lists (``us-central1-ai1a``...), whose names the zone type does not
accept yet. A zone missing here is refused with a message naming this table, never accepted silently: when Google
adds a zone, add it here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from tpuray.components.catalog import topology

__all__ = [
    "TPU_REGIONS",
    "TPU_ZONES",
    "TPU_ZONES_SOURCE",
    "location_problems",
    "pool_zone_problem",
    "region_problem",
    "tpu_regions",
    "tpu_zones",
    "zone_problem",
    "zones_of",
]

TPU_ZONES_SOURCE = "https://cloud.google.com/tpu/docs/regions-zones"


def tpu_zones() -> dict[str, frozenset[str]]:
    """Zone -> the TPU generations (canonical names) it offers, from each catalog row's ``zones``: a new generation
    brings its zones in its own row."""
    table: dict[str, set[str]] = {}
    for g in topology.GENERATIONS:  # read each time: a catalog row added at run time brings its zones
        for z in g.zones:
            table.setdefault(z, set()).add(g.name)
    return {z: frozenset(gens) for z, gens in sorted(table.items())}


def tpu_regions() -> frozenset[str]:
    """The regions that hold at least one TPU zone."""
    return frozenset(z.rsplit("-", 1)[0] for z in tpu_zones())


TPU_ZONES: Mapping[str, frozenset[str]] = tpu_zones()
"""The built-in catalog's zones (a snapshot for readers; the rules below read the catalog each time)."""
TPU_REGIONS: frozenset[str] = tpu_regions()


def zones_of(generation: str) -> list[str]:
    """The zones that offer ``generation`` (a canonical name), sorted."""
    return sorted(z for z, gens in tpu_zones().items() if generation in gens)


def region_problem(region: str) -> str | None:
    """Why ``region`` cannot host a tpuray stack (it has no TPU zone), or None."""
    regions = tpu_regions()
    if region in regions:
        return None
    return f"{region!r} has no Cloud TPU zone ({TPU_ZONES_SOURCE}); regions with TPUs: {', '.join(sorted(regions))}"


def zone_problem(zone: str) -> str | None:
    """Why ``zone`` is not a zone tpuray can place TPUs in (no TPU generation there), or None."""
    zones = tpu_zones()
    if zone in zones:
        return None
    return f"{zone!r} offers no Cloud TPU ({TPU_ZONES_SOURCE}); TPU zones: {', '.join(zones)}"


def pool_zone_problem(zone: str, generation: str, pool: str | None = None) -> str | None:
    """Why a pool of ``generation`` cannot live in ``zone``, naming the zones that offer it; None if it can.

    ``pool``: where the pool has no zone of its own and takes the stack's, the pool's path and name (the message
    then says whose zone it is).
    """
    if generation in tpu_zones().get(zone, frozenset()):
        return None
    offered = ", ".join(zones_of(generation)) or "none in the table"
    if pool is not None:
        return (
            f"{zone!r} does not offer TPU {generation}, the generation of {pool}, which takes the stack's zone "
            f"({TPU_ZONES_SOURCE}); set the pool's zone or this one to a zone that offers it: {offered}"
        )
    return f"{zone!r} does not offer TPU {generation} ({TPU_ZONES_SOURCE}); zones that offer it: {offered}"


def location_problems(
    region: str | None, zone: str | None, pools: Iterable[tuple[int, str, str, str | None]]
) -> list[tuple[str, str]]:
    """``(field, message)`` for a region without TPUs, a zone without TPUs, and a pool in a zone that does not
    offer its generation. ``pools``: ``(index, name, generation, the pool's own zone or None)``; a part that is None
    failed its own validation and is skipped."""
    found: list[tuple[str, str]] = []
    if region is not None and (problem := region_problem(region)):
        found.append(("region", problem))
    if zone is not None and (problem := zone_problem(zone)):
        found.append(("zone", problem))
    for i, name, generation, own_zone in pools:
        if own_zone is not None:
            problem = pool_zone_problem(own_zone, generation)
            field = f"slicePools[{i}].zone"
        else:  # a stack zone offering no TPU at all is reported once, above
            pool = f"slicePools[{i}] ({name})"
            problem = pool_zone_problem(zone, generation, pool) if zone is not None and zone in tpu_zones() else None
            field = "zone"
        if problem:
            found.append((field, problem))
    return found
