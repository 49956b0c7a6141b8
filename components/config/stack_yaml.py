"""Read a YAML file the way Pulumi reads stack and project files, with bounded cost and bounded errors.

Pulumi parses ``Pulumi.<stack>.yaml`` with Go's yaml.v3, which rejects duplicate mapping keys, invalid UTF-8,
excessive aliasing and excessive nesting. PyYAML's ``safe_load`` accepts duplicates (the last one wins, so a stack
that Pulumi refuses would pass here) and expands nothing itself, but printing or validating an alias bomb walks
every shared node again and again. :func:`load_yaml` refuses all of these with one short :class:`YamlError`.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from tpuray.components.catalog.data_file import DataFileError, read_text

__all__ = ["MAX_BYTES", "MAX_DEPTH", "MAX_NODES", "SafeLoader", "YamlError", "load_yaml", "read_yaml_file", "safe_load"]

MAX_BYTES = 1 << 20
"""A stack file is a few KB; anything past 1 MiB is not one."""
MAX_DEPTH = 64
"""Nesting deeper than any stack needs (yaml.v3's own limit is 10000, but tpuray's model is 4 levels deep)."""
MAX_NODES = 100_000
"""Nodes of the document with every alias expanded (yaml.v3 refuses "excessive aliasing" the same way)."""


class YamlError(DataFileError):
    """The file is not a YAML document Pulumi would read; the message is one short line. A
    :class:`~tpuray.components.catalog.data_file.DataFileError`, so one ``except`` catches a bad JSON or YAML file."""


def _mark(node: Node) -> str:
    m = node.start_mark
    return f"line {m.line + 1}, column {m.column + 1}"


if TYPE_CHECKING:
    SafeLoader = yaml.SafeLoader
else:  # libyaml's parser when PyYAML has its bindings (https://github.com/yaml/pyyaml: "fast LibYAML-based
    # parser"): the same nodes, so the same objects, as the pure-Python one, several times faster on a stack file
    # that lists many pools; the checks below and the construction stay this module's Python either way
    SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def safe_load(text: str) -> Any:
    """``yaml.safe_load`` of ``text`` through :data:`SafeLoader` (libyaml's parser when PyYAML has it): for YAML
    already checked, or read as Pulumi's CLI reads it; :func:`load_yaml` for a file to check."""
    return yaml.load(text, Loader=SafeLoader)


# Go's yaml.v3 (resolve.go, yamlStyleFloat) reads a plain scalar like 1e3, 1E+3 or 2.5e3 as a float; PyYAML follows
# YAML 1.1, which wants a dot and a signed exponent, and leaves those strings: a stack that Pulumi reads as a number
# would fail here. The strict loader resolves them as yaml.v3 does (quoted, they stay strings in both). PyYAML's
# resolver calls ``match``: ``\Z`` is Go's ``$`` (the end of the text; Python's ``$`` also matches before a final
# newline).
_YAML_V3_FLOAT = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?\Z")


class _StrictLoader(SafeLoader):
    """SafeLoader that refuses duplicate keys and counts every node as aliases expand it."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._sizes: dict[int, int] = {}

    def _expanded_size(self, node: Node, depth: int = 0) -> int:
        """Nodes under ``node`` with aliases expanded, memoised per node (an alias bomb is a DAG)."""
        if depth > MAX_DEPTH:
            raise YamlError(f"nested deeper than {MAX_DEPTH} levels at {_mark(node)}")
        key = id(node)
        if key in self._sizes:
            return self._sizes[key]
        size = 1
        if isinstance(node, SequenceNode):
            size += sum(self._expanded_size(child, depth + 1) for child in node.value)
        elif isinstance(node, MappingNode):
            size += sum(self._expanded_size(k, depth + 1) + self._expanded_size(v, depth + 1) for k, v in node.value)
        if size > MAX_NODES:
            raise YamlError(f"the document expands to more than {MAX_NODES} values (excessive aliasing?)")
        self._sizes[key] = size
        return size

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, Node] = {}
        for key_node, _ in node.value:
            if isinstance(key_node, ScalarNode):
                key = self.construct_object(key_node, deep=deep)
                try:
                    hash(key)
                except TypeError:
                    continue  # SafeLoader reports unhashable keys itself
                if key in seen:
                    raise YamlError(
                        f"duplicate key {str(key)[:60]!r} at {_mark(key_node)} (first at {_mark(seen[key])}); "
                        "Pulumi refuses duplicate keys"
                    )
                seen[key] = key_node
        return super().construct_mapping(node, deep=deep)


_StrictLoader.add_implicit_resolver("tag:yaml.org,2002:float", _YAML_V3_FLOAT, list("-+.0123456789"))


def load_yaml(text: str) -> Any:
    """One YAML document, or :class:`YamlError` (duplicate key, too deep, too large, not YAML)."""
    loader = _StrictLoader(text)
    try:
        root = loader.get_single_node()
        if root is None:
            return None
        loader._expanded_size(root)
        return loader.construct_document(root)
    except YamlError:
        raise
    except RecursionError:
        raise YamlError(f"nested deeper than {MAX_DEPTH} levels") from None
    except yaml.YAMLError as e:
        if "exceeded maximum nesting depth" in str(e):  # libyaml's own limit (1000 levels), past this module's
            raise YamlError(f"nested deeper than {MAX_DEPTH} levels") from None
        raise YamlError(_short(f"not valid YAML: {e}")) from None
    finally:
        loader.dispose()


def read_yaml_file(path: str | Path, *, what: str = "YAML file") -> Any:
    """Read and parse ``path``; every failure (missing, not a regular file, too big, not UTF-8, not YAML) is a
    :class:`YamlError`. The file is opened by :func:`tpuray.components.catalog.data_file.read_text`, the one bounded
    reader of the files tpuray is given (a FIFO or ``/dev/zero`` is refused before it is opened)."""
    try:
        text = read_text(path, what=what, max_bytes=MAX_BYTES)
    except DataFileError as e:
        raise YamlError(str(e)) from None
    return load_yaml(text)


def _short(text: str, limit: int = 400) -> str:
    one = " ".join(text.split())
    return one if len(one) <= limit else one[: limit - 3] + "..."
