"""The turn's stages, in the order a turn goes through them (engine/chat/pipeline.py).

A new stage — a reasoning parser around the stream, a tool loop around the answer — is one file
here and one line below, at the place in the turn where it acts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from engine.chat.conversation import Conversation
from engine.chat.doc_recall import DocumentRecall
from engine.chat.finish import Finish
from engine.chat.memory_recall import MemoryRecall
from engine.chat.pipeline import Stage
from engine.chat.stages.after import After
from engine.chat.stages.cascade import Cascade
from engine.chat.stages.fallback import Fallback
from engine.chat.stages.fit import Fit
from engine.chat.stages.generate import Generate
from engine.chat.stages.prompt import Prompt
from engine.chat.stages.recall import Recall
from engine.chat.stages.route import Route
from engine.chat.stages.store import Store
from engine.chat.summary_chain import SummaryChain
from engine.chat.tier_set import TierSet
from engine.kv.tiers import KVTiers
from engine.storage import Database


@dataclass(frozen=True)
class Parts:
    """The collaborators the stages are built over; each stage takes only what it needs."""

    db: Database
    tiers: TierSet
    kv: KVTiers | None
    memory: MemoryRecall
    documents: DocumentRecall
    summaries: SummaryChain
    conversation: Callable[[int], Conversation]


def turn_stages(p: Parts) -> tuple[Stage, ...]:
    return (
        After(memory=p.memory, summaries=p.summaries),  # hands the answer on; summaries, memory index
        Route(db=p.db, tiers=p.tiers, kv=p.kv, conversation=p.conversation),
        Recall(memory=p.memory, documents=p.documents, tiers=p.tiers),  # memories + excerpts, one budget
        Cascade(tiers=p.tiers),  # a weak L1 answer asked again on L2
        Fallback(tiers=p.tiers),  # the level's targets, nearest first
        Fit(memory=p.memory, summaries=p.summaries, tiers=p.tiers),  # the window, the answer's room
        Prompt(db=p.db, memory=p.memory),  # the user message stored
        Store(db=p.db, finish=Finish(db=p.db, tiers=p.tiers, kv=p.kv, memory=p.memory)),  # streamed into SQLite
        Generate(kv=p.kv),  # the model's answer
    )
