"""Run a Pulumi program in-process under the SDK's mock engine and collect every resource it registers.

This is what ``tpuray plan`` uses instead of ``pulumi preview``: no CLI, no state backend, no credentials.
Values only the cloud knows (ids, endpoints, CA certificates, service account e-mails) get deterministic
stand-ins, so the same program and config always produce the same resources.

The module is self-contained on purpose: it imports only the Pulumi SDK, PyYAML and the standard library
and never ``tpuray``. ``tpuray diff`` runs it as a script (``python plan_engine.py ...``) against another
git ref's checkout, whose ``tpuray.components`` then come from that checkout, not from this one.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import json
import os
import runpy
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tpuray.components.config.stack_yaml import safe_load

__all__ = ["Program", "ProgramRun", "RunError", "config_from_stack_file", "run_program"]

STANDIN_ENDPOINT = "203.0.113.10"
"""The cluster endpoint stand-in: an address from TEST-NET-3 (RFC 5737), never routable."""

STANDIN_CA = base64.b64encode(
    b"-----BEGIN CERTIFICATE-----\ntpuray-plan-stand-in\n-----END CERTIFICATE-----\n"
).decode()


class RunError(RuntimeError):
    """The program failed under the mock engine (its exception is chained; ``run`` holds what it registered)."""

    def __init__(self, message: str, run: ProgramRun) -> None:
        super().__init__(message)
        self.run = run


@dataclass
class ProgramRun:
    """What one run of a program registered."""

    project: str
    stack: str
    config: dict[str, str]
    resources: list[dict[str, Any]] = field(default_factory=list)
    outputs: dict[str, Any] = field(default_factory=dict)
    secret_outputs: list[str] = field(default_factory=list)
    """Names of the exported outputs that are secrets."""
    invokes: list[str] = field(default_factory=list)

    def of_type(self, type_: str) -> list[dict[str, Any]]:
        return [r for r in self.resources if r["type"] == type_]

    def one(self, type_: str, name: str | None = None) -> dict[str, Any]:
        found = [r for r in self.of_type(type_) if name is None or r["name"] == name]
        if len(found) != 1:
            raise LookupError(f"expected one {type_} {name or ''}, got {[r['name'] for r in found]}")
        return found[0]

    def types(self) -> list[str]:
        return sorted(r["type"] for r in self.resources)

    def to_json(self) -> dict[str, Any]:
        return {
            "project": self.project,
            "stack": self.stack,
            "config": dict(sorted(self.config.items())),
            "resources": self.resources,
            "outputs": self.outputs,
            "invokes": sorted(set(self.invokes)),
        }


# ---- wire values -> plain JSON --------------------------------------------------------------------------
SECRET_SIG = ("4dabf18193072939515e22adb298388d", "1b47061264138c4ac30d75fd1eb44270")
"""How the Pulumi wire format marks a secret value (``{sig_key: sig_value, "value": ...}``)."""
REDACTED = "[secret]"


def plain(value: Any) -> Any:
    """A JSON-ready copy of a wire value: integral floats become ints (the wire has only floats), dict keys are
    sorted by the JSON writer, resource references become their URN, secrets become ``[secret]`` (a plan is
    printed, committed and posted on pull requests), anything else exotic its ``str``."""
    if isinstance(value, bool) or value is None or isinstance(value, str | int):
        return value
    if isinstance(value, float):
        return int(value) if value.is_integer() else value
    if isinstance(value, Mapping) and value.get(SECRET_SIG[0]) == SECRET_SIG[1]:
        return REDACTED
    if isinstance(value, Mapping):
        # "__"-prefixed keys are the SDK's bookkeeping (e.g. "__defaults"), not inputs
        return {str(k): plain(v) for k, v in value.items() if not str(k).startswith("__")}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    urn = getattr(value, "urn", None)
    if isinstance(urn, str):
        return {"$ref": urn}
    return str(value)


def _stable_id(*parts: str) -> str:
    return hashlib.sha256("/".join(parts).encode()).hexdigest()[:12]


def computed_outputs(type_: str, name: str, inputs: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """The id and the cloud-computed outputs of one resource, as deterministic stand-ins."""
    project = str(inputs.get("project") or "plan-project")
    location = str(inputs.get("location") or inputs.get("region") or inputs.get("zone") or "plan-location")
    res_name = str(inputs.get("name") or name)
    out: dict[str, Any] = {"name": res_name}
    if type_.startswith("gcp:"):
        kind = type_.rsplit(":", 1)[-1].lower() + "s"
        rid = f"projects/{project}/locations/{location}/{kind}/{res_name}"
        out["selfLink"] = f"https://www.googleapis.com/plan/v1/{rid}"
    else:
        rid = f"{res_name}-{_stable_id(type_, name)}"
    if type_ == "gcp:container/cluster:Cluster":
        out.update(
            endpoint=STANDIN_ENDPOINT,
            masterAuth={"clusterCaCertificate": STANDIN_CA},
            masterVersion=inputs.get("minMasterVersion") or "1.34.0-gke.2201000",
            labelFingerprint="plan",
        )
    elif type_ == "gcp:serviceaccount/account:Account":
        account = inputs.get("accountId") or name
        out["email"] = f"{account}@{project}.iam.gserviceaccount.com"
        out["member"] = f"serviceAccount:{out['email']}"
        rid = f"projects/{project}/serviceAccounts/{out['email']}"
    elif type_ == "gcp:storage/bucket:Bucket":
        out["url"] = f"gs://{res_name}"
        rid = res_name
    elif type_.startswith("gcp:compute/"):
        out["selfLink"] = f"https://www.googleapis.com/compute/v1/projects/{project}/{res_name}"
    elif type_.startswith("kubernetes:") and "metadata" in inputs:
        meta = dict(inputs.get("metadata") or {})
        meta.setdefault("name", name)  # Pulumi would add a random suffix; a plan keeps the logical name
        out["metadata"] = meta
    return rid, out


# ---- the run --------------------------------------------------------------------------------------------
def _load_pulumi() -> Any:
    import pulumi.runtime  # imported here: importing the SDK costs most of a plan's time

    return pulumi


def _make_monitor(pulumi: Any, run: ProgramRun) -> Any:
    from pulumi.runtime import mocks as pmocks

    # The SDK's MockMonitor.RegisterResource deserializes each request's inputs and hands them to new_resource,
    # in the executor thread that registers the resource; keeping them per thread spares deserializing them again.
    seen = threading.local()

    class PlanMocks(pmocks.Mocks):
        def new_resource(self, args: Any) -> tuple[str, dict[str, Any]]:
            seen.inputs = args.inputs
            rid, extra = computed_outputs(args.typ, args.name, args.inputs)
            return rid, {**args.inputs, **extra}

        def call(self, args: Any) -> tuple[dict[str, Any], None]:
            # tpuray's program calls no data source (a test asserts it); record any call and echo its args
            run.invokes.append(args.token)
            return dict(args.args), None

    class CapturingMonitor(pmocks.MockMonitor):
        """Records what the engine would see: type, name, parent, provider, options and the inputs."""

        def make_urn(self, parent: str, type_: str, name: str) -> str:
            # The engine's rule (the mock's differs): a child's type is qualified by its parent's whole type
            # chain, except that children of the stack are not; so plan URNs match `pulumi preview`'s.
            if parent:
                qualified = parent.split("::")[2]
                if qualified != "pulumi:pulumi:Stack":
                    type_ = f"{qualified}${type_}"
            return f"urn:pulumi:{run.stack}::{run.project}::{type_}::{name}"

        def alias_urns(self, request: Any) -> list[str]:
            """The URNs the resource was known by: given whole, or as specs that the engine resolves against the
            resource's own name, type and parent (pulumi/sdk/proto/alias.proto).

            A spec that renames only the type is left out: the provider SDKs add those to every resource of a
            renamed type (pulumi_gcp's ``gcp:serviceAccount/...``), whatever the program does; the plan shows
            what the program moved."""
            urns = set(getattr(request, "aliasURNs", []) or [])
            for alias in getattr(request, "aliases", []) or []:
                if alias.WhichOneof("alias") == "urn":
                    urns.add(alias.urn)
                    continue
                spec = alias.spec
                if not (spec.name or spec.stack or spec.project or spec.parentUrn or spec.noParent):
                    continue
                parent = "" if spec.noParent else (spec.parentUrn or request.parent)
                urn = self.make_urn(parent, spec.type or request.type, spec.name or request.name)
                if spec.stack or spec.project:  # another stack's or project's resource
                    urn = (
                        f"urn:pulumi:{spec.stack or run.stack}::{spec.project or run.project}::{urn.split('::', 2)[2]}"
                    )
                urns.add(urn)
            return sorted(urns)

        def RegisterResource(self, request: Any) -> Any:  # the gRPC method name
            seen.inputs = None
            response = super().RegisterResource(request)  # type: ignore[no-untyped-call]
            if request.type != "pulumi:pulumi:Stack":
                inputs = seen.inputs
                if inputs is None:  # the SDK's mock no longer calls new_resource on this path: say so, loudly
                    raise RuntimeError(f"mock engine: no inputs seen for {request.type} {request.name}")
                options: dict[str, Any] = {}
                if request.protect:
                    options["protect"] = True
                if request.deleteBeforeReplace:
                    options["deleteBeforeReplace"] = True
                if request.retainOnDelete:
                    options["retainOnDelete"] = True
                for key in ("ignoreChanges", "replaceOnChanges"):
                    values = sorted(getattr(request, key, []) or [])
                    if values:
                        options[key] = values
                aliases = self.alias_urns(request)
                if aliases:
                    options["aliasURNs"] = aliases
                if request.dependencies:
                    options["dependsOn"] = sorted(set(request.dependencies))
                run.resources.append(
                    {
                        "urn": response.urn,
                        "type": request.type,
                        "name": request.name,
                        "parent": request.parent or None,
                        "custom": bool(request.custom),
                        # a provider reference is "<urn>::<id>"; the URN is what stays stable
                        "provider": request.provider.rsplit("::", 1)[0] if request.provider else None,
                        "options": options,
                        "inputs": plain(inputs),
                    }
                )
            return response

    return CapturingMonitor(PlanMocks())


def _reset_runtime(pulumi: Any) -> None:
    """Clear the SDK's process-global state so a second program runs as if in a fresh process."""
    from pulumi.runtime import config as pconfig
    from pulumi.runtime import settings as psettings

    pconfig.CONFIG.get().clear()  # the ContextVar's default is one shared dict
    pconfig.set_all_config({}, [])
    psettings.ROOT.set(None)
    psettings.SETTINGS.rpc_manager.clear()
    psettings.SETTINGS.outputs.clear()


Program = str | Path | Callable[[], Mapping[str, Any] | None]
"""A ``__main__.py`` (or a directory holding one), or a function that declares resources and may return outputs."""


_UNRETRIEVED = frozenset({"Future exception was never retrieved", "Task exception was never retrieved"})


def _quiet_unretrieved(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """The event loop's exception handler while (and after) a program runs under the mock engine.

    A failing program leaves every output that depends on the failure holding the same exception; asyncio prints
    each one's traceback when it is garbage-collected, at exit, after the command has already reported the error
    once (as a RunError). Everything else goes to asyncio's default handler.
    """
    if context.get("message") in _UNRETRIEVED:
        return
    loop.default_exception_handler(context)


def run_program(
    program: Program,
    *,
    project: str,
    stack: str,
    config: Mapping[str, str],
    secret_keys: tuple[str, ...] = (),
    cwd: str | Path | None = None,
) -> ProgramRun:
    """Run ``program`` with ``config`` (full ``ns:key`` names, string values as the CLI passes them; the keys in
    ``secret_keys`` as secrets) and return every registered resource, sorted by URN."""
    pulumi = _load_pulumi()
    from pulumi.runtime import mocks as pmocks
    from pulumi.runtime import settings as psettings
    from pulumi.runtime.stack import run_pulumi_func
    from pulumi.runtime.sync_await import _ensure_event_loop, _sync_await

    path = None if callable(program) else Path(program).resolve()
    if path is not None and path.is_dir():
        path = path / "__main__.py"
    run = ProgramRun(project=project, stack=stack, config=dict(config))
    _reset_runtime(pulumi)
    pulumi.runtime.set_all_config(dict(config), list(secret_keys))
    monitor = _make_monitor(pulumi, run)
    pmocks.set_mocks(monitor.mocks, project=project, stack=stack, preview=False, monitor=monitor)

    def declare() -> dict[str, Any]:
        if callable(program):
            return dict(program() or {})
        assert path is not None
        old_cwd = os.getcwd()
        old_path = list(sys.path)
        try:
            os.chdir(cwd or path.parent)
            sys.path.insert(0, str(path.parent))
            runpy.run_path(str(path), run_name="__main__")
        finally:
            os.chdir(old_cwd)
            sys.path[:] = old_path
        root = psettings.get_root_resource()
        return dict(getattr(root, "outputs", {}) or {})

    async def resolve(exported: dict[str, Any]) -> tuple[Any, list[str]]:
        secret = [k for k, v in exported.items() if isinstance(v, pulumi.Output) and await v.is_secret()]
        return await pulumi.Output.from_input(exported).future(), sorted(secret)

    resolved: tuple[Any, list[str]] = ({}, [])

    def body() -> None:
        nonlocal resolved
        resolved = _sync_await(resolve(declare()))

    psettings.SETTINGS.rpc_manager.clear()
    psettings.SETTINGS.outputs.clear()
    loop: asyncio.AbstractEventLoop = _ensure_event_loop()  # type: ignore[no-untyped-call]  # the loop it runs on
    loop.set_exception_handler(_quiet_unretrieved)
    try:
        _sync_await(run_pulumi_func(body))
    except Exception as e:  # the program's own error, or one raised while resolving its outputs
        run.resources.sort(key=lambda r: r["urn"])
        where = path if path is not None else getattr(program, "__name__", "program")
        raise RunError(f"{where} failed under the mock engine: {type(e).__name__}: {e}", run) from e
    finally:
        _reset_runtime(pulumi)
    run.outputs = plain(resolved[0] or {})
    run.secret_outputs = resolved[1]
    run.resources.sort(key=lambda r: r["urn"])
    return run


# ---- stack files -> config ------------------------------------------------------------------------------
def _load_yaml(path: str | Path) -> Any:
    """``yaml.safe_load`` of a file (libyaml's parser when PyYAML has it: :func:`stack_yaml.safe_load`)."""
    return safe_load(Path(path).read_text())


def _wire(value: Any) -> str:
    """A config value as the CLI hands it to the program: strings as they are, everything else as JSON."""
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def config_from_stack_file(path: str | Path, namespace: str, project_file: str | Path | None = None) -> dict[str, str]:
    """The config the CLI would pass for a stack file: every ``<namespace>:`` key of the stack file (bare keys
    belong to the project too), then the ``default`` of every key ``Pulumi.yaml`` declares and the stack
    leaves unset (the CLI applies those, the SDK does not)."""
    doc = _load_yaml(path) or {}
    raw = doc.get("config") or {}
    out: dict[str, str] = {}
    for key, value in raw.items():
        ns, _, name = str(key).rpartition(":")
        if ns in ("", namespace):
            out[f"{namespace}:{name}"] = _wire(value)
    if project_file is not None and Path(project_file).is_file():
        declared = (_load_yaml(project_file) or {}).get("config") or {}
        for key, decl in declared.items():
            ns, _, name = str(key).rpartition(":")
            full = f"{ns or namespace}:{name}"
            if ns in ("", namespace) and full not in out and isinstance(decl, dict) and "default" in decl:
                out[full] = _wire(decl["default"])
    return out


def project_name(root: str | Path, default: str) -> str:
    """The project name from ``Pulumi.yaml`` in ``root`` (the config namespace), else ``default``."""
    p = Path(root) / "Pulumi.yaml"
    if p.is_file():
        doc = _load_yaml(p) or {}
        if isinstance(doc, dict) and isinstance(doc.get("name"), str):
            return str(doc["name"])
    return default


def main(argv: list[str] | None = None) -> int:
    """Script entry for ``tpuray diff`` on git refs: print one run as JSON on stdout."""
    parser = argparse.ArgumentParser(description="run a Pulumi program under the mock engine, print JSON")
    parser.add_argument("--program", required=True)
    parser.add_argument("--stack-file", required=True)
    parser.add_argument("--stack", required=True)
    parser.add_argument("--project", required=True)
    parser.add_argument("--project-file", default=None, help="Pulumi.yaml, for its config defaults")
    args = parser.parse_args(argv)
    config = config_from_stack_file(args.stack_file, args.project, args.project_file)
    try:
        run = run_program(args.program, project=args.project, stack=args.stack, config=config)
    except RunError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    json.dump(run.to_json(), sys.stdout, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
