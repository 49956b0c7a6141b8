"""Kubernetes resource quantities (``"8"``, ``"500m"``, ``"64Gi"``) as exact numbers, for quota arithmetic.

Pure Python. Kueue quotas are sums of pod requests, so they are computed here from the same strings the pods
request (https://kubernetes.io/docs/reference/kubernetes-api/common-definitions/quantity/).
"""

from __future__ import annotations

import re
from decimal import Decimal

__all__ = ["format_cpu", "format_memory", "parse_quantity"]

_SUFFIX = {
    "": Decimal(1),
    "m": Decimal("0.001"),
    "k": Decimal(10) ** 3,
    "M": Decimal(10) ** 6,
    "G": Decimal(10) ** 9,
    "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15,
    "Ki": Decimal(2) ** 10,
    "Mi": Decimal(2) ** 20,
    "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50,
}
_QUANTITY = re.compile(r"^(\d+(?:\.\d+)?)(m|k|M|G|T|P|Ki|Mi|Gi|Ti|Pi)?$")


def parse_quantity(text: str) -> Decimal:
    """A quantity in base units (cores, bytes); ValueError names the valid form."""
    m = _QUANTITY.match(text.strip()) if isinstance(text, str) else None
    if not m:
        raise ValueError(f"{text!r} is not a Kubernetes quantity like '8', '500m', '64Gi'")
    return Decimal(m.group(1)) * _SUFFIX[m.group(2) or ""]


def format_cpu(cores: Decimal) -> str:
    """Whole cores as an integer, else millicores (``"1500m"``)."""
    if cores == cores.to_integral_value():
        return str(int(cores))
    return f"{int((cores * 1000).to_integral_value())}m"


def format_memory(size: Decimal) -> str:
    """Bytes in the largest binary unit that divides them exactly (``"256Gi"``), else plain bytes."""
    n = int(size.to_integral_value())
    for unit in ("Pi", "Ti", "Gi", "Mi", "Ki"):
        base = int(_SUFFIX[unit])
        if n and n % base == 0:
            return f"{n // base}{unit}"
    return str(n)
