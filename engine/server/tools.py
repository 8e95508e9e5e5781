"""A request's tools as the engine takes them (`tools`, `tool_choice`, `parallel_tool_calls`), and
the calls an earlier answer made, as a client sends them back. The server never runs a tool:
clients bring their own and send the results as `tool` messages."""

from __future__ import annotations

import json

from engine.api import ToolError, ToolUse, parse_tool_choice, parse_tools

MAX_CALLS = 64  # calls in one answer a client may send back


def _error(message: str, param: str):
    from engine.server.schema import RequestError  # schema imports this module

    return RequestError(message, param)


def tool_use(body: dict) -> ToolUse | None:
    """What the answer may call; None without tools (then a tool_choice other than none is an error)."""
    if body.get("functions") or body.get("function_call"):
        raise _error("functions and function_call are deprecated: send tools and tool_choice", "functions")
    raw, choice = body.get("tools"), body.get("tool_choice")
    if raw is None or raw == []:
        if choice not in (None, "none", "auto"):
            raise _error("tool_choice needs tools", "tool_choice")
        return None
    parallel = body.get("parallel_tool_calls", True)
    if not isinstance(parallel, bool):
        raise _error("parallel_tool_calls must be true or false", "parallel_tool_calls")
    try:
        tools = parse_tools(raw)
        return ToolUse(tools, parse_tool_choice(choice, tools), parallel)
    except ToolError as exc:
        raise _error(str(exc), exc.param) from None


def message_calls(value: object, param: str) -> list[dict]:
    """An assistant message's `tool_calls`, checked and in OpenAI's shape (arguments as text)."""
    if not isinstance(value, list) or len(value) > MAX_CALLS:
        raise _error(f"tool_calls must be a list of at most {MAX_CALLS} calls", param)
    calls, ids = [], set()
    for k, call in enumerate(value):
        where = f"{param}[{k}]"
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
            raise _error("a tool call needs a function with a name", where)
        cid = call.get("id")
        if not isinstance(cid, str) or not cid or cid in ids:
            raise _error("each tool call needs an id of its own", f"{where}.id")
        ids.add(cid)
        args = fn.get("arguments", "{}")
        if isinstance(args, dict):
            args = json.dumps(args, ensure_ascii=False)
        if not isinstance(args, str):
            raise _error("arguments must be a JSON string", f"{where}.function.arguments")
        calls.append({"id": cid, "type": "function", "function": {"name": fn["name"], "arguments": args}})
    return calls
