"""The names tpuray derives for cloud and Kubernetes resources: cut to the API's limit with a stable hash, service
account ids, the default checkpoint bucket, label values.

Pure Python. A derived name must pass the same rule as a configured one (``tpuray.components.config.value_types``
holds the rules; the tests check each derivation against them).
"""

from __future__ import annotations

import hashlib
import re

__all__ = [
    "GCP_LABEL_VALUE",
    "K8S_LABEL_VALUE",
    "SERVICE_ACCOUNT_ID",
    "bounded_name",
    "derived_bucket_name",
    "label_value",
    "service_account_id",
]


def bounded_name(base: str, limit: int) -> str:
    """``base`` if it fits, else a prefix plus a short stable hash (GCE names must be unique and <= ``limit``)."""
    if len(base) <= limit:
        return base
    digest = hashlib.sha256(base.encode()).hexdigest()[:8]
    return f"{base[: limit - 9].rstrip('-_.')}-{digest}"


# https://cloud.google.com/iam/docs/reference/rest/v1/projects.serviceAccounts/create : accountId "must be 6-30
# characters long, and match the regular expression [a-z]([-a-z0-9]*[a-z0-9])".
SERVICE_ACCOUNT_ID = re.compile(r"^[a-z](?:[-a-z0-9]{4,28}[a-z0-9])$")


def service_account_id(cluster: str, role: str) -> str:
    """The id of a service account tpuray derives from a (valid) cluster name, e.g. ``tpuray-prod-nodes``.

    Always 6-30 characters: a short cluster name gets ``-sa`` appended, a long one is cut with a stable hash.
    """
    base = f"{cluster}-{role}"
    if len(base) < 6:
        base += "-sa"
    return bounded_name(base, 30)


def derived_bucket_name(project: str, cluster: str) -> str:
    """The default checkpoint bucket, ``<project>-<cluster>-ckpt``, cut with a stable hash to 63 characters."""
    return bounded_name(f"{project}-{cluster}-ckpt", 63)


# GCP labels (https://cloud.google.com/compute/docs/labeling-resources): values <= 63 characters of lowercase
# letters, digits, '_' and '-'. Kubernetes label values
# (https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#syntax-and-character-set): <= 63
# characters, alphanumeric at both ends. A value written to both must satisfy both.
GCP_LABEL_VALUE = re.compile(r"^[a-z0-9_-]{0,63}$")
K8S_LABEL_VALUE = re.compile(r"^(?:(?:[A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def label_value(text: str) -> str:
    """``text`` as a value valid both as a GCP label and a Kubernetes label (e.g. a Pulumi stack name)."""
    value = re.sub(r"[^a-z0-9_-]", "-", text.lower())[:63]
    return value.strip("-_")
