"""A conversation as Markdown, JSON or HTML, for the user to keep or share (superseded answers left
out). An answer's tool calls and their results are part of it."""

from __future__ import annotations

import html
import json

from engine.storage import Database


def _kept(db: Database, conversation_id: int) -> tuple[dict, list[dict]]:
    """The conversation's row and the messages an export shows (superseded answers left out)."""
    conv = db.conversation(conversation_id)
    if conv is None:
        raise LookupError(f"no conversation with id {conversation_id}")
    return conv, [m for m in db.messages(conversation_id) if m["superseded_by"] is None]


def conversation_json(db: Database, conversation_id: int) -> str:
    conv, kept = _kept(db, conversation_id)
    messages = [{"role": m["role"], "content": m["content"], "created": m["created"], "model": m["model"],
                 "level": m["level"], "stats": m["stats"]} | ({"reasoning": m["reasoning"]} if m["reasoning"] else {})
                | ({"tool_calls": m["tool_calls"]} if m["tool_calls"] else {})
                | ({"tool_call_id": m["tool_call_id"]} if m["tool_call_id"] else {})
                for m in kept]
    return json.dumps({"id": conv["id"], "title": conv["title"], "created": conv["created"],
                       "system_prompt": conv["system_prompt"], "messages": messages,
                       "summaries": db.summaries(conversation_id)}, ensure_ascii=False, indent=2)


def conversation_markdown(db: Database, conversation_id: int, reasoning: bool = False) -> str:
    """`reasoning`: a reasoning model's thinking too, folded (<details>) above its answer."""
    conv, kept = _kept(db, conversation_id)
    out = [f"# {conv['title'] or 'Conversation ' + str(conversation_id)}", "", f"*{conv['created'][:19]}*", ""]
    if conv["system_prompt"]:
        out += [f"> System: {conv['system_prompt']}", ""]
    for m in kept:
        if m["role"] == "tool":
            out += ["**Tool result**", "", "```", m["content"].replace("```", "` ` `"), "```", ""]
            continue
        who = "**You**" if m["role"] == "user" else f"**Assistant** ({m['level'] or ''} {m['model'] or ''})".replace(" )", ")")
        out += [who, ""]
        if reasoning and m["reasoning"]:
            out += ["<details><summary>Thinking</summary>", "", m["reasoning"], "", "</details>", ""]
        if m["content"]:
            out += [m["content"], ""]
        for call in m["tool_calls"] or ():
            fn = call.get("function", {})
            out += [f"*Called `{fn.get('name', '?')}`* with `{fn.get('arguments', '')}`", ""]
    return "\n".join(out)


_STYLE = ("body{font-family:system-ui,'Noto Sans SC',sans-serif;max-width:46rem;margin:2rem auto;padding:0 1rem;"
          "line-height:1.5;color:#1d1d1f;background:#fff}"
          "section{margin:1rem 0;padding:.6rem .9rem;border-radius:8px}"
          ".user{background:#dcecff;margin-left:15%}.assistant{background:#f2f2f2;margin-right:10%}"
          ".tool{background:#fafafa;border:1px solid #ddd;margin-right:10%;font-size:.9em}"
          ".who{font-size:.8em;color:#666;margin-bottom:.3rem}.text{white-space:pre-wrap;overflow-wrap:anywhere}"
          "pre{white-space:pre-wrap;overflow-wrap:anywhere;background:#f6f6f6;padding:.4rem}"
          "details{color:#555;font-size:.9em}"
          "@media (prefers-color-scheme:dark){body{background:#1e1e1e;color:#e6e6e6}.user{background:#23374d}"
          ".assistant{background:#2b2b2b}.tool{background:#252525;border-color:#444}pre{background:#2f2f2f}}")


def conversation_html(db: Database, conversation_id: int, reasoning: bool = False) -> str:
    """One self-contained HTML page: no script, no remote resource, every text escaped (a model's
    or a tool's output is shown as the text it is, never as markup). Light and dark follow the
    reader's system."""
    conv, kept = _kept(db, conversation_id)
    e = html.escape
    title = conv["title"] or f"Conversation {conversation_id}"
    out = ["<!DOCTYPE html>", "<html><head><meta charset=\"utf-8\">",
           "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">",
           f"<title>{e(title)}</title><style>{_STYLE}</style></head><body>",
           f"<h1>{e(title)}</h1><p class=\"who\">{e(conv['created'][:19])}</p>"]
    if conv["system_prompt"]:
        out.append(f"<section class=\"tool\"><div class=\"who\">System</div><div class=\"text\">"
                   f"{e(conv['system_prompt'])}</div></section>")
    for m in kept:
        role = m["role"] if m["role"] in ("user", "assistant", "tool") else "assistant"
        who = {"user": "You", "tool": "Tool result"}.get(role) or \
            " ".join(p for p in ("Assistant", m["level"] or "", m["model"] or "") if p)
        parts = [f"<section class=\"{role}\"><div class=\"who\">{e(who)}</div>"]
        if reasoning and m["reasoning"]:
            parts.append(f"<details><summary>Thinking</summary><div class=\"text\">{e(m['reasoning'])}</div></details>")
        if m["content"]:
            tag = "pre" if role == "tool" else "div class=\"text\""
            parts.append(f"<{tag}>{e(m['content'])}</{tag.split()[0]}>")
        for call in m["tool_calls"] or ():
            fn = call.get("function", {})
            parts.append(f"<details><summary>Tool call: {e(fn.get('name', '?'))}</summary>"
                         f"<pre>{e(fn.get('arguments', ''))}</pre></details>")
        out.append("".join(parts) + "</section>")
    out.append("</body></html>")
    return "\n".join(out)
