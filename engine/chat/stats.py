"""What a turn reports: `TurnStats`, typed, and its JSON shape made in one place.

The generation's own measurements (tokens, timings, finish reason, cache mode) come from
engine/inference/generate.py; the turn adds where it ran and what went into its prompt. Front-ends
read the fields (the API's `x_*` fields among them); the CLI's `--json`, the window and the
stored row get `as_json()`, whose keys are the fields' names.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

from engine.inference.events import GenerationStats


@dataclass
class Retrieval:
    """Tokens the retrieved memories and document excerpts added to the user turn, and their
    shared budget (setting retrieval.max_tokens)."""

    memory_tokens: int = 0
    document_tokens: int = 0
    max_tokens: int = 0


@dataclass
class TurnStats(GenerationStats):
    """A finished turn: the generation's measurements, then the turn's own facts."""

    level: str = ""  # the tier that answered: "L1" | "L2" | "L3"
    route_reason: str = ""  # why the router chose it
    fallback: str | None = None  # another tier answered than the one chosen, and why
    offload: dict | None = None  # where the layers are (engine/inference/placement.py), local tiers
    confidence: dict | None = None  # engine/routing/confidence.py `confidence_report`, local tiers
    context: dict | None = None  # the window (engine/chat/window.py `Window.as_dict`) + context_shift
    summary_used: bool = False  # the window carries the summary of turns that left it
    risk: dict = field(default_factory=dict)  # {"flags", "caution"} (engine/routing/risk.py)
    memories_used: list[dict] = field(default_factory=list)  # recalled memories, with their sources
    memory: dict = field(default_factory=dict)  # what the memory did (retrieval status, pinned, remembered)
    sources: list[dict] = field(default_factory=list)  # the document excerpts [n] refers to
    documents: str = "off"  # "ok", "off" or why no excerpt was used
    retrieval: Retrieval = field(default_factory=Retrieval)

    @classmethod
    def of(cls, generation: GenerationStats, **turn: Any) -> "TurnStats":
        """The generation's stats with the turn's facts added."""
        return cls(**{f.name: getattr(generation, f.name) for f in fields(GenerationStats)}, **turn)

    def as_json(self) -> dict:
        """The JSON shape of `done.stats` (stored with the answer, sent to front-ends)."""
        return asdict(self)


def stored_sources(stats: dict | None) -> tuple[list[dict], str, int]:
    """(sources, documents status, document tokens) from a stored answer's JSON stats."""
    stats = stats or {}
    return (stats.get("sources") or [], stats.get("documents", "off"),
            (stats.get("retrieval") or {}).get("document_tokens", 0))
