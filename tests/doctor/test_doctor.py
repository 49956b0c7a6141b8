"""``tpuray doctor`` against saved snapshots and, through the real Kubernetes client, a fake API on loopback."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Any, get_args

import pytest

from tests.support.doctor_snapshots import FIXTURES, STACK, write_snapshot
from tests.support.fake_kube_api import PATHS, serve, write_kubeconfig
from tpuray.components import cli
from tpuray.components.catalog import names
from tpuray.components.config import WorkloadConfig, parse_stack_config
from tpuray.components.doctor.reader import (
    LIST_FILES,
    OPTIONAL_LIST_FILES,
    OPTIONAL_SNAPSHOT_FILES,
    SNAPSHOT_FILES,
    VERSION_FILE,
    ClusterObjects,
)
from tpuray.components.doctor.webhook_checks import check_tpu_webhook

ROOT = Path(__file__).resolve().parents[2]


def doctor(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = cli.main(["doctor", *args])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


def failing(out: str) -> set[str]:
    return {c["id"] for c in json.loads(out)["checks"] if c["status"] == "fail"}


@pytest.mark.parametrize("name", list(FIXTURES))
def test_snapshot_and_live_give_the_fixtures_expected_checks(
    name: str, project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, want_ids, want_code = FIXTURES[name]
    snapshot = write_snapshot(tmp_path / name, name)
    base = ["--stack", STACK, "--root", str(project), "--json"]

    code, out, _ = doctor(capsys, *base, "--snapshot", str(snapshot))
    assert (code, failing(out)) == (want_code, want_ids)
    from_snapshot = json.loads(out)

    with serve(snapshot) as api:
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", api.server)
        code, out, _ = doctor(capsys, *base, "--kubeconfig", str(kubeconfig), "--context", "fake")
    assert (code, failing(out)) == (want_code, want_ids)
    assert api.writes == []  # the doctor only reads
    assert set(api.gets) == set(PATHS)  # and only what it needs
    live = json.loads(out)
    assert live["source"] == f"context fake at {api.server}"
    assert live["checks"] == from_snapshot["checks"]  # one code path: the same facts either way
    assert all(c["source"].startswith("https://") and c["fix"] for c in live["checks"])


def test_text_report_names_each_failure_with_fix_and_source(
    project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    snapshot = write_snapshot(tmp_path / "s", "old-gke")
    code, out, _ = doctor(capsys, "--stack", STACK, "--root", str(project), "--snapshot", str(snapshot))
    assert code == 1
    fail_lines = [line for line in out.splitlines() if line.startswith("FAIL")]
    assert [line.split()[1] for line in fail_lines] == [
        "gke-version.v6e",
        "gke-version.tpu7x",
        "gke-version.flex-start",
        "gke-version.spot-shutdown",
    ]
    assert "1.34.0-gke.2201000" in out and "v1.31.1-gke.1678000" in out
    assert out.count("fix: ") == 4 and out.count("source: https://") == 4
    assert out.strip().endswith("4 failed")


@pytest.mark.parametrize(
    ("file", "content", "complaint"),
    [
        (LIST_FILES["nodes"], None, "missing"),
        (LIST_FILES["pods"], "{not json", "not JSON (line 1"),
        (LIST_FILES["crds"], '{"kind": "List"}', "expected a Kubernetes list"),
        (LIST_FILES["webhooks"], '{"items": [42]}', "items[0] is not a Kubernetes object"),
        (VERSION_FILE, '{"clientVersion": {"gitVersion": "v1.34.0"}}', "no serverVersion.gitVersion"),
        # optional, but read when it is there: a wrong list is refused as any other
        (
            OPTIONAL_LIST_FILES["gateway_classes"],
            '{"kind": "NodeList", "items": []}',
            "expected a list of GatewayClass",
        ),
    ],
)
def test_a_malformed_snapshot_is_one_line_naming_the_file(
    file: str, content: str | None, complaint: str, project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    snapshot = write_snapshot(tmp_path / "s", "healthy")
    if content is None:
        (snapshot / file).unlink()
    else:
        (snapshot / file).write_text(content)
    code, out, err = doctor(capsys, "--stack", STACK, "--root", str(project), "--snapshot", str(snapshot))
    assert (code, out) == (2, "")
    assert len(err.strip().splitlines()) == 1
    assert str(snapshot / file) in err and complaint in err


def test_an_unreachable_cluster_is_one_line_naming_context_and_server(
    project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import socket

    with socket.socket() as s:  # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", f"http://127.0.0.1:{port}", context="gone")
    code, out, err = doctor(capsys, "--stack", STACK, "--root", str(project), "--kubeconfig", str(kubeconfig))
    assert (code, out) == (2, "")
    assert len(err.strip().splitlines()) == 1
    assert f"context gone at http://127.0.0.1:{port}" in err and "cannot reach the API server" in err


def test_an_unknown_context_or_kubeconfig_is_bad_input(
    project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", "http://127.0.0.1:9")
    args = ["--stack", STACK, "--root", str(project), "--kubeconfig", str(kubeconfig)]
    code, _, err = doctor(capsys, *args, "--context", "nope")
    assert code == 2 and "context 'nope'" in err and len(err.strip().splitlines()) == 1
    code, _, err = doctor(capsys, "--stack", STACK, "--root", str(project), "--kubeconfig", str(tmp_path / "none"))
    assert code == 2 and "kubeconfig" in err and len(err.strip().splitlines()) == 1


def test_an_unknown_stack_is_bad_input(project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    snapshot = write_snapshot(tmp_path / "s", "healthy")
    code, out, err = doctor(capsys, "--stack", "nosuch", "--root", str(project), "--snapshot", str(snapshot))
    assert (code, out) == (2, "")
    assert "unknown stack 'nosuch'" in err and f"stacks: {STACK}" in err
    code, _, err = doctor(capsys, "--stack", "../x", "--root", str(project), "--snapshot", str(snapshot))
    assert code == 2 and "--stack" in err


def test_without_the_kubernetes_client_live_mode_says_how_to_install_it(
    project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "kubernetes", None)  # import kubernetes now raises ModuleNotFoundError
    code, _, err = doctor(capsys, "--stack", STACK, "--root", str(project))
    assert code == 2 and "pip install 'tpuray[doctor]'" in err and "--snapshot" in err
    snapshot = write_snapshot(tmp_path / "s", "healthy")  # snapshot mode does without it
    code, _, _ = doctor(capsys, "--stack", STACK, "--root", str(project), "--snapshot", str(snapshot))
    assert code == 0


def _docker_inspect(path: Path, labels: dict[str, str]) -> Path:
    path.write_text(json.dumps([{"Id": "sha256:" + "0" * 64, "Config": {"Labels": labels}}]))
    return path


def test_image_inspect_output_is_read_for_the_worker_versions(
    project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    snapshot = write_snapshot(tmp_path / "s", "healthy")
    base = ["--stack", STACK, "--root", str(project), "--snapshot", str(snapshot), "--json"]
    labels = {
        names.IMAGE_RAY_VERSION_LABEL: "2.51.0",
        names.IMAGE_TORCH_VERSION_LABEL: "2.9.0",
        names.IMAGE_TORCH_XLA_VERSION_LABEL: "2.9.0",
    }
    code, out, _ = doctor(capsys, *base, "--image-inspect", str(_docker_inspect(tmp_path / "i.json", labels)))
    assert (code, failing(out)) == (1, {"worker-ray-version"})  # below the token-auth floor
    code, _, err = doctor(capsys, *base, "--image-inspect", str(_docker_inspect(tmp_path / "j.json", {})) + "x")
    assert code == 2 and "j.jsonx" in err
    (tmp_path / "k.json").write_text('[{"Config": {}}]')
    code, _, err = doctor(capsys, *base, "--image-inspect", str(tmp_path / "k.json"))
    assert code == 2 and "k.json: no Config.Labels" in err


def test_unknown_worker_versions_warn_and_never_pass(
    project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    snapshot = write_snapshot(tmp_path / "s", "healthy")
    pods: dict[str, Any] = json.loads((snapshot / LIST_FILES["pods"]).read_text())
    for pod in pods["items"]:
        pod["metadata"].pop("annotations", None)
    (snapshot / LIST_FILES["pods"]).write_text(json.dumps(pods))
    code, out, _ = doctor(capsys, "--stack", STACK, "--root", str(project), "--snapshot", str(snapshot), "--json")
    checks = {c["id"]: c for c in json.loads(out)["checks"]}
    assert code == 0
    assert checks["worker-torch-pair"]["status"] == checks["worker-ray-version"]["status"] == "warn"
    assert "unknown" in checks["worker-ray-version"]["fact"]


def _dockerfile_labels() -> dict[str, dict[str, str]]:
    """workloads/Dockerfile's LABELs by build stage (``FROM ... AS <stage>``), in the file's order."""
    text = (ROOT / "workloads" / "Dockerfile").read_text().replace("\\\n", " ")
    stages: dict[str, dict[str, str]] = {}
    for line in text.splitlines():
        if line.startswith("FROM "):
            words = line.split()
            assert len(words) == 4 and words[2] == "AS", f"every stage is named: {line}"
            stage = stages.setdefault(words[3], {})
        elif line.startswith("LABEL "):
            for pair in shlex.split(line)[1:]:
                key, _, value = pair.partition("=")
                stage[key] = value
    return stages


def test_each_worker_image_target_stamps_its_backend_and_the_versions_the_doctor_reads() -> None:
    labels = _dockerfile_labels()
    images = {stage: keys for stage, keys in labels.items() if keys}
    shared = {names.IMAGE_BACKEND_LABEL, names.IMAGE_RAY_VERSION_LABEL, names.IMAGE_TORCH_VERSION_LABEL}
    assert {stage: set(keys) for stage, keys in images.items()} == {
        "worker-torch-tpu": shared | {names.IMAGE_TORCH_TPU_VERSION_LABEL, names.IMAGE_LIBTPU_VERSION_LABEL},
        "worker-xla": shared | {names.IMAGE_TORCH_XLA_VERSION_LABEL},
    }
    # one image per backend the workload config names; the default target (the last stage) stays the XLA one
    backends = {keys[names.IMAGE_BACKEND_LABEL]: stage for stage, keys in images.items()}
    assert backends == {"torch_tpu": "worker-torch-tpu", "xla": "worker-xla"}
    assert set(backends) == set(get_args(WorkloadConfig.model_fields["backend"].annotation))
    assert list(labels)[-1] == "worker-xla"


def test_snapshot_files_are_documented() -> None:
    guide = (ROOT / "docs" / "doctor.md").read_text()
    assert all(f"`{name}`" in guide for name in (*SNAPSHOT_FILES, *OPTIONAL_SNAPSHOT_FILES))


def test_the_tpu_webhook_is_needed_only_by_multi_host_slices() -> None:
    """The KubeRay Helm chart brings no TPU webhook: a stack with a multi-host pool fails without one, naming the
    pool; a single-host-only stack passes (its pod is worker 0 of its slice)."""
    objs = ClusterObjects((), (), (), (), (), "v1.33.0-gke.1", "test")
    pools = {
        "single": [{"name": "one", "generation": "v5e", "topology": "2x2"}],
        "multi": [
            {"name": "one", "generation": "v5e", "topology": "2x2"},
            {"name": "big", "generation": "v5p", "topology": "2x2x2"},
        ],
    }
    results = {}
    for name, slice_pools in pools.items():
        cfg = parse_stack_config(
            {"project": "tpuray-test-proj", "region": "us-east5", "zone": "us-east5-a", "slicePools": slice_pools}
        )
        results[name] = check_tpu_webhook(cfg, objs)
    assert results["single"].status == "pass" and "no pool is multi-host" in results["single"].fact
    assert results["multi"].status == "fail" and "(big)" in results["multi"].fact
    assert "kuberay-tpu-webhook" in results["multi"].fix
