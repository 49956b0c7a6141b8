"""``tpuray port check``: every GPU-only construct of a fixture script, at its line; nothing in a clean one."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from tpuray.components.catalog.gpu_to_tpu import REPLACEMENTS
from tpuray.components.cli import main
from tpuray.components.review.port_check import check_file, check_source

FIXTURES = Path(__file__).parents[1] / "fixtures" / "port"
GPU_SCRIPT = FIXTURES / "gpu_train.py"
CLEAN_SCRIPT = FIXTURES / "tpu_train.py"


def _expected(path: Path) -> set[tuple[int, str]]:
    """(line, kind) of each ``# expect: KIND`` comment in the fixture."""
    lines = path.read_text().splitlines()
    return {(n, m.group(1)) for n, line in enumerate(lines, 1) if (m := re.search(r"# expect: ([\w-]+)$", line))}


def test_the_fixture_covers_every_kind() -> None:
    assert {kind for _, kind in _expected(GPU_SCRIPT)} == set(REPLACEMENTS)


def test_every_construct_is_found_at_its_line() -> None:
    found = {(f.line, f.kind) for f in check_file(GPU_SCRIPT)}
    assert found == _expected(GPU_SCRIPT)


def test_a_clean_script_has_no_finding() -> None:
    assert check_file(CLEAN_SCRIPT) == []


@pytest.mark.parametrize(
    ("source", "kind"),
    [
        ("import torch as th\nth.cuda.empty_cache()\n", "cuda-memory"),
        ("from torch import cuda\ncuda.synchronize()\n", "cuda-sync"),
        ("import torch\nn = torch.cuda.device_count()\n", "cuda-api"),
        ("from ray import train\nc = train.ScalingConfig(num_workers=2, use_gpu=flag)\n", "use-gpu"),
        ("import torch\ntorch.distributed.init_process_group(backend='nccl')\n", "nccl"),
    ],
)
def test_aliases_and_variants(source: str, kind: str) -> None:
    assert [(f.line, f.kind) for f in check_source(source)] == [(2, kind)]


@pytest.mark.parametrize(
    "source",
    [
        "from ray.train import ScalingConfig\nc = ScalingConfig(num_workers=2, use_gpu=False)\n",
        "import torch\nwith torch.autocast('xla', dtype=torch.bfloat16):\n    pass\n",
        "import torch\nwith torch.autocast(dtype=torch.bfloat16):\n    pass\n",
        "x = {'GPU': 1}\nname = 'cudatoolkit'\n",
        "import torch\ntorch.distributed.init_process_group('gloo')\n",
    ],
)
def test_tpu_ready_code_is_not_flagged(source: str) -> None:
    assert check_source(source) == []


def test_cli_exit_codes_and_output(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["port", "check", str(CLEAN_SCRIPT)]) == 0
    assert "no GPU-only construct" in capsys.readouterr().out
    assert main(["port", "check", str(CLEAN_SCRIPT), str(GPU_SCRIPT)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert f"{GPU_SCRIPT}:52:20: ScalingConfig(num_workers=8, use_gpu=True): " in out[-4]
    assert 'tpu_scaling_config("v5e:2x2")' in out[-4]
    assert out[-1] == f"{len(_expected(GPU_SCRIPT))} GPU-only construct(s) in 1 of 2 script(s)"


def test_cli_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["port", "check", "--json", str(GPU_SCRIPT)]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert {(d["line"], d["kind"]) for d in doc} == _expected(GPU_SCRIPT)
    assert all(d["replacement"] == REPLACEMENTS[d["kind"]][1] for d in doc)


def _fifo(tmp_path: Path) -> Path:
    os.mkfifo(tmp_path / "pipe.py")
    return tmp_path / "pipe.py"


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda d: d / "missing.py", "missing.py: no such file"),
        (lambda d: d, "a directory"),
        (lambda d: (d / "bad.py").write_text("def f(:\n    pass\n") and d / "bad.py", "bad.py:1: not Python"),
        (lambda d: (d / "bin.py").write_bytes(b"\xff\xfe\x00") and d / "bin.py", "bin.py: not UTF-8"),
        (_fifo, "pipe.py: not a regular file"),
    ],
)
def test_bad_input_is_one_line_naming_the_file(
    tmp_path: Path, make: object, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = make(tmp_path)  # type: ignore[operator]
    assert main(["port", "check", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1


def test_the_checker_imports_neither_torch_nor_ray() -> None:
    import subprocess
    import sys

    code = "import sys, tpuray.components.cli as c; c.main(['port', 'check', sys.argv[1]])\n"
    code += "print(sorted(m for m in sys.modules if m.split('.')[0] in {'torch', 'ray', 'pulumi'}))"
    out = subprocess.run([sys.executable, "-c", code, str(GPU_SCRIPT)], capture_output=True, text=True, check=True)
    assert out.stdout.splitlines()[-1] == "[]"


def test_a_450_link_attribute_chain_that_cpython_compiles_is_checked() -> None:
    source = "import torch\nx = torch" + ".a" * 450 + "\ny = torch.cuda.synchronize()\n"
    compile(source, "chain.py", "exec")  # valid Python, as CPython sees it
    found = check_source(source, "chain.py")
    assert [(f.line, f.kind) for f in found] == [(3, "cuda-sync")]


def test_a_600_term_sum_that_cpython_compiles_is_checked() -> None:
    source = "import torch\nt = " + " + ".join(["x.cuda()"] * 600) + "\n"
    compile(source, "sum.py", "exec")
    found = check_source(source, "sum.py")
    assert len(found) == 600 and {f.kind for f in found} == {"cuda-method"}
    assert {f.code for f in found} == {"x.cuda()"}


def test_a_long_expression_finding_is_cut_from_its_first_characters() -> None:
    source = "import torch\nx = model.cuda(\n" + ",\n".join(f"    a{i}" for i in range(5000)) + ")\n"
    (f,) = check_source(source, "long.py")
    assert f.kind == "cuda-method" and f.code.startswith("model.cuda( a0, a1, a2") and len(f.code) == 60


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("import torch\nx = 1\x00\n", "nul.py:2: not Python (a NUL byte"),
        ("x = " + "(" * 300 + "1" + ")" * 300 + "\n", "nul.py:1: not Python (too many nested parentheses)"),
        ("x = " + "-" * 200_000 + "1\n", "nul.py: not checkable: nested too deeply for Python's parser"),
    ],
    ids=["nul", "parentheses", "unary-chain"],
)
def test_unparseable_input_names_the_file_and_a_line_never_none(
    tmp_path: Path, source: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "nul.py"
    path.write_bytes(source.encode())
    assert main(["port", "check", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and ":None" not in err and err.count("\n") == 1


def test_port_check_prints_no_control_character_it_did_not_write(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "esc\x1b[31m.py"
    path.write_text('import torch\nx = torch.randn(2).cuda("\x1b]0;pwned\x07")\n')
    assert main(["port", "check", str(path)]) == 1
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out
    assert "esc\\x1b[31m.py:2:" in out and '.cuda("\\x1b]0;pwned\\x07")' in out
    missing = tmp_path / "gone\x1b[2J.py"
    assert main(["port", "check", str(missing)]) == 2
    assert "\x1b" not in capsys.readouterr().err
