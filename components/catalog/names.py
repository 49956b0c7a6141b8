"""Every name that TPU slices are matched and reached by: node labels, Ray labels and resources, taints, ports.

Pure data, no Pulumi, beside the catalog (:mod:`tpuray.components.catalog.topology`). Node pools, KubeRay worker groups,
policy rules, the plan and the workload's placement all read these, so each name is written once.
"""

from __future__ import annotations

from dataclasses import dataclass

# ---- GKE node labels and resources (https://cloud.google.com/kubernetes-engine/docs/concepts/plan-tpus) ----
GKE_ACCELERATOR_LABEL = "cloud.google.com/gke-tpu-accelerator"
"""Node label: the TPU generation as GKE names it (``TpuSlice.gke_accelerator``)."""
GKE_TOPOLOGY_LABEL = "cloud.google.com/gke-tpu-topology"
"""Node label: the slice topology (``TpuSlice.topology``)."""
GKE_NODEPOOL_LABEL = "cloud.google.com/gke-nodepool"
"""Node label GKE sets to the node pool's name."""
TPU_RESOURCE = "google.com/tpu"
"""Extended resource on TPU nodes and in pod requests: chips; also the key of the TPU taint."""

# ---- Ray on TPU VMs (ray/_private/accelerators/tpu.py); KubeRay worker groups set them too -----------------
RAY_TPU_RESOURCE = "TPU"
"""Ray's resource for TPU chips (KubeRay copies ``google.com/tpu`` into it); a per-chip worker asks for 1."""
RAY_SLICE_NAME_LABEL = "ray.io/tpu-slice-name"
RAY_WORKER_ID_LABEL = "ray.io/tpu-worker-id"
RAY_TOPOLOGY_LABEL = "ray.io/tpu-topology"
RAY_POD_TYPE_LABEL = "ray.io/tpu-pod-type"
RAY_ACCELERATOR_TYPE_LABEL = "ray.io/accelerator-type"
RAY_CLUSTER_LABEL = "ray.io/cluster"
"""KubeRay's label (and RayJob ``clusterSelector`` key) naming a RayCluster."""

# ---- tpuray's own node labels ---------------------------------------------------------------------------
POOL_LABEL = "tpuray.io/pool"
"""The slice pool a node belongs to; Ray worker groups select their nodes by it."""
SLICE_LABEL = "tpuray.io/slice"
RAY_CLUSTER_POD_LABEL = "tpuray.io/ray-cluster"
"""On every Ray pod tpuray renders: the Ray cluster it belongs to. KubeRay's own ``ray.io/cluster`` label holds the
RayCluster's name, which for a RayJob's own cluster is ``<job>-<random suffix>``; NetworkPolicies select by this."""
POD_TYPE_LABEL = "tpuray.io/pod-type"

