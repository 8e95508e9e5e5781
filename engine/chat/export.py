"""A conversation as Markdown or JSON, for the user to keep or share (superseded answers left out)."""

from __future__ import annotations

import json

from engine.storage import Database


def conversation_json(db: Database, conversation_id: int) -> str:
    conv = db.conversation(conversation_id)
    if conv is None:
        raise LookupError(f"no conversation with id {conversation_id}")
    messages = [{"role": m["role"], "content": m["content"], "created": m["created"], "model": m["model"],
                 "level": m["level"], "stats": m["stats"]} | ({"reasoning": m["reasoning"]} if m["reasoning"] else {})
                for m in db.messages(conversation_id) if m["superseded_by"] is None]
    return json.dumps({"id": conv["id"], "title": conv["title"], "created": conv["created"],
                       "system_prompt": conv["system_prompt"], "messages": messages,
                       "summaries": db.summaries(conversation_id)}, ensure_ascii=False, indent=2)


def conversation_markdown(db: Database, conversation_id: int, reasoning: bool = False) -> str:
    """`reasoning`: a reasoning model's thinking too, folded (<details>) above its answer."""
    conv = db.conversation(conversation_id)
    if conv is None:
        raise LookupError(f"no conversation with id {conversation_id}")
    out = [f"# {conv['title'] or 'Conversation ' + str(conversation_id)}", "", f"*{conv['created'][:19]}*", ""]
    if conv["system_prompt"]:
        out += [f"> System: {conv['system_prompt']}", ""]
    for m in db.messages(conversation_id):
        if m["superseded_by"] is not None:
            continue
        who = "**You**" if m["role"] == "user" else f"**Assistant** ({m['level'] or ''} {m['model'] or ''})".replace(" )", ")")
        out += [who, ""]
        if reasoning and m["reasoning"]:
            out += ["<details><summary>Thinking</summary>", "", m["reasoning"], "", "</details>", ""]
        out += [m["content"], ""]
    return "\n".join(out)
