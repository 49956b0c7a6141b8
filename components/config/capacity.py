"""The capacity types of a slice pool (on-demand, spot, reservation, flex-start, queued) and what each one needs.

Each class carries its traits (:class:`CapacityType`'s class variables and properties): the GKE node pool fields it
sets, the taints its nodes get and the tolerations its pods need, whether only Kueue reaches it, whether its slices
may sit in the long-lived shared RayCluster, the drain grace and deadline of its pods, the VMs' maximum run time,
the node pool inputs whose change replaces the pool, and the price it pays. The planners ask the capacity object;
none of them tests its class or its ``type`` string. A new capacity type is one class here (a member of
:data:`CapacityClass`).
"""

from __future__ import annotations

import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    Field,
    field_validator,
)

from tpuray.components.catalog.names import GKE_QUEUED_TAINT_KEY, Taint, Toleration
from tpuray.components.catalog.topology import FLEX_START_MIN_GKE_VERSION
from tpuray.components.config.base import (
    ConfigModel,
    duration_seconds,
)
from tpuray.components.config.value_types import (
    GceName,
    ProjectId,
)

PriceBasis = Literal["on-demand", "spot", "committed", "flex-start"]
"""Which public (or supplied) price a chip-hour of a capacity type pays (``pricing.table``)."""
CommitmentTerm = Literal["1y", "3y"]
"""The term of a committed use contract (https://cloud.google.com/tpu/pricing: "1 year or 3 year commitment")."""


@dataclass(frozen=True)
class ReservationAffinitySpec:
    """A node pool's ``nodeConfig.reservationAffinity``."""

    consume_reservation_type: str
    key: str | None = None
    values: tuple[str, ...] | None = None


@dataclass(frozen=True)
class GkeMinimum:
    """A GKE version a capacity type needs, beyond the slice's own minimum."""

    feature: str
    """Short id (the doctor's check is ``gke-version.<feature>``)."""
    what: str
    version: str
    source: str


FLEX_START_GKE = GkeMinimum(
    "flex-start",
    "flex-start for TPUs",
    FLEX_START_MIN_GKE_VERSION,
    "https://cloud.google.com/kubernetes-engine/docs/concepts/flex-start",
)

SPOT_SHUTDOWN_SOURCE = "https://cloud.google.com/kubernetes-engine/docs/concepts/spot-vms"
"""GKE's Spot VMs concept page, "Termination and graceful shutdown of Spot VMs": after the preemption notice GKE
gives pods 30 s by default, the first 15 s to non-system pods and the rest to critical system pods; a Standard node
pool can extend it to 120 s through its node system configuration when the cluster's control plane runs GKE
1.35.0-gke.1171000 or later."""

SPOT_SHUTDOWN_GKE = GkeMinimum(
    "spot-shutdown", "a 120 s graceful shutdown of Spot VMs", "1.35.0-gke.1171000", SPOT_SHUTDOWN_SOURCE
)

MAX_RUN_MARGIN_SECONDS = 420
"""How long before ``maxRunDuration`` ends a flex-start/queued job checkpoints: tpuray's 5-minute checkpoint budget
(:attr:`CapacityType.drain_grace_seconds`) plus 2 minutes for the VM's boot, which ``maxRunDuration`` counts (from VM
creation) and the workers' clock (``/proc/uptime``) does not."""


@dataclass(frozen=True)
class NodeShutdownSpec:
    """The kubelet's graceful node shutdown a node pool asks for (``nodeConfig.kubeletConfig``'s
    ``shutdownGracePeriodSeconds`` and ``shutdownGracePeriodCriticalPodsSeconds``, GKE's ``NodeKubeletConfig``;
    pulumi-gcp 10.2's ``NodePoolNodeConfigKubeletConfigArgs``, which allows them on Spot and preemptible pools
    only). Non-system pods get the difference (Kubernetes' graceful node shutdown,
    https://kubernetes.io/docs/concepts/cluster-administration/node-shutdown/)."""

    grace_seconds: int
    critical_pods_seconds: int

    @property
    def pods_seconds(self) -> int:
        """What non-system pods get of it."""
        return self.grace_seconds - self.critical_pods_seconds


