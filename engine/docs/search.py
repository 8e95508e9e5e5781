"""Ranking document chunks: the shared fusion (engine/retrieval/fusion.py) with the documents'
rules: CJK character pairs as a third list, exact phrases boosted, a keyword match without a
vector yet still counts, few chunks per file unless the question asks for a list.

Like GPT4All's LocalDocs, a chunk that holds the query's exact phrase ranks as if it had also come
first in a third list; a quoted phrase counts the most. "List all …" questions lift the per-file
cap and take more chunks, so an answer can gather items spread over one long file.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Callable

from engine.docs.store import ChunkRow
from engine.retrieval import Candidates, Hit, Rules, fuse
from engine.retrieval.terms import query_pairs

PER_FILE = 2          # chunks of one file among the hits of an ordinary question
PAIR_TOP = 5          # the best BM25 matches of a query's CJK pairs count as relevant
LIST_FACTOR = 3       # a "list all …" question takes this many times k, any number per file
_QUOTED = re.compile(r"[\"“”「」『』'‘’]([^\"“”「」『』'‘’]{3,80})[\"“”「」『』'‘’]")
_LIST_EN = re.compile(r"\b(list|enumerate|name)\s+(all|every|each|the)\b|\ball (the|of the)\b|\bwhat are (all|the)\b"
                      r"|\bwhich\b.*\b(all|every)\b", re.I)
_LIST_ZH = re.compile(r"列出|列举|所有|全部|哪些|有哪|都有")


def wants_list(query: str) -> bool:
    """The question asks for every item of something ("list all …", "列出所有…")."""
    return bool(_LIST_EN.search(query) or _LIST_ZH.search(query))


def phrases(query: str) -> tuple[list[str], list[str]]:
    """(quoted phrases, word pairs) of the query, case-folded: what exact-phrase boosting looks for.
    Word pairs are consecutive words of 3+ letters (Latin scripts) or 4-character runs (CJK)."""
    quoted = [q.casefold().strip() for q in _QUOTED.findall(query)]
    words = [w for w in re.findall(r"\w+", query.casefold()) if len(w) >= 3 and not _cjk(w[0])]
    pairs = [f"{a} {b}" for a, b in zip(words, words[1:])]
    for run in re.findall(r"[\u3400-\u9fff]{4,}", query):
        pairs += [run[i:i + 4] for i in range(len(run) - 3)]
    return quoted, list(dict.fromkeys(pairs))[:24]


def _cjk(ch: str) -> bool:
    return unicodedata.east_asian_width(ch) in ("W", "F")


def _squash(text: str) -> str:
    return " ".join(re.findall(r"\w+", text.casefold())) if text else ""


def source(row: ChunkRow) -> tuple[dict, str]:
    """A chunk's Hit.source and kind: where in which file it is."""
    return ({"file_id": row.file_id, "path": row.path, "collection": row.collection, "page": row.page,
             "heading": row.heading, "line": row.line}, "document")


def phrase_boost(query: str) -> Callable[[str], float] | None:
    """chunk text -> extra weight: 2 for a quoted phrase of the query, up to 1 for its word pairs."""
    quoted, pairs = phrases(query)
    if not quoted and not pairs:
        return None
    squashed_pairs = [_squash(p) if not _cjk(p[0]) else p for p in pairs]

    def boost(text: str) -> float:
        folded = text.casefold()
        if quoted and any(q in folded for q in quoted):
            return 2.0
        if pairs:
            flat = _squash(text)
            hit = sum(1 for p in squashed_pairs if p and (p in flat if not _cjk(p[0]) else p in folded))
            return min(hit, 3) / 3
        return 0.0
    return boost


def strong_pairs(query: str, pair_ranked: list[int], rows: dict) -> frozenset:
    """Chunks among the PAIR_TOP best pair matches, or holding two or more of the query's pairs:
    they need no cosine (the English embedder cannot judge Chinese)."""
    qpairs = set(query_pairs(query))
    enough = min(2, len(qpairs))
    return frozenset(i for r, i in enumerate(pair_ranked, start=1)
                     if i in rows and (r <= PAIR_TOP or sum(p in rows[i].text for p in qpairs) >= enough))


def rank(query: str, found: Candidates, rows: dict, k: int, floors: Callable[[str], tuple[float, float]],
         vector_weight: float = 1.0) -> list[Hit]:
    """The best `k` chunks (`k` × LIST_FACTOR for a list question), fused and floored.

    Args:
        found: the index's candidates (vector, keyword and CJK pair lists, cosines).
        rows: chunk id -> ChunkRow for the candidates that may be shown (others are dropped).
        floors: a chunk's text -> (cosine a chunk found only by meaning needs, cosine one that
            also matched a keyword); a chunk without a vector is judged by its keyword rank alone.
        vector_weight: the vector rank's share in the fusion (below 1 where the embedder reads
            the query's language poorly).
    """
    listing = wants_list(query)
    rules = Rules(floors=floors, describe=source, needs_vector=False, vector_weight=vector_weight,
                  exempt=strong_pairs(query, found.pairs, rows), boost=phrase_boost(query),
                  group=None if listing else (lambda row: row.file_id), per_group=PER_FILE)
    return fuse(found, rows, k * LIST_FACTOR if listing else k, rules)
