"""What a check of ``tpuray doctor`` gives: its id, pass/warn/fail, the fact it checked with its source, the fix."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

__all__ = ["Check", "CheckResult", "Status"]

Status = Literal["pass", "warn", "fail"]


@dataclass(frozen=True)
class CheckResult:
    id: str
    status: Status
    fact: str
    """What was checked and what was found."""
    source: str
    """Public page of the requirement."""
    fix: str

    def as_json(self) -> dict[str, str]:
        return {"id": self.id, "status": self.status, "fact": self.fact, "source": self.source, "fix": self.fix}


Check = Callable[[], "CheckResult | list[CheckResult] | None"]
"""One check, its inputs bound: what it finds (None where it does not apply to the stack)."""
