"""A request's tools as the engine takes them (`tools`, `tool_choice`, `parallel_tool_calls`), and
the calls an earlier answer made, as a client sends them back. What is wrong is a ToolError naming
the field (a 400, engine/server/errors.py), as the engine's own checks of tools are. The server
never runs a tool: clients bring their own and send the results as `tool` messages."""

from __future__ import annotations

import json

from engine.api import ToolError, ToolUse, parse_tool_choice, parse_tools

MAX_CALLS = 64  # calls in one answer a client may send back


def tool_use(body: dict) -> ToolUse | None:
    """What the answer may call; None without tools (then a tool_choice other than none is an error)."""
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
    return ToolUse(tools, parse_tool_choice(choice, tools), parallel)


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
