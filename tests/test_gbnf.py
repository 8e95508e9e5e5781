"""engine/inference/gbnf.py: the repetition the engine writes in place of the converter's nested
groups matches exactly the counts asked for, with counts under llama.cpp's threshold and no deep
nesting; `shape` measures what llama.cpp's parser would recurse through. Checked here through
Python's `re`, whose `{m,n}`, groups and `?`/`*` read the same as GBNF's; tests/model/ and the
fuzzer (tests/test_grammar_fuzz.py) parse the grammars with llama.cpp itself."""

from __future__ import annotations

import re

import pytest

from engine.inference.gbnf import LLAMA_MAX_REPEAT, repetition, shape


def as_regex(gbnf: str) -> re.Pattern:
    return re.compile(gbnf.replace(" ", "").replace('"', ""))


def counts(gbnf: str, up_to: int, unit: str = "a") -> set[int]:
    pattern = as_regex(gbnf)
    return {n for n in range(up_to + 1) if pattern.fullmatch(unit * n)}


@pytest.mark.parametrize("lo, hi", [(0, 0), (0, 1), (1, 1), (0, 5), (3, 3), (2, 7), (0, 2000), (0, 2001),
                                    (5, 2999), (0, 4321), (1999, 4000), (2500, 2500), (0, 10_000), (17, 12_345)])
def test_bounded_repetition_matches_exactly_the_counts_asked(lo, hi):
    gbnf = repetition('"a"', lo, hi)
    assert counts(gbnf, hi + 3) == set(range(lo, hi + 1))
    measured = shape(f"root ::= {gbnf}")
    assert measured.largest_count <= LLAMA_MAX_REPEAT
    assert measured.nesting <= 3
    assert measured.size < 100


@pytest.mark.parametrize("lo", [0, 1, 4, 2001])
def test_unbounded_repetition_has_its_minimum(lo):
    assert counts(repetition('"a"', lo, None), lo + 5) == set(range(lo, lo + 6))


@pytest.mark.parametrize("lo, hi", [(0, 0), (0, 1), (1, 1), (0, 3), (2, 4), (0, 2500), (3, None), (0, None)])
def test_separated_items_come_with_one_separator_between_two(lo, hi):
    gbnf = repetition('"a"', lo, hi, separator_rule='","')
    pattern = as_regex(gbnf)
    top = (hi if hi is not None else lo + 4) + 2
    matched = {n for n in range(top + 1) if pattern.fullmatch(",".join("a" * n))}
    assert matched == set(range(lo, (hi if hi is not None else top) + 1))
    assert not pattern.fullmatch("a,,a") and not pattern.fullmatch(",a")


def test_a_million_items_is_a_grammar_of_a_few_dozen_bytes():
    measured = shape(f"root ::= {repetition('char', 0, 1_000_000)} {repetition('x', 1_000_000, 1_000_000)}")
    assert measured.size < 200 and measured.largest_count <= LLAMA_MAX_REPEAT and measured.nesting <= 4


def test_shape_skips_literals_classes_and_comments():
    measured = shape('root ::= "((({99999}" [(){}\\]] # ((( {5000}\n  (a (b)?){3,12}')
    assert (measured.nesting, measured.largest_count) == (2, 12)
    assert shape("r ::= x{" + "9" * 5000 + "}").largest_count > 10**9  # not read as a number whole
