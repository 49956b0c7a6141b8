"""Container image references: tag or digest, and the Artifact Registry repository an image lives in.

Pure Python. A reference pinned by digest (``...@sha256:<64 hex>``) names immutable content; a tag can be moved
to other content at any time, so production policy warns on it. Artifact Registry Docker images are named
``<location>-docker.pkg.dev/<project>/<repository>/<image>``
(https://cloud.google.com/artifact-registry/docs/docker/names); the node service account gets read access on
exactly those repositories.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tpuray.components.catalog.runtimes import RuntimeBackend, runtime_for_tag

__all__ = ["ArtifactRepository", "ImageRef", "image_backend", "image_ray_version", "parse_image"]

_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_PATH_PART = re.compile(r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$")
_AR_HOST = re.compile(r"^([a-z0-9-]+)-docker\.pkg\.dev$")
# https://github.com/distribution/reference/blob/main/reference.go : domain[:port], and NameTotalLengthMax = 255
_DOMAIN = re.compile(
    r"^[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*(?::\d+)?$"
)
_NAME_MAX = 255


@dataclass(frozen=True)
class ArtifactRepository:
    project: str
    location: str
    repository: str


@dataclass(frozen=True)
class ImageRef:
    registry: str | None
    """The host (``us-docker.pkg.dev``), or None for Docker Hub's short names."""
    path: str
    tag: str | None
    digest: str | None

    @property
    def pinned(self) -> bool:
        """Pinned by digest: the reference names immutable content."""
        return self.digest is not None

    @property
    def artifact_repository(self) -> ArtifactRepository | None:
        m = _AR_HOST.fullmatch(self.registry or "")
        parts = self.path.split("/")
        if not m or len(parts) < 3:
            return None
        return ArtifactRepository(project=parts[0], location=m.group(1), repository=parts[1])


def parse_image(ref: str) -> ImageRef:
    """``[registry/]path[:tag][@sha256:digest]``; raises ValueError naming the valid form."""
    form = "an image like 'us-docker.pkg.dev/<project>/<repo>/<image>:<tag>' or '<image>@sha256:<64 hex digits>'"
    rest, at, digest_text = ref.partition("@")
    digest = digest_text if at else None
    if digest is not None and not _DIGEST.fullmatch(digest):
        raise ValueError(f"{ref!r}: the digest must be sha256:<64 hex digits>; expected {form}")
    head, _, last = rest.rpartition("/")
    tag = None
    if ":" in last:
        last, tag = last.split(":", 1)
        if not _TAG.fullmatch(tag):
            raise ValueError(f"{ref!r}: bad tag {tag!r}; expected {form}")
    parts = [*(head.split("/") if head else []), last]
    registry = None
    if len(parts) > 1 and ("." in parts[0] or ":" in parts[0] or parts[0] == "localhost"):
        registry = parts.pop(0)
    if (
        (registry is not None and not _DOMAIN.fullmatch(registry))
        or not parts
        or not all(_PATH_PART.fullmatch(p) for p in parts)
    ):
        raise ValueError(f"{ref!r} is not an image reference; expected {form}")
    if len(rest.rsplit(":", 1)[0] if tag else rest) > _NAME_MAX:
        raise ValueError(f"the image name is longer than {_NAME_MAX} characters; expected {form}")
    return ImageRef(registry=registry, path="/".join(parts), tag=tag, digest=digest)


def image_backend(ref: str) -> RuntimeBackend | None:
    """The runtime a worker image's tag names (``...:0.1.0-torch-tpu`` -> ``torch_tpu``), or None when the tag does
    not say (a digest alone, another naming): then only the image's ``tpuray.io/backend`` label, which
    ``tpuray doctor`` reads, tells (each runtime's tag suffix: :mod:`~tpuray.components.catalog.runtimes`)."""
    return runtime_for_tag(parse_image(ref).tag)


# ---- the Ray version an image carries ----------------------------------------------------------------------
_RAY_IMAGES = ("rayproject/ray", "rayproject/ray-ml", "anyscale/ray")
"""Images whose tags name the Ray release they carry (https://hub.docker.com/r/rayproject/ray)."""
_RAY_TAG = re.compile(r"(\d+\.\d+\.\d+)(?:[-.].*)?")


def image_ray_version(image: str) -> str | None:
    """The Ray version a ``rayproject/ray``-style tag names (``2.60.0-py311`` -> ``2.60.0``); None when the tag does
    not say (a digest, ``latest``, a custom tag)."""
    ref = parse_image(image)
    if ref.registry not in (None, "docker.io") or ref.path not in _RAY_IMAGES or ref.digest is not None:
        return None  # a custom image's tag is its own version, not Ray's
    m = _RAY_TAG.fullmatch(ref.tag or "")
    return m.group(1) if m else None
