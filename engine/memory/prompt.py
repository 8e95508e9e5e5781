"""How memories appear in a prompt.

Pinned memories go into the stable block after the system prompt (cached with it, changed only at
the window's shift points); memories retrieved for a message go inside that user turn, before
the user's words, so retrieval never touches the cached prefix.
"""

from __future__ import annotations

import re
from typing import Callable

from engine.memory.service import Hit, Hits

_CJK = re.compile(r"[\u3400-\u9fff]")
PINNED_MAX_CHARS = 1_200     # the pinned block rides in every prompt: keep it to a few facts
HEADER = {"en": ("(Possibly relevant memories from earlier conversations)", "(The user's message)"),
          "zh": ("（可能相关的记忆，来自之前的对话）", "（用户的消息）")}


class Recall(Hits):
    """The memories that went into a turn, best first, and the tokens they added to it (header
    included; `done.stats["retrieval"]["memory_tokens"]`). `dropped`: candidates left out, by
    reason (engine/memory/relevance.py; "over_budget": they did not fit `retrieval.max_tokens`)."""

    def __init__(self, hits=(), status: str = "ok", tokens: int = 0, dropped: dict | None = None):
        super().__init__(hits, status)
        self.tokens = tokens
        self.dropped = dropped or {}


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
    # The date only: a conversation's id means nothing to the model and cost ~7 tokens a line.
    if isinstance(hit.source, dict):
        return (hit.source.get("date") or "")[:10] or "earlier conversation"
    return "saved memory"


def recalled_line(hit: Hit) -> str:
    """How one memory reads in the prompt: its text on one line, then where it came from."""
    return f"- {' '.join(hit.text.split())} ({_source_label(hit)})"


def _header(user_text: str) -> tuple[str, str]:
    return HEADER["zh" if _CJK.search(user_text) else "en"]


def fit_recalled(hits: list[Hit], max_tokens: int, count: Callable[[str], int],
                 user_text: str = "") -> tuple[list[Hit], int]:
    """The hits that fit `max_tokens` with the header, by rank, and the tokens they add.

    A hit whose line does not fit is passed over (a later, shorter one may still fit), as
    documents are trimmed (engine/docs/prompt.py). The count is the header's and each line's
    (with its newline) apart; joined, the tokenizer may differ by a token at the seams.

    Args:
        hits: best first.
        max_tokens: the budget for the header and the lines together (0: nothing is recalled).
        count: tokens of a text for the model that reads it.
        user_text: the message (its language picks the header's).
    """
    if not hits:
        return [], 0
    header, ask = _header(user_text)
    used = count(f"{header}\n{ask}\n")
    kept: list[Hit] = []
    for hit in hits:
        cost = count(recalled_line(hit) + "\n")
        if used + cost > max_tokens:
            continue
        used += cost
        kept.append(hit)
    return kept, used if kept else 0


def recalled_turn(user_text: str, hits: list[Hit], max_chars: int | None = None) -> str | None:
    """The user turn as the model reads it with the memories retrieved for it, or None (no hits).

    The header is in the user's language so a small model does not switch languages to answer.
    The token budget is applied before (`fit_recalled`); `max_chars` drops lines past it.
    """
    lines, used = [], 0
    for hit in hits:
        line = recalled_line(hit)
        if max_chars is not None and used + len(line) > max_chars:
            continue
        used += len(line)
        lines.append(line)
    if not lines:
        return None
    header, ask = _header(user_text)
    return f"{header}\n" + "\n".join(lines) + f"\n{ask}\n{user_text}"
