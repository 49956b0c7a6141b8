"""Kubernetes resource quantities (``"8"``, ``"500m"``, ``"64Gi"``) as exact numbers, for quota arithmetic.

Pure Python. Kueue quotas are sums of pod requests, so they are computed from the same strings the pods request
(https://kubernetes.io/docs/reference/kubernetes-api/common-definitions/quantity/), parsed as the config model
parses them.
"""

from __future__ import annotations

from decimal import Decimal

from tpuray.components.config.value_types import parse_quantity

__all__ = ["format_cpu", "format_memory", "parse_quantity"]


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
