"""The worker image: the runtime the stack's backend names, its torch pair, and the Ray version of the stack."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from tpuray.components.catalog.names import (
    IMAGE_BACKEND_LABEL,
    IMAGE_LIBTPU_VERSION_LABEL,
    IMAGE_RAY_VERSION_LABEL,
    IMAGE_TORCH_TPU_VERSION_LABEL,
    IMAGE_TORCH_VERSION_LABEL,
    IMAGE_TORCH_XLA_VERSION_LABEL,
)
from tpuray.components.catalog.runtimes import (
    RUNTIMES,
    TORCH_TPU_LIBTPU,
    TORCH_TPU_TORCH,
    TORCH_TPU_VERSIONS,
    runtime_for_tag,
)
from tpuray.components.config import (
    MIN_RAY_TOKEN_AUTH,
    StackConfig,
)
from tpuray.components.doctor.objects import (
    image_tag,
    meta,
    running_tpu_pods,
    short,
    tpu_containers,
    version,
    where,
)
from tpuray.components.doctor.reader import ClusterObjects
from tpuray.components.doctor.result import CheckResult
from tpuray.components.doctor.sources import SRC_TOKEN_AUTH, SRC_TORCH_TPU, SRC_TORCH_XLA

__all__ = ["ImageVersions", "check_worker_image", "worker_image_versions"]


@dataclass(frozen=True)
class ImageVersions:
    """Versions a worker image reports (its ``tpuray.io/*-version`` labels); None where it says nothing."""

    ray: str | None
    torch: str | None
    torch_xla: str | None
    where: str
    torch_tpu: str | None = None
    libtpu: str | None = None
    backend: str | None = None
    """The image's runtime (``tpuray.io/backend``: ``xla`` or ``torch_tpu``, one workloads/Dockerfile target each)."""
    tag_backend: str | None = None
    """The runtime the pod's image tag names (``...-xla``, ``...-torch-tpu``: catalog/images.py), where it does."""

    @classmethod
    def from_labels(cls, labels: Mapping[str, Any], where: str) -> ImageVersions:
        def get(key: str) -> str | None:
            value = labels.get(key)
            return value if isinstance(value, str) and value else None

        return cls(
            get(IMAGE_RAY_VERSION_LABEL),
            get(IMAGE_TORCH_VERSION_LABEL),
            get(IMAGE_TORCH_XLA_VERSION_LABEL),
            where,
            get(IMAGE_TORCH_TPU_VERSION_LABEL),
            get(IMAGE_LIBTPU_VERSION_LABEL),
            get(IMAGE_BACKEND_LABEL),
        )


def _tag_backend(pod: Mapping[str, Any]) -> str | None:
    """The runtime the image tag of the pod's TPU container names (``...-xla``), or None where it names none."""
    for path in tpu_containers(pod):
        _, tag = image_tag(pod, path)
        found = runtime_for_tag(tag)
        if found is not None:
            return found
    return None


def worker_image_versions(cfg: StackConfig, objs: ClusterObjects) -> list[ImageVersions]:
    """The versions each running TPU worker pod of the Ray namespace reports through its annotations, and the
    runtime its image's tag names."""
    out = []
    for pod in running_tpu_pods(objs, cfg.ray.namespace):
        annotations = meta(pod).get("annotations")
        found = ImageVersions.from_labels(annotations if isinstance(annotations, Mapping) else {}, where(pod))
        out.append(replace(found, tag_backend=_tag_backend(pod)))
    return out


def _runtime_seen(r: ImageVersions, torch_tpu: bool) -> str:
    backend = f"{r.backend} image, " if r.backend else ""
    if r.tag_backend is not None and r.tag_backend != r.backend:
        backend += f"tagged {r.tag_backend}, "
    if torch_tpu:
        return f"{r.where}: {backend}torch {r.torch or '?'}, torch_tpu {r.torch_tpu or '?'}, libtpu {r.libtpu or '?'}"
    return f"{r.where}: {backend}torch {r.torch or '?'}, torch_xla {r.torch_xla or '?'}"


def _torch_xla_ok(r: ImageVersions) -> bool:
    torch, xla = version(r.torch), version(r.torch_xla)
    return torch is not None and xla is not None and torch.release[:2] == xla.release[:2]


def _in(text: str | None, spec: str) -> bool:
    v = version(text)
    return v is not None and SpecifierSet(spec).contains(v.base_version)


def _torch_tpu_ok(r: ImageVersions) -> bool:
    return (
        _in(r.torch_tpu, TORCH_TPU_VERSIONS)
        and _in(r.torch, TORCH_TPU_TORCH)
        and _in(r.libtpu, TORCH_TPU_LIBTPU)
        and r.torch_xla is None
    )


def check_worker_image(cfg: StackConfig, objs: ClusterObjects, image: ImageVersions | None) -> list[CheckResult]:
    reports = (
        [image]
        if image is not None
        else [v for v in worker_image_versions(cfg, objs) if v.ray or v.torch or v.tag_backend]
    )
    torch_tpu = cfg.workload.backend == "torch_tpu"
    runtime = (
        (IMAGE_TORCH_TPU_VERSION_LABEL, IMAGE_LIBTPU_VERSION_LABEL) if torch_tpu else (IMAGE_TORCH_XLA_VERSION_LABEL,)
    )
    how = (
        f"build the worker from workloads/Dockerfile (it stamps {IMAGE_RAY_VERSION_LABEL}, "
        f"{IMAGE_TORCH_VERSION_LABEL}, {', '.join(runtime)}, {IMAGE_BACKEND_LABEL}) and pass its docker inspect output "
        "with --image-inspect, or annotate the worker pods with those keys"
    )
    if not reports:
        fact = "no running TPU worker pod and no image inspect output reports its versions: unknown"
        pair = ("worker-torch-tpu", SRC_TORCH_TPU) if torch_tpu else ("worker-torch-pair", SRC_TORCH_XLA)
        return [
            CheckResult(pair[0], "warn", fact, pair[1], how),
            CheckResult("worker-ray-version", "warn", fact, SRC_TOKEN_AUTH, how),
        ]
    pair_bad, pair_seen, ray_bad, ray_seen = [], [], [], []
    for r in reports:
        pair_seen.append(_runtime_seen(r, torch_tpu))
        backends = {b for b in (r.backend, r.tag_backend) if b is not None}
        if backends - {cfg.workload.backend} or not (_torch_tpu_ok(r) if torch_tpu else _torch_xla_ok(r)):
            pair_bad.append(pair_seen[-1])
        ray = version(r.ray)
        ray_seen.append(f"{r.where}: Ray {r.ray or '?'}")
        if ray is None or ray < Version(MIN_RAY_TOKEN_AUTH) or ray != version(cfg.ray.version):
            ray_bad.append(ray_seen[-1])
    if torch_tpu:
        pair_id, pair_src = "worker-torch-tpu", SRC_TORCH_TPU
        pair_fact = (
            f"backend torch_tpu: a torch_tpu image (torch_tpu {TORCH_TPU_VERSIONS}, torch {TORCH_TPU_TORCH}, libtpu "
            f"{TORCH_TPU_LIBTPU}, torch_tpu 0.2.0's own requirements)"
        )
        tpu = RUNTIMES["torch_tpu"]
        fix = f"build the {tpu.image_target} target of workloads/Dockerfile (tpuray[{tpu.extra}])"
    else:
        pair_id, pair_src = "worker-torch-pair", SRC_TORCH_XLA
        pair_fact = "backend xla: torch_xla loads only with the torch of its own release (same major.minor)"
        fix = "rebuild the worker image with torch and torch_xla of one release (workloads/Dockerfile pins both)"
    results = [
        CheckResult(pair_id, "fail", f"{pair_fact}; {short(pair_bad, 3)}", pair_src, fix)
        if pair_bad
        else CheckResult(pair_id, "pass", f"{pair_fact}; {short(pair_seen, 3)}", pair_src, fix)
    ]
    ray_fact = (
        f"workers run Ray >= {MIN_RAY_TOKEN_AUTH} (token auth) and the head's Ray {cfg.ray.version} (one version per "
        "cluster)"
    )
    fix = f"rebuild the worker image on rayproject/ray:{cfg.ray.version} (ARG RAY_VERSION in workloads/Dockerfile)"
    src = SRC_TOKEN_AUTH
    results.append(
        CheckResult("worker-ray-version", "fail", f"{ray_fact}; {short(ray_bad, 3)}", src, fix)
        if ray_bad
        else CheckResult("worker-ray-version", "pass", f"{ray_fact}; {short(ray_seen, 3)}", src, fix)
    )
    return results
