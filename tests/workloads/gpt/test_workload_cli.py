"""The command lines: ``python -m tpuray.workloads.train`` (README command 1, the RayJob entrypoint) and
``python -m tpuray.workloads.emulate -- CMD``, each in a fresh process, and what they leave behind."""

from __future__ import annotations

import ast
import importlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tpuray.components.config import ConfigError, StackConfig, WorkloadConfig, load_stack_file
from tpuray.workloads.gpt import cli as train

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A short private temp dir for the commands' Ray clusters (Ray's socket paths are length-limited), so the
    test can tell its own Ray processes from any other Ray on the machine."""
    d = Path(tempfile.mkdtemp(prefix="t8", dir="/tmp"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def run(module: str, *args: str, cwd: Path, timeout: float = 280, tmp: Path | None = None) -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    if tmp is not None:
        env["TMPDIR"] = str(tmp)
    proc = subprocess.run(
        [sys.executable, "-m", module, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )
    return proc.returncode, proc.stdout, proc.stderr


def summary(stdout: str) -> dict[str, Any] | None:
    lines = [ln for ln in stdout.splitlines() if ln.startswith("{")]
    return json.loads(lines[-1]) if lines else None


def ray_processes(tmp: Path) -> set[int]:
    """Ray processes (raylet, GCS, workers) of clusters under ``tmp``: a command must leave none behind."""
    out = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    return {int(ln.split()[0]) for ln in out.splitlines()[1:] if "ray" in ln and str(tmp) in ln}


def leftovers(tmp: Path) -> list[str]:
    """Ray processes or emulated-cluster dirs still under ``tmp`` (checkpoint dirs are kept on purpose)."""
    dirs = [p.name for p in tmp.iterdir() if re.fullmatch(r"tpuray-[a-z0-9_]{8}", p.name)]
    return [*map(str, ray_processes(tmp)), *dirs]


# ---- flags (no cluster) --------------------------------------------------------------------------------------


def _settings(*argv: str, stack: StackConfig | None = None) -> train.Settings:
    return train.settings(train.build_parser().parse_args(list(argv)), stack)


def test_model_flags_override_the_stack_model() -> None:
    s = _settings("--layers", "3", "--d-model", "96", "--heads", "6", "--vocab-size", "500")
    m = s.workload.model
    assert (m.layers, m.d_model, m.heads, m.vocab_size) == (3, 96, 6, 500)


def test_flags_override_the_stack_and_defaults_come_from_the_models(stack_file: Path) -> None:
    stack = load_stack_file(stack_file)
    s = _settings("--steps", "7", stack=stack)
    # one field overridden, every other one the stack's: the same model, validated once more
    assert s.workload == stack.workload.model_copy(update={"steps": 7})
    assert s.workload.steps != stack.workload.steps
    # no flag, no stack: the models' own defaults (argparse restates none)
    assert _settings() == train.Settings(WorkloadConfig(), train.RunSettings())
    assert all(v is None for k, v in vars(train.build_parser().parse_args([])).items() if k != "local")


def test_the_workload_crosses_as_one_json_value_and_flags_override_it(stack_file: Path) -> None:
    w = WorkloadConfig.model_validate({"steps": 9, "learningRate": 0.5, "model": {"layers": 5}})
    text = w.model_dump_json(by_alias=True)
    assert _settings("--workload", text).workload == w
    s = _settings("--workload", text, "--layers", "6", "--learning-rate", "0.25")
    assert (s.workload.model.layers, s.workload.learning_rate, s.workload.steps) == (6, 0.25, 9)
    with pytest.raises(ConfigError) as err:
        _settings("--workload", '{"steps": 0, "stepz": 1}')
    assert [p for p, _ in err.value.problems] == ["--workload.steps", "--workload.stepz"]
    with pytest.raises(ConfigError, match="--workload: comes instead of --stack"):
        _settings("--workload", text, stack=load_stack_file(stack_file))


@pytest.mark.parametrize(
    ("argv", "flag", "words"),
    [
        (["--steps", "-5"], "--steps", [">= 1 and <= 100000000", "'-5'"]),
        (["--steps", "x"], "--steps", ["valid integer"]),
        (["--learning-rate", "nan"], "--learning-rate", ["finite", "> 0 and <= 10"]),
        (["--heads", "5"], "--heads", ["5 does not divide dModel=64"]),
        (["--d-model", "4"], "--d-model", [">= 8"]),
        (["--backend", "tpu"], "--backend", ["'xla' or 'torch_tpu'"]),
        (["--max-restarts", "-1"], "--max-restarts", [">= 0"]),
        (["--log-every", "0"], "--log-every", [">= 1"]),
        (["--run-name", ".."], "--run-name", ["not a run name", "'/'"]),
        (["--run-name", "a/b"], "--run-name", ["not a run name"]),
        (["--run-name", "../x"], "--run-name", ["not a run name"]),
        (["--run-name", ""], "--run-name", ["not a run name"]),
        (["--run-name=-x"], "--run-name", ["not a run name"]),
        (["--run-name", "a\nb"], "--run-name", ["control character"]),
    ],
)
def test_bad_flags_name_the_flag_and_the_valid_form(argv: list[str], flag: str, words: list[str]) -> None:
    with pytest.raises(ConfigError) as err:
        _settings(*argv)
    ((path, message),) = err.value.problems
    assert path == flag
    assert all(w in message for w in words), message


def test_run_names_are_checkpoint_folders() -> None:
    """Ray Train keeps a run's checkpoints in ``<storage_path>/<name>``: the CLI passes --checkpoint-dir as the
    storage path and --run-name as the name, so two run names never share checkpoints (the GPT test on the
    emulated slice checks where Ray Train puts them)."""
    configs = [train._run_config(_settings("--run-name", n).run, "/ckpt") for n in ("a", "b")]
    assert [(c.storage_path, c.name) for c in configs] == [("/ckpt", "a"), ("/ckpt", "b")]


@pytest.fixture
def no_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if anything starts an emulated cluster or connects to Ray."""
    import ray

    from tpuray.workloads.emulation.cluster import EmulatedCluster

    def refuse(*_: object, **__: object) -> None:
        raise AssertionError("a cluster was started for an input that is refused before any cluster work")

    monkeypatch.setattr(EmulatedCluster, "start", refuse)
    monkeypatch.setattr(ray, "init", refuse)


