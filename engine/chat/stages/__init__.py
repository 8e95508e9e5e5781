"""The turn's stages, in the order a turn goes through them (engine/chat/pipeline.py).

Each stage wraps the ones below it. What it does before handing on happens on the way in, top
to bottom; what it does with the answer the rest returns happens on the way out, bottom to top.
So `tools` and `after`, at the top, act last: the tool loop once an answer asks for calls, After
once the answer is out. A new stage — a parser around the stream, a draft model's verifier — is
one file here and one line below, at the place in the turn where it acts.
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
from engine.chat.stages.tools import ToolLoop
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
        ToolLoop(db=p.db),  # out: an answer's calls run, their results answered (each round: all below)
        After(memory=p.memory, summaries=p.summaries),  # out: the answer handed on; summaries, memory index
        Route(db=p.db, tiers=p.tiers, kv=p.kv, conversation=p.conversation),
        Recall(memory=p.memory, documents=p.documents, tiers=p.tiers),  # memories + excerpts, one budget
        Cascade(tiers=p.tiers),  # out: a weak L1 answer asked again on L2
        Fallback(tiers=p.tiers),  # the level's targets, nearest first
        Fit(memory=p.memory, summaries=p.summaries, tiers=p.tiers),  # the window, the answer's room
        Prompt(db=p.db, memory=p.memory),  # the user message stored
        Store(db=p.db, finish=Finish(db=p.db, tiers=p.tiers, memory=p.memory)),  # streamed into SQLite
        Generate(),  # the model's answer
    )
