"""Fusing an index's lists into hits: reciprocal-rank fusion (RRF), the cosine floors, and the
choice of the best `k` (no text twice, a cap per group).

The memory and the documents fuse with the same function and differ only in their `Rules`:
the documents also rank CJK pairs, let keyword matches without a vector through, boost exact
phrases and cap the chunks per file; the memory leaves out what the prompt already shows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from engine.retrieval.index import Candidates

RRF_K = 60  # reciprocal-rank fusion constant (Cormack et al. 2009)


@dataclass(frozen=True)
class Hit:
    """One retrieved chunk.

    Attributes:
        score: cosine similarity of query and chunk (what the floors apply to); None when only
            keywords matched and the chunk has no vector yet.
        source: where the text comes from, as its index describes it: a memory's
            {"conversation_id", "message_id", "date"}, "pinned" or "memory"; a document's
            {"file_id", "path", "collection", "page", "heading", "line"}.
        kind: "pinned" | "note" | "message" (memory), "document".
        rrf: the fused rank score hits are ordered by.
        vector_rank, keyword_rank: 1-based ranks in the vector and keyword lists (None: not in it).
    """

    id: int
    text: str
    score: float | None
    source: Any
    kind: str
    rrf: float
    vector_rank: int | None = None
    keyword_rank: int | None = None

    def to_dict(self) -> dict:
        return dict(self.__dict__)


class Hits(list):
    """`Hit`s, best first, with `status`: "ok", or why retrieval ran without vectors or not at all."""

    def __init__(self, hits=(), status: str = "ok"):
        super().__init__(hits)
        self.status = status


@dataclass(frozen=True)
class Rules:
    """How one search turns candidates into hits.

    Attributes:
        floors: a chunk's text -> (cosine a chunk found only by meaning needs, cosine one that
            also matched a keyword or pair needs).
        describe: a row -> (Hit.source, Hit.kind).
        needs_vector: a keyword match without a vector is dropped (else judged by its rank alone).
        vector_weight: the vector rank's share in the fusion (below 1 where the embedder reads the
            query's language poorly).
        exempt: ids that need no cosine at all (strong CJK pair matches: an English embedder
            cannot judge Chinese).
        boost: a chunk's text -> extra weight, counted as a first place in one more list.
        group, per_group: at most `per_group` hits with the same group(row) (None: no cap).
        shown: normalised texts already in the prompt: a hit contained in one is left out.
    """

    floors: Callable[[str], tuple[float, float]]
    describe: Callable[[Any], tuple[Any, str]]
    needs_vector: bool = True
    vector_weight: float = 1.0
    exempt: frozenset = frozenset()
    boost: Callable[[str], float] | None = None
    group: Callable[[Any], Any] | None = None
    per_group: int = 0
    shown: tuple[str, ...] = ()


def norm(text: str) -> str:
    """Case and spacing folded: how two texts are told to be the same."""
    return " ".join(text.casefold().split())


def _ranks(ids) -> dict[int, int]:
    return {i: r for r, i in enumerate(ids, start=1)}


def fuse(found: Candidates, rows: dict, k: int, rules: Rules) -> list[Hit]:
    """The best `k` candidates that clear their floors, by fused rank (equal ranks: the closer
    meaning first, then the older id). `rows`: id -> row (with `.text`) for the candidates that
    may be shown; others are dropped."""
    vec_rank = _ranks(i for i, _ in found.vector)
    kw_rank, pair_rank = _ranks(found.keyword), _ranks(found.pairs)
    lists = ((rules.vector_weight, vec_rank), (1.0, kw_rank), (1.0, pair_rank))
    scored: list[tuple[float, float, int]] = []
    for chunk_id in set(vec_rank) | set(kw_rank) | set(pair_rank) | set(found.cosine):
        row = rows.get(chunk_id)
        if row is None:
            continue
        score = found.cosine.get(chunk_id)
        matched = chunk_id in kw_rank or chunk_id in pair_rank
        if score is None:
            if rules.needs_vector or not matched:
                continue
        elif chunk_id not in rules.exempt:
            min_score, keyword_min_score = rules.floors(row.text)
            if score < (keyword_min_score if matched else min_score):
                continue
        rrf = sum(w / (RRF_K + ranks[chunk_id]) for w, ranks in lists if chunk_id in ranks)
        if rules.boost is not None:
            rrf += rules.boost(row.text) / (RRF_K + 1)
        scored.append((rrf, score if score is not None else -1.0, chunk_id))
    scored.sort(key=lambda t: (-t[0], -t[1], t[2]))
    hits: list[Hit] = []
    seen: set[str] = set()
    per_group: dict[Any, int] = {}
    for rrf, _, chunk_id in scored:
        row = rows[chunk_id]
        group = rules.group(row) if rules.group is not None else None
        if group is not None and per_group.get(group, 0) >= rules.per_group:
            continue
        text = norm(row.text)
        if text in seen or any(text in shown for shown in rules.shown):
            continue
        seen.add(text)
        per_group[group] = per_group.get(group, 0) + 1
        score = found.cosine.get(chunk_id)
        source, kind = rules.describe(row)
        hits.append(Hit(chunk_id, row.text, None if score is None else round(float(score), 4), source, kind,
                        round(rrf, 6), vec_rank.get(chunk_id), kw_rank.get(chunk_id)))
        if len(hits) == k:
            break
    return hits
