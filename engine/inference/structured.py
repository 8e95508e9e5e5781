"""Structured output: OpenAI's `response_format` (`json_object`, `json_schema`) as a GBNF grammar that
constrains sampling (engine/inference/llama_seam.py `Grammar`), so the answer parses, and validates
against the schema for every feature accepted here.

The schema is converted by llama-cpp-python's port of llama.cpp's converter. It does not enforce
integer bounds, so those rules are written here (`integer_rule`); a keyword that neither enforces
is refused by name (`SchemaUnsupported`) rather than silently ignored.

A schema is a client's input, and its grammar runs in llama.cpp's parser and in every sampled
token: each is bounded before llama.cpp sees it (issue 37: one 250-byte schema crashed the server).
Length and item counts are at most MAX_BOUND and written as compact repetition
(engine/inference/gbnf.py); the finished grammar is measured (`checked`: bytes, nesting, counts),
then parsed once by llama.cpp itself (`Grammar(None, …)`), so whatever it would refuse is a 400 naming the schema, never
a failure mid-turn. Grammars are kept by size, within GRAMMAR_CACHE_BYTES.
"""

from __future__ import annotations

import json
import re
from typing import Any

from engine.config import threads
from engine.inference import gbnf, llama_seam

# Keywords the grammar enforces (with the converter's or our own rules) or that only annotate.
ENFORCED = {"type", "properties", "required", "additionalProperties", "items", "prefixItems", "minItems",
            "maxItems", "enum", "const", "anyOf", "oneOf", "allOf", "$ref", "$defs", "definitions", "pattern",
            "minLength", "maxLength", "format", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}
ANNOTATIONS = {"title", "description", "default", "examples", "$schema", "$id", "$comment", "deprecated",
               "readOnly", "writeOnly"}
FORMATS = {"date", "time", "date-time", "uuid", "uuid1", "uuid2", "uuid3", "uuid4", "uuid5"}
TYPES = {"object", "array", "string", "number", "integer", "boolean", "null"}
MAX_SCHEMA_CHARS = 100_000
COUNTS = (("minLength", "maxLength"), ("minItems", "maxItems"))
# A string's length, an array's items, a pattern's {m,n}: past any answer a model writes (131 072
# tokens), and each written in a few dozen bytes of grammar however large.
MAX_BOUND = 1_000_000
# A 100 000-character schema (1 500 properties of every kind) wrote 555 kB, which llama.cpp parsed
# in 0.4 s here.
MAX_GRAMMAR_BYTES = 1 << 20
# Groups nested in a grammar (a pattern's, a number range's): llama.cpp's parser recurses through
# each, ~0.5 KiB of stack a level (600 levels overflowed a 256 KiB stack, 3 000 a 1 MiB one), so 128
# levels (64 KiB) fit any platform's default thread stack, macOS's 512 KiB included.
MAX_NESTING = 128
# The converter writes an object's optional properties as one alternative per suffix of them:
# its time grows with their square (800 took 1.4 s, 256 take 0.15 s).
MAX_OPTIONAL = 256
GRAMMAR_CACHE_BYTES = 8 << 20
# A back-reference in a pattern (\1, \k<name>): no grammar can say "the same text again".
BACK_REFERENCE = re.compile(r"\\(?:[1-9]|k<)")
# A pattern's counted repetition, {m}, {m,} or {m,n}, not escaped.
PATTERN_COUNT = re.compile(r"(?<!\\)\{\s*(\d+)\s*(?:,\s*(\d*)\s*)?\}")


class SchemaUnsupported(ValueError):
    """The schema uses something the grammar cannot enforce; `where` is its JSON path."""

    def __init__(self, what: str, where: str):
        super().__init__(f"{what} at {where} is not supported in structured output")
        self.what, self.where = what, where


