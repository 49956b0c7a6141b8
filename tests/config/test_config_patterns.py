"""Every pattern of the stack model matches the whole value: pydantic's Rust engine searches anywhere in a value
(so each pattern is anchored), and a value with a final newline, which Python's ``$`` would let through, or with a
digit outside ASCII, is refused by every one of them; the config's own Python patterns hold to the same."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated, Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import Field, TypeAdapter, ValidationError

from tests.support.stacks import minimal_values
from tpuray.components.config import ConfigError, StackConfig, parse_stack_config
from tpuray.components.config.base import ConfigModel
from tpuray.components.config.loaders import stack_of_file


def _patterns(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        if isinstance(node.get("pattern"), str):
            yield node["pattern"]
        for v in node.values():
            yield from _patterns(v)
    elif isinstance(node, list):
        for v in node:
            yield from _patterns(v)


PATTERNS = sorted(set(_patterns(StackConfig.model_json_schema(by_alias=True))))


def test_the_stack_model_uses_pydantics_rust_engine_and_anchors_every_pattern() -> None:
    """``rust-regex`` (pydantic's default, ``ConfigDict.regex_engine``): there ``$`` is the end of the text, and a
    pattern is searched for anywhere, so one without ``^`` and ``$`` would accept a value around a valid one."""
    assert "regex_engine" not in ConfigModel.model_config
    assert len(PATTERNS) >= 8
    assert [p for p in PATTERNS if not (p.startswith("^") and p.endswith("$"))] == []


def _field(regex: str) -> TypeAdapter[str]:
    return TypeAdapter(Annotated[str, Field(pattern=regex)], config=ConfigModel.model_config)


@pytest.mark.parametrize("regex", PATTERNS)
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_a_valid_value_with_a_final_newline_is_refused(regex: str, data: st.DataObject) -> None:
    value = data.draw(st.from_regex(regex, fullmatch=True).filter(lambda v: not v.endswith("\n")))
    field = _field(regex)
    assert field.validate_python(value) == value
    with pytest.raises(ValidationError):
        field.validate_python(value + "\n")


def test_no_pattern_reads_a_digit_as_any_unicode_digit() -> None:
    assert [p for p in PATTERNS if "\\d" in p] == []


@pytest.mark.parametrize("regex", [p for p in PATTERNS if "[0-9]" in p])
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_a_digit_outside_ascii_is_refused(regex: str, data: st.DataObject) -> None:
    """Both engines read ``\\d`` as any Unicode digit: "v\u0661.2.3" is no chart version Helm resolves, nor
    "\u0661Gi" a size the GCS FUSE driver parses. The patterns that ask for digits spell them ``[0-9]``."""
    value = data.draw(st.from_regex(regex, fullmatch=True).filter(lambda v: any(c in "0123456789" for c in v)))
    at = data.draw(st.sampled_from([i for i, c in enumerate(value) if c in "0123456789"]))
    with pytest.raises(ValidationError):
        _field(regex).validate_python(value[:at] + "\u0663" + value[at + 1 :])  # ARABIC-INDIC DIGIT THREE


def test_pydantics_engine_is_the_one_whose_dollar_ends_the_text() -> None:
    """The property above would hold vacuously if the engine were Python's, whose ``$`` matches before a final
    newline: pin the difference."""
    assert _field(r"^a$").validate_python("a") == "a"
    with pytest.raises(ValidationError):
        _field(r"^a$").validate_python("a\n")
    python_re = TypeAdapter(Annotated[str, Field(pattern=r"^a$")], config={"regex_engine": "python-re"})
    assert python_re.validate_python("a\n") == "a\n"


def test_a_region_with_a_final_newline_is_one_problem_of_its_own() -> None:
    """The cross-section rules read the region only where it is valid: a final newline is the region's problem,
    not also a zone 'not in region' and a region without TPU zones."""
    with pytest.raises(ConfigError) as e:
        parse_stack_config(minimal_values(region="us-east5\n"), stack="dev")
    assert [p.path for p in e.value.problems] == ["region"]


def test_a_stack_file_name_with_a_final_newline_names_no_stack() -> None:
    assert stack_of_file("Pulumi.dev.yaml") == "dev"
    assert stack_of_file("Pulumi.dev.yaml\n") is None