# ---- pods -------------------------------------------------------------------------------------------------
WEBHOOK_POD_LABEL = {"app.kubernetes.io/name": "kuberay"}
"""The GKE TPU webhook only mutates pods with this label (KubeRay sets it too; set here so it is explicit)."""
TPU_WEBHOOK = "kuberay-tpu-webhook"
"""The Helm chart that sets TPU_WORKER_ID and TPU_WORKER_HOSTNAMES on multi-host Ray TPU pods, which the KubeRay
chart does not install."""
TPU_WEBHOOK_SOURCE = "https://github.com/ai-on-gke/kuberay-tpu-webhook"
"""Where its chart (``helm-chart/``) and install steps are: the webhook is developed in a repository of its own
(it left GoogleCloudPlatform/ai-on-gke ``ray-on-gke/tpu/kuberay-tpu-webhook``)."""
KUBERAY_NAMESPACE = "kuberay-system"
"""Namespace of the KubeRay operator tpuray installs from the Helm chart (``ray.operator: helm``)."""
SYSTEM_POOL = "system"
"""Name of the CPU node pool that runs the Ray head and system pods."""
RAY_SERVICE_ACCOUNT = "ray"
"""Kubernetes service account of the Ray head (bound to the Ray Google service account; KubeRay binds it to the
autoscaler Role, which may patch pods and RayClusters)."""
RAY_WORKER_SERVICE_ACCOUNT = "ray-worker"
"""Kubernetes service account of the TPU workers, which run user code: bound to the same Google service account
(checkpoints) but to no Kubernetes Role, and its token is never mounted."""
NODE_SERVICE_ACCOUNT_ROLE = "roles/container.defaultNodeServiceAccount"
"""The one project role GKE documents for node service accounts
(https://cloud.google.com/kubernetes-engine/docs/how-to/service-accounts; CIS GKE 5.2.1)."""
IMAGE_STREAMING_NODE_ROLE = "roles/serviceusage.serviceUsageConsumer"
"""What image streaming needs of a node service account other than the default one, in the project that hosts the
images (https://cloud.google.com/kubernetes-engine/docs/how-to/image-streaming, "Requirements"); without it the
pods of a streaming node pool fail to start (terraform-google-modules/terraform-google-kubernetes-engine sa.tf,
which grants it where ``enable_gcfs`` is on since v36.0.0)."""
CLOUD_PLATFORM_SCOPE = "https://www.googleapis.com/auth/cloud-platform"
"""Every node's OAuth scope: GKE's default for a custom node service account, whose IAM roles then limit access
(https://cloud.google.com/kubernetes-engine/docs/how-to/access-scopes)."""


def workload_identity_pool(project: str) -> str:
    """The cluster's Workload Identity pool; a Kubernetes service account is ``<pool>[<namespace>/<name>]`` in it
    (https://cloud.google.com/kubernetes-engine/docs/how-to/workload-identity)."""
    return f"{project}.svc.id.goog"


# ---- taints -----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Taint:
    key: str
    value: str
    effect: str
    """GKE API spelling (``NO_SCHEDULE``); Kubernetes spells it ``NoSchedule``."""

    @property
    def k8s_effect(self) -> str:
        return "".join(part.capitalize() for part in self.effect.split("_"))

    def toleration(self) -> Toleration:
        """The toleration of exactly this taint."""
        return Toleration(key=self.key, operator="Equal", value=self.value, effect=self.k8s_effect)


@dataclass(frozen=True)
class Toleration:
    """A pod's toleration (Kubernetes spelling)."""

    key: str
    operator: str
    effect: str
    value: str | None = None

    def k8s(self) -> dict[str, str]:
        d = {"key": self.key, "operator": self.operator}
        if self.value is not None:
            d["value"] = self.value
        d["effect"] = self.effect
        return d


TPU_TAINT = Taint(key=TPU_RESOURCE, value="present", effect="NO_SCHEDULE")
"""Keeps non-TPU pods off TPU nodes; TPU pods carry the matching toleration."""
GKE_QUEUED_TAINT_KEY = "cloud.google.com/gke-queued"
"""Nodes of queued-provisioning pools carry this taint until a ProvisioningRequest claims them
(https://cloud.google.com/kubernetes-engine/docs/how-to/provisioningrequest)."""

