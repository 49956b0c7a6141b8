"""The one text rule for a string tpuray did not write itself (a name, a path or a value read from a stack file, a
``plan.json``, a script, a flag) on its way to Markdown, SVG/HTML, a terminal or a file.

- :func:`control_char` finds a control character: Unicode categories Cc (C0/C1 controls: newline, ESC, NUL...),
  Cf (format: bidi overrides, zero-width characters), Zl and Zp (line and paragraph separators). Config strings
  refuse them (:func:`refuse_control`); everything else shows them as visible escapes (:func:`one_line`), so one
  string stays one line and a terminal never receives an escape sequence it did not get from tpuray.
- :func:`md_text` and :func:`md_code` make a one-line string inert Markdown: plain text with every character that
  can open Markdown structure (emphasis, links, images, HTML, table pipes, headings, code spans) backslash-escaped
  (https://spec.commonmark.org/0.31.2/#backslash-escapes: "Any ASCII punctuation character may be
  backslash-escaped"), or a code span whose fence is longer than any backtick run inside
  (https://spec.commonmark.org/0.31.2/#code-spans). A pipe is ``\\|`` in both: GitHub's tables split cells on it
  even inside a code span (https://github.github.com/gfm/#tables-extension-).
- :func:`xml_text` is for SVG and HTML: visible escapes, then ``html.escape``.
"""

from __future__ import annotations

import html
import re
import unicodedata

__all__ = ["CONTROL_CATEGORIES", "control_char", "md_code", "md_text", "one_line", "refuse_control", "xml_text"]

CONTROL_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp"})
"""Unicode general categories no name, value or line tpuray shows may carry."""

_MD_SPECIAL = re.compile(r"([\\`*_\[\]<>|#!~&])")
"""ASCII punctuation that opens Markdown structure inline: emphasis ``*_~``, links and images ``[]!``, raw HTML and
autolinks ``<>``, entities ``&``, table cells ``|``, headings ``#``, code spans ````` and the escape itself."""


def control_char(text: str) -> str | None:
    """The first control character of ``text`` (see :data:`CONTROL_CATEGORIES`), or None."""
    for ch in text:
        if unicodedata.category(ch) in CONTROL_CATEGORIES:
            return ch
    return None


def _visible(ch: str) -> str:
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def refuse_control(text: str) -> str:
    """``text`` unchanged, or ValueError naming the control character and where it is (a pydantic validator)."""
    ch = control_char(text)
    if ch is not None:
        raise ValueError(
            f"contains the control character {_visible(ch)} at index {text.index(ch)}; use printable characters "
            "only (no newline, tab or escape sequence)"
        )
    return text


def one_line(text: object) -> str:
    """``str(text)`` on one line: each control character (newline, ESC, NUL, bidi override...) as ``\\xNN`` or
    ``\\uNNNN``; every other character unchanged."""
    s = str(text)
    if control_char(s) is None:
        return s
    return "".join(_visible(ch) if unicodedata.category(ch) in CONTROL_CATEGORIES else ch for ch in s)


def md_text(text: object) -> str:
    """``text`` as inert one-line Markdown text: control characters visible, Markdown punctuation escaped."""
    return _MD_SPECIAL.sub(r"\\\1", one_line(text))


def md_code(text: object) -> str:
    """``text`` as a one-line Markdown code span, whatever backticks or pipes it holds."""
    s = one_line(text).replace("|", "\\|")
    runs = [len(m) for m in re.findall(r"`+", s)]
    fence = "`" * (max(runs, default=0) + 1)
    pad = " " if s.startswith("`") or s.endswith("`") else ""
    return f"{fence}{pad}{s}{pad}{fence}"


def xml_text(text: object) -> str:
    """``text`` for an SVG or HTML text node or attribute: control characters visible, then ``html.escape``."""
    return html.escape(one_line(text))
