"""The `tpuray` console script: topology report and config check."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tpuray.components.cli import main, render_project_file

ROOT = Path(__file__).resolve().parents[1]


def test_topology_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["topology", "v5e", "4x8", "--json"]) == 0
    facts = json.loads(capsys.readouterr().out)
    assert facts["hosts"] == 8 and facts["chips"] == 32 and facts["pod_type"] == "v5litepod-32"
    assert facts["host_bounds"] == "2,4,1"


def test_topology_table_and_machine_type(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["topology", "trillium", "2x4", "--machine-type", "ct6e-standard-4t"]) == 0
    out = capsys.readouterr().out
    assert "hosts                  2" in out and "placement              compact" in out


def test_topology_error_exits_2_naming_the_field(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["topology", "v5p", "4x8x4"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: topology:") and "4x4x8" in err


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_config_check_accepts_the_stacks(stack: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "check", str(ROOT / f"Pulumi.{stack}.yaml")]) == 0
    assert ": ok" in capsys.readouterr().out


def test_config_check_rejects_a_corrupted_copy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "Pulumi.bad.yaml"
    bad.write_text((ROOT / "Pulumi.prod.yaml").read_text().replace("topology: 4x4\n", "topology: 4x5\n"))
    assert main(["config", "check", str(bad)]) == 1
    assert "slicePools[1].topology: '4x5' is not a valid v6e topology" in capsys.readouterr().err


def test_project_file_is_regenerated_byte_for_byte() -> None:
    text = (ROOT / "Pulumi.yaml").read_text()
    assert render_project_file(text) == text


def test_the_command_runs_main_without_the_cyclic_collector_and_exits_with_its_code() -> None:
    """``tpuray`` (``cli.run``) turns the collector off around ``main`` and exits with main's code; ``main`` alone
    (what tests and embedding programs call) leaves it on."""
    import gc
    import subprocess
    import sys

    assert main(["topology", "v5e", "2x2", "--json"]) == 0 and gc.isenabled()
    probe = (
        "import gc, tpuray.components.cli as cli\n"
        "def fake(argv=None):\n"
        "    print(gc.isenabled(), flush=True)\n"
        "    return 5\n"
        "cli.main = fake\n"
        "cli.run()\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=False)
    assert (done.returncode, done.stdout.strip()) == (5, "False"), done.stderr
