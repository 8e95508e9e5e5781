"""GBNF that the engine writes or measures itself before llama.cpp's parser sees it: repetition
written so that any bound makes a small grammar, and the size and shape of a finished grammar.

llama-cpp-python's port of llama.cpp's JSON-schema converter writes a bounded repetition as nested
groups, `(a (a (a)?)?)?`, one group per allowed item, and a minimum as that many copies. llama.cpp's
GBNF parser recurses once per group, so one `"maxLength": 100000` ran the model's thread out of
stack (SIGSEGV, issue 37), and `"minLength": 10000000` wrote a 50 MB grammar. llama.cpp's own
converter now writes `a{m,n}`, which its parser expands in a loop; the parser refuses a minimum over
LLAMA_MAX_REPEAT and reads a larger maximum as no maximum, so `repetition` factors a larger count
into groups of STEP (`(a{1000}){0,4} a{0,1000}`): the same strings, exactly, in a few dozen bytes.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

LLAMA_MAX_REPEAT = 2000  # llama.cpp's MAX_REPETITION_THRESHOLD (src/llama-grammar.cpp)
STEP = 1000  # a large count's factor: `upto` writes x{0,STEP+r} with r < STEP, under the threshold


def repetition(item: str, min_items: int, max_items: int | None, separator_rule: str | None = None,
               item_rule_is_literal: bool = False) -> str:
    """GBNF for `min_items` to `max_items` (None: no maximum) of `item`, one GBNF element (a rule
    name, a literal, a class or a group), with `separator_rule` between two items. The signature of
    the port's `_build_repetition`, which this replaces (engine/inference/llama_seam.py)."""
    del item_rule_is_literal  # a literal is an element like any other here
    if max_items == 0:
        return ""
    if separator_rule:
        more = repetition(f"({separator_rule} {item})", max(min_items - 1, 0),
                          None if max_items is None else max_items - 1)
        items = _join(item, more)
        # None at all: an empty alternative, not `( … )?`, whose `?` llama.cpp counts as repeating
        # every rule the group made (its threshold again: a list of 3 000 failed to parse).
        return items if min_items > 0 else f"({items} | )"
    if max_items is None:
        return _join(exact(item, min_items), f"{item}*")
    return _join(exact(item, min_items), upto(item, max_items - min_items))


def exact(item: str, n: int) -> str:
    """Exactly `n` of `item`."""
    if n <= 1:
        return item if n == 1 else ""
    if n <= LLAMA_MAX_REPEAT:
        return f"{item}{{{n}}}"
    groups, rest = divmod(n, STEP)
    return _join(exact(f"({item}{{{STEP}}})", groups), exact(item, rest))


def upto(item: str, n: int) -> str:
    """From none to `n` of `item`. Past the threshold, n = q·STEP + r is written as up to q-1
    groups of STEP and then up to STEP+r single items: every count from 0 to n, and none above."""
    if n <= 1:
        return f"{item}?" if n == 1 else ""
    if n <= LLAMA_MAX_REPEAT:
        return f"{item}{{0,{n}}}"
    groups, rest = divmod(n, STEP)
    return _join(upto(f"({item}{{{STEP}}})", groups - 1), f"{item}{{0,{STEP + rest}}}")


def _join(*parts: str) -> str:
    return " ".join(p for p in parts if p)


@dataclass(frozen=True)
class Shape:
    """What bounds llama.cpp's work on a grammar before it runs: its bytes, the deepest nesting of
    groups (its parser recurses once per level) and the largest `{m,n}` count (it refuses one over
    LLAMA_MAX_REPEAT)."""

    size: int
    nesting: int
    largest_count: int


def shape(gbnf: str) -> Shape:
    """Measure `gbnf` the way llama.cpp's parser reads it: literals ("…"), classes ([…]) and
    comments (#…) are skipped, backslash escapes included."""
    depth = nesting = largest = 0
    i, n = 0, len(gbnf)
    while i < n:
        c = gbnf[i]
        if c in "\"[":
            i = skip_quoted(gbnf, i + 1, '"' if c == '"' else "]")
            continue
        if c == "#":
            end = gbnf.find("\n", i)
            i = n if end < 0 else end
            continue
        if c == "(":
            depth += 1
            nesting = max(nesting, depth)
        elif c == ")":
            depth -= 1
        elif c == "{":
            end = gbnf.find("}", i)
            end = n if end < 0 else end
            for number in gbnf[i + 1:end].split(","):
                number = number.strip()
                if number.isdigit():  # a count of ten digits or more is past any limit: not read whole
                    largest = max(largest, int(number) if len(number) < 10 else 10**10)
            i = end
        i += 1
    return Shape(len(gbnf.encode("utf-8")), nesting, largest)


def skip_quoted(text: str, i: int, close: str) -> int:
    """The index past the `close` that ends a literal or class starting at `i` (backslash escapes
    skipped); past len(text) when nothing closes it."""
    n = len(text)
    while i < n and text[i] != close:
        i += 2 if text[i] == "\\" else 1
    return i + 1


class GrammarCache:
    """Grammars by the request text they were written for, least recently used first out, within a
    budget of bytes (keys and grammars counted): a count of entries let seven huge grammars hold
    half a gigabyte. A grammar larger than the budget is not kept. Any thread."""

    def __init__(self, budget: int):
        self.budget, self.size = budget, 0
        self._items: OrderedDict[str, str] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str) -> str | None:
        with self._lock:
            grammar = self._items.get(key)
            if grammar is not None:
                self._items.move_to_end(key)
            return grammar

    def get_or_make(self, key: str, make) -> str:
        """The grammar kept under `key`, else `make()`'s, kept (an exception from it is raised, and
        nothing kept)."""
        grammar = self.get(key)
        if grammar is None:
            grammar = make()
            self.put(key, grammar)
        return grammar

    def put(self, key: str, grammar: str) -> None:
        cost = _cost(key, grammar)
        with self._lock:
            if key in self._items or cost > self.budget:
                return
            self._items[key] = grammar
            self.size += cost
            while self.size > self.budget:
                old_key, old = self._items.popitem(last=False)
                self.size -= _cost(old_key, old)


def _cost(key: str, grammar: str) -> int:
    return len(key) + len(grammar)
