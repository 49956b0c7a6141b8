"""What ``tpuray doctor`` reads from a cluster: a live API server or a directory of saved ``kubectl`` output.

Both readers return the same :class:`ClusterObjects` (plain dicts in the Kubernetes API's JSON form), so the checks
run one code path whichever way the objects came. Nothing here writes to a cluster: the live reader only lists.

Snapshot directory (every file is the JSON that the command beside it prints):

================================  ==========================================================================
file                              command
================================  ==========================================================================
``nodes.json``                    ``kubectl get nodes -o json``
``pods.json``                     ``kubectl get pods -A -o json``
``deployments.json``              ``kubectl get deployments -A -o json``
``mutatingwebhookconfigurations.json``  ``kubectl get mutatingwebhookconfigurations -o json``
``customresourcedefinitions.json``      ``kubectl get customresourcedefinitions -o json``
``version.json``                  ``kubectl version -o json`` (its ``serverVersion``), or the API's ``/version``
``gatewayclasses.json``           ``kubectl get gatewayclasses -o json``: optional (an older snapshot lacks it)
``rayclusters.json``              ``kubectl get rayclusters.ray.io -A -o json``: optional, as above
================================  ==========================================================================

An optional file that is absent is "not read" (None in :class:`ClusterObjects`): the checks that need it say
unknown, or what they could tell without it, never a plain pass. Live, GatewayClasses and RayClusters are listed
only where their CRD is installed; without it there are none.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from tpuray.components.catalog.data_file import MAX_DEPTH, DataFileError, loads_json, read_json_file

__all__ = [
    "GATEWAY_API_GROUP",
    "GATEWAY_API_VERSION",
    "GATEWAY_CLASS_CRD",
    "LIST_FILES",
    "LIST_KINDS",
    "OPTIONAL_LISTS",
    "OPTIONAL_LIST_FILES",
    "OPTIONAL_SNAPSHOT_FILES",
    "RAY_CLUSTER_CRD",
    "SNAPSHOT_FILES",
    "VERSION_FILE",
    "ClusterObjects",
    "ClusterReader",
    "LiveReader",
    "ReadError",
    "SnapshotReader",
    "parse_list",
    "parse_version",
]

LIST_FILES: Mapping[str, str] = {
    "nodes": "nodes.json",
    "pods": "pods.json",
    "deployments": "deployments.json",
    "webhooks": "mutatingwebhookconfigurations.json",
    "crds": "customresourcedefinitions.json",
}
"""Field of :class:`ClusterObjects` -> its file in a snapshot directory."""
OPTIONAL_LIST_FILES: Mapping[str, str] = {"gateway_classes": "gatewayclasses.json", "ray_clusters": "rayclusters.json"}
"""Field -> its file, for the lists a snapshot may lack: the field is then None (not read)."""
LIST_KINDS: Mapping[str, str] = {
    "nodes": "Node",
    "pods": "Pod",
    "deployments": "Deployment",
    "webhooks": "MutatingWebhookConfiguration",
    "crds": "CustomResourceDefinition",
    "gateway_classes": "GatewayClass",
    "ray_clusters": "RayCluster",
}
"""Field of :class:`ClusterObjects` -> the kind of its items (a pod list saved as nodes.json is refused)."""
VERSION_FILE = "version.json"
SNAPSHOT_FILES = (*LIST_FILES.values(), VERSION_FILE)
"""The files every snapshot holds."""
OPTIONAL_SNAPSHOT_FILES = tuple(OPTIONAL_LIST_FILES.values())

GATEWAY_API_GROUP = "gateway.networking.k8s.io"
GATEWAY_API_VERSION = "v1"
"""The Gateway API version KubeRay v1.7.0 uses: its RayService controller builds the Gateway and HTTPRoute of an
incremental upgrade with ``sigs.k8s.io/gateway-api/apis/v1`` (``ray-operator/controllers/ray/rayservice_controller.go``;
gateway-api v1.4.1 in ``ray-operator/go.mod``); GatewayClass is v1 in the same API (https://gateway-api.sigs.k8s.io/)."""
GATEWAY_CLASS_CRD = f"gatewayclasses.{GATEWAY_API_GROUP}"
RAY_CLUSTER_CRD = "rayclusters.ray.io"
OPTIONAL_LISTS: Mapping[str, tuple[str, str, str, str]] = {
    "gateway_classes": (GATEWAY_CLASS_CRD, GATEWAY_API_GROUP, GATEWAY_API_VERSION, "gatewayclasses"),
    "ray_clusters": (RAY_CLUSTER_CRD, "ray.io", "v1", "rayclusters"),
}
"""Field -> (its CRD, API group, version, plural): the optional lists, each read live through its custom resource
path (cluster-wide for every namespace)."""

MAX_OBJECT_DEPTH = 2 * MAX_DEPTH
"""Nesting the doctor accepts in a list of API objects: a cluster's CRDs are not tpuray's, and their schemas (and the
``managedFields`` that mirror them) nest deeper than tpuray's own files; still bounded, so no walk recurses past
Python's limit."""


class ReadError(Exception):
    """The cluster or the snapshot cannot be read: one line naming the file, context or server."""


@dataclass(frozen=True)
class ClusterObjects:
    """Everything the checks look at, as the Kubernetes API returns it."""

    nodes: tuple[dict[str, Any], ...]
    pods: tuple[dict[str, Any], ...]
    deployments: tuple[dict[str, Any], ...]
    webhooks: tuple[dict[str, Any], ...]
    """MutatingWebhookConfigurations."""
    crds: tuple[dict[str, Any], ...]
    server_version: str
    """``gitVersion`` of the API server, e.g. ``v1.34.1-gke.1829001``."""
    source: str
    """Where the objects came from: the snapshot directory, or the context and server."""
    gateway_classes: tuple[dict[str, Any], ...] | None = None
    """Gateway API GatewayClasses; None where they were not read (a snapshot without ``gatewayclasses.json``), empty
    where the cluster has none (live: no GatewayClass CRD, or it does not serve v1)."""
    ray_clusters: tuple[dict[str, Any], ...] | None = None
    """KubeRay RayClusters of every namespace, whose owner references say which a RayService made; None where they
    were not read, empty where the cluster has none."""


class ClusterReader(Protocol):
    def read(self) -> ClusterObjects: ...


def parse_list(doc: Any, where: str, kind: str | None = None) -> tuple[dict[str, Any], ...]:
    """The ``items`` of a ``kubectl get -o json`` list (``kind: List`` or ``<Kind>List``), each an object with
    ``metadata`` whose name is a string and whose labels and annotations map strings to strings, as the API server
    keeps them (ObjectMeta); with ``kind``, each item is one of that kind (the API server's own lists leave out the
    items' ``kind``; kubectl writes it)."""
    if not isinstance(doc, dict) or not isinstance(doc.get("items"), list):
        raise ReadError(
            f"{where}: expected a Kubernetes list (an object with an 'items' array), as kubectl get -o json"
        )
    list_kind = doc.get("kind")
    if kind is not None and list_kind is not None and list_kind not in ("List", f"{kind}List"):
        raise ReadError(f"{where}: a {list_kind}; expected a list of {kind} objects (a {kind}List or List)")
    items = doc["items"]
    for i, item in enumerate(items):
        if not isinstance(item, dict) or not isinstance(item.get("metadata"), dict):
            raise ReadError(f"{where}: items[{i}] is not a Kubernetes object (an object with 'metadata')")
        if kind is not None and item.get("kind", kind) != kind:
            raise ReadError(f"{where}: items[{i}] is a {str(item.get('kind'))[:60]}; expected {kind} objects")
        problem = _metadata_problem(item["metadata"])
        if problem:
            raise ReadError(f"{where}: items[{i}].metadata.{problem}")
    return tuple(items)


_JSON_TYPES = {dict: "object", list: "array", int: "number", float: "number", bool: "boolean", type(None): "null"}


def _metadata_problem(meta: Mapping[str, Any]) -> str | None:
    """What in an item's metadata the API server would never return (ObjectMeta's types), or None."""
    for key in ("name", "namespace"):
        if key in meta and not isinstance(meta[key], str):
            return f"{key} is not a string"
    for key in ("labels", "annotations"):
        value = meta.get(key)
        if value is None:
            continue
        if not isinstance(value, dict):
            return f"{key} is not an object of strings"
        bad = next((k for k, v in value.items() if not isinstance(v, str)), None)
        if bad is not None:
            kind = _JSON_TYPES.get(type(value[bad]), "value")
            return f"{key}[{bad[:60]!r}] is a JSON {kind}, not a string ({key} map strings to strings)"
    return None


def parse_version(doc: Any, where: str) -> str:
    """The server's ``gitVersion`` from ``kubectl version -o json`` or the API's ``/version``."""
    server = doc.get("serverVersion", doc) if isinstance(doc, dict) else None
    version = server.get("gitVersion") if isinstance(server, dict) else None
    if not isinstance(version, str) or not version:
        raise ReadError(f"{where}: no serverVersion.gitVersion (expected kubectl version -o json output)")
    return version


class SnapshotReader:
    """A directory of saved ``kubectl ... -o json`` output (file names: :data:`SNAPSHOT_FILES`)."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)

    def _present(self, name: str) -> bool:
        path = self.directory / name
        return path.exists() or path.is_symlink()  # a dangling link is there: reading it names the problem

    def _load(self, name: str) -> Any:
        path = self.directory / name
        if not self._present(name):
            raise ReadError(f"{path}: missing; a snapshot holds {', '.join(SNAPSHOT_FILES)}")
        try:
            return read_json_file(path, what="snapshot file", max_depth=MAX_OBJECT_DEPTH)
        except DataFileError as e:
            raise ReadError(str(e)) from None

    def read(self) -> ClusterObjects:
        if not self.directory.is_dir():
            raise ReadError(f"{self.directory}: not a directory (a snapshot holds {', '.join(SNAPSHOT_FILES)})")
        lists = {
            field: parse_list(self._load(name), str(self.directory / name), LIST_KINDS[field])
            for field, name in LIST_FILES.items()
        }
        optional: dict[str, tuple[dict[str, Any], ...] | None] = {
            field: (
                parse_list(self._load(name), str(self.directory / name), LIST_KINDS[field])
                if self._present(name)
                else None  # not read: the checks that need it say unknown
            )
            for field, name in OPTIONAL_LIST_FILES.items()
        }
        version = parse_version(self._load(VERSION_FILE), str(self.directory / VERSION_FILE))
        return ClusterObjects(
            **lists,
            server_version=version,
            source=str(self.directory),
            gateway_classes=optional["gateway_classes"],
            ray_clusters=optional["ray_clusters"],
        )


class LiveReader:
    """A live cluster through the Kubernetes Python client; kubeconfig and context as kubectl takes them
    (``$KUBECONFIG``, else ``~/.kube/config``; the current context unless one is named). Only GET requests."""

    def __init__(self, kubeconfig: str | None = None, context: str | None = None, timeout: float = 20.0) -> None:
        self.kubeconfig = kubeconfig
        self.context = context
        self.timeout = timeout

    def read(self) -> ClusterObjects:
        try:
            from kubernetes import client, config
        except ModuleNotFoundError:
            raise ReadError(
                "the Kubernetes Python client is not installed: pip install 'tpuray[doctor]' (or use --snapshot DIR)"
            ) from None
        from kubernetes.config.config_exception import ConfigException

        configuration = client.Configuration()
        try:
            config.load_kube_config(  # type: ignore[no-untyped-call]  # the client leaves it unannotated
                config_file=self.kubeconfig, context=self.context, client_configuration=configuration
            )
            _, current = config.list_kube_config_contexts(config_file=self.kubeconfig)  # type: ignore[no-untyped-call]
        except (ConfigException, OSError, ValueError, TypeError) as e:
            where = f"context {self.context!r}" if self.context else "the current context"
            raise ReadError(f"cannot load {where} from the kubeconfig: {' '.join(str(e).split())[:200]}") from None
        configuration.retries = 0  # an unreachable server is reported at once, not after urllib3's retries
        name = self.context or (current.get("name") if isinstance(current, dict) else None) or "(current)"
        where = f"context {name} at {configuration.host}"
        api = client.ApiClient(configuration)
        core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
        admission, ext = client.AdmissionregistrationV1Api(api), client.ApiextensionsV1Api(api)
        calls: dict[str, Callable[..., Any]] = {
            "nodes": core.list_node,
            "pods": core.list_pod_for_all_namespaces,
            "deployments": apps.list_deployment_for_all_namespaces,
            "webhooks": admission.list_mutating_webhook_configuration,
            "crds": ext.list_custom_resource_definition,
        }
        try:
            lists = {
                field: parse_list(self._get(call, where), f"{where}: {field}", LIST_KINDS[field])
                for field, call in calls.items()
            }
            optional: dict[str, tuple[dict[str, Any], ...] | None] = {}
            custom = client.CustomObjectsApi(api)
            installed = {c["metadata"].get("name") for c in lists["crds"]}
            for field, (crd, *args) in OPTIONAL_LISTS.items():
                optional[field] = ()
                # Only where the CRD is installed: without it the path 404s, and there can be none.
                if crd in installed:
                    # a 404 still: the CRD does not serve that version, so there is none of it to find; a 403:
                    # this identity may not list them, which only a serving stack's checks need: not read
                    doc = self._get(
                        custom.list_cluster_custom_object, where, *args, answers={404: {"items": []}, 403: None}
                    )
                    optional[field] = None if doc is None else parse_list(doc, f"{where}: {field}", LIST_KINDS[field])
            version = parse_version(self._get(client.VersionApi(api).get_code, where), f"{where}: /version")
        finally:
            api.close()  # type: ignore[no-untyped-call]
        return ClusterObjects(
            **lists,
            server_version=version,
            source=where,
            gateway_classes=optional["gateway_classes"],
            ray_clusters=optional["ray_clusters"],
        )

    def _get(self, call: Callable[..., Any], where: str, *args: str, answers: Mapping[int, Any] | None = None) -> Any:
        """One list call's raw JSON (``_preload_content=False``: the checks read the API's own field names); an HTTP
        status in ``answers`` answers its value instead of failing the read."""
        import urllib3
        from kubernetes.client.exceptions import ApiException

        said = f"{call.__name__}({', '.join(args)})" if args else call.__name__
        try:
            response = call(*args, _preload_content=False, _request_timeout=self.timeout)
            return loads_json(response.data, what=f"{where}: {said}", max_depth=MAX_OBJECT_DEPTH)
        except ApiException as e:
            if answers is not None and e.status in answers:
                return answers[e.status]
            raise ReadError(f"{where}: {said}: the API server answered {e.status} {e.reason}") from None
        except (urllib3.exceptions.HTTPError, OSError) as e:
            reason = getattr(e, "reason", None) or e
            raise ReadError(f"{where}: cannot reach the API server ({' '.join(str(reason).split())[:200]})") from None
        except DataFileError as e:
            raise ReadError(f"{e} (the API server's answer)") from None