# ---- ports ------------------------------------------------------------------------------------------------
TPU_SLICEBUILDER_PORT = 8471
"""The TPU runtime's process port between the hosts of a slice, and tpuray's first TorchTPU slice-builder port.

8471 is the TPU runtime's default process port: the KubeRay TPU webhook 1.3.1 numbers ``TPU_PROCESS_PORT`` from it
(ai-on-gke/kuberay-tpu-webhook ``main.go`` at 5da78aa, ``tpuProcessPortBase = 8471``: 8471 + container on v7x).
Ray 2.60 names no such port (neither ``ray/_private/accelerators/tpu.py`` nor ``ray/train/torch/config.py`` sets a
``TORCH_TPU_*`` or ``TPU_PROCESS_*`` variable), and torch_tpu 0.2.0's own launcher counts its slice builders from
8070 (``TORCH_TPU_BASE_PORT``); tpuray's TorchTPU env counts them from 8471 so that device 0's is the port the
webhook gives container 0."""
TPU_MEGASCALE_PORT = 8081
"""The first multislice (MEGASCALE) port: Ray's ``DEFAULT_MEGASCALE_PORT`` (``ray/_private/accelerators/tpu.py``).

Not shared by the processes of one host: ``MEGASCALE_PORT`` is the port each process's own MegaScale client binds
(libtpu "sets --megascale_port to MEGASCALE_PORT", torch_tpu 0.2.0 ``_internal/distributed/device_mesh.py``), so
every process of a host needs its own. Ray 2.60 gives each worker ``8081 + LOCAL_RANK`` "to prevent port bind
collisions when multiple workers share a single TPU host" (``ray/train/torch/config.py``,
``_set_tpu_multislice_env_vars``) and the KubeRay TPU webhook 1.3.1 gives each TPU container ``8081 + container``
on tpu7x, 8081 before, where the container already names ``MEGASCALE_NUM_SLICES`` (``main.go`` at 5da78aa,
``megascalePortBase``); tpuray gives PyTorch/XLA's per-chip process ``8081 + chip``
(:mod:`tpuray.components.catalog.runtime_ports`)."""
TORCH_TPU_MEGASCALE_BASE_PORT = 8080
"""torch_tpu 0.2.0 overwrites each multislice process's ``MEGASCALE_PORT`` with ``8080 + 2 * i`` and
``MEGASCALE_DEBUG_PORT`` with ``8081 + 2 * i``, ``i`` its local rank, whatever Ray set (the C++ glue's
``AssignMegascalePorts``, ``torch_tpu/csrc/common/glue_2_14_0/libpywrap_2_14_0_common.so``: ``setenv`` with overwrite,
called from ``InitializeDistributedEnvironment`` when ``WORLD_SIZE`` exceeds the slice-builder addresses; read from
the disassembly, its log line "Multi-slice job detected, setting MEGASCALE_PORT=... and MEGASCALE_DEBUG_PORT=...")."""
TPU_RUNTIME_PORTS = (("tpu-slicebuilder", TPU_SLICEBUILDER_PORT), ("tpu-megascale", TPU_MEGASCALE_PORT))
TORCH_TPU_ENV_CALLBACK = "tpuray.workloads.torch_tpu.TorchTpuEnvCallback"
"""The Ray Train callback that gives TorchTPU workers their env (``tpuray.workloads.torch_tpu.callback``): named in
``RAY_TRAIN_CALLBACKS`` on every Ray pod (head and TPU workers) of a ``backend: torch_tpu`` stack."""
RAY_TRAIN_CALLBACKS_ENV = "RAY_TRAIN_CALLBACKS"
"""Ray Train V2 adds the callbacks this names to every trainer
(``ray/train/v2/_internal/callbacks/env_callback.py``)."""
RAY_TPU_RESOURCE_PER_CHIP_ENV = "RAY_TPU_RESOURCE_PER_CHIP"
"""Ray counts this many ``TPU`` resources per chip (``ray/_private/accelerators/tpu.py``): the devices per chip where
TorchTPU runs one worker per device."""
"""Ports the TPU runtime listens on in multi-host slices (KubeRay and GKE TPU samples)."""
RAY_DASHBOARD_PORT = 8265
RAY_GCS_PORT = 6379
RAY_CLIENT_PORT = 10001
KUBERAY_DEFAULT_METRICS_PORT = 8080
"""Where KubeRay v1.7.0 starts Ray's metrics export on a pod whose ``rayStartParams`` name no ``metrics-export-port``
(``ray-operator/controllers/ray/utils/constant.go`` ``DefaultMetricsPort = 8080``, set in ``common/pod.go``), and
the container port named ``metrics`` it adds where the Ray container has none of that name: inside torch_tpu's
multislice range (:data:`TORCH_TPU_MEGASCALE_BASE_PORT`), so tpuray never leaves it to KubeRay."""
RAY_METRICS_PORT = 9800
"""Ray's metrics export port on every Ray pod tpuray plans (``rayStartParams`` ``metrics-export-port`` and the Ray
container's port named ``metrics``, so KubeRay adds neither), which the head Service (KubeRay copies the head
container's ports, ``common/service.go`` ``getPortsFromCluster``), the PodMonitorings and the NetworkPolicy read.

Not KubeRay's 8080 (:data:`KUBERAY_DEFAULT_METRICS_PORT`): torch_tpu 0.2.0 binds 8080 + 2 * local rank and the next
port in every process of a job across slices (:data:`TORCH_TPU_MEGASCALE_BASE_PORT`). 9800 is clear of every
listener a Ray pod has (:mod:`tpuray.components.catalog.listeners` lists them; the review's listener rule checks
every planned pod): TorchTPU's 8070 + device (its own launcher's slice builders, ``TORCH_TPU_BASE_PORT``), 8080-8095
(megascale, 8 devices per tpu7x host), 8471 + device and 36423 (its split-compile handshake, ``_internal/distributed/
handshake.py``); PyTorch/XLA's 8471, 8476 + chip and 8081 + chip; libtpu's runtime metrics service on 8431
(``localhost:8431`` in libtpu 0.0.52); the TPU webhook's 8471 + container and 8081 + container (kuberay-tpu-webhook
``main.go`` at 5da78aa) and its own 443; Ray 2.60's GCS 6379, tpuray's pinned 6380-6383, dashboard 8265, client
10001 and its per-client servers 23000-24000 (``ray/util/client/server/proxier.py``), dashboard agent 52365, the
worker ports 10002-19999 (``ray start`` defaults; tpuray pins fewer, :data:`RAY_WORKER_PORT_RANGE`); Serve's HTTP
8000, gRPC 9000 and HAProxy stats 8404 (``ray/serve/_private/constants.py``). And it is below Linux's ephemeral
range (32768-60999, ``net.ipv4.ip_local_port_range``), where the ports Ray and torch pick at random come from."""
RAY_METRICS_PORT_NAME = "metrics"
"""The Ray container's port KubeRay looks for by name (``utils.MetricsPortName``) before adding its own at 8080."""
RAY_SERVE_HTTP_PORT = 8000
"""Ray Serve's HTTP proxy port (Ray 2.60 ``python/ray/serve/_private/constants.py`` ``DEFAULT_HTTP_PORT``); KubeRay's
Serve service targets it."""
HEAD_PORTS = (
    ("gcs-server", RAY_GCS_PORT),
    ("dashboard", RAY_DASHBOARD_PORT),
    ("client", RAY_CLIENT_PORT),
    (RAY_METRICS_PORT_NAME, RAY_METRICS_PORT),
)
"""Ports of the Ray head container (KubeRay's defaults, but for the metrics port: :data:`RAY_METRICS_PORT`)."""
WORKER_PORTS = (*TPU_RUNTIME_PORTS, (RAY_METRICS_PORT_NAME, RAY_METRICS_PORT))
"""Ports of a TPU worker's Ray container: the runtime's first ports and Ray's metrics port (named, so that KubeRay
adds no ``metrics`` port at 8080 of its own)."""
TPU_PROCESS_BASE_PORT = 8476
"""First per-chip PJRT process port: the chip ``r`` of a host listens on ``8476 + r`` (torch_xla
``_internal/tpu.py``; ``TPU_PROCESS_ADDRESSES`` lists every host at these ports)."""

