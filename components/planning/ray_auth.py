"""Ray token authentication for a KubeRay cluster, as pod-spec pieces. Pure data; imports no Pulumi.

Ray >= 2.52 checks a bearer token on the GCS, the dashboard and the job API when ``RAY_AUTH_MODE=token`` is set
on every node; the token is read from ``RAY_AUTH_TOKEN``
(https://docs.ray.io/en/latest/ray-core/internals/token-authentication.html). Two ways to set it up, both from the
same Secret (key ``auth_token``) that the Pulumi program generates:

- KubeRay >= 1.6 ``authOptions: {mode: token, secretName: ...}``: the operator injects both variables into every
  Ray container and the RayJob submitter, and uses the token itself for the job API
  (https://docs.ray.io/en/latest/cluster/kubernetes/user-guides/kuberay-auth.html).
- any KubeRay: both variables written into every Ray container (KubeRay's ``ray-cluster.auth-manual.yaml``
  sample); the worker's ``wait-gcs-ready`` init container inherits them. The operator's own job API calls then
  carry no token, so a RayJob's status gets 401: the stacks always use ``authOptions``
  (:mod:`tpuray.components.catalog.cloud_limits`), and this way is left to a component's own ``RayAuth``.

The RayJob submitter always gets the variables in its pod template: KubeRay skips variables already set.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tpuray.components.catalog.names import RAY_AUTH_MODE_ENV, RAY_AUTH_TOKEN_ENV, RAY_AUTH_TOKEN_KEY

__all__ = ["RayAuth", "auth_secret_name"]


def auth_secret_name(cluster: str) -> str:
    """The Kubernetes Secret holding a RayCluster's token."""
    return f"{cluster}-ray-auth"


@dataclass(frozen=True)
class RayAuth:
    secret_name: str
    auth_options: bool
    """Use KubeRay's ``authOptions`` (else the variables go into the containers here)."""

    def env(self) -> list[dict[str, Any]]:
        """``RAY_AUTH_MODE=token`` and ``RAY_AUTH_TOKEN`` from the Secret."""
        return [
            {"name": RAY_AUTH_MODE_ENV, "value": "token"},
            {
                "name": RAY_AUTH_TOKEN_ENV,
                "valueFrom": {"secretKeyRef": {"name": self.secret_name, "key": RAY_AUTH_TOKEN_KEY}},
            },
        ]

    def container_env(self) -> list[dict[str, Any]]:
        """What a Ray container of the cluster needs set in its template (nothing when KubeRay injects it)."""
        return [] if self.auth_options else self.env()

    def spec_options(self) -> dict[str, Any] | None:
        """The RayCluster ``authOptions``, if used."""
        return {"mode": "token", "secretName": self.secret_name} if self.auth_options else None
