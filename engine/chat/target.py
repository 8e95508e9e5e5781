"""`Target`: what a turn's stages may ask of whatever answers it — a local model (L1/L2), the
remote endpoint (L3), or a test's fake — and the capabilities it declares.

The stages ask the target; they never reach into it (a worker, a client) or guess what it is
from another attribute. A new kind of target (a vision model, a draft-and-verify pair) declares
what it can do here, and the stages that care read the flag.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Generator, Protocol

from engine.chat.conversation import TurnDone
from engine.chat.session import Message
from engine.chat.window import Window
from engine.inference.events import Chunk, GenerateParams, ReasoningChunk, TurnResult
from engine.kv.snapshot import WINDOW_DOMAIN


@dataclass(frozen=True)
class Capabilities:
    """What a target can do. The first four are what it takes and gives; the last four are what
    the engine may do with it once it has answered."""

    vision: bool = False  # reads images in a user turn
    tools: bool = False  # calls tools in a format the engine parses
    reasoning: bool = False  # thinks in a block before answering (its template says how)
    speculative: bool = False  # decodes more than one token a pass (a draft model)
    tokens: bool = False  # its exact token ids are known: stored with the messages, reused as KV
    checkpoint: bool = False  # its KV state goes to the chat's cold file while the user reads
    offload: bool = False  # it says where its layers are (done.stats.offload)
    confidence: bool = False  # per-token log-probabilities: the answer's confidence report


class Target(Protocol):
    """Where a turn runs. `identity` names the vocabulary its stored token ids belong to (None:
    they are not known, `capabilities.tokens` is False)."""

    level: str

    @property
    def capabilities(self) -> Capabilities: ...

    @property
    def model_id(self) -> str: ...

    @property
    def identity(self) -> str | None: ...

    def fit(self, system: list[Message], turns: list[Message], user: Message, params: GenerateParams,
            first_kept: int = 0) -> Window:
        """The window for this turn (MessageTooLong when the message cannot fit)."""
        ...

    def count_text(self, text: str) -> int:
        """Tokens of `text` as message content (an estimate where the tokenizer is unknown)."""
        ...

    def stream(self, history: list[Message], user: Message, params: GenerateParams,
               cancel: threading.Event | None, window_moved: bool = False, *, conversation_id: int,
               read_ahead: bool = False, domain: str = WINDOW_DOMAIN
               ) -> Generator[Chunk | ReasoningChunk | TurnResult, None, None]:
        """The answer to `user` after `history`: its chunks, then one TurnResult."""
        ...

    def offload(self) -> dict[str, object] | None:
        """Where its layers are and why not where they were asked to be (None: not a local model)."""
        ...

    def confidence(self, done: TurnDone, sampled: bool, warn: float | None) -> dict[str, object] | None:
        """The answer's confidence report (engine/routing/confidence.py), None without logprobs.
        `sampled`: the answer was sampled rather than greedy; `warn`: the user's own threshold."""
        ...

    def after_turn(self, done: TurnDone) -> None:
        """The answer is stored: what the target does while the user reads (a local model
        checkpoints the chat's KV to its cold file)."""
        ...


def token_owner(target: Target) -> str | None:
    """The identity an answer's token ids are stored under; None when the target's ids are not
    known (nothing is stored for them)."""
    return target.identity if target.capabilities.tokens else None