SPOT_DEFAULT_SHUTDOWN = NodeShutdownSpec(30, 15)
"""GKE's graceful node shutdown of a Spot VM when the node pool asks for none (:data:`SPOT_SHUTDOWN_SOURCE`)."""


class CapacityType(ConfigModel):
    """What every capacity type says of itself; the defaults are plain on-demand VMs.

    Traits are class variables (the same for every pool of the type) or properties (they read the pool's values).
    """

    # ---- node pool fields ----------------------------------------------------------------------------------
    spot: ClassVar[bool] = False
    """``nodeConfig.spot``."""
    flex_start: ClassVar[bool] = False
    """``nodeConfig.flexStart``: flex-start (DWS) VMs, created on demand; the pool starts empty, its nodes are not
    auto-repaired, and it scales with location policy ANY even single-host (GKE's flex-start and
    ProvisioningRequest docs)."""
    queued_provisioning: ClassVar[bool] = False
    """``queuedProvisioning.enabled``: GKE creates the nodes only for a granted ProvisioningRequest."""
    node_taints: ClassVar[tuple[Taint, ...]] = ()
    """Taints tpuray declares on the pool's nodes beside the TPU taint."""
    tolerations: ClassVar[tuple[Toleration, ...]] = ()
    """Tolerations of taints GKE itself puts on the pool's nodes; the pods (and the pool's Kueue flavor) carry them
    beside those of the TPU taint and :attr:`node_taints` (``planning.scheduling``)."""
    replacing_inputs: ClassVar[tuple[str, ...]] = ()
    """Node pool input paths this type sets whose change makes the provider replace the pool (ForceNew in the
    Terraform Google provider's ``resource_container_node_pool.go`` and ``node_config.go``)."""
    wire_signatures: ClassVar[tuple[Mapping[str, object], ...]] = ()
    """How a declared node pool's inputs (camelCase paths) show this type: any one signature whose every path has
    its value. The type whose matching signature is the longest wins; no match is on-demand."""
    # ---- scheduling, lifetime, price ------------------------------------------------------------------------
    needs_kueue: ClassVar[bool] = False
    """Only a Kueue-admitted workload reaches this capacity (its admission check makes GKE create the nodes)."""
    in_shared_cluster: ClassVar[bool] = True
    """Its slices may sit in the long-lived shared RayCluster (False: only an ephemeral RayJob brings its nodes)."""
    drain_grace_seconds: ClassVar[int] = 300
    """The worker pods' ``terminationGracePeriodSeconds``. Capacity other than spot is taken away by host
    maintenance, upgrades, flex-start's maxRunDuration or Kueue preemption
    (https://cloud.google.com/kubernetes-engine/docs/concepts/handle-disruption-gpu-tpu); a pod deletion honours
    the whole grace period, and 5 minutes is tpuray's budget for a checkpoint of the slice (not a GKE limit)."""
    drain_deadline_seconds: ClassVar[int] = 270
    """What the preStop hook tells Ray is left: the grace less the hook's start-up and the container's shutdown."""
    price_basis: ClassVar[PriceBasis] = "on-demand"
    disruption: ClassVar[str] = "host maintenance, a node upgrade or Kueue preemption"
    """What takes this capacity's pods away, said in the plan beside its drain window."""

    @property
    def gke_minimum(self) -> GkeMinimum | None:
        """A GKE version this pool's capacity needs beyond its slice's (None: nothing more)."""
        return None

    def drain_seconds(self) -> tuple[int, int]:
        """The worker pods' grace period and the drain deadline the preStop hook gives Ray (``planning.drain``)."""
        return self.drain_grace_seconds, self.drain_deadline_seconds

    @property
    def node_shutdown(self) -> NodeShutdownSpec | None:
        """The kubelet's graceful node shutdown the node pool asks for (None: GKE's default)."""
        return None

    # ---- elastic training (workload.elastic) -------------------------------------------------------------------
    lost_slice_returns: ClassVar[bool] = True
    """A slice lost while a job runs can come back to the running job, so training on the rest can grow again."""
    lost_slice_return: ClassVar[str] = (
        "GKE recreates the VMs of a static pool (its managed instance group keeps its size) and the cluster "
        "autoscaler adds nodes for the replacement pods of an autoscaled one"
    )
    """How a lost slice comes back (or, where it cannot, why not): the config error and docs/elastic.md say it."""

    @property
    def reservation_affinity(self) -> ReservationAffinitySpec | None:
        """``nodeConfig.reservationAffinity`` (None: GKE's default)."""
        return None

    @property
    def node_pool_max_run_seconds(self) -> int | None:
        """``nodeConfig.maxRunDuration`` in seconds."""
        return None

    @property
    def provisioning_request_max_run_seconds(self) -> int | None:
        """The ProvisioningRequest's ``maxRunDurationSeconds`` (a queued type)."""
        return None

    @property
    def max_run_seconds(self) -> int | None:
        """The VMs' lifetime, wherever GKE takes it from (passed to the workers as ``TPURAY_MAX_RUN_SECONDS``)."""
        return self.node_pool_max_run_seconds or self.provisioning_request_max_run_seconds