# Ray picks most of its ports at random unless `ray start` is told otherwise
# (https://docs.ray.io/en/latest/ray-core/configure.html#ports-configurations). tpuray pins every one, so the
# NetworkPolicy of the Ray namespace can allow exactly these: rayStartParams and the policy both read this table.
RAY_NODE_PORTS = (
    ("node-manager-port", 6380),
    ("object-manager-port", 6381),
    ("runtime-env-agent-port", 6382),
    ("dashboard-agent-grpc-port", 6383),
    ("dashboard-agent-listen-port", 52365),
    ("metrics-export-port", RAY_METRICS_PORT),
)
"""``ray start`` flag -> port, on every Ray node (head and workers)."""
RAY_WORKER_PORT_RANGE = (10002, 10257)
"""``--min-worker-port``/``--max-worker-port``: 256 ports for the worker processes of one Ray node (each binds one).

Ray's default is 10002-19999, but the NetworkPolicy lists every port one by one (GKE Dataplane V2 is Cilium, which
before 1.16 ignored a rule's ``endPort``, and GKE does not publish its Cilium version:
:mod:`tpuray.components.planning.network_policy`), so the range is kept small. A node that needs more workers at
once fails loudly: the raylet refuses the next one ("No available ports. Please specify a wider port range using
--min-worker-port and --max-worker-port.", Ray 2.60 ``raylet``), never silently."""

