"""Structured output: OpenAI's `response_format` (`json_object`, `json_schema`) as a GBNF grammar that
constrains sampling (engine/inference/llama_seam.py `Grammar`), so the answer parses, and validates
against the schema for every feature accepted here.

The schema is converted by llama-cpp-python's port of llama.cpp's converter. It does not enforce
integer bounds, so those rules are written here (`integer_rule`); a keyword that neither enforces
is refused by name (`SchemaUnsupported`) rather than silently ignored.
"""

from __future__ import annotations

from functools import lru_cache
import json
from typing import Any

from engine.inference import llama_seam

# Keywords the grammar enforces (with the converter's or our own rules) or that only annotate.
ENFORCED = {"type", "properties", "required", "additionalProperties", "items", "prefixItems", "minItems",
            "maxItems", "enum", "const", "anyOf", "oneOf", "allOf", "$ref", "$defs", "definitions", "pattern",
            "minLength", "maxLength", "format", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}
ANNOTATIONS = {"title", "description", "default", "examples", "$schema", "$id", "$comment", "deprecated",
               "readOnly", "writeOnly"}
FORMATS = {"date", "time", "date-time", "uuid", "uuid1", "uuid2", "uuid3", "uuid4", "uuid5"}
TYPES = {"object", "array", "string", "number", "integer", "boolean", "null"}
MAX_SCHEMA_CHARS = 100_000


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

@lru_cache(maxsize=64)
def _grammar(fmt: str) -> str:
    spec = json.loads(fmt)
    if spec["type"] == "json_object":
        return llama_seam.json_object_grammar()
    return llama_seam.json_schema_grammar(spec["json_schema"]["schema"], integer_rule)


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
    except (AssertionError, ValueError, KeyError, TypeError, RecursionError) as exc:
        # the converter's own refusals (a regex feature, an unresolvable $ref)
        raise SchemaUnsupported(f"this schema ({exc})", "response_format.json_schema.schema") from exc
