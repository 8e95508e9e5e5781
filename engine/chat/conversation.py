"""A conversation as the models see it, and what a turn carries through the engine."""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.chat.session import Message
from engine.chat.stats import TurnStats
from engine.inference.events import TurnResult
from engine.memory.prompt import pinned_text
from engine.storage import Database


class ConversationNotFound(LookupError):
    pass


@dataclass
class TurnDone:
    """An answer, the one type every stage of a turn returns (engine/chat/pipeline.py).

    `Generate` makes it from the model's result, before anything is stored: `message_id` is None
    and `stats` holds the generation's own measurements. `Store` gives it its row and the turn's
    full `TurnStats`; every stage outside Store, and every front-end, gets it so.
    """

    conversation_id: int
    message_id: int | None  # the stored answer's row; None only inside Store (not stored yet)
    model: str
    text: str  # the answer (a reasoning model's thinking is `reasoning`)
    token_ids: list[int]
    logprobs: list[float] = field(default_factory=list)
    stats: TurnStats | None = None
    level: str = ""
    route_reason: str = ""
    fallback: str | None = None
    confidence: float | None = None
    reasoning: str = ""  # a reasoning model's thinking, without its tags
    # The calls the answer made, OpenAI-shaped ({"id", "type", "function": {"name", "arguments"}}):
    # the caller runs them and answers with `send_tool_results` (stats.finish_reason "tool_calls").
    tool_calls: list[dict] = field(default_factory=list)
    reasoning_ids: list[int] = field(default_factory=list)  # the thinking's ids, before the answer's

    @classmethod
    def of(cls, result: TurnResult, conversation_id: int, model: str, level: str) -> "TurnDone":
        """The model's result as an answer not yet stored."""
        return cls(conversation_id, None, model, result.text, list(result.token_ids), list(result.logprobs),
                   TurnStats.of(result.stats, level=level),
                   level, reasoning=result.reasoning, tool_calls=[c.as_openai() for c in result.tool_calls],
                   reasoning_ids=list(result.reasoning_ids))

    @property
    def sources(self) -> list[dict]:
        """The document excerpts the answer's [n] refer to: {"n", "path", "page", "heading",
        "line", "text", "score", "collection"}."""
        return self.stats.sources if self.stats is not None else []


@dataclass(frozen=True)
class StableBlock:
    """What follows the system prompt in a model's window: pinned memories and the summary of
    turns that left the window. Frozen between shift points: changing it re-evaluates the window."""

    pinned: tuple[str, ...] = ()
    summary: str | None = None


@dataclass
class Conversation:
    id: int
    system_prompt: str
    messages: list[Message]  # every turn the models may see (superseded answers are not here)
    # Per model identity (None: the remote tier): index into `messages` where its window starts
    # (older turns overflowed).
    first_kept: dict[str | None, int] = field(default_factory=dict)

    # Per model identity (None: the remote tier): the stable block in its window.
    stable: dict[str | None, StableBlock] = field(default_factory=dict)

    def system(self, block: StableBlock | None = None) -> list[Message]:
        parts = [self.system_prompt] if self.system_prompt else []
        if block and block.pinned:
            parts.append(pinned_text(list(block.pinned)))
        if block and block.summary:
            parts.append(f"Summary of the earlier conversation: {block.summary}")
        return [Message("system", "\n\n".join(parts))] if parts else []

    def history(self) -> list[Message]:
        return self.system() + self.messages


def load_conversation(db: Database, conversation_id: int) -> Conversation:
    """The conversation rebuilt from SQLite: every turn the models may see, with stored token ids.

    Raises:
        ConversationNotFound: unknown id.
    """
    row = db.conversation(conversation_id)
    if row is None:
        raise ConversationNotFound(f"no conversation with id {conversation_id}")
    messages = []
    for m in db.messages(conversation_id):
        if m["superseded_by"] is not None:
            continue
        # Stored ids belong to the model that made/read them; other models re-tokenize.
        ids = {m["token_model"]: m["token_ids"]} if m["token_model"] and m["token_ids"] is not None else {}
        thought = ({m["token_model"]: m["reasoning_ids"]} if m["token_model"] and m["reasoning_ids"] is not None
                   else {})
        messages.append(Message(m["role"], m["content"], ids, m["id"], m["level"], m["model_text"],
                                reasoning=m["reasoning"], reasoning_ids=thought, tool_calls=m["tool_calls"],
                                tool_call_id=m["tool_call_id"], images=m.get("images")))
    return Conversation(conversation_id, row["system_prompt"], messages)
