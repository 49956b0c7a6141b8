"""XlaChipConfig's pieces that need no cluster: the scaling config, chip() outside a run, the slice read-back."""

from __future__ import annotations

import pytest

from tpuray.components.catalog.names import (
    RAY_POD_TYPE_LABEL,
    RAY_SLICE_NAME_LABEL,
    RAY_TOPOLOGY_LABEL,
    RAY_WORKER_ID_LABEL,
)
from tpuray.components.catalog.topology import TopologyError, TpuSlice
from tpuray.workloads import XlaChipConfig, chip, tpu_scaling_config
from tpuray.workloads.api.scaling import GENERATION_PIN
from tpuray.workloads.placement.seats import PlacementError, Seat, slice_of
from tpuray.workloads.xla.backend import check_scaling_config


@pytest.mark.parametrize(
    "spec,n", [("v5p:4x4x4", 1), ("v6e:2x4:ct6e-standard-4t", 2), ("v5e:2x2", 1), ("tpu7x:2x2x4", 3)]
)
def test_one_tpu_worker_per_chip_whole_slices(spec: str, n: int) -> None:
    s = TpuSlice.parse(spec)
    for arg in (spec, s):
        cfg = tpu_scaling_config(arg, num_slices=n)  # Ray validates use_tpu/topology/accelerator_type here
        assert cfg.num_workers == s.chips * n
        assert (cfg.use_tpu, cfg.topology, cfg.accelerator_type) == (True, s.topology, s.ray_accelerator_type)
        # Ray pins only what it takes for multi-host slices; the others stay on the right generation, and a
        # single-host slice's chips on one VM. Ray takes a v6e 2x4 for one 8-chip VM even on two 4-chip VMs.
        pin = {f"accelerator_type:{s.ray_accelerator_type}": GENERATION_PIN}
        pinned_by_ray = s.multi_host and spec != "v6e:2x4:ct6e-standard-4t"
        # one CPU per VM, shared by its chips' workers: Ray would add CPU: 1 per chip worker otherwise, and a
        # Tune trial's own actor would find no CPU left on the slice's VMs
        cpu = {"CPU": 1 / s.chips_per_host}
        assert cfg.resources_per_worker == ({"TPU": 1, **cpu} if pinned_by_ray else {"TPU": 1, **cpu, **pin})
        assert cfg.resources_per_worker["CPU"] * s.chips_per_host == pytest.approx(1)
        assert cfg.placement_strategy == ("PACK" if s.multi_host else "STRICT_PACK")


def test_bad_scaling_inputs_are_named() -> None:
    with pytest.raises(ValueError, match="single-host slice and GKE Multislice only joins multi-host"):
        tpu_scaling_config("v5e:2x2", num_slices=2)
    with pytest.raises(ValueError, match="num_slices must be a whole number"):
        tpu_scaling_config("v5p:2x2x2", num_slices=0)
    with pytest.raises(ValueError, match=r"sets \['num_workers'\] itself"):
        tpu_scaling_config("v5p:2x2x2", num_workers=3)
    with pytest.raises(TopologyError, match="3x3"):
        tpu_scaling_config("v5e:3x3")
    with pytest.raises(ValueError, match=r"use_gpu=True with XlaChipConfig.*tpu_scaling_config"):
        tpu_scaling_config("v5e:2x2", use_gpu=True)


def test_a_worker_count_that_is_not_whole_slices_is_refused_before_anything_starts() -> None:
    """Ray's own ScalingConfig refuses it at construction, so no controller or placement group exists yet."""
    from ray.train.v2.api.config import ScalingConfig  # what ray.train exports in 2.60 (V2)

    s = TpuSlice.parse("v5p:2x2x2")
    good = tpu_scaling_config(s)
    with pytest.raises(ValueError, match=r"`num_workers` \(6\) must be a multiple of 8"):
        ScalingConfig(
            num_workers=6,
            use_tpu=True,
            topology=good.topology,
            accelerator_type=good.accelerator_type,
            resources_per_worker=good.resources_per_worker,
        )


_GPU = {"num_workers": 4, "use_gpu": True}  # the GPU script's own line, kept by mistake


