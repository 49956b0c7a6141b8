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

from tpuray.components.catalog.gpu_to_tpu import REPLACEMENTS
from tpuray.components.catalog.safe_text import one_line

__all__ = [
    "Finding",
    "PortCheckError",
    "check_file",
    "check_source",
    "format_finding",
    "summary",
]

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
    """One line for a terminal: the path and the code as the script wrote them, control characters made visible."""
    return f"{one_line(f.path)}:{f.line}:{f.col + 1}: {one_line(f.code)}: {f.what} -> {f.replacement}"


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


class _Walker:
    """One pass over the tree with an explicit stack, no recursion: a 450-link attribute chain or a 600-term sum
    that CPython compiles is checked like any script (``ast.NodeVisitor`` recurses once per level). Each node is
    looked at once, dotted names are built once per node (:meth:`dotted` remembers them) and a finding's code is
    cut from its first lines only, so the pass is linear in the file."""

    _CODE = 60
    """Characters of a finding's code shown."""

    def __init__(self, path: str, source: str, aliases: dict[str, str]) -> None:
        self.path, self.aliases = path, aliases
        self.lines = source.splitlines(keepends=True)
        self._encoded: dict[int, bytes] = {}
        self._dotted: dict[int, str | None] = {}
        self.findings: list[Finding] = []

    def dotted(self, node: ast.AST) -> str | None:
        chain: list[ast.Attribute] = []
        while isinstance(node, ast.Attribute) and id(node) not in self._dotted:
            chain.append(node)
            node = node.value
        if isinstance(node, ast.Attribute):
            base = self._dotted[id(node)]
        elif isinstance(node, ast.Name):
            base = self.aliases.get(node.id, node.id)
        else:
            base = None
        for link in reversed(chain):  # innermost first: each link's name is its value's name plus one attribute
            base = None if base is None else f"{base}.{link.attr}"
            self._dotted[id(link)] = base
        return base

    def _line(self, lineno: int) -> bytes:
        # col_offset counts UTF-8 bytes (ast docs); each line is encoded once however many findings it holds
        b = self._encoded.get(lineno)
        if b is None:
            b = self._encoded[lineno] = self.lines[lineno - 1].encode() if lineno <= len(self.lines) else b""
        return b

    def code(self, node: ast.expr) -> str:
        """The node's source, whitespace collapsed, cut to :attr:`_CODE` characters (read from its first lines
        only: a long expression costs no more than a short one)."""
        budget = 4 * self._CODE
        end_line = node.end_lineno or node.lineno
        parts: list[str] = []
        for ln in range(node.lineno, end_line + 1):
            raw = self._line(ln)
            stop = (node.end_col_offset or len(raw)) if ln == end_line else len(raw)
            begin = node.col_offset if ln == node.lineno else 0
            parts.append(raw[begin : min(stop, begin + budget)].decode("utf-8", errors="ignore"))
            budget -= len(parts[-1])
            if budget <= 0:
                break
        code = " ".join("".join(parts).split())
        return code if len(code) <= self._CODE else code[: self._CODE - 3] + "..."

    def add(self, node: ast.expr, kind: str) -> None:
        self.findings.append(Finding(self.path, node.lineno, node.col_offset, kind, self.code(node)))

    def walk(self, tree: ast.AST) -> list[Finding]:
        stack: list[ast.AST] = [tree]
        while stack:
            node = stack.pop()
            children = self.inspect(node)
            stack.extend(ast.iter_child_nodes(node) if children is None else children)
        return self.findings

    def inspect(self, node: ast.AST) -> Iterable[ast.AST] | None:
        """Record the node's findings; the nodes to look at next (None: all its children)."""
        if isinstance(node, ast.Call):
            return self._call(node)
        if isinstance(node, ast.keyword):
            return self._keyword(node)
        if isinstance(node, ast.Constant):
            # "cuda" / "cuda:0" anywhere a device is given: torch.device("cuda"), x.to("cuda"), DEVICE = "cuda"
            if _is_cuda_string(node):
                self.add(node, "cuda-device")
            return ()
        if isinstance(node, ast.Attribute):
            kind = _torch_cuda_kind(self.dotted(node) or "")
            if kind:
                self.add(node, kind)
                return ()  # torch.cuda.x.y is one finding
            return None
        if isinstance(node, ast.Name):
            # a name imported from torch.cuda and used bare (`from torch.cuda import synchronize`)
            kind = _torch_cuda_kind(self.aliases.get(node.id, ""))
            if kind and isinstance(node.ctx, ast.Load):
                self.add(node, kind)
            return ()
        return None

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

    def _call(self, node: ast.Call) -> Iterable[ast.AST] | None:
        name = self.dotted(node.func) or ""
        last = name.rsplit(".", 1)[-1]
        if name.startswith("torch.") and last == "autocast":
            kind = self._autocast_kind(node, name)
            if kind:
                self.add(node, kind)
                return ()  # the whole call is one finding, not also its torch.cuda or "cuda" parts
        elif name.startswith("torch.") and last == "GradScaler":
            self.add(node, "grad-scaler")
            return ()
        elif name.startswith("torch.") and last == "device" and node.args and _is_cuda_string(node.args[0]):
            self.add(node, "cuda-device")
            return ()
        elif isinstance(node.func, ast.Attribute) and node.func.attr == "cuda":
            self.add(node, "cuda-method")
            return [node.func.value, *node.args, *(k.value for k in node.keywords)]
        elif last == "ScalingConfig" and self._truthy(_keyword(node, "use_gpu")):
            self.add(node, "use-gpu")
        elif last == "init_process_group" and node.args and self._is_nccl(node.args[0]):
            self.add(node, "nccl")
        return None

    @staticmethod
    def _truthy(value: ast.expr | None) -> bool:
        # anything but a literal False/0/None may turn the GPU on
        return value is not None and not (isinstance(value, ast.Constant) and not value.value)

    @staticmethod
    def _is_nccl(node: ast.AST) -> bool:
        return isinstance(node, ast.Constant) and node.value == "nccl"

    def _keyword(self, node: ast.keyword) -> Iterable[ast.AST] | None:
        if node.arg == "backend" and self._is_nccl(node.value):
            self.add(node.value, "nccl")
        elif node.arg == "resources_per_worker" and isinstance(node.value, ast.Dict):
            if any(isinstance(k, ast.Constant) and k.value == "GPU" for k in node.value.keys):
                self.add(node.value, "gpu-resources")
        elif node.arg == "device" and _is_cuda_string(node.value):
            self.add(node.value, "cuda-device")
            return ()
        return None


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
    shown = one_line(path)
    if "\0" in source:  # CPython refuses NUL in source before parsing (a ValueError, or a SyntaxError with no line)
        line = source.count("\n", 0, source.index("\0")) + 1
        raise PortCheckError(f"{shown}:{line}: not Python (a NUL byte; Python source cannot hold one)")
    try:
        tree = ast.parse(source, filename=path)
    except SyntaxError as e:
        where = f":{e.lineno}" if e.lineno else ""
        raise PortCheckError(f"{shown}{where}: not Python ({one_line(e.msg)})") from None
    except (RecursionError, MemoryError, ValueError) as e:
        # nesting deeper than CPython's parser takes ("too many nested parentheses" is a SyntaxError, an
        # expression nested past the compiler's recursion limit is a RecursionError)
        raise PortCheckError(
            f"{shown}: not checkable: nested too deeply for Python's parser ({type(e).__name__})"
        ) from None
    findings = _Walker(path, source, _aliases(tree)).walk(tree)
    return sorted(set(findings), key=lambda f: (f.line, f.col, f.kind))


def check_file(path: Path) -> list[Finding]:
    shown = one_line(path)
    if path.is_dir():
        raise PortCheckError(f"{shown}: a directory; give Python script files")
    if not path.exists():
        raise PortCheckError(f"{shown}: no such file")
    if not path.is_file():
        raise PortCheckError(f"{shown}: not a regular file")
    try:
        source = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise PortCheckError(f"{shown}: not UTF-8 text, so not a Python script") from None
    except OSError as e:
        raise PortCheckError(f"{shown}: cannot read: {e.strerror or e}") from None
    return check_source(source, str(path))


def summary(findings: Sequence[Finding], files: int) -> str:
    if not findings:
        return f"{files} script(s): no GPU-only construct found"
    return f"{len(findings)} GPU-only construct(s) in {len({f.path for f in findings})} of {files} script(s)"
