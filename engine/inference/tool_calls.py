"""Tool calls: the tools a turn may call, the calls a model makes in its answer, and the grammar
that makes a call parse.

One wire format is parsed: Hermes-style `<tool_call>{"name": …, "arguments": {…}}</tool_call>`,
which Qwen2.5, Qwen3 and Hermes models are trained on and their templates render. A template
that shows tools itself (its source mentions `tools` and `<tool_call>`) gets the tools as its
`tools` variable; any other template gets them in a system-prompt block this module writes
(`prompt_block`), asking for the same markers. That is the documented format for models without a
native one (docs/tools.md).

Calls are constrained lazily, as llama-server does: the answer is free text until the model writes
the opening marker; from there a grammar (`call_grammar`) allows only a call to one of the turn's
tools with arguments that fit its schema, then the closing marker. With tool_choice "required" or
a named function, the opening marker is part of the grammar from the first token.
"""

from __future__ import annotations

import json
import re
import secrets
from dataclasses import dataclass
from engine.inference import llama_seam
from engine.inference.gbnf import GrammarCache
from engine.inference.structured import GRAMMAR_CACHE_BYTES, SchemaUnsupported, check_schema, checked, integer_rule

OPEN, CLOSE = "<tool_call>", "</tool_call>"
NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
MAX_TOOLS = 128
MAX_TOOLS_CHARS = 200_000  # the tools' JSON: what every prompt of the turn carries
CHOICES = ("auto", "none", "required")


class ToolError(ValueError):
    """Tools or a tool choice the engine cannot take; `param` names the field."""

    def __init__(self, message: str, param: str = "tools"):
        super().__init__(message)
        self.param = param


@dataclass(frozen=True)
class Tool:
    name: str
    description: str = ""
    parameters: str = '{"type": "object", "properties": {}}'  # JSON schema, as JSON text (hashable)

    @property
    def schema(self) -> dict:
        return json.loads(self.parameters)

    def as_openai(self) -> dict:
        """The OpenAI shape, which chat templates read from their `tools` variable."""
        return {"type": "function", "function": {"name": self.name, "description": self.description,
                                                 "parameters": self.schema}}


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # a JSON object as text, as OpenAI's API carries it

    def as_openai(self) -> dict:
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


@dataclass(frozen=True)
class ToolUse:
    """What a turn may call. `choice`: "auto", "none", "required" or one tool's name;
    `parallel`: more than one call in an answer."""

    tools: tuple[Tool, ...]
    choice: str = "auto"
    parallel: bool = True

    @property
    def forced(self) -> bool:
        return self.choice not in ("auto", "none")

    def offered(self) -> tuple[Tool, ...]:
        """The tools the model may call now (a named choice: that one)."""
        if self.choice == "none":
            return ()
        if self.forced and self.choice != "required":
            return tuple(t for t in self.tools if t.name == self.choice)
        return self.tools


def new_call_id() -> str:
    return "call_" + secrets.token_hex(12)


def parse_tools(value: object) -> tuple[Tool, ...]:
    """OpenAI's `tools` list, checked.

    Raises:
        ToolError: anything malformed, named by its index.
    """
    if not isinstance(value, list) or not value:
        raise ToolError("tools must be a non-empty list")
    if len(value) > MAX_TOOLS:
        raise ToolError(f"at most {MAX_TOOLS} tools")
    if len(json.dumps(value, ensure_ascii=False)) > MAX_TOOLS_CHARS:
        raise ToolError(f"the tools' JSON may hold at most {MAX_TOOLS_CHARS} characters")
    tools, names = [], set()
    for i, item in enumerate(value):
        where = f"tools[{i}]"
        if not isinstance(item, dict) or item.get("type", "function") != "function":
            raise ToolError("each tool must be {\"type\": \"function\", \"function\": {...}}", where)
        fn = item.get("function")
        if not isinstance(fn, dict):
            raise ToolError("a tool needs a function object", f"{where}.function")
        name = fn.get("name")
        if not isinstance(name, str) or not NAME.match(name):
            raise ToolError("a function name is 1-64 letters, digits, '_', '.' or '-'", f"{where}.function.name")
        if name in names:
            raise ToolError(f"two tools are named {name!r}", f"{where}.function.name")
        names.add(name)
        description = fn.get("description", "")
        if not isinstance(description, str):
            raise ToolError("description must be a string", f"{where}.function.description")
        params = fn.get("parameters", {"type": "object", "properties": {}})
        if not isinstance(params, dict) or params.get("type", "object") != "object":
            raise ToolError("parameters must be a JSON schema of an object", f"{where}.function.parameters")
        tools.append(Tool(name, description, json.dumps(params, ensure_ascii=False)))
    return tuple(tools)


