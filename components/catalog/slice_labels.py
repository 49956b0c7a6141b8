"""One reader of a TPU slice from what a node or a worker carries: its labels (Ray's, GKE's or tpuray's) or the
env GKE gives a TPU container.

Pure Python, no Pulumi, beside the label names (:mod:`tpuray.components.catalog.names`) and the catalog
(:mod:`tpuray.components.catalog.topology`). The Ray Train backend (the labels of the nodes its workers landed on), the
trainer (a cluster's slices) and the policy rules (a node pool's labels) all recover a :class:`TpuSlice` here.
"""

from __future__ import annotations

from collections.abc import Mapping

from tpuray.components.catalog.names import (
    GKE_ACCELERATOR_LABEL,
    GKE_TOPOLOGY_LABEL,
    POD_TYPE_LABEL,
    RAY_POD_TYPE_LABEL,
    RAY_SLICE_NAME_LABEL,
    RAY_TOPOLOGY_LABEL,
    RAY_WORKER_ID_LABEL,
    TPU_ACCELERATOR_TYPE_ENV,
    TPU_NAME_ENV,
    TPU_TOPOLOGY_ENV,
    TPU_WORKER_ID_ENV,
)
from tpuray.components.catalog.topology import (
    Generation,
    TopologyError,
    TpuSlice,
    generation,
    generation_of_accelerator,
    generation_of_machine_type,
)

__all__ = ["labels_of_env", "slice_from_labels"]

_POD_TYPE_LABELS = (RAY_POD_TYPE_LABEL, POD_TYPE_LABEL)
"""Labels that carry a pod type (``v5litepod-16``): Ray's on TPU nodes, tpuray's on its node pools."""
_TOPOLOGY_LABELS = (RAY_TOPOLOGY_LABEL, GKE_TOPOLOGY_LABEL)
_ENV_LABELS = {
    TPU_ACCELERATOR_TYPE_ENV: RAY_POD_TYPE_LABEL,
    TPU_TOPOLOGY_ENV: RAY_TOPOLOGY_LABEL,
    TPU_NAME_ENV: RAY_SLICE_NAME_LABEL,
    TPU_WORKER_ID_ENV: RAY_WORKER_ID_LABEL,
}


def labels_of_env(env: Mapping[str, str]) -> dict[str, str]:
    """A TPU container's GKE env (``TPU_ACCELERATOR_TYPE``, ``TPU_TOPOLOGY``, ``TPU_NAME``, ``TPU_WORKER_ID``) as
    the Ray node labels that say the same, so :func:`slice_from_labels` reads a worker's env like a node."""
    return {label: env[var] for var, label in _ENV_LABELS.items() if env.get(var)}


def _first(labels: Mapping[str, object], keys: tuple[str, ...]) -> tuple[str, str] | None:
    for key in keys:
        value = labels.get(key)
        if value is not None and value != "":
            if not isinstance(value, str):
                raise TopologyError(key, f"label value {value!r} is not a string")
            return key, value
    return None


def slice_from_labels(
    labels: Mapping[str, object], *, machine_type: str | None = None, chips_per_host: int | None = None
) -> TpuSlice:
    """The slice shape a node's labels describe.

    The generation comes from a pod type label (``ray.io/tpu-pod-type``, else ``tpuray.io/pod-type``), else from
    GKE's ``cloud.google.com/gke-tpu-accelerator``, else from ``machine_type``; the topology from
    ``ray.io/tpu-topology`` or ``cloud.google.com/gke-tpu-topology`` (a pod type alone gives its default shape).
    A topology served by two machine types (v5e/v6e ``2x4``: one 8-chip VM or two 4-chip VMs) is told apart by
    ``machine_type``, else by ``chips_per_host`` (the chips Ray saw on one host), else it is the single-host VM.

    Raises :class:`TopologyError` whose field is the label that is missing or wrong.
    """
    pod = _first(labels, _POD_TYPE_LABELS)
    topo = _first(labels, _TOPOLOGY_LABELS)
    topology = topo[1] if topo else None
    accelerator = _first(labels, (GKE_ACCELERATOR_LABEL,))
    gen: Generation | None
    if pod is not None:
        try:
            shape = TpuSlice.parse_pod_type(pod[1], topology)  # with no topology label, the default shape
            gen = generation(shape.generation)
        except TopologyError as e:
            raise TopologyError(topo[0] if topo and e.field == "topology" else pod[0], _reason(e)) from None
    else:
        gen = generation_of_accelerator(accelerator[1]) if accelerator else generation_of_machine_type(machine_type)
        if accelerator is not None and gen is None:
            raise TopologyError(accelerator[0], f"{accelerator[1]!r} is not a known TPU accelerator")
        if gen is None or topo is None:
            missing = " or ".join(_POD_TYPE_LABELS) if gen is None else " or ".join(_TOPOLOGY_LABELS)
            raise TopologyError(missing, f"no TPU slice label (labels: {sorted(labels)[:8]})")
        try:
            shape = TpuSlice.parse(gen.name, topo[1])
        except TopologyError as e:
            raise TopologyError(topo[0], _reason(e)) from None
    if machine_type is None and chips_per_host is not None:
        machine_type = next((m for m, c in gen.machine_types.items() if c == chips_per_host), None)
        if machine_type is None:
            raise TopologyError(
                "chips per host",
                f"no {gen.name} machine type has {chips_per_host} chips; valid: "
                + ", ".join(f"{m} ({c})" for m, c in gen.machine_types.items()),
            )
    try:
        return TpuSlice.parse(gen.name, shape.topology, machine_type)
    except TopologyError as e:
        raise TopologyError(topo[0] if topo else (pod[0] if pod else "machine_type"), _reason(e)) from None


def _reason(e: TopologyError) -> str:
    return str(e).split(": ", 1)[-1]
