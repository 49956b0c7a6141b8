"""The emulated cluster's own start and stop, without starting Ray: a start Ray gives up on is tried once more, and
a stop leaves no process of the cluster behind."""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tpuray.components.catalog.topology import TpuSlice
from tpuray.workloads._ray_compat import is_node_start_timeout
from tpuray.workloads.emulation import cluster as emulation
from tpuray.workloads.emulation.cluster import EmulatedCluster

RAY_GAVE_UP = (
    "The current node timed out during startup. This could happen because some of the raylet failed to startup or "
    "the GCS has become overloaded."
)  # ray/_private/node.py, Ray 2.60


def test_only_rays_node_start_timeout_is_recognised() -> None:
    assert is_node_start_timeout(Exception(RAY_GAVE_UP))
    assert not is_node_start_timeout(RuntimeError(RAY_GAVE_UP))  # Ray raises a bare Exception
    assert not is_node_start_timeout(Exception("The GCS is gone"))


class Starts:
    """A stand-in for :meth:`EmulatedCluster.start` that fails with each of ``errors`` in turn, then starts (a
    private dir, as the real start makes), counting its calls and the dirs it made."""

    def __init__(self, *errors: BaseException) -> None:
        self.errors = list(errors)
        self.dirs: list[Path] = []

    def __call__(self, cluster: EmulatedCluster) -> None:
        cluster._tmp = tempfile.mkdtemp(prefix="tpuray-")
        self.dirs.append(Path(cluster._tmp))
        if self.errors:
            raise self.errors.pop(0)


def test_a_start_ray_gave_up_on_is_made_again_from_nothing_and_said(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    starts = Starts(Exception(RAY_GAVE_UP))
    monkeypatch.setattr(EmulatedCluster, "start", lambda cluster: starts(cluster))
    with EmulatedCluster(TpuSlice.parse("v5e:2x2")) as cluster:
        assert len(starts.dirs) == 2
        assert not starts.dirs[0].exists() and starts.dirs[1].exists()  # the first try's dir went with it
        assert cluster._tmp == str(starts.dirs[1])
    assert not starts.dirs[1].exists()
    assert "did not register within Ray's 30 s start-up limit" in capsys.readouterr().err


@pytest.mark.parametrize(
    "errors",
    [(RuntimeError("port 8265 is taken"),), (Exception(RAY_GAVE_UP), Exception(RAY_GAVE_UP))],
    ids=["another-error", "a-second-timeout"],
)
def test_any_other_failure_or_a_second_timeout_is_raised(
    monkeypatch: pytest.MonkeyPatch, errors: tuple[BaseException, ...]
) -> None:
    starts = Starts(*errors)
    monkeypatch.setattr(EmulatedCluster, "start", lambda cluster: starts(cluster))
    with pytest.raises(type(errors[-1]), match=re.escape(str(errors[-1]))), EmulatedCluster(TpuSlice.parse("v5e:2x2")):
        pass
    assert len(starts.dirs) == len(errors)
    assert not [d for d in starts.dirs if d.exists()]


# A worker whose raylet was killed: its log open in the cluster's dir, its command line renamed (``ray::IDLE``),
# and still writing a file there now and then, as a worker exiting on its own time does.
WRITER = """
import os, pathlib, time
d = pathlib.Path(os.environ["DIR"])
log = open(d / "ray" / "worker.log", "a")
while True:
    log.write("x"); log.flush()
    (d / "ray").mkdir(parents=True, exist_ok=True); (d / "ray" / "late.log").write_text("late")
    time.sleep(0.02)
"""


def test_a_stop_ends_every_process_that_names_the_clusters_dir_or_writes_in_it(tmp_path: Path) -> None:
    cluster = EmulatedCluster(TpuSlice.parse("v5e:2x2"))
    cluster._tmp = str(tmp_path / "tpuray-abcd1234")
    (tmp_path / "tpuray-abcd1234" / "ray").mkdir(parents=True)
    # what a raylet Ray gave up on looks like: started by this process, its session dir on its command line
    named = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", f"{cluster._tmp}/ray/session"])
    writer = subprocess.Popen([sys.executable, "-c", WRITER], env={"DIR": cluster._tmp})
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", str(tmp_path / "tpuray-other")])
    try:
        while not (tmp_path / "tpuray-abcd1234" / "ray" / "late.log").exists():
            assert writer.poll() is None
        assert emulation._processes_using(cluster._tmp) == sorted([named.pid, writer.pid])
        cluster.shutdown()
        assert named.wait(timeout=10) == -9 and writer.wait(timeout=10) == -9
        assert other.poll() is None  # another cluster's process is not this one's
        assert not (tmp_path / "tpuray-abcd1234").exists()
    finally:
        for p in (named, writer, other):
            p.kill()
            p.wait()
