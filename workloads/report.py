"""The driver's progress display and the run summary (pure formatting; no Ray, no torch)."""

from __future__ import annotations

import sys
from statistics import median
from typing import TextIO

from tpuray.components.topology import TpuSlice
from tpuray.workloads.metrics import ModelShape, Throughput, throughput

__all__ = ["Progress", "steady_step_time", "summarise_throughput"]


def steady_step_time(chunk_times: list[float]) -> float | None:
    """Median seconds per step over the chunks after each attempt's first one (which includes the compile)."""
    steady = chunk_times[1:] or chunk_times
    return median(steady) if steady else None


def summarise_throughput(
    shape: ModelShape, tpu_slice: TpuSlice, chips: int, batch_per_chip: int, step_time_s: float | None
) -> Throughput | None:
    return None if step_time_s is None else throughput(shape, tpu_slice, chips, batch_per_chip, step_time_s)


class Progress:
    """One status line per chunk on stderr (redrawn in place on a terminal), e.g.
    ``[#####-----] step 30/60 loss 2.412 | 31.2 ms/step | 32.8k tok/s (8.2k/chip) | MFU 0.00%``."""

    def __init__(self, total_steps: int, stream: TextIO | None = None, width: int = 20) -> None:
        self.total = total_steps
        self.stream = stream or sys.stderr
        self.width = width
        self.tty = self.stream.isatty()

    def line(self, step: int, loss: float, t: Throughput | None) -> str:
        filled = round(self.width * step / max(1, self.total))
        bar = "#" * filled + "-" * (self.width - filled)
        text = f"[{bar}] step {step}/{self.total} loss {loss:.3f}"
        if t is not None:
            text += (
                f" | {t.step_time_s * 1e3:.1f} ms/step | {t.tokens_per_s / 1e3:.1f}k tok/s "
                f"({t.tokens_per_s_per_chip / 1e3:.1f}k/chip) | MFU {t.mfu:.2%}"
            )
        return text

    def update(self, step: int, loss: float, t: Throughput | None) -> None:
        text = self.line(step, loss, t)
        if self.tty:
            self.stream.write("\r\033[K" + text + ("\n" if step >= self.total else ""))
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def note(self, message: str) -> None:
        self.stream.write(("\n" if self.tty else "") + message + "\n")
        self.stream.flush()