class OnDemand(CapacityType):
    """Standard on-demand VMs."""

    type: Literal["on-demand"] = "on-demand"


class Spot(CapacityType):
    """Spot VMs: cheaper, preemptible at any time."""

    type: Literal["spot"]

    spot: ClassVar[bool] = True
    replacing_inputs: ClassVar[tuple[str, ...]] = ("nodeConfig.spot",)
    wire_signatures: ClassVar[tuple[Mapping[str, object], ...]] = (
        {"nodeConfig.spot": True},
        {"nodeConfig.preemptible": True},
    )
    shutdown_grace_period: Literal[30, 120] = Field(
        default=120,
        description="seconds GKE gives the node after a preemption notice (the kubelet's shutdownGracePeriodSeconds, "
        "15 of them for critical system pods): 120 needs GKE 1.35.0-gke.1171000 or later (cluster.minMasterVersion); "
        "30 is GKE's default",
    )

    # GKE's graceful node shutdown gives non-system pods the first 15 s of the 30 s after the notice, best effort
    # (SPOT_SHUTDOWN_SOURCE, https://cloud.google.com/kubernetes-engine/docs/how-to/preemptible-vms): the deadline
    # must fit in those 15 s, less the hook's own start-up.
    drain_grace_seconds: ClassVar[int] = 30
    drain_deadline_seconds: ClassVar[int] = 10
    # With 120 s (critical system pods keep their 15 s), non-system pods get 105 s; the deadline leaves 15 s for the
    # hook's start-up and the container's shutdown, as 10 of 15 does above.
    extended_drain_grace_seconds: ClassVar[int] = 105
    extended_drain_deadline_seconds: ClassVar[int] = 90
    price_basis: ClassVar[PriceBasis] = "spot"
    disruption: ClassVar[str] = "a Spot VM preemption notice"

    @property
    def extended(self) -> bool:
        return self.shutdown_grace_period > 30

    @property
    def gke_minimum(self) -> GkeMinimum | None:
        return SPOT_SHUTDOWN_GKE if self.extended else None

    def drain_seconds(self) -> tuple[int, int]:
        if self.extended:
            return self.extended_drain_grace_seconds, self.extended_drain_deadline_seconds
        return self.drain_grace_seconds, self.drain_deadline_seconds

    @property
    def node_shutdown(self) -> NodeShutdownSpec | None:
        # Only the longer period is declared: 30 s is GKE's default, and leaving it unset keeps such pools as they are.
        if not self.extended:
            return None
        return NodeShutdownSpec(self.shutdown_grace_period, SPOT_DEFAULT_SHUTDOWN.critical_pods_seconds)

    lost_slice_return: ClassVar[str] = (
        "GKE recreates a preempted spot VM when Compute Engine has spot capacity for it again, which may take a "
        "while (https://cloud.google.com/kubernetes-engine/docs/concepts/spot-vms)"
    )


