"""A request's tools as the engine takes them (`tools`, `tool_choice`, `parallel_tool_calls`), and
the calls an earlier answer made, as a client sends them back. What is wrong is a ToolError naming
the field (a 400, engine/server/errors.py), as the engine's own checks of tools are. The server
never runs a tool: clients bring their own and send the results as `tool` messages."""

from __future__ import annotations

import json
from typing import Callable

from engine.api import SchemaUnsupported, ToolError, ToolUse, call_grammar, parse_tool_choice, parse_tools

MAX_CALLS = 64  # calls in one answer a client may send back
# The tools' definitions are part of every prompt of the turn, read before the first token: 90 tools
# (18.7 kB, 6 300 tokens) held demo-small's thread for 57-70 s here. The default of the setting
# server.max_tool_tokens; tools past it are refused before they cost anything.
MAX_TOOL_TOKENS = 4096


def tool_use(body: dict, count_tokens: Callable[[str], int | None] | None = None,
             max_tokens: int | None = MAX_TOOL_TOKENS) -> ToolUse | None:
    """What the answer may call; None without tools (then a tool_choice other than none is an error).
    The tools' prompt is counted with `count_tokens` (estimated when it gives None) and refused
    past `max_tokens` (None: no bound); their call grammar is written and parsed by llama.cpp
    here, so one it would refuse is a 400 now rather than a failed turn."""
    if body.get("functions") or body.get("function_call"):
        raise ToolError("functions and function_call are deprecated: send tools and tool_choice", "functions")
    raw, choice = body.get("tools"), body.get("tool_choice")
    if raw is None or raw == []:
        if choice not in (None, "none", "auto"):
            raise ToolError("tool_choice needs tools", "tool_choice")
        return None
    parallel = body.get("parallel_tool_calls", True)
    if not isinstance(parallel, bool):
        raise ToolError("parallel_tool_calls must be true or false", "parallel_tool_calls")
    tools = parse_tools(raw)
    use = ToolUse(tools, parse_tool_choice(choice, tools), parallel)
    if max_tokens is not None:
        cost = prompt_tokens(tools, count_tokens)
        if cost > max_tokens:
            raise ToolError(f"these tools take {cost} tokens of every prompt, more than the {max_tokens} this server "
                            "reads before an answer (setting server.max_tool_tokens): send only the tools this "
                            "request needs, or shorter descriptions and parameter schemas")
    try:
        call_grammar(use, with_open=use.forced)
    except SchemaUnsupported as exc:
        raise ToolError(str(exc), "tools") from None
    return use


def prompt_tokens(tools, count_tokens: Callable[[str], int | None] | None) -> int:
    """The tokens the tools' definitions add to a prompt (as JSON, one a line, as templates show
    them); without a tokenizer, a byte count over 3, which errs toward more."""
    listed = "\n".join(json.dumps(t.as_openai(), ensure_ascii=False) for t in tools)
    counted = count_tokens(listed) if count_tokens is not None else None
    return counted if counted is not None else -(-len(listed.encode("utf-8")) // 3)


def message_calls(value: object, param: str) -> list[dict]:
    """An assistant message's `tool_calls`, checked and in OpenAI's shape (arguments as text)."""
    if not isinstance(value, list) or len(value) > MAX_CALLS:
        raise ToolError(f"tool_calls must be a list of at most {MAX_CALLS} calls", param)
    calls, ids = [], set()
    for k, call in enumerate(value):
        where = f"{param}[{k}]"
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
            raise ToolError("a tool call needs a function with a name", where)
        cid = call.get("id")
        if not isinstance(cid, str) or not cid or cid in ids:
            raise ToolError("each tool call needs an id of its own", f"{where}.id")
        ids.add(cid)
        args = fn.get("arguments", "{}")
        if isinstance(args, dict):
            args = json.dumps(args, ensure_ascii=False)
        if not isinstance(args, str):
            raise ToolError("arguments must be a JSON string", f"{where}.function.arguments")
        calls.append({"id": cid, "type": "function", "function": {"name": fn["name"], "arguments": args}})
    return calls
