"""`Turn`: one turn's state as it moves through the pipeline's stages (engine/chat/pipeline.py).

Each stage reads what the stages before it set and adds its own part; the request and the
config are the turn's fixed inputs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from engine.chat.config import EngineConfig
from engine.chat.conversation import Conversation, TurnDone
from engine.chat.request import TurnRequest
from engine.chat.session import Message
from engine.chat.window import Window
from engine.inference.generate import GenerateParams
from engine.retrieval.fusion import Hits
from engine.routing.router import RouteDecision


@dataclass
class Turn:
    request: TurnRequest
    config: EngineConfig
    conv: Conversation
    user: Message  # the user message answered (its `model_text` gains memories and excerpts)
    commit_user: bool = True  # the user message is new: store it before the answer
    supersedes: TurnDone | None = None  # the answer this one replaces (regenerate, cascade)
    decision: RouteDecision | None = None  # set by route
    # recall (memory and documents under one budget)
    recall: Hits | None = None  # memories retrieved for it (None: no memory service)
    fact: str | None = None  # "remember that …": the fact to pin once the message is stored
    remembered: dict | None = None  # {"id", "text"} of the pinned memory, or {"error"}
    memory_tokens: int = 0  # tokens the recalled memories added to the turn
    document_tokens: int = 0  # tokens the document excerpts added
    sources: list[dict] = field(default_factory=list)  # what the answer's [n] refer to
    docs_status: str = "off"  # "ok", "off" or why no excerpt was used
    local_only: bool = False  # carries the user's documents: never sent to the remote tier
    # per target (set by fallback and fit)
    target: Any = None  # engine/chat/targets.py LocalTarget | RemoteTarget
    note: str | None = None  # why another tier answers than the one chosen
    window: Window | None = None
    moved: bool = False  # the window moved this turn: older turns left it
    params: GenerateParams = GenerateParams()  # the request's, max_tokens capped to the room left
    history: list[Message] = field(default_factory=list)  # what the model reads before `user`

    @property
    def memory(self) -> bool:
        """The memory reads and keeps this turn."""
        return self.request.memory

    @property
    def cancel(self):
        return self.request.cancel