def check_schema(schema: Any, where: str = "schema") -> None:
    """Raise SchemaUnsupported for the first feature the grammar would not enforce."""
    if isinstance(schema, bool):
        if schema is False:
            raise SchemaUnsupported("a false schema", where)
        return
    if not isinstance(schema, dict):
        raise SchemaUnsupported(f"a {type(schema).__name__} in place of a schema", where)
    for key, value in schema.items():
        at = f"{where}.{key}"
        if key in ANNOTATIONS:
            continue
        if key not in ENFORCED:
            raise SchemaUnsupported(f"'{key}'", at)
        if key == "type":
            kinds = value if isinstance(value, list) else [value]
            if not kinds or any(k not in TYPES for k in kinds):
                raise SchemaUnsupported(f"type {value!r}", at)
        elif key == "format" and value not in FORMATS:
            raise SchemaUnsupported(f"format {value!r}", at)
        elif key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
            if schema.get("type") != "integer" or isinstance(value, bool) or not isinstance(value, (int, float)):
                raise SchemaUnsupported(f"'{key}' (bounds are enforced on integers only)", at)
        elif key == "additionalProperties" and not isinstance(value, bool):
            check_schema(value, at)
        elif key in ("properties", "$defs", "definitions"):
            if not isinstance(value, dict):
                raise SchemaUnsupported(f"'{key}' that is not an object", at)
            required = schema.get("required") if isinstance(schema.get("required"), list) else []
            if key == "properties" and sum(name not in required for name in value) > MAX_OPTIONAL:
                raise SchemaUnsupported(f"more than {MAX_OPTIONAL} optional properties (list more in 'required', "
                                        "or split the object)", at)
            for name, sub in value.items():
                check_schema(sub, f"{at}.{name}")
        elif key in ("items",) and not isinstance(value, bool):
            check_schema(value, at)
        elif key in ("prefixItems", "anyOf", "oneOf", "allOf"):
            if not isinstance(value, list) or not value:
                raise SchemaUnsupported(f"'{key}' that is not a non-empty list", at)
            for i, sub in enumerate(value):
                check_schema(sub, f"{at}[{i}]")
        elif key == "$ref" and not (isinstance(value, str) and value.startswith("#")):
            raise SchemaUnsupported(f"a non-local $ref {value!r}", at)
        elif key in ("minLength", "maxLength", "minItems", "maxItems"):
            _check_count(key, value, at)
        elif key == "pattern":
            _check_pattern(value, at)
    for low, high in COUNTS:
        if isinstance(schema.get(low), int) and isinstance(schema.get(high), int) and schema[low] > schema[high]:
            raise SchemaUnsupported(f"'{low}' above '{high}' (nothing could match)", f"{where}.{low}")


