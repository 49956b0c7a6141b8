"""Throughput per dollar: the training summary's $/h and tokens per dollar, and ``tpuray compare``."""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tpuray.components.catalog.throughput import CostFileError
from tpuray.components.catalog.topology import TpuSlice
from tpuray.components.cli import main as tpuray
from tpuray.workloads.gpt.cli import RunPrice, _summary, build_parser, run_price

GOLDEN_DEV = Path(__file__).resolve().parents[2] / "review" / "golden" / "dev"


def _result(tokens_per_s: float) -> Any:
    metrics = {"losses": [5.0, 2.0], "step": 10, "tokens_per_s": tokens_per_s, "mfu": 0.1}
    return SimpleNamespace(error=None, metrics=metrics, checkpoint=None)


def _job() -> Any:
    return SimpleNamespace(steps=10, model=SimpleNamespace(params=1000), run_dir=None)  # no run dir: no goodput


def _args(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(list(argv))


def test_summary_prices_the_slices_in_use_from_the_plan(tmp_path: Path) -> None:
    cost = tmp_path / "cost.json"
    shutil.copy(GOLDEN_DEV / "cost.json", cost)
    per_chip = json.loads(cost.read_text())["pools"][0]["usd_per_chip_hour"]
    price = run_price(_args("--cost-json", str(cost)), "v5e-dev", "spot")
    s = _summary(_result(1000.0), _job(), TpuSlice.parse("v5e", "2x2"), 2, "xla", True, 1.0, price)
    assert s["capacity"] == "spot"
    assert s["usd_per_hour"] == pytest.approx(per_chip * 8)  # two 4-chip slices in use
    assert s["tokens_per_s_per_chip"] == pytest.approx(1000.0 / 8)
    assert s["tokens_per_usd"] == pytest.approx(1000.0 * 3600 / (per_chip * 8))
    assert "skypilot-catalog" in str(s["usd_source"])


def test_summary_without_a_price_says_unpriced_never_zero() -> None:
    s = _summary(_result(1000.0), _job(), TpuSlice.parse("v5e", "2x2"), 1, "xla", True, 1.0, RunPrice())
    assert s["usd_per_hour"] is None and s["tokens_per_usd"] is None
    assert str(s["usd_source"]).startswith("unpriced")


def test_a_given_usd_per_hour_is_the_total() -> None:
    price = run_price(_args("--usd-per-hour", "10"), None, None)
    s = _summary(_result(3600.0), _job(), TpuSlice.parse("v5e", "2x2"), 1, "xla", True, 1.0, price)
    assert s["usd_per_hour"] == 10.0 and s["tokens_per_usd"] == pytest.approx(3600.0 * 3600 / 10)


def test_bad_price_inputs_name_the_flag_or_file(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="--usd-per-hour"):
        run_price(_args("--usd-per-hour", "-3"), None, None)
    bad = tmp_path / "cost.json"
    bad.write_text("{}")
    with pytest.raises(CostFileError, match=r"cost\.json: not a tpuray cost\.json"):
        run_price(_args("--cost-json", str(bad)), None, None)
    with pytest.raises(CostFileError, match="no pool 'nope'"):
        run_price(_args("--cost-json", str(GOLDEN_DEV / "cost.json")), "nope", None)


def test_compare_prints_both_setups_and_the_ratios(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["compare", "--usd-per-hour", "2", "--tokens-per-second", "9000"]
    assert tpuray([*argv, "--current-usd-per-hour", "4", "--current-tokens-per-second", "6000"]) == 0
    out = capsys.readouterr().out
    ratio = {label: next(x for x in out.splitlines() if x.startswith(label)).split()[-1] for label in
             ("$/h", "tokens/s", "tokens per $")}  # fmt: skip
    assert ratio == {"$/h": "0.500", "tokens/s": "1.500", "tokens per $": "3.000"}  # 16.2M vs 5.4M tokens per $
    assert "16,200,000" in out and "5,400,000" in out


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["--usd-per-hour", "abc", "--tokens-per-second", "1"], "--usd-per-hour"),
        (["--usd-per-hour", "1", "--tokens-per-second", "0"], "--tokens-per-second"),
        (["--usd-per-hour", "1"], "--tokens-per-second"),
        (["--summary", "/nonexistent/summary.json"], "--summary"),
    ],
)
def test_compare_bad_input_is_named(argv: list[str], flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    code = tpuray(["compare", *argv, "--current-usd-per-hour", "4", "--current-tokens-per-second", "6000"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith(f"error: {flag}") and "Traceback" not in err
