"""The public price rows tpuray uses, copied verbatim from their source, one row per (TPU type, region).

Source: SkyPilot's GCP catalogue, ``catalogs/v7/gcp/vms.csv`` of skypilot-org/skypilot-catalog at commit
017e2502fb63c7a28757acd94002b2d6099d3e3d. SkyPilot generates it from the Cloud Billing Catalog API (the Cloud TPU
service, SKU usage types ``OnDemand`` and ``Preemptible``; commitment SKUs are pruned), see
skypilot-org/skypilot ``sky/catalog/data_fetchers/fetch_gcp.py``. Columns used: ``AcceleratorName``, ``Region``,
``Price`` (on-demand USD per hour of the whole TPU type) and ``SpotPrice``.

Sentinels in that file (never prices): ``700.0`` is ``TPU_V6E_MAX_PRICE`` in ``fetch_gcp.py`` ("we set a higher
price so the failover will go to the region with precise pricing info first"), written for v6e regions whose SKU
has no price; earlier catalogue versions wrote ``0`` for the same case (SkyPilot's v6e example README: "We set the
price to 0.0 in those regions for now"); an empty cell means no price. :func:`sentinel` names them.

Committed use (1 and 3 years, what a reservation pays) and flex-start/DWS have no row in that file: the
catalogue prunes commitment SKUs. Their public source is the Cloud TPU pricing page (:data:`TPU_PRICING_PAGE`);
:data:`COMMITTED_USE` and :data:`FLEX_START` hold the per-chip-hour figures read from it, each with the page and the
date. The copy of the page read on 2026-12-01 (through the project's page search, the only access this work had)
shows the page's opening: the pricing systems, that TPU Pod types need "a 1 year or 3 year commitment", and the
start of the v4 table, but no per-chip-hour commitment or flex-start figure for any generation tpuray plans (v5e,
v5p, v6e, tpu7x). No figure is copied from a third-party page or from memory, so both tables are empty and such a
pool is unpriced with that reason (the stack can still supply its contract's rate in ``cost.rates``). A figure read
later is one row here.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "CATALOGUE",
    "COMMITTED_USE",
    "FLEX_START",
    "TPU_PRICING_PAGE",
    "CatalogueRow",
    "CommittedRow",
    "Source",
    "sentinel",
]


@dataclass(frozen=True)
class Source:
    """Where a price was read, and when."""

    url: str
    read_on: str
    """ISO date the row was read from ``url``."""
    note: str = ""


SKYPILOT_GCP = Source(
    url="https://github.com/skypilot-org/skypilot-catalog/blob/017e2502fb63c7a28757acd94002b2d6099d3e3d/"
    "catalogs/v7/gcp/vms.csv",
    read_on="2026-12-01",
    note="generated from the Cloud Billing Catalog API (Cloud TPU SKUs, OnDemand and Preemptible usage types)",
)

_V6E_NO_PRICE = 700.0
"""``TPU_V6E_MAX_PRICE`` in skypilot ``fetch_gcp.py``: a placeholder above every real v6e price."""


@dataclass(frozen=True)
class CatalogueRow:
    """One line of the catalogue: the price per hour of a whole TPU type (``tpu-v5p-8`` is 4 chips)."""

    accelerator: str
    region: str
    price: float | None
    """On-demand USD per hour of the TPU type (the ``Price`` column), None for an empty cell."""
    spot_price: float | None
    """Spot USD per hour (``SpotPrice``), None for an empty cell."""
    source: Source = SKYPILOT_GCP


def sentinel(value: float | None) -> str | None:
    """Why a catalogue cell is not a price (``"empty"``, ``"0 means no price"``, ...), or None for a price."""
    if value is None:
        return "empty cell"
    if value <= 0:
        return f"{value:g} means no price in this catalogue"
    if value == _V6E_NO_PRICE:
        return f"{value:g} is the catalogue's placeholder for a missing price (TPU_V6E_MAX_PRICE)"
    return None


def _rows(accelerator: str, *lines: tuple[str, float | None, float | None]) -> tuple[CatalogueRow, ...]:
    return tuple(CatalogueRow(accelerator, region, price, spot) for region, price, spot in lines)


# One TPU type per generation, the smallest the catalogue lists: its price is chips x the per-chip price (the
# catalogue's larger types of the same generation and region are exact multiples, e.g. tpu-v5p-12288 us-east5
# 25804.8 = 6144 chips x 4.2).
CATALOGUE: tuple[CatalogueRow, ...] = (
    *_rows("tpu-v4-8", ("us-central2", 12.88, 3.686)),
    *_rows(
        "tpu-v5litepod-1",
        ("asia-east1", 1.38948, 0.69474),
        ("asia-southeast1", 1.56, 0.78),
        ("europe-north1", 1.32132, 0.66066),
        ("europe-west1", 1.32132, 0.66066),
        ("europe-west4", 1.56, 0.44261),
        ("us-central1", 1.2, 0.21298),
        ("us-east1", 1.2, 0.21298),
        ("us-east5", 1.2, 0.6),
        ("us-south1", 1.416, 0.5664),
        ("us-west1", 1.2, 0.21298),
        ("us-west4", 1.2, 0.4692),
    ),
    *_rows(
        "tpu-v5p-8",
        ("europe-west1", 17.83782, 7.13513),
        ("europe-west4", 17.01, 5.39396),
        ("us-central1", 16.8, 6.72),
        ("us-east1", 16.8, 6.72),
        ("us-east5", 16.8, 6.24036),
        ("us-south1", 19.116, 9.5816),
    ),
    *_rows(
        "tpu-v6e-1",
        ("asia-east1", 700.0, 700.0),
        ("asia-northeast1", 3.24, 1.07681),
        ("asia-south1", 3.24, 2.27),
        ("asia-southeast1", 2.97, 0.72958),
        ("europe-west4", 2.97, 0.71316),
        ("southamerica-east1", 700.0, 700.0),
        ("southamerica-west1", 700.0, 700.0),
        ("us-central1", 2.7, 0.64833),
        ("us-central2", 700.0, 700.0),
        ("us-east1", 2.7, 0.64833),
        ("us-east4", 2.7, 0.85833),
        ("us-east5", 2.7, 1.08),
        ("us-south1", 2.7, 1.89),
        ("us-west1", 2.7, 0.64833),
    ),
)

TPU_PRICING_PAGE = Source(
    url="https://cloud.google.com/tpu/pricing",
    read_on="2026-12-01",
    note="the copy read shows no per-chip-hour commitment or flex-start figure for v5e, v5p, v6e or tpu7x",
)
"""Google's Cloud TPU pricing page: the public source of committed use (1-year, 3-year) and flex-start prices."""


@dataclass(frozen=True)
class CommittedRow:
    """A price per chip-hour read from :data:`TPU_PRICING_PAGE`: a commitment term's, or flex-start's."""

    generation: str
    region: str
    term: str
    """``1y``, ``3y`` (committed use) or ``flex-start``."""
    usd_per_chip_hour: float
    source: Source = TPU_PRICING_PAGE


COMMITTED_USE: tuple[CommittedRow, ...] = ()
"""1-year and 3-year commitment prices per chip-hour, by generation and region, as the pricing page gives them
(none read: see the module's docstring)."""
FLEX_START: tuple[CommittedRow, ...] = ()
"""Flex-start prices per chip-hour, by generation and region (none read: see the module's docstring)."""