@pytest.mark.parametrize(
    ("asked", "message"),
    [
        (_GPU, r"use_gpu=True with XlaChipConfig.*tpu_scaling_config\('<gen>:<topology>'"),
        ({"num_workers": 4}, r"ScalingConfig.use_tpu is False with XlaChipConfig.*tpu_scaling_config\("),
        (
            {
                "num_workers": 8,
                "use_tpu": True,
                "topology": "2x2x2",
                "accelerator_type": "TPU-V5P",
                "resources_per_worker": {"TPU": 4},
            },
            r"ScalingConfig.resources_per_worker\['TPU'\] = 4 with XlaChipConfig: must be 1",
        ),
    ],
    ids=["use_gpu", "no_tpu", "tpu_per_host"],
)
def test_a_scaling_config_xla_cannot_run_is_refused_when_the_trainer_is_built(
    asked: dict[str, object], message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``TorchTrainer(...)`` itself raises, so no controller starts and no placement group is asked for (a run
    asking for GPUs would wait for them and retry without end); other backends' configs are untouched."""
    import ray
    from ray.train import ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    def refuse(*_: object, **__: object) -> None:
        raise AssertionError("a refused config reached Ray")

    monkeypatch.setattr(ray, "init", refuse)
    with pytest.raises(ValueError, match=message):
        TorchTrainer(lambda: None, scaling_config=ScalingConfig(**asked), torch_config=XlaChipConfig())  # type: ignore[arg-type]
    TorchTrainer(lambda: None, scaling_config=ScalingConfig(**_GPU), torch_config=TorchConfig())  # type: ignore[arg-type]
    TorchTrainer(
        lambda: None, scaling_config=tpu_scaling_config("v5p:2x2x2", num_slices=2), torch_config=XlaChipConfig()
    )
    assert not ray.is_initialized()


def test_a_worker_count_changed_after_construction_is_refused_by_the_backend_check() -> None:
    """Ray checks whole slices when the ScalingConfig is built; a count set afterwards meets tpuray's check."""
    from ray.train.torch import TorchTrainer

    s = TpuSlice.parse("v5p:2x2x2")
    cfg = tpu_scaling_config(s)
    cfg.num_workers = 12
    with pytest.raises(ValueError, match=r"ScalingConfig.num_workers = 12: not a whole number of v5p:2x2x2 .* 8"):
        TorchTrainer(lambda: None, scaling_config=cfg, torch_config=XlaChipConfig())
    check_scaling_config(XlaChipConfig(), tpu_scaling_config(s, num_slices=3))  # 24 workers: three slices


def test_chip_outside_a_run_says_where_it_works() -> None:
    with pytest.raises(RuntimeError, match="XlaChipConfig"):
        chip()


def test_config_names_its_own_backend() -> None:
    """A named backend keeps TorchTrainer from switching to torch_tpu's tpu_dist, and Ray's _TorchBackend
    (which needs torch_tpu on a TPU worker) is not used."""
    from ray.train.backend import Backend
    from ray.train.torch import TorchTrainer
    from ray.train.torch.config import _TorchBackend

    cfg = XlaChipConfig()
    trainer = TorchTrainer(lambda: None, torch_config=cfg, scaling_config=tpu_scaling_config("v5e:2x2"))
    assert trainer.backend_config.backend == "xla"  # type: ignore[attr-defined]
    assert issubclass(cfg.backend_cls, Backend) and not issubclass(cfg.backend_cls, _TorchBackend)


def _labels(name: str, s: TpuSlice, w: int) -> dict[str, str]:
    return {
        RAY_SLICE_NAME_LABEL: name,
        RAY_WORKER_ID_LABEL: str(w),
        RAY_POD_TYPE_LABEL: s.pod_type,
        RAY_TOPOLOGY_LABEL: s.topology,
    }


@pytest.mark.parametrize("spec", ["v5e:2x4:ct5lp-hightpu-4t", "v5e:2x4", "v5p:2x2x2", "v6e:2x2"], ids=str)
def test_slice_read_back_from_the_workers_labels(spec: str) -> None:
    """2x4 is one 8-chip VM or two 4-chip VMs: the hosts the workers sit on decide (Ray's own reservation
    does not pass chips_per_vm)."""
    s = TpuSlice.parse(spec)
    seats = [
        Seat(0, i, f"sl{i}", w, c, "10.0.0.1", labels=_labels(f"sl{i}", s, w))
        for i in range(2)
        for w in range(s.hosts)
        for c in range(s.chips_per_host)
    ]
    assert slice_of(seats) == s
    with pytest.raises(PlacementError, match="not one per chip"):
        slice_of(seats[:-1])
    other = TpuSlice.parse("v4:2x2x2")
    with pytest.raises(PlacementError, match="not on one TPU slice shape"):
        slice_of([*seats, Seat(0, 2, "x", 0, 0, "10.0.0.2", labels=_labels("x", other, 0))])