class Reservation(CapacityType):
    """Consume a specific reservation; ``project`` names the owner of a shared reservation.

    https://cloud.google.com/kubernetes-engine/docs/how-to/consuming-reservations : the reservation affinity value is
    the reservation's name, or ``projects/<project>/reservations/<name>`` for a shared one.
    """

    type: Literal["reservation"]
    name: GceName
    project: ProjectId | None = None
    commitment: CommitmentTerm | None = Field(
        default=None,
        description="the term of the committed use contract the reservation comes with: prices the pool at the "
        "Cloud TPU pricing page's 1-year or 3-year commitment price (tpuray.components.pricing)",
    )

    replacing_inputs: ClassVar[tuple[str, ...]] = ("nodeConfig.reservationAffinity",)
    wire_signatures: ClassVar[tuple[Mapping[str, object], ...]] = (
        {"nodeConfig.reservationAffinity.consumeReservationType": "SPECIFIC_RESERVATION"},
    )
    # A TPU reservation comes with a committed use contract ("You can only use a reservation for TPUs if you have a
    # committed use discount", https://cloud.google.com/tpu/docs/consumption-options).
    price_basis: ClassVar[PriceBasis] = "committed"
    lost_slice_return: ClassVar[str] = (
        "the reservation keeps the capacity: a VM lost to host maintenance or a failure is recreated in it"
    )

    @property
    def reservation_value(self) -> str:
        """The reservation affinity value GKE expects: the name, or ``projects/<p>/reservations/<name>``."""
        return f"projects/{self.project}/reservations/{self.name}" if self.project else self.name

    @property
    def reservation_affinity(self) -> ReservationAffinitySpec:
        return ReservationAffinitySpec(
            consume_reservation_type="SPECIFIC_RESERVATION",
            key="compute.googleapis.com/reservation-name",
            values=(self.reservation_value,),
        )


class _FlexStartVms(CapacityType):
    """Flex-start (DWS) VMs, with or without queued provisioning."""

    flex_start: ClassVar[bool] = True
    price_basis: ClassVar[PriceBasis] = "flex-start"
    disruption: ClassVar[str] = "the end of maxRunDuration, host maintenance or Kueue preemption"

    @property
    def gke_minimum(self) -> GkeMinimum | None:
        return FLEX_START_GKE

    @property
    def reservation_affinity(self) -> ReservationAffinitySpec:
        # DWS capacity is never taken from a reservation; queued provisioning requires this explicitly.
        return ReservationAffinitySpec(consume_reservation_type="NO_RESERVATION")


class FlexStart(_FlexStartVms):
    """Flex-start (DWS flex): VMs for at most ``maxRunDuration``, created on demand by the autoscaler."""

    type: Literal["flex-start"]
    max_run_duration: Annotated[int, Field(gt=0, le=7 * 86400, description="seconds, or '24h', '7d'")]

    _parse = field_validator("max_run_duration", mode="before")(lambda v: duration_seconds(v))

    replacing_inputs: ClassVar[tuple[str, ...]] = (
        "nodeConfig.flexStart",
        "nodeConfig.maxRunDuration",
        "nodeConfig.reservationAffinity",
    )
    wire_signatures: ClassVar[tuple[Mapping[str, object], ...]] = ({"nodeConfig.flexStart": True},)
    lost_slice_return: ClassVar[str] = (
        "the cluster autoscaler asks for new flex-start VMs for the replacement pods (a flex-start pool always "
        "autoscales) and they come when DWS finds the capacity; each VM lives at most maxRunDuration"
    )

    @property
    def node_pool_max_run_seconds(self) -> int:
        # Flex-start VMs carry maxRunDuration on the node pool.
        return self.max_run_duration


