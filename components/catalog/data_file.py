"""Read a JSON file someone hands tpuray, with bounded cost and one-line errors naming the file.

Every JSON document tpuray reads from outside (``tpuray doctor --snapshot`` files and the API server's answers,
``tpuray diff``'s ``plan.json``, ``--cost-json``, ``--workload``, ``--image-inspect``) goes through
:func:`read_json_file` or :func:`loads_json`; YAML (stack and project files) goes through
:func:`tpuray.components.config.stack_yaml.read_yaml_file`, which opens the file with :func:`read_text` and raises a
:class:`DataFileError` too. What they refuse, each as one :class:`DataFileError`:

- a path that is not a regular file: a FIFO blocks the open until a writer comes, a device (``/dev/zero``, or a
  link to it) never ends; checked with ``stat`` before the open, and the open is non-blocking;
- more than ``max_bytes`` (read as ``max_bytes + 1``, so a file that grows after the ``stat`` is caught too);
- text that is not UTF-8 (RFC 8259 section 8.1; a UTF-16 byte order mark, which PowerShell's ``>`` writes, is named);
- a duplicate key in an object: RFC 8259 section 4 leaves their meaning open, Python keeps the last silently, so
  the object tpuray checks could differ from the one another reader acts on;
- ``NaN``, ``Infinity`` (Python's extensions, not JSON), a number that overflows a double (``1e400``) and an
  integer of more than :data:`MAX_INT_DIGITS` digits (no count in these files needs more, and CPython refuses
  ``int()`` past 4300 digits with a ValueError of its own);
- nesting deeper than ``max_depth``: Python's parser recurses, and so does code that walks the result.

The API is three functions and the error; the limits are keyword arguments with documented defaults.
"""

from __future__ import annotations

import json
import math
import os
import stat
from pathlib import Path
from typing import Any

__all__ = [
    "MAX_BYTES",
    "MAX_DEPTH",
    "MAX_INT_DIGITS",
    "DataFileError",
    "loads_json",
    "read_bytes",
    "read_json_file",
    "read_text",
]

MAX_BYTES = 256 * 1024 * 1024
"""Default size limit: ``kubectl get pods -A -o json`` of a large cluster runs to tens of MB; tpuray's own files
(plan.json, cost.json) are well under 1 MiB."""
MAX_DEPTH = 100
"""Default nesting limit (objects and arrays). tpuray's own files nest at most 17 levels (plan.json), the pinned
KubeRay CRDs 37 (``ray.io_rayjobs.yaml``), so a ``kubectl get crd -o json`` list about 40."""
MAX_INT_DIGITS = 20
"""Digits of the longest integer accepted: 2**64 - 1 has 20."""


class DataFileError(ValueError):
    """A file (or flag value) that is not the data asked for; the message is one line naming it."""


def _fail(what: str, path: Path | None, problem: str) -> DataFileError:
    where = f"{what} {path}" if path is not None else what
    return DataFileError(f"{where}: {' '.join(problem.split())}")


def read_bytes(path: str | Path, *, what: str, max_bytes: int = MAX_BYTES) -> bytes:
    """The bytes of the regular file ``path``, at most ``max_bytes``; else :class:`DataFileError`."""
    p = Path(path)
    try:
        mode = os.stat(p).st_mode  # stat before open: opening a FIFO waits for a writer, a device may never end
        if stat.S_ISDIR(mode):
            raise _fail(what, p, "a directory, not a file")
        if not stat.S_ISREG(mode):
            raise _fail(what, p, "not a regular file (a FIFO, socket or device); give a file")
        # O_NONBLOCK: should the path become a FIFO between the stat and the open, the open does not wait
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise _fail(what, p, "not a regular file (a FIFO, socket or device); give a file")
            data = f.read(max_bytes + 1)
    except FileNotFoundError:
        raise _fail(what, p, "cannot read: no such file") from None
    except OSError as e:
        raise _fail(what, p, f"cannot read: {e.strerror or e}") from None
    except MemoryError:
        raise _fail(what, p, "too large to read into memory") from None
    if len(data) > max_bytes:
        raise _fail(what, p, f"larger than {_size(max_bytes)}")
    return data


def read_text(path: str | Path, *, what: str, max_bytes: int = MAX_BYTES) -> str:
    """:func:`read_bytes` decoded as UTF-8 (RFC 8259 section 8.1); else :class:`DataFileError`."""
    return _decode(read_bytes(path, what=what, max_bytes=max_bytes), what, Path(path))


def _decode(data: bytes, what: str, path: Path | None) -> str:
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise _fail(what, path, "UTF-16 text (it starts with a UTF-16 byte order mark); save it as UTF-8")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise _fail(what, path, f"not valid UTF-8 at byte {e.start} (line {line})") from None


class _Refused(Exception):
    """Raised by the parser hooks; becomes a DataFileError with the file's name."""


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _Refused(f"duplicate key {key[:60]!r} in one object; write each key once")
            seen.add(key)
    return obj


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _Refused(f"the number {text[:40]} does not fit a double")
    return value


def _int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise _Refused(f"an integer of {len(text.lstrip('-'))} digits (at most {MAX_INT_DIGITS})")
    return int(text)


def _constant(text: str) -> Any:
    raise _Refused(f"{text} is not JSON (RFC 8259 has no NaN or Infinity)")


def _depth_problem(doc: Any, max_depth: int) -> str | None:
    """Iterative: the walk itself must not recurse."""
    stack: list[tuple[Any, int]] = [(doc, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict):
            children: Any = value.values()
        elif isinstance(value, list):
            children = value
        else:
            continue
        if depth > max_depth:
            return f"nested deeper than {max_depth} levels"
        stack.extend((child, depth + 1) for child in children)
    return None


def _loads(text: str | bytes, what: str, path: Path | None, max_depth: int) -> Any:
    if isinstance(text, bytes):
        text = _decode(text, what, path)
    try:
        doc = json.loads(text, object_pairs_hook=_object, parse_float=_float, parse_int=_int, parse_constant=_constant)
    except _Refused as e:
        raise _fail(what, path, str(e)) from None
    except json.JSONDecodeError as e:
        raise _fail(what, path, f"not JSON (line {e.lineno}, column {e.colno}: {e.msg})") from None
    except RecursionError:
        raise _fail(what, path, f"nested deeper than {max_depth} levels") from None
    except MemoryError:
        raise _fail(what, path, "too large to parse in memory") from None
    problem = _depth_problem(doc, max_depth)
    if problem:
        raise _fail(what, path, problem)
    return doc


def loads_json(text: str | bytes, *, what: str, max_depth: int = MAX_DEPTH) -> Any:
    """One JSON document from ``text`` (a flag's value, an API answer), or :class:`DataFileError` starting with
    ``what`` (e.g. ``"--workload"``)."""
    return _loads(text, what, None, max_depth)


def read_json_file(path: str | Path, *, what: str, max_bytes: int = MAX_BYTES, max_depth: int = MAX_DEPTH) -> Any:
    """The JSON document in ``path``, or :class:`DataFileError` naming ``what`` (the file's role, e.g.
    ``"--cost-json"``, ``"snapshot file"``) and the path."""
    p = Path(path)
    return _loads(read_bytes(p, what=what, max_bytes=max_bytes), what, p, max_depth)


def _size(n: int) -> str:
    return f"{n // 2**20} MiB" if n >= 2**20 else f"{n // 1024} KiB" if n >= 1024 else f"{n} bytes"
