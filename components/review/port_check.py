"""``tpuray port check``: the GPU-only constructs of a Ray Train script, and what replaces each on TPUs.

The script is read with :mod:`ast` and never run or imported, so checking needs neither torch nor Ray (this module
imports neither). Names are resolved through the script's own imports (``import torch as th``,
``from torch.cuda.amp import autocast``), so an alias does not hide a construct.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

__all__ = ["REPLACEMENTS", "Finding", "PortCheckError", "check_file", "check_source", "format_finding"]

# Each kind of finding -> (what it is, the TPU replacement). Written once: the CLI, --json and the README's
# example all come from here. The replacements name tpuray's real API (tpuray.workloads) and Ray Train's portable
# one, which returns the worker's XLA chip when the trainer runs with XlaChipConfig().
REPLACEMENTS: dict[str, tuple[str, str]] = {
    "cuda-method": (
        ".cuda() moves to a GPU",
        ".to(ray.train.torch.get_device()), or ray.train.torch.prepare_model(model) for the model",
    ),
    "cuda-device": (
        "a CUDA device",
        "ray.train.torch.get_device() (the worker's XLA chip under torch_config=XlaChipConfig())",
    ),
    "cuda-sync": (
        "torch.cuda.synchronize()",
        "torch_xla.sync() to cut and run the graph; torch_xla.core.xla_model.wait_device_ops() to wait for it",
    ),
    "cuda-memory": (
        "CUDA memory statistics",
        "torch_xla.core.xla_model.get_memory_info(device) (bytes_used, bytes_limit, peak_bytes_used); "
        "no reset or cache calls on TPUs: drop them",
    ),
    "cuda-api": (
        "a torch.cuda call",
        "none on TPUs: Ray places one worker per chip (tpu_scaling_config(...)), ray.train.torch.get_device() "
        "gives its device; drop device counting and selection",
    ),
    "nccl": (
        'backend="nccl" (GPU-only collectives)',
        "TorchTrainer(..., torch_config=XlaChipConfig()) from tpuray.workloads sets up the process group; "
        "drop init_process_group and TorchConfig(backend=...)",
    ),
    "use-gpu": (
        "ScalingConfig(use_gpu=True)",
        'scaling_config=tpu_scaling_config("v5e:2x2") from tpuray.workloads (whole slices, one worker per chip)',
    ),
    "gpu-resources": (
        'resources_per_worker={"GPU": ...}',
        'tpu_scaling_config("v5e:2x2") from tpuray.workloads: it sets the TPU resources per worker itself',
    ),
    "fp16-autocast": (
        "float16 autocast (TPUs compute in bfloat16)",
        'torch.autocast("xla", dtype=torch.bfloat16)',
    ),
    "grad-scaler": (
        "GradScaler (fp16 loss scaling)",
        "drop it: bfloat16 needs no loss scaling (scaler.scale(loss).backward() -> loss.backward(), "
        "scaler.step(opt) -> opt.step())",
    ),
}

_CUDA_DEVICE = re.compile(r"cuda(:\d+)?")
_MEMORY_CALLS = frozenset(
    {
        "memory_allocated",
        "max_memory_allocated",
        "memory_reserved",
        "max_memory_reserved",
        "memory_cached",
        "max_memory_cached",
        "memory_stats",
        "memory_summary",
        "memory_snapshot",
        "mem_get_info",
        "reset_peak_memory_stats",
        "reset_max_memory_allocated",
        "empty_cache",
    }
)
_AUTOCASTS = frozenset({"torch.autocast", "torch.amp.autocast", "torch.amp.autocast_mode.autocast"})
_FP16 = frozenset({"torch.float16", "torch.half"})


class PortCheckError(ValueError):
    """A script that cannot be checked (missing, a directory, not UTF-8, not Python)."""


@dataclass(frozen=True)
class Finding:
    path: str
    line: int
    col: int
    kind: str
    code: str
    """The construct as written (the source segment, shortened)."""

    @property
    def what(self) -> str:
        return REPLACEMENTS[self.kind][0]

    @property
    def replacement(self) -> str:
        return REPLACEMENTS[self.kind][1]

    def as_json(self) -> dict[str, object]:
        return {**asdict(self), "what": self.what, "replacement": self.replacement}


def format_finding(f: Finding) -> str:
    return f"{f.path}:{f.line}:{f.col + 1}: {f.code}: {f.what} -> {f.replacement}"


def _aliases(tree: ast.AST) -> dict[str, str]:
    """Local name -> the dotted name it was imported as."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.asname:
                    names[a.asname] = a.name
                else:  # `import torch.cuda` binds `torch`
                    top = a.name.split(".", 1)[0]
                    names[top] = top
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for a in node.names:
                names[a.asname or a.name] = f"{node.module}.{a.name}"
    return names


