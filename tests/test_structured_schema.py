"""Structured output without a model: what the grammar cannot enforce is refused by name, every
test schema is accepted, and the integer-bound rules match exactly the integers in range."""

from __future__ import annotations

import re

import pytest

from engine.inference.structured import SchemaUnsupported, check_schema, integer_rule
from tests.data.json_schemas import SCHEMAS, UNSUPPORTED


def test_every_test_schema_is_accepted():
    for schema in SCHEMAS.values():
        check_schema(schema)


@pytest.mark.parametrize("name", sorted(UNSUPPORTED))
def test_what_the_grammar_cannot_enforce_is_refused_by_name(name):
    schema, what = UNSUPPORTED[name]
    with pytest.raises(SchemaUnsupported) as caught:
        check_schema(schema)
    assert caught.value.what.startswith(what)


@pytest.mark.parametrize("lo,hi", [(0, 10), (18, None), (-50, -10), (-1234, 56789), (None, 7), (100, 999), (5, 5)])
def test_integer_bounds_match_exactly_the_integers_in_range(lo, hi):
    schema = {"type": "integer"} | ({"minimum": lo} if lo is not None else {}) | ({"maximum": hi} if hi is not None else {})
    rule = integer_rule(schema).removesuffix(" space")
    # the rule's GBNF as a regex: literals, classes, groups, alternation, {n} repetition
    pattern = re.sub(r'"([^"]*)"', lambda m: re.escape(m.group(1)), rule).replace(" ", "")
    regex = re.compile(pattern)
    edges = {e + d for e in (lo, hi, 0, 9, 10, 99, 100, -9, -10, -100) if e is not None for d in range(-3, 4)}
    for n in sorted(edges | set(range(-2000, 2000, 37)) | {10**17, -10**17, 10**17 + 3}):
        inside = (lo is None or n >= lo) and (hi is None or n <= hi)
        assert bool(regex.fullmatch(str(n))) == inside, (n, rule)
    assert len(rule) < 4000  # linear in the digits, however wide the range
