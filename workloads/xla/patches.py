"""The record of what tpuray changes in frameworks on a per-chip worker, so that each change is undone when the
worker's process group ends (Ray Train may run another job's train function in the same process). Ray's own
internals are :mod:`tpuray.workloads._ray_compat`'s, which installs and undoes its changes itself.

:class:`Patches` replaces an attribute and remembers what it held; :meth:`Patches.restore` puts every one back,
newest first. :meth:`Patches.after_import` runs a patch right after a module is first imported, so that a guarded
framework adds no import to the workers that never use it.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

__all__ = ["Patches"]

_INHERITED = object()


class Patches:
    """Attributes replaced in other packages, each with the value it held."""

    def __init__(self) -> None:
        self._held: list[tuple[Any, str, Any]] = []
        self._hooks: list[_AfterImport] = []

    def __bool__(self) -> bool:
        """Whether anything is patched (or waits for its module): an install that finds it so does nothing."""
        return bool(self._held or self._hooks)

    def replace(self, owner: Any, name: str, value: Any) -> None:
        """Set ``owner.name`` (a module's or a class's) to ``value``, remembering the owner's own value, or that the
        owner only inherited the name (restoring then removes it, rather than copying the parent's onto it)."""
        getattr(owner, name)  # a patch of a name the owner does not have is a mistake: raise AttributeError
        self._held.append((owner, name, vars(owner).get(name, _INHERITED)))
        setattr(owner, name, value)

    def after_import(self, module: str, then: Callable[[ModuleType], None]) -> None:
        """Call ``then(module)`` now if ``module`` is imported, else right after it is first imported (before the
        module importing it sees it)."""
        found = sys.modules.get(module)
        if found is not None:
            then(found)
            return
        hook = _AfterImport(module, then, self._hooks)
        self._hooks.append(hook)
        sys.meta_path.insert(0, hook)

    def restore(self) -> None:
        """Undo every replacement, newest first, and drop the import hooks that have not fired."""
        for hook in self._hooks:
            if hook in sys.meta_path:
                sys.meta_path.remove(hook)
        self._hooks.clear()
        while self._held:
            owner, name, value = self._held.pop()
            if value is _INHERITED:
                delattr(owner, name)
            else:
                setattr(owner, name, value)


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs ``then(module)`` right after module ``name`` is executed, once, by wrapping its loader."""

    def __init__(self, name: str, then: Callable[[ModuleType], None], pending: list[_AfterImport]) -> None:
        self.name, self.then, self.pending = name, then, pending

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None) -> Any:
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        self.pending.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        loader: Any = spec.loader
        exec_module, then = loader.exec_module, self.then

        class Then(importlib.abc.Loader):
            def create_module(self, spec: Any) -> Any:
                return loader.create_module(spec)

            def exec_module(self, module: ModuleType) -> None:
                exec_module(module)
                then(module)

        spec.loader = Then()
        return spec
