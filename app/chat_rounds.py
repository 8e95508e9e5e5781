"""A stored chat as the view shows it: an answer's tool rounds folded into one bubble."""

from __future__ import annotations


def fold_tool_rounds(messages: list[dict]) -> list[dict]:
    """A stored chat as the view shows it: an answer's rounds (answers with calls, the tool results
    that follow them) and its final answer in one bubble, each call a block with its result."""
    out: list[dict] = []
    for m in messages:
        role = m.get("role")
        if role == "tool":
            host = out[-1] if out and out[-1]["role"] == "assistant" else None
            block = None
            if host is not None:
                block = next((b for kind, b in host.get("steps", ()) if kind == "tool"
                              and b.get("call_id") == m.get("tool_call_id")), None)
            if block is not None:
                block.update(status="stored", text=m["content"])
            continue
        if role == "assistant" and out and out[-1]["role"] == "assistant" and out[-1].get("calling"):
            host = out.pop()  # the answer after the results: same bubble, below the calls
            # One turn: the bubble acts as its first round, the message its branches hang on.
            m = dict(m, steps=host.get("steps", []), id=host.get("id"), branches=host.get("branches"))
        if role == "assistant" and m.get("tool_calls"):
            steps = list(m.get("steps", []))
            if (m.get("content") or "").strip():
                steps.append(("text", m["content"]))
            for call in m["tool_calls"]:
                fn = call.get("function", {})
                steps.append(("tool", {"call_id": call.get("id"), "server": "", "tool": fn.get("name", "?"),
                                       "arguments": fn.get("arguments", "")}))
            m = dict(m, content="", steps=steps, calling=True)
        elif role == "assistant":
            m = dict(m, calling=False)
        out.append(m)
    return out
