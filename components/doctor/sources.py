"""The public pages the doctor's checks read their facts from, each written once for every check that cites it."""

from __future__ import annotations

__all__ = [
    "SRC_API_OBJECTS",
    "SRC_CRD_PRUNING",
    "SRC_DEVICE_PLUGIN",
    "SRC_DPV2",
    "SRC_GATEWAY_CLASS",
    "SRC_GKE_GATEWAYS",
    "SRC_GKE_TPU",
    "SRC_KUBERAY_AUTH",
    "SRC_KUBERAY_HELM",
    "SRC_KUEUE",
    "SRC_NETWORK_POLICY",
    "SRC_RAYSERVICE_UPGRADE",
    "SRC_TOKEN_AUTH",
    "SRC_TORCH_TPU",
    "SRC_TORCH_XLA",
    "SRC_TPU7X",
]

SRC_GKE_TPU = "https://cloud.google.com/kubernetes-engine/docs/concepts/plan-tpus"
SRC_TPU7X = "https://cloud.google.com/kubernetes-engine/docs/concepts/tpu-ironwood"
SRC_KUBERAY_AUTH = "https://docs.ray.io/en/latest/cluster/kubernetes/user-guides/kuberay-auth.html"
SRC_KUBERAY_HELM = "https://github.com/ray-project/kuberay/tree/master/helm-chart/kuberay-operator"
SRC_CRD_PRUNING = (
    "https://kubernetes.io/docs/tasks/extend-kubernetes/custom-resources/custom-resource-definitions/#field-pruning"
)
SRC_DEVICE_PLUGIN = "https://cloud.google.com/kubernetes-engine/docs/how-to/tpus"
SRC_KUEUE = "https://kueue.sigs.k8s.io/docs/installation/"
SRC_DPV2 = "https://cloud.google.com/kubernetes-engine/docs/concepts/dataplane-v2"
SRC_NETWORK_POLICY = "https://kubernetes.io/docs/concepts/services-networking/network-policies/"
SRC_TOKEN_AUTH = "https://docs.ray.io/en/latest/ray-security/token-auth.html"
SRC_TORCH_XLA = "https://github.com/pytorch/xla#available-docker-images-and-wheels"
SRC_TORCH_TPU = "https://pypi.org/project/torch-tpu/0.2.0/"
SRC_API_OBJECTS = "https://kubernetes.io/docs/reference/kubernetes-api/"
SRC_RAYSERVICE_UPGRADE = "https://docs.ray.io/en/latest/serve/production-guide/kubernetes.html"
SRC_GKE_GATEWAYS = "https://cloud.google.com/kubernetes-engine/docs/how-to/deploying-gateways"
SRC_GATEWAY_CLASS = "https://gateway-api.sigs.k8s.io/api-types/gatewayclass/"
