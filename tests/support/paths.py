"""Where the suite finds the repository."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
"""The checkout's root: the stack files, pyproject.toml and the venvs beside the code."""
