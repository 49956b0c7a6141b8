"""The Gateway API a serving stack's incremental upgrade (``NewClusterWithIncrementalUpgrade``) needs on a live
cluster: the CRDs of the objects KubeRay creates, and the GatewayClass the stack names. Pure functions of the objects
read, like :mod:`.checks`; None where the stack serves nothing or upgrades otherwise.

KubeRay v1.7.0 (``ray-operator/controllers/ray/rayservice_controller.go``) reconciles, on every pass over such a
RayService, a Gateway ``<service>-gateway`` of ``clusterUpgradeOptions.gatewayClassName`` and an HTTPRoute
``<service>-httproute`` (``reconcileGateway``, ``reconcileHTTPRoute``), both ``gateway.networking.k8s.io/v1``, and
it does so before it reconciles the Serve service: without the CRDs each pass ends there in an error. It never
reads the GatewayClass; the Gateway's controller does, and programs no Gateway of a class that is missing or not
Accepted, so KubeRay never finds the Gateway ready and never moves traffic (``IsGatewayReady`` in
``ray-operator/controllers/ray/utils/util.go``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tpuray.components.config import StackConfig
from tpuray.components.config.serving import INCREMENTAL
from tpuray.components.doctor.objects import item_paths, mapping_at, name, short, text_at
from tpuray.components.doctor.reader import (
    GATEWAY_API_GROUP,
    GATEWAY_API_VERSION,
    OPTIONAL_LIST_FILES,
    ClusterObjects,
)
from tpuray.components.doctor.result import CheckResult
from tpuray.components.doctor.sources import SRC_GATEWAY_CLASS, SRC_GKE_GATEWAYS

__all__ = ["KUBERAY_GATEWAY_KINDS", "check_serving_gateway_api", "check_serving_gateway_class"]

KUBERAY_GATEWAY_KINDS = (("Gateway", "gateways"), ("HTTPRoute", "httproutes"))
"""(kind, plural) of each Gateway API object KubeRay v1.7.0 creates for an incremental upgrade (its RBAC markers in
``rayservice_controller.go`` grant exactly these two resources)."""


def _gke_gateway_api(cfg: StackConfig) -> str:
    """How to install the Gateway API on the stack's GKE cluster: GKE's own, with its CRDs and GatewayClasses."""
    return (
        f"gcloud container clusters update {cfg.cluster.name} --location {cfg.location} --gateway-api=standard "
        "(GKE installs the Gateway API v1 CRDs and its GatewayClasses, gke-l7-*)"
    )


def _served(crd: Mapping[str, Any]) -> list[str]:
    """The versions a CRD serves (``spec.versions[].served``)."""
    paths = item_paths(crd, "spec", "versions")
    return [text_at(crd, *v, "name") or "?" for v in paths if mapping_at(crd, *v).get("served") is True]


def check_serving_gateway_api(cfg: StackConfig, objs: ClusterObjects) -> CheckResult | None:
    """The Gateway and HTTPRoute CRDs serve v1 where the stack upgrades incrementally."""
    serving = cfg.serving
    if serving is None or serving.upgrade.strategy != INCREMENTAL:
        return None
    wanted = [f"{plural}.{GATEWAY_API_GROUP}" for _, plural in KUBERAY_GATEWAY_KINDS]
    fact = (
        f"serving upgrade {INCREMENTAL}: KubeRay makes a Gateway and an HTTPRoute ({GATEWAY_API_GROUP}/"
        f"{GATEWAY_API_VERSION}) for the RayService, so the cluster serves {' and '.join(wanted)} at "
        f"{GATEWAY_API_VERSION}"
    )
    fix = f"install GKE's Gateway API: {_gke_gateway_api(cfg)}"
    crds = {name(c): c for c in objs.crds}
    problems: list[str] = []
    found: list[str] = []
    for crd_name in wanted:
        crd = crds.get(crd_name)
        if crd is None:
            problems.append(f"no CRD {crd_name}")
            continue
        served = _served(crd)
        said = f"{crd_name} serves {', '.join(served) or 'nothing'}"
        (found if GATEWAY_API_VERSION in served else problems).append(said)
    if problems:
        return CheckResult("serving-gateway-api", "fail", f"{fact}; {'; '.join(problems)}", SRC_GKE_GATEWAYS, fix)
    return CheckResult("serving-gateway-api", "pass", f"{fact}; {'; '.join(found)}", SRC_GKE_GATEWAYS, fix)


def _accepted(gateway_class: Mapping[str, Any]) -> tuple[bool, str]:
    """Whether a GatewayClass's controller accepted it (its ``Accepted`` condition is ``True``), and what it says."""
    for c in item_paths(gateway_class, "status", "conditions"):
        if text_at(gateway_class, *c, "type") == "Accepted":
            status = text_at(gateway_class, *c, "status") or "?"
            reason = text_at(gateway_class, *c, "reason")
            message = " ".join((text_at(gateway_class, *c, "message") or "").split())[:200]
            detail = ", ".join(x for x in (reason, message) if x)
            return status == "True", f"Accepted {status}" + (f" ({detail})" if detail else "")
    return False, "no Accepted condition (its controller has not answered)"


def check_serving_gateway_class(cfg: StackConfig, objs: ClusterObjects) -> CheckResult | None:
    """The GatewayClass ``serving.upgrade.gatewayClassName`` names exists and is Accepted, where the stack upgrades
    incrementally. Unread GatewayClasses (an older snapshot) warn as unknown."""
    serving = cfg.serving
    if serving is None or serving.upgrade.strategy != INCREMENTAL:
        return None
    wanted = serving.upgrade.gateway_class_name
    fact = (
        f"serving upgrade {INCREMENTAL}: KubeRay's Gateway takes GatewayClass {wanted} "
        "(serving.upgrade.gatewayClassName), which must exist and be Accepted by its controller"
    )
    fix = (
        f"set serving.upgrade.gatewayClassName to a GatewayClass the cluster has, or install GKE's: "
        f"{_gke_gateway_api(cfg)}"
    )
    if objs.gateway_classes is None:
        file = OPTIONAL_LIST_FILES["gateway_classes"]
        return CheckResult(
            "serving-gateway-class",
            "warn",
            f"{fact}; GatewayClasses not read (the snapshot has no {file}): unknown",
            SRC_GATEWAY_CLASS,
            f"save kubectl get gatewayclasses -o json as {file} in the snapshot, or run the doctor live",
        )
    found = {name(g): g for g in objs.gateway_classes}
    if wanted not in found:
        there = f"the cluster has {short(found)}" if found else "the cluster has none"
        return CheckResult(
            "serving-gateway-class", "fail", f"{fact}; no GatewayClass {wanted}: {there}", SRC_GATEWAY_CLASS, fix
        )
    gateway_class = found[wanted]
    accepted, said = _accepted(gateway_class)
    controller = text_at(gateway_class, "spec", "controllerName") or "no controllerName"
    fact = f"{fact}; {wanted} ({controller}): {said}"
    if not accepted:
        return CheckResult(
            "serving-gateway-class",
            "warn",
            fact,
            SRC_GATEWAY_CLASS,
            f"see kubectl describe gatewayclass {wanted}: its controller ({controller}) has not accepted it",
        )
    return CheckResult("serving-gateway-class", "pass", fact, SRC_GATEWAY_CLASS, fix)
