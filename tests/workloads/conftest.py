"""Shared fixtures: stack files for local runs (the ``slow`` marker is tests/conftest.py's)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def stack_file(tmp_path: Path) -> Path:
    """The dev stack file (one v5e 2x2 slice), copied so a test can tweak it."""
    doc = yaml.safe_load((REPO / "Pulumi.dev.yaml").read_text())
    out = tmp_path / "Pulumi.dev.yaml"
    out.write_text(yaml.safe_dump(doc))
    return out
