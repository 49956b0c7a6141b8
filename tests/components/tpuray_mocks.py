"""The SDK's in-process mock engine, recording every registration with its parent.

Pitfalls this guards (runtime-facts.md): mocks are installed when this module is imported, before any test
imports a module that declares resources; ``preview=False`` so ``apply`` callbacks run; ``new_resource``
returns the inputs plus the computed outputs a real provider would add; tests assert on what was registered so
a run that registers nothing fails.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
import yaml
from pulumi.runtime import mocks as pmocks
from pulumi.runtime import rpc
from pulumi.runtime import settings as psettings

ROOT = Path(__file__).resolve().parents[2]
CA = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nmock\n-----END CERTIFICATE-----\n").decode()


@dataclass
class Registered:
    type: str
    name: str
    parent: str
    custom: bool
    provider: str
    inputs: dict[str, Any]
    """Wire values: camelCase keys, numbers as floats."""
    dependencies: list[str]
    """URNs this resource waits for (explicit depends_on and inputs from other resources)."""
    replace_on_changes: list[str] = field(default_factory=list)


def computed(type_: str, name: str, inputs: Mapping[str, Any]) -> dict[str, Any]:
    """What the cloud would add to a resource's state."""
    project = str(inputs.get("project") or "mock-project")
    out: dict[str, Any] = {}
    if type_ == "gcp:container/cluster:Cluster":
        out = {"endpoint": "203.0.113.1", "masterAuth": {"clusterCaCertificate": CA}}
    elif type_ == "gcp:serviceaccount/account:Account":
        email = f"{inputs['accountId']}@{project}.iam.gserviceaccount.com"
        out = {"email": email, "name": f"projects/{project}/serviceAccounts/{email}"}
    elif type_.startswith("gcp:compute/"):
        out = {"selfLink": f"https://www.googleapis.com/compute/v1/projects/{project}/x/{inputs.get('name', name)}"}
    return out


class Recorder(pmocks.Mocks):
    def __init__(self) -> None:
        self.registered: list[Registered] = []
        self.calls: list[str] = []

    def new_resource(self, args: pmocks.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        return f"{args.name}-id", {**args.inputs, **computed(args.typ, args.name, args.inputs)}

    def call(self, args: pmocks.MockCallArgs) -> tuple[dict[str, Any], None]:
        self.calls.append(args.token)
        return {}, None

    # ---- queries --------------------------------------------------------------------------------------
    def of_type(self, type_: str) -> list[Registered]:
        return [r for r in self.registered if r.type == type_]

    def one(self, type_: str, name: str | None = None) -> Registered:
        found = [r for r in self.of_type(type_) if name is None or r.name == name]
        assert len(found) == 1, f"expected one {type_} {name or ''}, got {[r.name for r in found]}"
        return found[0]

    def types(self) -> list[str]:
        return sorted(r.type for r in self.registered)


class RecordingMonitor(pmocks.MockMonitor):
    """Keeps the parent and provider of each registration (MockResourceArgs has neither parent nor urn)."""

    def __init__(self, recorder: Recorder) -> None:
        super().__init__(recorder)
        self.recorder = recorder

    def RegisterResource(self, request: Any) -> Any:  # gRPC method name
        response = super().RegisterResource(request)  # type: ignore[no-untyped-call]
        if request.type != "pulumi:pulumi:Stack":
            self.recorder.registered.append(
                Registered(
                    type=request.type,
                    name=request.name,
                    parent=request.parent,
                    custom=bool(request.custom),
                    provider=request.provider,
                    inputs=rpc.deserialize_properties(request.object),
                    dependencies=sorted(set(request.dependencies)),
                    replace_on_changes=list(request.replaceOnChanges),
                )
            )
        return response


current: Recorder | None = None
"""The recorder of the latest :func:`install` (for tests where the build raises before :func:`run` returns)."""


def install(stack: str = "test", config: Mapping[str, str] | None = None) -> Recorder:
    """Fresh mocks and config for one test; returns the recorder."""
    pulumi.runtime.config.set_all_config(dict(config or {}))
    psettings.ROOT.set(None)  # a new root stack per test, so exports of one test do not leak into the next
    global current
    recorder = current = Recorder()
    pmocks.set_mocks(recorder, project="tpuray", stack=stack, preview=False, monitor=RecordingMonitor(recorder))
    return recorder


def stack_outputs() -> dict[str, Any]:
    root = psettings.get_root_resource()
    return dict(getattr(root, "outputs", {}) or {})


def _wire(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def cli_config(stack: str) -> dict[str, str]:
    """Config as the CLI passes it: the stack file's ``tpuray:`` keys, then ``Pulumi.yaml`` defaults for the rest
    (the SDK applies no defaults itself); strings raw, everything else JSON."""
    doc = yaml.safe_load((ROOT / f"Pulumi.{stack}.yaml").read_text())
    out = {k: _wire(v) for k, v in doc["config"].items() if k.startswith("tpuray:")}
    project = yaml.safe_load((ROOT / "Pulumi.yaml").read_text()) if (ROOT / "Pulumi.yaml").is_file() else {}
    for key, decl in (project.get("config") or {}).items():
        if key.startswith("tpuray:") and key not in out and isinstance(decl, dict) and "default" in decl:
            out[key] = _wire(decl["default"])
    return out


@contextmanager
def env(**values: str) -> Iterator[None]:
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def wire_plain(value: Any) -> Any:
    """Wire values back to JSON types: integral floats to ints (the wire only has floats)."""
    if isinstance(value, bool) or value is None or isinstance(value, str | int):
        return value
    if isinstance(value, float):
        return int(value) if value.is_integer() else value
    if isinstance(value, Mapping):
        return {k: wire_plain(v) for k, v in value.items() if not str(k).startswith("__")}
    if isinstance(value, list | tuple):
        return [wire_plain(v) for v in value]
    return value


install()  # before any test module imports something that declares resources


def run(build: Any, *, stack: str = "test", config: Mapping[str, str] | None = None) -> tuple[Recorder, dict[str, Any]]:
    """Run ``build()`` under fresh mocks; it may return a dict of Outputs/values, returned resolved.

    Every registration has completed when this returns (``pulumi.runtime.test`` waits for outstanding RPCs).
    """
    recorder = install(stack, config)
    resolved: dict[str, Any] = {}

    @pulumi.runtime.test  # type: ignore[untyped-decorator]
    def body() -> Any:
        wanted = build() or {}
        keys = list(wanted)
        return pulumi.Output.all(*[wanted[k] for k in keys]).apply(
            lambda vs: resolved.update(zip(keys, vs, strict=True))
        )

    body()
    return recorder, resolved


def children_of(recorder: Recorder, component_type: str) -> list[Registered]:
    """Registrations whose parent is a component of ``component_type``."""
    return [r for r in recorder.registered if r.parent.split("::")[2].endswith(component_type)] if recorder else []
