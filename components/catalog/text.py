"""How a value a user gave is shown back in an error message.

Pure Python.
"""

from __future__ import annotations

__all__ = ["short_repr"]


def short_repr(value: str, limit: int = 80) -> str:
    """``repr`` of a value cut to ``limit`` characters, so an error never echoes a huge input."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 4] + "...'"