# ---- Ray token authentication (https://docs.ray.io/en/latest/ray-security/token-auth.html) ------------------
RAY_AUTH_MODE_ENV = "RAY_AUTH_MODE"
RAY_AUTH_TOKEN_ENV = "RAY_AUTH_TOKEN"
RAY_AUTH_TOKEN_KEY = "auth_token"
"""The Secret data key KubeRay's ``authOptions.secretName`` reads the token from."""
SUBMITTER_ROLE_LABEL = {"tpuray.io/role": "ray-job-submitter"}
"""Pod label of the RayJob submitter, which the NetworkPolicy lets reach the head's dashboard port."""

# ---- worker image versions --------------------------------------------------------------------------------
# workloads/Dockerfile stamps these image LABELs with the versions it installs and checks; `tpuray doctor` reads them
# from `docker inspect` output, or from worker pod annotations of the same keys.
IMAGE_RAY_VERSION_LABEL = "tpuray.io/ray-version"
IMAGE_TORCH_VERSION_LABEL = "tpuray.io/torch-version"
IMAGE_TORCH_XLA_VERSION_LABEL = "tpuray.io/torch-xla-version"
IMAGE_TORCH_TPU_VERSION_LABEL = "tpuray.io/torch-tpu-version"
IMAGE_LIBTPU_VERSION_LABEL = "tpuray.io/libtpu-version"
IMAGE_BACKEND_LABEL = "tpuray.io/backend"
"""The training backend the image holds, a value of the workload config's ``backend`` (``xla`` or ``torch_tpu``):
torch_xla and torch_tpu need different torch releases, so no image holds both."""

# ---- worker environment ---------------------------------------------------------------------------------
# What GKE puts in a TPU container's env and Ray reads on a TPU worker (ray/_private/accelerators/tpu.py, Ray 2.60:
# GKE_TPU_ACCELERATOR_TYPE_ENV_VAR, GKE_TPU_TOPOLOGY_ENV_VAR, GKE_TPU_NAME_ENV_VAR, GKE_TPU_WORKER_ID_ENV_VAR): the
# same facts as Ray's node labels, under other names.
TPU_ACCELERATOR_TYPE_ENV = "TPU_ACCELERATOR_TYPE"
"""The slice's pod type (``v5litepod-16``), as ``ray.io/tpu-pod-type``."""
TPU_TOPOLOGY_ENV = "TPU_TOPOLOGY"
"""The slice's topology (``4x4``), as ``ray.io/tpu-topology``."""
TPU_NAME_ENV = "TPU_NAME"
"""The slice's name, as ``ray.io/tpu-slice-name``."""
TPU_WORKER_ID_ENV = "TPU_WORKER_ID"
"""The host's index within its slice, as ``ray.io/tpu-worker-id``."""
EMULATED_SLICE_ENV = "TPURAY_EMULATED_SLICE"
"""Set (to ``1``) on every process of an emulated TPU host (``tpuray.workloads.emulation``), never on a TPU VM: where
TorchTPU's env callback installs the stand-in (``tpuray.workloads.emulation.torch_tpu_standin``)."""
MAX_RUN_ENV = "TPURAY_MAX_RUN_SECONDS"
"""On TPU workers of pools with a ``maxRunDuration`` (flex-start, queued): the VMs' lifetime in seconds, counted
by GKE from VM creation (before the pod starts), so the training side can checkpoint before the VMs go away."""

# ---- Kueue (https://kueue.sigs.k8s.io/docs/tasks/run/rayjobs/) ----------------------------------------------
KUEUE_QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
"""Job label naming the LocalQueue that admits it."""
KUEUE_PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"
"""Job label naming its WorkloadPriorityClass."""
