"""The one record of what tpuray patches in other packages on a worker: every change is undone, newest first, and an
import hook that never fired leaves nothing behind."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

from tpuray.workloads.xla.patches import Patches


def test_restore_puts_back_every_value_newest_first() -> None:
    owner = types.SimpleNamespace(f="original")
    patches = Patches()
    assert not patches
    patches.replace(owner, "f", "first")
    patches.replace(owner, "f", "second")  # a patch over a patch: restoring must end at the original
    assert owner.f == "second" and patches
    patches.restore()
    assert owner.f == "original" and not patches


def test_a_name_the_owner_only_inherited_is_removed_again_not_copied_onto_it() -> None:
    class Base:
        def greet(self) -> str:
            return "base"

    class Child(Base):
        pass

    patches = Patches()
    patches.replace(Child, "greet", lambda self: "patched")
    assert Child().greet() == "patched" and Base().greet() == "base"
    patches.restore()
    assert "greet" not in vars(Child) and Child().greet() == "base"
    with pytest.raises(AttributeError):
        patches.replace(Child, "no_such_name", None)


def test_a_patch_waits_for_its_module_and_runs_once_it_is_imported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "late_framework.py").write_text("def prepare():\n    return 'theirs'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "late_framework", raising=False)
    patches = Patches()
    seen: list[str] = []

    def guard(module: types.ModuleType) -> None:
        seen.append(module.__name__)
        patches.replace(module, "prepare", lambda: "guarded")

    patches.after_import("late_framework", guard)
    assert seen == [] and patches  # nothing imported on its behalf, but the hook is pending
    import late_framework  # type: ignore[import-not-found]

    assert seen == ["late_framework"] and late_framework.prepare() == "guarded"
    patches.restore()
    assert late_framework.prepare() == "theirs"


def test_restore_drops_a_hook_that_never_fired() -> None:
    patches = Patches()
    before = list(sys.meta_path)
    patches.after_import("tpuray_no_such_module_is_ever_imported", lambda m: None)
    assert len(sys.meta_path) == len(before) + 1
    patches.restore()
    assert sys.meta_path == before and not patches
