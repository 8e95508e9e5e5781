"""The schema-to-grammar path against random hostile schemas (issue 37): extreme bounds, deep
nesting, wild patterns. Each one either converts to a grammar within the limits, which llama.cpp's
own parser then reads (`checked` parses it, on a thread of known stack), or is refused by name
(SchemaUnsupported: a 400 at the server). Nothing else may come out, and nothing may crash: a
grammar llama.cpp's parser recursed through to the end of the stack killed the server (SIGSEGV).

Derandomized and bounded, so the fast suite runs the same examples everywhere; raise
FUZZ_EXAMPLES to search longer (`FUZZ_EXAMPLES=5000 .venv/bin/python -m pytest tests/test_grammar_fuzz.py`).
"""

from __future__ import annotations

import json
import os
import string

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.inference import gbnf
from engine.inference.structured import (MAX_GRAMMAR_BYTES, MAX_NESTING, SchemaUnsupported, response_grammar)
from engine.inference.tool_calls import Tool, ToolUse, call_grammar

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "150"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# Bounds from the ordinary to the absurd, and what is not a bound at all.
COUNT = st.one_of(st.integers(0, 12), st.sampled_from([999, 1000, 1001, 1999, 2000, 2001, 4321, 10_000, 100_000,
                                                       999_999, 1_000_000, 1_000_001, 10**7, 10**12, 10**40]),
                  st.sampled_from([-1, 1.5, True, "10", None]))

PATTERN_PIECES = st.sampled_from(["a", "b", r"\d", r"\w", ".", "[a-z]", "[^\"\\\\]", "(", ")", "|", "*", "+", "?",
                                  "{3}", "{0,5}", "{2,}", "{0,2000}", "{0,100000}", "{1000000}", "{99999999999}",
                                  r"\1", r"\k<x>", "(?:", "(?=", "\\", "\\{", "\"", "ü", "中"])
PATTERN = st.one_of(
    st.lists(PATTERN_PIECES, max_size=24).map(lambda p: "^" + "".join(p) + "$"),
    st.integers(1, 400).map(lambda depth: "^" + "(" * depth + "a" + ")" * depth + "$"),
    st.integers(1, 60).map(lambda depth: "^" + "(a{0,40})" * depth + "$"),
    st.text(string.printable, max_size=40),
)


def _bounds(keys: tuple[str, str]):
    return st.dictionaries(st.sampled_from(keys), COUNT, max_size=2).map(
        lambda d: {k: v for k, v in d.items() if v is not None})


STRING = st.one_of(
    st.builds(lambda b: {"type": "string", **b}, _bounds(("minLength", "maxLength"))),
    st.builds(lambda p, b: {"type": "string", "pattern": p, **b}, PATTERN, _bounds(("minLength", "maxLength"))),
    st.sampled_from([{"type": "string", "format": f} for f in ("date", "time", "date-time", "uuid")]),
)
INTEGER = st.builds(lambda lo, hi: {"type": "integer", **({"minimum": lo} if lo is not None else {}),
                                    **({"maximum": hi} if hi is not None else {})},
                    st.one_of(st.none(), st.integers(-10**30, 10**30)), st.one_of(st.none(), st.integers(-10**30, 10**30)))
LEAF = st.one_of(STRING, INTEGER, st.sampled_from([{"type": t} for t in ("number", "boolean", "null", "object")]),
                 st.lists(st.text(max_size=8), min_size=1, max_size=5).map(lambda v: {"enum": v}),
                 st.text(max_size=30).map(lambda v: {"const": v}))


def _composite(children):
    names = st.text(string.ascii_letters + "_-. 中", min_size=1, max_size=8)
    return st.one_of(
        st.builds(lambda props, n: {"type": "object", "properties": props, "required": sorted(props)[:n]},
                  st.dictionaries(names, children, min_size=1, max_size=6), st.integers(0, 6)),
        st.builds(lambda items, b: {"type": "array", "items": items, **b}, children, _bounds(("minItems", "maxItems"))),
        st.lists(children, min_size=1, max_size=4).map(lambda alts: {"anyOf": alts}),
        st.lists(children, min_size=1, max_size=3).map(lambda alts: {"oneOf": alts}),
        st.lists(children, min_size=1, max_size=3).map(lambda items: {"type": "array", "prefixItems": items}),
    )


SCHEMA = st.recursive(LEAF, _composite, max_leaves=24)


def _check(grammar: str | None) -> None:
    assert grammar is not None
    shape = gbnf.shape(grammar)
    assert shape.size <= MAX_GRAMMAR_BYTES and shape.nesting <= MAX_NESTING
    assert shape.largest_count <= gbnf.LLAMA_MAX_REPEAT


@FUZZ
@given(SCHEMA)
def test_a_random_schema_converts_within_the_limits_or_is_refused_by_name(schema):
    fmt = {"type": "json_schema", "json_schema": {"name": "fuzz", "schema": schema}}
    try:
        grammar = response_grammar(fmt)
    except SchemaUnsupported as exc:
        assert exc.where.startswith("response_format"), exc
        return
    _check(grammar)


# Schemas within every documented limit: these must convert, never be refused (a bound llama.cpp's
# threshold refused, a list of 3 000 items once, would otherwise pass as "refused by name").
LEGAL_COUNT = st.one_of(st.integers(0, 5), st.integers(0, 1_000_000), st.sampled_from([1999, 2000, 2001, 3000]))


def _legal_bounds(low: str, high: str):
    return st.tuples(LEGAL_COUNT, LEGAL_COUNT, st.booleans()).map(
        lambda t: {low: min(t[0], t[1]), high: max(t[0], t[1])} if t[2] else {high: t[1]})


LEGAL = st.recursive(
    st.one_of(st.builds(lambda b: {"type": "string", **b}, _legal_bounds("minLength", "maxLength")),
              st.sampled_from([{"type": "integer", "minimum": -5, "maximum": 10**12}, {"type": "number"},
                               {"type": "string", "pattern": "^[a-z]{2,2000}-[0-9]{0,4000}$"}])),
    lambda children: st.one_of(
        st.builds(lambda items, b: {"type": "array", "items": items, **b}, children,
                  _legal_bounds("minItems", "maxItems")),
        st.dictionaries(st.sampled_from("abcdef"), children, min_size=1, max_size=4).map(
            lambda props: {"type": "object", "properties": props, "required": sorted(props)[:1]})),
    max_leaves=8)


@FUZZ
@given(LEGAL)
def test_a_schema_within_every_limit_always_converts(schema):
    _check(response_grammar({"type": "json_schema", "json_schema": {"name": "legal", "schema": schema}}))


@FUZZ
@given(st.lists(SCHEMA, min_size=1, max_size=4), st.booleans())
def test_random_tool_parameters_give_a_call_grammar_within_the_limits(schemas, forced):
    tools = tuple(Tool(f"tool_{i}", "", json.dumps({"type": "object", "properties": {"x": s}, "required": ["x"]}))
                  for i, s in enumerate(schemas))
    # A tool's schema is the client's: a call that parses beats a refused request, so a schema the
    # grammar cannot take falls back to any JSON object, never to an error.
    _check(call_grammar(ToolUse(tools, "required" if forced else "auto"), with_open=forced))