def parse_tool_choice(value: object, tools: tuple[Tool, ...]) -> str:
    """OpenAI's `tool_choice`: "auto" (the default), "none", "required" or
    {"type": "function", "function": {"name": ...}} → that name."""
    if value is None:
        return "auto"
    if isinstance(value, str):
        if value not in CHOICES:
            raise ToolError("tool_choice must be auto, none, required or a function", "tool_choice")
        return value
    if isinstance(value, dict) and isinstance(value.get("function"), dict):
        name = value["function"].get("name")
        if not any(t.name == name for t in tools):
            raise ToolError(f"tool_choice names {name!r}, which is not among the tools", "tool_choice")
        return name
    raise ToolError("tool_choice must be auto, none, required or a function", "tool_choice")


# ---- prompts

def native(template_source: str) -> bool:
    """The template shows tools itself, in this module's markers (Qwen2.5, Qwen3, Hermes)."""
    return "tools" in template_source and OPEN in template_source


def prompt_block(tools: tuple[Tool, ...]) -> str:
    """For a template without tools: what goes at the end of the system prompt (Hermes' own words,
    so a model trained on either reads it alike)."""
    listed = "\n".join(json.dumps(t.as_openai(), ensure_ascii=False) for t in tools)
    return ("# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
            "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
            f"{listed}\n</tools>\n\nFor each function call, return a json object with function name and "
            "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
            '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>')


def arguments_value(arguments: str):
    """A call's arguments as the object they spell (templates write them with `tojson`), or the
    text itself when it is not JSON."""
    try:
        return json.loads(arguments)
    except ValueError:
        return arguments


def call_markup(call: dict) -> str:
    """An OpenAI-shaped call in the markers, as a model writes it (for a history not sampled here)."""
    fn = call["function"]
    body = json.dumps({"name": fn["name"], "arguments": arguments_value(fn["arguments"])}, ensure_ascii=False)
    return f"\n{OPEN}\n{body}\n{CLOSE}"


# A tool's result in a user turn, for a template without a tool role (tokenized apart from the
# result, so the opening tag can be read ahead while the tool runs).
RESULT_OPEN, RESULT_CLOSE = "<tool_response>\n", "\n</tool_response>"


# ---- the grammar

def _arguments_schema(tool: Tool) -> dict:
    """The tool's parameters where the grammar can enforce them; any JSON object where it cannot
    (a tool's schema is the client's, and a call that parses beats a refused request)."""
    schema = tool.schema
    try:
        check_schema(schema, "parameters")
        return schema
    except SchemaUnsupported:
        return {"type": "object"}


CALL_GRAMMARS = GrammarCache(GRAMMAR_CACHE_BYTES)


def _call_grammar(tools: tuple[Tool, ...], with_open: bool) -> str:
    key = json.dumps([with_open, [[t.name, t.parameters] for t in tools]])
    return CALL_GRAMMARS.get_or_make(key, lambda: _write_call_grammar(tools, with_open))


def _write_call_grammar(tools: tuple[Tool, ...], with_open: bool) -> str:
    try:
        return checked(_wrapped(_calls_gbnf(tools, strict=True), with_open), "tools")
    except (AssertionError, ValueError, LookupError, TypeError, RecursionError):
        # the converter's own refusals (a regex feature, a $ref that points outside the tool's
        # schema once it sits inside a call) and a grammar past the limits: the arguments are
        # then any JSON object
        return checked(_wrapped(_calls_gbnf(tools, strict=False), with_open), "tools")


def _wrapped(gbnf: str, with_open: bool) -> str:
    """The converter's root is the call's object: wrap it in the markers."""
    gbnf = re.sub(r"^root ::=", "call ::=", gbnf, count=1, flags=re.M)
    head = f'"{OPEN}" ' if with_open else ""
    return f'root ::= {head}[ \\n]* call [ \\n]* "{CLOSE}"\n{gbnf}'


def _calls_gbnf(tools: tuple[Tool, ...], strict: bool) -> str:
    defs: dict = {}
    calls = [{"type": "object", "properties": {"name": {"const": t.name},
                                               "arguments": _hoisted(t, defs) if strict else {"type": "object"}},
              "required": ["name", "arguments"], "additionalProperties": False} for t in tools]
    schema = calls[0] if len(calls) == 1 else {"anyOf": calls}
    return llama_seam.json_schema_grammar({**schema, "$defs": defs} if defs else schema, integer_rule)


