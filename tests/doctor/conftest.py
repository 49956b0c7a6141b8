"""The doctor tests' project: a folder holding the doctor snapshots' stack file (tests/support/doctor_snapshots.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.doctor_snapshots import write_stack


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    write_stack(root)
    return root