def _is_cuda_string(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and bool(_CUDA_DEVICE.fullmatch(node.value))


def _keyword(call: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


class _Visitor(ast.NodeVisitor):
    def __init__(self, path: str, source: str, aliases: dict[str, str]) -> None:
        self.path, self.source, self.aliases = path, source, aliases
        self.findings: list[Finding] = []

    def dotted(self, node: ast.AST) -> str | None:
        parts: list[str] = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name):
            return None
        parts.append(self.aliases.get(node.id, node.id))
        return ".".join(reversed(parts))

    def add(self, node: ast.expr, kind: str) -> None:
        code = " ".join((ast.get_source_segment(self.source, node) or ast.unparse(node)).split())
        if len(code) > 60:
            code = code[:57] + "..."
        self.findings.append(Finding(self.path, node.lineno, node.col_offset, kind, code))

    def _autocast_kind(self, call: ast.Call, name: str) -> str | None:
        """``fp16-autocast`` when the autocast computes in float16 (the CUDA default), else None."""
        dtype = _keyword(call, "dtype")
        if dtype is None and len(call.args) > 1:
            dtype = call.args[1]
        if dtype is not None:
            return "fp16-autocast" if self.dotted(dtype) in _FP16 else None
        if name.startswith("torch.cuda."):
            return "fp16-autocast"  # torch.cuda.amp.autocast() defaults to float16
        device = _keyword(call, "device_type") or (call.args[0] if call.args else None)
        return "fp16-autocast" if _is_cuda_string(device) else None

    def visit_Call(self, node: ast.Call) -> None:
        name = self.dotted(node.func) or ""
        last = name.rsplit(".", 1)[-1]
        if name.startswith("torch.") and last == "autocast":
            kind = self._autocast_kind(node, name)
            if kind:
                self.add(node, kind)
                return  # the whole call is one finding, not also its torch.cuda or "cuda" parts
        elif name.startswith("torch.") and last == "GradScaler":
            self.add(node, "grad-scaler")
            return
        elif name.startswith("torch.") and last == "device" and node.args and _is_cuda_string(node.args[0]):
            self.add(node, "cuda-device")
            return
        elif isinstance(node.func, ast.Attribute) and node.func.attr == "cuda":
            self.add(node, "cuda-method")
            self.visit(node.func.value)
            for a in [*node.args, *(k.value for k in node.keywords)]:
                self.visit(a)
            return
        elif last == "ScalingConfig" and self._truthy(_keyword(node, "use_gpu")):
            self.add(node, "use-gpu")
        elif last == "init_process_group" and node.args and self._is_nccl(node.args[0]):
            self.add(node, "nccl")
        self.generic_visit(node)

    @staticmethod
    def _truthy(value: ast.expr | None) -> bool:
        # anything but a literal False/0/None may turn the GPU on
        return value is not None and not (isinstance(value, ast.Constant) and not value.value)

    @staticmethod
    def _is_nccl(node: ast.AST) -> bool:
        return isinstance(node, ast.Constant) and node.value == "nccl"

    def visit_keyword(self, node: ast.keyword) -> None:
        if node.arg == "backend" and self._is_nccl(node.value):
            self.add(node.value, "nccl")
        elif node.arg == "resources_per_worker" and isinstance(node.value, ast.Dict):
            if any(isinstance(k, ast.Constant) and k.value == "GPU" for k in node.value.keys):
                self.add(node.value, "gpu-resources")
        elif node.arg == "device" and _is_cuda_string(node.value):
            self.add(node.value, "cuda-device")
            return
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        # "cuda" / "cuda:0" anywhere a device is given: torch.device("cuda"), x.to("cuda"), DEVICE = "cuda"
        if _is_cuda_string(node):
            self.add(node, "cuda-device")

    def visit_Attribute(self, node: ast.Attribute) -> None:
        kind = _torch_cuda_kind(self.dotted(node) or "")
        if kind:
            self.add(node, kind)
            return  # torch.cuda.x.y is one finding
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        # a name imported from torch.cuda and used bare (`from torch.cuda import synchronize`)
        kind = _torch_cuda_kind(self.aliases.get(node.id, ""))
        if kind and isinstance(node.ctx, ast.Load):
            self.add(node, kind)


def _torch_cuda_kind(name: str) -> str | None:
    parts = name.split(".")
    if parts[:2] != ["torch", "cuda"] or len(parts) < 3:
        return None
    if parts[2] == "amp":
        return "grad-scaler" if parts[3:4] == ["GradScaler"] else "fp16-autocast"
    if parts[2] == "synchronize":
        return "cuda-sync"
    return "cuda-memory" if parts[2] in _MEMORY_CALLS else "cuda-api"


def check_source(source: str, path: str = "<script>") -> list[Finding]:
    """The GPU-only constructs of ``source``, in source order; :class:`PortCheckError` if it is not Python."""
    try:
        tree = ast.parse(source, filename=path)
    except SyntaxError as e:
        raise PortCheckError(f"{path}:{e.lineno}: not Python ({e.msg})") from None
    visitor = _Visitor(path, source, _aliases(tree))
    visitor.visit(tree)
    return sorted(set(visitor.findings), key=lambda f: (f.line, f.col, f.kind))


def check_file(path: Path) -> list[Finding]:
    if path.is_dir():
        raise PortCheckError(f"{path}: a directory; give Python script files")
    if not path.exists():
        raise PortCheckError(f"{path}: no such file")
    if not path.is_file():
        raise PortCheckError(f"{path}: not a regular file")
    try:
        source = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise PortCheckError(f"{path}: not UTF-8 text, so not a Python script") from None
    except OSError as e:
        raise PortCheckError(f"{path}: cannot read: {e.strerror or e}") from None
    return check_source(source, str(path))


def check_files(paths: Iterable[Path]) -> list[Finding]:
    return [f for p in paths for f in check_file(p)]


def summary(findings: Sequence[Finding], files: int) -> str:
    if not findings:
        return f"{files} script(s): no GPU-only construct found"
    return f"{len(findings)} GPU-only construct(s) in {len({f.path for f in findings})} of {files} script(s)"