def _hoisted(tool: Tool, defs: dict) -> dict:
    """The tool's arguments schema inside a call: its own `$defs` (and `definitions`) move to the
    call's root under names of the tool's, and its local `$ref`s follow them."""
    schema = _arguments_schema(tool)
    own = {**schema.pop("definitions", {}), **schema.pop("$defs", {})}
    if not own:
        return schema
    prefix = f"{tool.name}__"
    defs.update({prefix + k: v for k, v in own.items()})

    def move(node):
        if isinstance(node, dict):
            return {k: (v.replace("#/$defs/", f"#/$defs/{prefix}").replace("#/definitions/", f"#/$defs/{prefix}")
                        if k == "$ref" and isinstance(v, str) else move(v)) for k, v in node.items()}
        return [move(v) for v in node] if isinstance(node, list) else node

    moved = move(schema)
    defs.update({k: move(v) for k, v in defs.items() if k.startswith(prefix)})
    return moved


def call_grammar(use: ToolUse, with_open: bool = False) -> str | None:
    """GBNF for one call to a tool `use` offers, from after its opening marker (`with_open`: from
    the marker itself) to its closing marker; None when none is offered."""
    tools = use.offered()
    return _call_grammar(tools, with_open) if tools else None


# ---- parsing calls out of an answer

def parse_call(body: str, tools: tuple[Tool, ...]) -> ToolCall:
    """The call between the markers.

    Raises:
        ToolError: not a JSON object with a known name and object arguments.
    """
    try:
        data = json.loads(body)
    except ValueError as exc:
        raise ToolError(f"the tool call is not JSON ({exc})", "tool_calls") from None
    if not isinstance(data, dict) or not isinstance(data.get("name"), str):
        raise ToolError("the tool call has no name", "tool_calls")
    args = data.get("arguments", data.get("parameters", {}))
    if isinstance(args, str):  # some models write the arguments as a JSON string
        try:
            args = json.loads(args)
        except ValueError:
            raise ToolError("the tool call's arguments are not JSON", "tool_calls") from None
    if not isinstance(args, dict):
        raise ToolError("the tool call's arguments are not an object", "tool_calls")
    if not any(t.name == data["name"] for t in tools):
        raise ToolError(f"the model called {data['name']!r}, which is not among the tools", "tool_calls")
    return ToolCall(new_call_id(), data["name"], json.dumps(args, ensure_ascii=False))


class CallSplitter:
    """Splits a streamed answer into text to show and tool calls, as the text grows.

    `feed(piece)` returns the text that may be shown now; text that may be the start of a marker
    is held back. A completed call is appended to `calls` (or, malformed, to `errors`, its raw
    text shown). `state` is "text", or "call" between the markers."""

    def __init__(self, tools: tuple[Tool, ...], inside: bool = False):
        self.tools = tools
        self.state = "call" if inside else "text"
        self.held = ""
        self.body = ""
        self.calls: list[ToolCall] = []
        self.errors: list[str] = []

    def feed(self, piece: str) -> str:
        shown = []
        text = self.held + piece
        self.held = ""
        while text:
            if self.state == "text":
                at = text.find(OPEN)
                if at < 0:
                    keep = _partial(text, OPEN)
                    shown.append(text[:len(text) - keep])
                    self.held = text[len(text) - keep:]
                    break
                shown.append(text[:at])
                text, self.state, self.body = text[at + len(OPEN):], "call", ""
            else:
                at = text.find(CLOSE)
                if at < 0:
                    keep = _partial(text, CLOSE)
                    self.body += text[:len(text) - keep]
                    self.held = text[len(text) - keep:]
                    break
                self.body += text[:at]
                text, self.state = text[at + len(CLOSE):], "text"
                shown.append(self._end_call())
        return "".join(shown)

    def flush(self) -> str:
        """At the answer's end: held text is shown; an unclosed call is parsed as it stands."""
        held, self.held = self.held, ""
        if self.state == "call":
            self.body += held
            self.state = "text"
            return self._end_call()
        return held

    def _end_call(self) -> str:
        try:
            self.calls.append(parse_call(self.body.strip(), self.tools))
            return ""
        except ToolError as exc:
            self.errors.append(str(exc))
            return f"{OPEN}{self.body}{CLOSE}"


def _partial(text: str, marker: str) -> int:
    """How many trailing chars of `text` could begin `marker`."""
    for k in range(min(len(marker) - 1, len(text)), 0, -1):
        if text.endswith(marker[:k]):
            return k
    return 0
