"""Kubernetes resource quantities (``"8"``, ``"500m"``, ``"64Gi"``) as exact numbers, and back.

Pure Python. The config model validates pod requests with :func:`parse_quantity`, and Kueue quotas are sums of pod
requests, so the planner computes them from the same strings the pods request, parsed the same way
(https://kubernetes.io/docs/reference/kubernetes-api/common-definitions/quantity/).
"""

from __future__ import annotations

import re
from decimal import Decimal

from tpuray.components.catalog.text import short_repr

__all__ = ["format_cpu", "format_memory", "parse_quantity"]

# <number><suffix>, suffix a binary SI (Ki..Ei), decimal SI (n, u, m, "", k, M, G, T, P, E) or an exponent (e3, E-2).
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
        raise ValueError(f"{short_repr(value)} is not a Kubernetes quantity like '8', '500m', '64Gi' or '1e3'")
    number, suffix = m.group(1), m.group(2) or ""
    try:
        if suffix in _SUFFIX:
            return Decimal(number) * Decimal(_SUFFIX[suffix])
        return Decimal(number) * Decimal(10) ** int(suffix[1:])  # a decimal exponent, e.g. 1e3
    except (ArithmeticError, ValueError):
        raise ValueError(f"{short_repr(value)} is out of range for a Kubernetes quantity") from None


def format_cpu(cores: Decimal) -> str:
    """Whole cores as an integer, else millicores (``"1500m"``)."""
    if cores == cores.to_integral_value():
        return str(int(cores))
    return f"{int((cores * 1000).to_integral_value())}m"


def format_memory(size: Decimal) -> str:
    """Bytes in the largest binary unit that divides them exactly (``"256Gi"``), else plain bytes."""
    n = int(size.to_integral_value())
    for power, unit in ((5, "Pi"), (4, "Ti"), (3, "Gi"), (2, "Mi"), (1, "Ki")):
        base = 1024**power
        if n and n % base == 0:
            return f"{n // base}{unit}"
    return str(n)
