"""`Turn`: one turn as it moves through the pipeline's stages (engine/chat/pipeline.py).

It is frozen. What the entry point asked (`request`, `config`, `conv`, `user`, whether the user
message is new, which answer it replaces) comes first; then one frozen record per stage, set by
the stage named beside it, which hands the rest of the turn `replace(turn, its_record=…)`. So a
test can tell which stage decided what, and nothing flows back through the turn: what a stage
learns once the model answered comes back in the `TurnDone` it returns. The route is the one
record more than one stage sets: a stage that moves the turn (Recall keeping documents local,
Cascade asking L2, Fit answering without thinking) hands on a new decision whose reason says so.

Two things are shared, not records: the conversation (`conv`, the chat as the models see it) and
the user `Message`, whose `model_text` (what the model reads: memories and excerpts added, or a
shortened copy) and `id` (once stored) are the message's own.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from engine.chat.config import EngineConfig
from engine.chat.conversation import Conversation, TurnDone
from engine.chat.request import TurnRequest
from engine.chat.session import Message
from engine.chat.target import Target
from engine.chat.window import Window
from engine.inference.events import GenerateParams
from engine.retrieval.fusion import Hits
from engine.routing.router import RouteDecision


@dataclass(frozen=True)
class Recalled:
    """What Recall found for the message (Fit empties it when the message alone fills the context)."""

    memories: Hits | None = None  # memories retrieved for it (None: no memory service)
    fact: str | None = None  # "remember that …": the fact to pin once the message is stored
    memory_tokens: int = 0  # tokens the recalled memories added to the turn
    document_tokens: int = 0  # tokens the document excerpts added
    sources: tuple[dict[str, object], ...] = ()  # what the answer's [n] refer to
    docs_status: str = "off"  # "ok", "off" or why no excerpt was used
    local_only: bool = False  # carries the user's documents: never sent to the remote tier


@dataclass(frozen=True)
class Placed:
    """Which target answers (Fallback), and why it is not the one chosen."""

    target: Target
    note: str | None = None


@dataclass(frozen=True)
class Fitted:
    """The window on the target (Fit): what the model reads and the room left for the answer."""

    window: Window | None
    moved: bool  # the window moved this turn: older turns left it
    params: GenerateParams  # the request's, max_tokens capped to the room left
    history: list[Message] = field(default_factory=list)  # what the model reads before `user`


@dataclass(frozen=True)
class Turn:
    request: TurnRequest
    config: EngineConfig
    conv: Conversation
    user: Message  # the user message (or tool result) answered
    commit_user: bool = True  # the user message is new: store it before the answer
    supersedes: TurnDone | None = None  # the answer this one replaces (regenerate, cascade)
    decision: RouteDecision | None = None  # Route (Recall keeps it local; Cascade asks L2; Fit notes no thinking)
    recalled: Recalled = Recalled()  # Recall
    remembered: dict[str, object] | None = None  # Prompt: {"id", "text"} of the memory "remember that" pinned, or {"error"}
    placed: Placed | None = None  # Fallback
    fitted: Fitted | None = None  # Fit

    @property
    def memory(self) -> bool:
        """The memory reads and keeps this turn."""
        return self.request.memory

    @property
    def cancel(self) -> threading.Event | None:
        return self.request.cancel

    # What the stages after Route, Fallback and Fit read: set by then, by construction.
    @property
    def route(self) -> RouteDecision:
        assert self.decision is not None, "read before Route"
        return self.decision

    @property
    def target(self) -> Target:
        assert self.placed is not None, "read before Fallback"
        return self.placed.target

    @property
    def fit(self) -> Fitted:
        assert self.fitted is not None, "read before Fit"
        return self.fitted
