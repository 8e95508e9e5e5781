"""How document excerpts appear in a prompt: numbered, with file and page, inside the new user
turn (after the cached prefix), trimmed by rank to a token budget; and the `sources` of `done`."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Callable

from engine.retrieval import Hit

_CJK = re.compile(r"[\u3400-\u9fff]")
HEADER = {"en": "(Excerpts from the user's documents. Answer from them and cite each as [n] after what it supports.)",
          "zh": "（以下摘录自用户的文档。请依据它们回答，并在所依据的内容后用 [n] 标注来源。）"}
ASK = {"en": "(The user's message)", "zh": "（用户的消息）"}


def where(hit: Hit, lang: str = "en") -> str:
    """"manual.pdf, page 3" / "notes.md, Meals" / "log.txt, line 40" — the label of a source."""
    at = hit.source
    name = Path(at["path"]).name
    if at["page"] is not None:
        return f"{name}，第 {at['page']} 页" if lang == "zh" else f"{name}, page {at['page']}"
    if at["heading"]:
        return f"{name}，{at['heading']}" if lang == "zh" else f"{name}, {at['heading']}"
    if at["line"] is not None:
        return f"{name}，第 {at['line']} 行" if lang == "zh" else f"{name}, line {at['line']}"
    return name


def documents_turn(user_text: str, rest: str, hits: list[Hit], max_tokens: int,
                   count: Callable[[str], int]) -> tuple[str | None, list[Hit], int]:
    """(the turn as the model reads it, the hits kept, tokens the excerpts added).

    Args:
        user_text: what the user typed (its language picks the header's).
        rest: what follows the excerpts: the user's words, or the memory's recalled turn.
        hits: best first; an excerpt that does not fit the budget is dropped, a later smaller
            one may still fit (trimmed by rank).
        max_tokens: budget for the excerpts and their header.
        count: tokens of a text for the model that will read it.
    """
    lang = "zh" if _CJK.search(user_text) else "en"
    header = HEADER[lang]
    used = count(header + "\n" + ASK[lang] + "\n")
    kept: list[Hit] = []
    lines: list[str] = []
    for hit in hits:
        line = f"[{len(kept) + 1}] {where(hit, lang)}: {' '.join(hit.text.split())}"
        cost = count(line + "\n")
        if used + cost > max_tokens:
            continue
        used += cost
        kept.append(hit)
        lines.append(line)
    if not kept:
        return None, [], 0
    ask = "" if rest.startswith(("(", "（")) else ASK[lang] + "\n"  # a recalled turn has its own marker
    return f"{header}\n" + "\n".join(lines) + f"\n{ask}{rest}", kept, used


def sources(hits: list[Hit]) -> list[dict]:
    """`done`'s sources: what [n] refers to."""
    return [{"n": n, "path": h.source["path"], "page": h.source["page"], "heading": h.source["heading"],
             "line": h.source["line"], "text": h.text, "score": h.score if h.score is not None else 0.0,
             "collection": h.source["collection"]} for n, h in enumerate(hits, start=1)]
