"""``tpuray compare`` and the trainer's cost and checkpoint flags on inputs a user (or an attacker) may give:
figures that overflow, labels holding escape sequences, a cost.json with a rate no chip-hour has, a checkpoint
directory that is a file, and workload JSON naming a key twice."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tpuray.components.catalog.throughput import CostFileError, slice_usd_per_hour
from tpuray.components.cli import main as tpuray
from tpuray.workloads.gpt.cli import main as train

GOLDEN_DEV = Path(__file__).resolve().parents[1] / "review" / "golden" / "dev"


def _compare(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = tpuray(["compare", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_a_ratio_that_overflows_is_unknown_never_inf_or_nan(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _compare(
        capsys,
        *("--current-usd-per-hour", "1e-300", "--current-tokens-per-second", "1e-300"),
        *("--usd-per-hour", "1e300", "--tokens-per-second", "1e300"),
    )
    assert code == 0, err
    assert "inf" not in out and "nan" not in out
    ratio_of_usd = next(line for line in out.splitlines() if line.startswith("$/h"))
    assert ratio_of_usd.endswith("unknown")


def test_tokens_per_dollar_that_overflows_is_refused_naming_the_flags(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _compare(
        capsys,
        *("--current-usd-per-hour", "1e-300", "--current-tokens-per-second", "1e300"),
        *("--usd-per-hour", "1", "--tokens-per-second", "1"),
    )
    assert code == 2 and out == ""
    assert "--current-tokens-per-second" in err and "overflows" in err


def test_labels_reach_the_terminal_without_their_escape_sequences(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _compare(
        capsys,
        *("--current-usd-per-hour", "10", "--current-tokens-per-second", "1000", "--current-name", "gpu\x1b[2J"),
        *("--usd-per-hour", "5", "--tokens-per-second", "1000", "--name", "tpu\x1b]0;t\x07\nforged"),
    )
    assert code == 0
    assert "\x1b" not in out and "\x07" not in out and "forged\n" not in out
    assert "gpu\\x1b[2J" in out
    code, _, err = _compare(capsys, "--current-usd-per-hour", "10", "--current-tokens-per-second", "1", "--summary",
                            "no\x1b[31m.json")  # fmt: skip
    assert code == 2 and "\x1b" not in err


@pytest.mark.parametrize(
    ("rate", "named"),
    [
        ("-1.5", r"pools\[0\]\.usd_per_chip_hour is .*a price is a positive finite"),
        ("0", r"pools\[0\]\.usd_per_chip_hour is .*a price is a positive finite"),
        ('"2.0"', r"pools\[0\]\.usd_per_chip_hour is .*a price is a positive finite"),
        ("true", r"pools\[0\]\.usd_per_chip_hour is .*a price is a positive finite"),
        # JSON has no such numbers: the file reader (components/catalog/data_file.py) refuses them first, naming the
        # flag
        ("Infinity", r"--cost-json .*Infinity"),
        ("-Infinity", r"--cost-json .*Infinity"),
        ("NaN", r"--cost-json .*NaN"),
    ],
)
def test_a_cost_json_rate_no_chip_hour_has_is_refused_naming_the_field(tmp_path: Path, rate: str, named: str) -> None:
    doc = json.loads((GOLDEN_DEV / "cost.json").read_text())
    doc["pools"][0]["usd_per_chip_hour"] = "RATE"
    f = tmp_path / "cost.json"
    f.write_text(json.dumps(doc).replace('"RATE"', rate))
    with pytest.raises(CostFileError, match=named):
        slice_usd_per_hour(f, None, 4)


def test_the_trainer_refuses_a_negative_rate_before_any_cluster_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = json.loads((GOLDEN_DEV / "cost.json").read_text())
    doc["pools"][0]["usd_per_chip_hour"] = -2
    f = tmp_path / "cost.json"
    f.write_text(json.dumps(doc))
    ck = tmp_path / "ck"
    assert train(["--topology", "v5e:2x2", "--cost-json", str(f), "--checkpoint-dir", str(ck)]) == 2
    err = capsys.readouterr().err
    assert "pools[0].usd_per_chip_hour is '-2'" in err and "Traceback" not in err


@pytest.mark.parametrize("below", [False, True])
def test_a_checkpoint_dir_that_is_a_file_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], below: bool
) -> None:
    f = tmp_path / "ckpt.txt"
    f.write_text("not a directory")
    target = f / "run" if below else f
    assert train(["--local", "--topology", "v5e:2x2", "--checkpoint-dir", str(target)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --checkpoint-dir ") and "a file, not a directory" in err
    assert "NotADirectoryError" not in err and "Traceback" not in err


def test_workload_json_naming_a_key_twice_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--topology", "v5e:2x2", "--workload", '{"steps": 5, "model": {"layers": 2, "layers": 3}}']
    assert train(argv) == 2
    err = capsys.readouterr().err
    assert "--workload" in err and "duplicate key 'layers'" in err
