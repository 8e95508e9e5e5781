"""How memories appear in a prompt.

Pinned memories go into the stable block after the system prompt (cached with it, changed only at
the window's shift points); memories retrieved for a message go inside that user turn, before
the user's words, so retrieval never touches the cached prefix.
"""

from __future__ import annotations

import re

from engine.memory.service import Hit

_CJK = re.compile(r"[\u3400-\u9fff]")
PINNED_MAX_CHARS = 1_200     # the pinned block rides in every prompt: keep it to a few facts
RECALLED_MAX_CHARS = 1_500   # k hits of ≤ ~500-character chunks


def pinned_facts(texts: list[str], max_chars: int = PINNED_MAX_CHARS) -> list[str]:
    """The newest pinned facts that fit in `max_chars`, oldest first (the rest stay retrievable)."""
    kept, used = [], 0
    for text in reversed(texts):
        if used + len(text) > max_chars:
            break
        kept.append(text)
        used += len(text)
    return kept[::-1]


def pinned_text(facts: list[str]) -> str:
    if not facts:
        return ""
    return "What the user asked you to remember:\n" + "\n".join(f"- {f}" for f in facts)


def _source_label(hit: Hit) -> str:
    if isinstance(hit.source, dict):
        date = (hit.source.get("date") or "")[:10]
        return f"conversation {hit.source.get('conversation_id')}" + (f", {date}" if date else "")
    return "saved memory"


def recalled_turn(user_text: str, hits: list[Hit], max_chars: int = RECALLED_MAX_CHARS) -> str | None:
    """The user turn as the model reads it with the memories retrieved for it, or None (no hits).

    The header is in the user's language so a small model does not switch languages to answer.
    """
    lines, used = [], 0
    for hit in hits:
        text = " ".join(hit.text.split())
        if used + len(text) > max_chars:
            continue
        used += len(text)
        lines.append(f"- {text} ({_source_label(hit)})")
    if not lines:
        return None
    if _CJK.search(user_text):
        header, ask = "（可能相关的记忆，来自之前的对话）", "（用户的消息）"
    else:
        header, ask = "(Possibly relevant memories from earlier conversations)", "(The user's message)"
    return f"{header}\n" + "\n".join(lines) + f"\n{ask}\n{user_text}"