class Queued(_FlexStartVms):
    """Flex-start with queued provisioning (DWS): the whole slice is granted at once through a ProvisioningRequest.

    ``maxRunDuration`` belongs to the ProvisioningRequest (``maxRunDurationSeconds``), not to the node pool
    (https://cloud.google.com/kubernetes-engine/docs/how-to/provisioningrequest). "To use flex-start with queued
    provisioning, you have to add the --flex-start and --enable-queued-provisioning flags" (same page).
    """

    type: Literal["queued"]
    max_run_duration: Annotated[int | None, Field(gt=0, le=7 * 86400)] = None

    @field_validator("max_run_duration", mode="before")
    @classmethod
    def _parse(cls, v: object) -> int | None:
        return None if v is None else duration_seconds(v)

    queued_provisioning: ClassVar[bool] = True
    # Nodes of queued-provisioning pools carry GKE's gke-queued taint until a ProvisioningRequest claims them.
    tolerations: ClassVar[tuple[Toleration, ...]] = (
        Toleration(key=GKE_QUEUED_TAINT_KEY, operator="Exists", effect="NoSchedule"),
    )
    replacing_inputs: ClassVar[tuple[str, ...]] = (
        "queuedProvisioning",
        "nodeConfig.flexStart",
        "nodeConfig.reservationAffinity",
    )
    wire_signatures: ClassVar[tuple[Mapping[str, object], ...]] = (
        {"queuedProvisioning.enabled": True, "nodeConfig.flexStart": True},
        {"queuedProvisioning.enabled": True},
    )
    needs_kueue: ClassVar[bool] = True
    in_shared_cluster: ClassVar[bool] = False
    # Kueue v0.19.2 creates one ProvisioningRequest per admitted workload (pkg/controller/admissionchecks/
    # provisioning/controller.go, syncOwnedProvisionRequest) and GKE creates the nodes once for it; a lost node is
    # not auto-repaired (flex-start) and nothing asks GKE for it again while the workload stays admitted.
    lost_slice_returns: ClassVar[bool] = False
    lost_slice_return: ClassVar[str] = (
        "queued provisioning creates a slice's nodes once, for the ProvisioningRequest Kueue made when it admitted "
        "the job; nothing asks GKE for a lost slice's nodes again while the job runs, so the job could only shrink"
    )

    @property
    def provisioning_request_max_run_seconds(self) -> int | None:
        return self.max_run_duration


CapacityClass = OnDemand | Spot | Reservation | FlexStart | Queued
"""Every built-in capacity type: a new one is a class here and a member of this union; the tables below follow."""
Capacity = Annotated[CapacityClass, Field(discriminator="type")]


def capacity_type(cls: type[CapacityType]) -> str:
    """The ``type`` tag of a capacity class (its ``type: Literal[...]`` field)."""
    (tag,) = typing.get_args(cls.model_fields["type"].annotation)
    return str(tag)


CAPACITY_CLASSES: dict[str, type[CapacityType]] = {capacity_type(c): c for c in typing.get_args(CapacityClass)}
"""Each capacity class by its ``type`` tag: the registry the slice pool's ``capacity`` union is built from."""
CAPACITY_TYPES: tuple[str, ...] = tuple(CAPACITY_CLASSES)
"""The built-in types' tags (read :func:`capacity_types` for the registered ones too)."""


def capacity_types() -> tuple[str, ...]:
    """Every registered capacity type's tag, built-in ones first."""
    return tuple(CAPACITY_CLASSES)


def capacity_class(tag: str) -> type[CapacityType]:
    """The class of a capacity type tag (a plan's or a stack's string); ValueError names the valid choices."""
    try:
        return CAPACITY_CLASSES[tag]
    except KeyError:
        raise ValueError(f"unknown capacity type {tag!r}; valid choices: {', '.join(CAPACITY_CLASSES)}") from None


def capacity_of_node_pool(inputs: Mapping[str, Any]) -> str:
    """The capacity type a declared node pool's inputs (camelCase, as the plan writes them) show: the type with the
    longest matching :attr:`~CapacityType.wire_signatures`, else the type with none (on-demand)."""

    def value(path: str) -> object:
        node: object = inputs
        for part in path.split("."):
            node = node.get(part) if isinstance(node, Mapping) else None
        return node

    best, best_len = None, 0
    for tag, cls in CAPACITY_CLASSES.items():
        for sig in cls.wire_signatures:
            if len(sig) > best_len and all(value(p) == v for p, v in sig.items()):
                best, best_len = tag, len(sig)
    if best is not None:
        return best
    (plain,) = (tag for tag, cls in CAPACITY_CLASSES.items() if not cls.wire_signatures)
    return plain
