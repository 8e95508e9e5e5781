"""Ranking document chunks: vector and keyword ranks fused (RRF), exact phrases boosted, a
relevance floor, few chunks per file unless the question asks for a list.

Like GPT4All's LocalDocs, a chunk that holds the query's exact phrase ranks as if it had also come
first in a third list; a quoted phrase counts the most. "List all …" questions lift the per-file
cap and take more chunks, so an answer can gather items spread over one long file.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import Callable

from engine.docs.store import query_pairs

RRF_K = 60
PER_FILE = 2          # chunks of one file among the hits of an ordinary question
PAIR_TOP = 5          # the best BM25 matches of a query's CJK pairs count as relevant
LIST_FACTOR = 3       # a "list all …" question takes this many times k, any number per file
_QUOTED = re.compile(r"[\"“”「」『』'‘’]([^\"“”「」『』'‘’]{3,80})[\"“”「」『』'‘’]")
_LIST_EN = re.compile(r"\b(list|enumerate|name)\s+(all|every|each|the)\b|\ball (the|of the)\b|\bwhat are (all|the)\b"
                      r"|\bwhich\b.*\b(all|every)\b", re.I)
_LIST_ZH = re.compile(r"列出|列举|所有|全部|哪些|有哪|都有")


@dataclass(frozen=True)
class DocHit:
    """One retrieved excerpt.

    Attributes:
        score: cosine similarity of query and chunk (None when only keywords matched and the
            chunk has no vector yet).
        rrf: the fused rank score hits are ordered by.
        page: 1-based PDF page; heading / line: where in a file without pages.
    """

    chunk_id: int
    file_id: int
    path: str
    collection: str
    page: int | None
    heading: str | None
    line: int | None
    text: str
    score: float | None
    rrf: float
    vector_rank: int | None = None
    keyword_rank: int | None = None

    def to_dict(self) -> dict:
        return dict(self.__dict__)


class DocHits(list):
    """`DocHit`s, best first, with `status`: "ok", or why retrieval ran without vectors or not at all."""

    def __init__(self, hits=(), status: str = "ok"):
        super().__init__(hits)
        self.status = status


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


def fuse(query: str, vec_ranked: list[tuple[int, float]], kw_ranked: list[int], pair_ranked: list[int],
         cosine: dict[int, float], rows: dict, k: int, floors: Callable[[str], tuple[float, float]],
         vector_weight: float = 1.0) -> list[DocHit]:
    """The best `k` chunks (`k` × LIST_FACTOR for a list question), fused and floored.

    Args:
        vec_ranked: (chunk id, cosine) nearest first; kw_ranked: chunk ids, best keyword match first;
            pair_ranked: the same for the query's CJK character pairs. A chunk holding two or more
            of the query's pairs, or among the PAIR_TOP best, needs no cosine: the English
            embedder cannot judge Chinese.
        vector_weight: the vector rank's share in the fusion (below 1 where the embedder reads
            the query's language poorly).
        cosine: every candidate's cosine (keyword-only candidates included when they have a vector).
        rows: chunk id -> ChunkRow for the candidates still in the index (others are dropped).
        floors: a chunk's text -> (cosine a chunk found only by meaning needs, cosine one that also
            matched a keyword); a chunk without a vector is judged by its keyword rank alone.
    """
    listing = wants_list(query)
    vec_rank = {i: r for r, (i, _) in enumerate(vec_ranked, start=1)}
    kw_rank = {i: r for r, i in enumerate(kw_ranked, start=1)}
    pair_rank = {i: r for r, i in enumerate(pair_ranked, start=1)}
    qpairs = set(query_pairs(query))
    enough = min(2, len(qpairs))
    quoted, pairs = phrases(query)
    squashed_pairs = [_squash(p) if not _cjk(p[0]) else p for p in pairs]
    scored: list[tuple[float, float, int]] = []
    for chunk_id in set(vec_rank) | set(kw_rank) | set(pair_rank):
        row = rows.get(chunk_id)
        if row is None:
            continue
        score = cosine.get(chunk_id)
        in_kw = chunk_id in kw_rank or chunk_id in pair_rank
        strong = chunk_id in pair_rank and (pair_rank[chunk_id] <= PAIR_TOP
                                            or sum(p in row.text for p in qpairs) >= enough)
        if score is None and not in_kw:
            continue
        min_score, keyword_min_score = floors(row.text)
        if score is not None and not strong and score < (keyword_min_score if in_kw else min_score):
            continue
        rrf = sum(w / (RRF_K + ranks[chunk_id])
                  for w, ranks in ((vector_weight, vec_rank), (1.0, kw_rank), (1.0, pair_rank)) if chunk_id in ranks)
        text = row.text.casefold()
        flat = None
        if quoted and any(q in text for q in quoted):
            rrf += 2.0 / (RRF_K + 1)
        elif pairs:
            flat = flat or _squash(row.text)
            hit = sum(1 for p in squashed_pairs if p and (p in flat if not _cjk(p[0]) else p in text))
            if hit:
                rrf += min(hit, 3) / 3 / (RRF_K + 1)
        scored.append((rrf, score if score is not None else -1.0, chunk_id))
    scored.sort(key=lambda t: (-t[0], -t[1], t[2]))  # equal fused ranks: the closer meaning first
    limit = k * LIST_FACTOR if listing else k
    per_file: dict[int, int] = {}
    seen: set[str] = set()
    hits: list[DocHit] = []
    for rrf, _, chunk_id in scored:
        row = rows[chunk_id]
        if not listing and per_file.get(row.file_id, 0) >= PER_FILE:
            continue
        norm = " ".join(row.text.split())
        if norm in seen:  # the same text in two files (a copy): once
            continue
        seen.add(norm)
        per_file[row.file_id] = per_file.get(row.file_id, 0) + 1
        score = cosine.get(chunk_id)
        hits.append(DocHit(chunk_id, row.file_id, row.path, row.collection, row.page, row.heading, row.line,
                           row.text, None if score is None else round(float(score), 4), round(rrf, 6),
                           vec_rank.get(chunk_id), kw_rank.get(chunk_id)))
        if len(hits) == limit:
            break
    return hits