def test_bad_inputs_fail_before_any_cluster(
    stack_file: Path,
    tmp_path: Path,
    no_cluster: None,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    emulate = importlib.import_module("tpuray.workloads.emulate")  # the module (the package exports a function)
    # a setting the stack's model refuses: refused the same way for a flag, before Ray starts (was: exit 0)
    assert train.main(["--local", "--stack-file", str(stack_file), "--steps", "-5"]) == 2
    out, err = capsys.readouterr()
    assert summary(out) is None and "--steps: " in err and ">= 1" in err
    assert train.main(["--local", "--stack-file", str(stack_file), "--run-name", "../elsewhere"]) == 2
    assert "--run-name: " in capsys.readouterr().err
    assert train.main(["--local", "--topology", "v5e:3x3"]) == 2
    err = capsys.readouterr().err
    assert "3x3" in err and "nearest valid shapes" in err
    assert train.main(["--local", "--stack-file", str(stack_file), "--dataset", str(tmp_path / "nope.bin")]) == 2
    out, err = capsys.readouterr()
    assert summary(out) is None and "nope.bin" in err and "does not exist" in err
    # the dev stack has one slice: emulating it could only end in the refusal the cluster would give
    assert train.main(["--local", "--stack-file", str(stack_file), "--chips", "8"]) == 2
    out, err = capsys.readouterr()
    assert summary(out) is None and "needs 2" in err and "has 1" in err
    assert emulate.main(["--topology", "v5p:2x2x3", "--", "true"]) == 2
    assert "2x2x3" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:  # argparse names the flag
        emulate.main(["--topology", "v5e:2x2", "--num-slices", "0", "--", "true"])
    assert exit_.value.code == 2 and "--num-slices: must be >= 1, got 0" in capsys.readouterr().err
    # a missing stack file names --stack and how to give one (config.find_stack_file, shared by both commands)
    monkeypatch.chdir(tmp_path)
    assert emulate.main(["--stack", "nowhere", "--", "true"]) == 2
    assert "--stack: no Pulumi.nowhere.yaml" in capsys.readouterr().err


# ---- end to end on the emulated dev slice --------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_readme_command_trains_the_gpt_locally(stack_file: Path, tmp_path: Path, short_tmp: Path) -> None:
    code, out, err = run(
        "tpuray.workloads.train",
        "--local",
        "--stack-file",
        str(stack_file),
        "--steps",
        "30",
        cwd=tmp_path,
        tmp=short_tmp,
    )
    assert code == 0, err[-3000:]
    s = summary(out)
    assert s is not None
    assert (s["chips"], s["final_step"], s["restarts"], s["emulated"]) == (4, 30, 0, True)
    assert s["loss_final"] < 0.7 * s["loss_first"]
    assert s["params_identical"]  # the gradient average really happened on every chip
    assert s["tokens_per_s"] > 0 and s["time_to_first_step_s"] > 0
    # the emulated run's compile cache, beside its checkpoints: cold, and what it wrote is counted
    assert s["compile_cache"]["warm"] is False and s["compile_cache"]["files_written"] > 0
    assert "step 30/30" in err  # progress from the chips
    # the first impression (README command 1): one line per progress interval, no MFU on emulated chips,
    # nothing that looks like an error
    progress = [ln.split(")", 1)[-1].strip() for ln in err.splitlines() if re.search(r"\] step \d+/30", ln)]
    assert progress and len(progress) == len(set(progress)), progress
    assert all("MFU n/a" in ln for ln in progress) and "0.00%" not in err
    assert s["mfu"] is None
    assert not [ln for ln in err.splitlines() if "Failed to" in ln or "Error" in ln]
    # goodput over the run's event log: every second of the wall time in one bucket
    g = s["goodput"]
    assert g is not None and 0 < g["goodput_pct"] < 100
    assert g["productive_s"] + sum(g["badput_s"].values()) == pytest.approx(g["elapsed_s"], abs=0.05)
    assert g["elapsed_s"] == pytest.approx(s["wall_s"], rel=0.02)
    assert not leftovers(short_tmp)


def _readme_example() -> str:
    """The ten-line example of the README's emulate section."""
    text = (REPO / "README.md").read_text()
    m = re.search(r"<!-- emulate-example -->\s*```python\n(.*?)```", text, re.S)
    assert m, "README.md lost its emulate example"
    return m.group(1)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_emulate_runs_a_user_script_that_imports_only_the_public_api(
    stack_file: Path, tmp_path: Path, short_tmp: Path
) -> None:
    script = tmp_path / "your_script.py"
    script.write_text(_readme_example())
    imports = set(re.findall(r"^(?:from|import) ([\w.]+)", script.read_text(), re.M))
    assert {i.split(".")[0] for i in imports} <= {"ray", "torch", "torch_xla", "tpuray"}
    assert {i for i in imports if i.startswith("tpuray")} <= {"tpuray.workloads"}
    (tmp_path / "Pulumi.dev.yaml").write_text(stack_file.read_text())
    # Ray Train's default storage (~/ray_results) stays in the test's dir
    env_home = {"HOME": str(tmp_path), "TMPDIR": str(short_tmp)}
    # the script, then a failing exit: one cluster shows both that the script trains and that a command's exit
    # code comes back with the cluster gone all the same (7 only if the script itself succeeded)
    command = ["sh", "-c", '"$0" "$1" && exit 7', sys.executable, str(script)]
    proc = subprocess.run(
        [sys.executable, "-m", "tpuray.workloads.emulate", "--stack", "dev", "--", *command],
        cwd=tmp_path,
        env={**{k: v for k, v in os.environ.items() if not k.startswith("RAY_")}, **env_home},
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert proc.returncode == 7, proc.stderr[-3000:]
    assert "emulating 1 x v5e:2x2" in proc.stderr
    result = ast.literal_eval([ln for ln in proc.stdout.splitlines() if ln.startswith("{")][-1])
    assert result["loss"] < 0.1 * result["first_loss"]
    assert not leftovers(short_tmp)