def _check_count(key: str, value: Any, at: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise SchemaUnsupported(f"'{key}' that is not a whole number of 0 or more", at)
    if value > MAX_BOUND:
        raise SchemaUnsupported(f"'{key}' {value} (at most {MAX_BOUND})", at)


def _check_pattern(pattern: Any, at: str) -> None:
    if not isinstance(pattern, str):
        raise SchemaUnsupported("a 'pattern' that is not a string", at)
    if BACK_REFERENCE.search(pattern):
        raise SchemaUnsupported("a back-reference in 'pattern'", at)
    stray = _unmatched(pattern)
    if stray:
        raise SchemaUnsupported(f"an unmatched '{stray}' in 'pattern'", at)
    for match in PATTERN_COUNT.finditer(pattern):
        for number in match.groups():
            if number and (len(number) > 9 or int(number) > MAX_BOUND):
                raise SchemaUnsupported(f"the count {match.group(0)} in 'pattern' (at most {MAX_BOUND})", at)


def _unmatched(pattern: str) -> str | None:
    """A ']' or '}' that closes nothing, or a '[' or '{' never closed, read as the converter reads
    the pattern. It loops forever on a stray ']' or '}' ("^a}$" held a thread at full CPU for good)."""
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "\\":
            i += 2
        elif c == "[":
            i = gbnf.skip_quoted(pattern, i + 1, "]")
            if i > n:
                return "["
        elif c == "{":
            end = pattern.find("}", i)
            if end < 0:
                return "{"
            i = end + 1
        elif c in "]}":
            return c
        else:
            i += 1
    return None


def checked(grammar: str, where: str) -> str:
    """`grammar` once it is known to be safe for llama.cpp: within MAX_GRAMMAR_BYTES and
    MAX_NESTING, every count within llama.cpp's threshold, and parsed by llama.cpp itself.

    Raises:
        SchemaUnsupported: it is not, said of the schema at `where`.
    """
    shape = gbnf.shape(grammar)
    if shape.size > MAX_GRAMMAR_BYTES:
        raise SchemaUnsupported(f"a schema whose grammar takes {shape.size} bytes (at most {MAX_GRAMMAR_BYTES})",
                                where)
    if shape.nesting > MAX_NESTING:
        raise SchemaUnsupported(f"a schema whose grammar nests {shape.nesting} groups deep (at most {MAX_NESTING})",
                                where)
    if shape.largest_count > gbnf.LLAMA_MAX_REPEAT:
        raise SchemaUnsupported(f"a repetition of {shape.largest_count} (at most {gbnf.LLAMA_MAX_REPEAT} written "
                                "at once)", where)
    try:
        threads.run(lambda: llama_seam.Grammar(None, grammar).close())  # the parser recurses: a known stack
    except llama_seam.GrammarError:
        raise SchemaUnsupported("this schema (llama.cpp could not parse the grammar written for it)", where) from None
    return grammar


# ---- integers within bounds

def _digits_range(lo: str, hi: str) -> str:
    """GBNF for the digit strings of equal length from `lo` to `hi` (lo <= hi)."""
    if lo == hi:
        return " ".join(f'"{d}"' for d in lo)
    if len(lo) == 1:
        return f"[{lo}-{hi}]"
    if set(lo) == {"0"} and set(hi) == {"9"}:  # every digit string of this length (keeps the rule linear)
        return f"[0-9]{{{len(lo)}}}"
    rest = len(lo) - 1
    if lo[0] == hi[0]:
        return f'"{lo[0]}" ({_digits_range(lo[1:], hi[1:])})'
    parts = [f'"{lo[0]}" ({_digits_range(lo[1:], "9" * rest)})']
    if int(hi[0]) - int(lo[0]) > 1:
        parts.append(f"[{int(lo[0]) + 1}-{int(hi[0]) - 1}] [0-9]{{{rest}}}")
    parts.append(f'"{hi[0]}" ({_digits_range("0" * rest, hi[1:])})')
    return " | ".join(parts)


def _natural_range(lo: int, hi: int) -> list[str]:
    """Alternatives matching the decimal numbers lo..hi (0 <= lo <= hi), no leading zeros."""
    out = []
    while lo <= hi:
        top = min(hi, 10 ** len(str(lo)) - 1)  # the same number of digits as lo
        out.append(f"({_digits_range(str(lo), str(top))})")
        lo = top + 1
    return out


MAX_DIGITS = 18  # an integer without an upper bound: at most this many digits


def integer_rule(schema: dict) -> str | None:
    """GBNF for an integer schema with bounds (None: no bounds, the converter's rule)."""
    if schema.get("type") != "integer" or not any(k in schema for k in ("minimum", "maximum", "exclusiveMinimum",
                                                                          "exclusiveMaximum")):
        return None
    lo = schema.get("minimum")
    if "exclusiveMinimum" in schema:
        lo = max(lo if lo is not None else -10**MAX_DIGITS, int(schema["exclusiveMinimum"] // 1) + 1)
    hi = schema.get("maximum")
    if "exclusiveMaximum" in schema:
        edge = schema["exclusiveMaximum"]
        hi = min(hi if hi is not None else 10**MAX_DIGITS, -int(-edge // 1) - 1)
    lo = -(10**MAX_DIGITS - 1) if lo is None else int(-(-lo // 1))  # ceil: 1.5 → 2
    hi = 10**MAX_DIGITS - 1 if hi is None else int(hi // 1)
    if lo > hi:
        raise SchemaUnsupported(f"an empty range [{lo}, {hi}]", "schema")
    parts = []
    if hi >= 0:
        parts += _natural_range(max(lo, 0), hi)
    if lo < 0:
        parts += [f'"-" {p}' for p in _natural_range(max(1, -hi), -lo)]
    return "(" + " | ".join(parts) + ') space'


# ---- response_format

GRAMMARS = gbnf.GrammarCache(GRAMMAR_CACHE_BYTES)


def _grammar(fmt: str) -> str:
    return GRAMMARS.get_or_make(fmt, lambda: _write(json.loads(fmt)))


def _write(spec: dict) -> str:
    if spec["type"] == "json_object":
        return llama_seam.json_object_grammar()
    grammar = llama_seam.json_schema_grammar(spec["json_schema"]["schema"], integer_rule)
    return checked(grammar, "response_format.json_schema.schema")


def response_grammar(response_format: dict | None) -> str | None:
    """The GBNF grammar for an OpenAI `response_format` (None: plain text).

    Raises:
        SchemaUnsupported: a schema feature the grammar would not enforce, or a malformed format.
    """
    if not response_format or response_format.get("type", "text") == "text":
        return None
    kind = response_format.get("type")
    if kind == "json_object":
        return _grammar(json.dumps({"type": kind}))
    if kind != "json_schema":
        raise SchemaUnsupported(f"response_format type {kind!r}", "response_format.type")
    spec = response_format.get("json_schema")
    if not isinstance(spec, dict) or "schema" not in spec:
        raise SchemaUnsupported("a json_schema without 'schema'", "response_format.json_schema")
    schema = spec["schema"]
    text = json.dumps(schema)  # key order kept: the answer's properties come in the schema's order
    if len(text) > MAX_SCHEMA_CHARS:
        raise SchemaUnsupported(f"a schema over {MAX_SCHEMA_CHARS} characters", "response_format.json_schema")
    check_schema(schema, "response_format.json_schema.schema")
    try:
        return _grammar(json.dumps({"type": kind, "json_schema": {"schema": schema}}))
    except SchemaUnsupported as exc:  # a rule of ours refused (integer_rule, which has no path), or a limit
        raise SchemaUnsupported(exc.what, "response_format.json_schema.schema") if exc.where == "schema" else exc
    except (AssertionError, ValueError, LookupError, TypeError, RecursionError) as exc:
        # the converter's own refusals (a regex feature, an unresolvable $ref)
        raise SchemaUnsupported(f"this schema ({exc})", "response_format.json_schema.schema") from exc
