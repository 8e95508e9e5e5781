"""The closed set of events a turn streams to its front-end, and the one place that folds them.

A turn streams, in order: the answer's `Chunk`s and a reasoning model's `ReasoningChunk`s as they
come; each call the engine runs itself (`ToolCallEvent`, then its `ToolResultEvent`); a `TurnDone`
as each answer ends (one per round of tool calls, then the final one). When the cascade takes a
weak L1 answer back to ask L2, it streams `Retracted` in place of that answer's `TurnDone`: what
was shown since the turn began is withdrawn, and the next answer streams after it.

Every front-end (the window, the local API server, the terminal) matches these types exhaustively
and ends with `case _: unknown_event(item)`: an event it does not know is an error, never text.
`TurnFold` keeps what each of them needs of a turn, the retraction applied in one place.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NoReturn, TypeAlias

from engine.chat.conversation import TurnDone
from engine.inference.events import Chunk, ReasoningChunk
from engine.tools.runner import ToolCallEvent, ToolResultEvent


@dataclass(frozen=True)
class Retracted:
    """The answer streamed so far is taken back (engine/chat/stages/cascade.py): a low-confidence
    L1 answer, stored off the chat's path (it stays in the record, out of every prompt). The turn
    goes on: `next_level`'s answer streams after this event."""

    answer: TurnDone  # the answer taken back: stored (its message_id), measured (its stats)
    reason: str  # "cascade: L1 confidence 0.20 < 0.50": the route reason of the answer that follows
    next_level: str = "L2"


TurnEvent: TypeAlias = Chunk | ReasoningChunk | ToolCallEvent | ToolResultEvent | Retracted | TurnDone
EVENT_TYPES: tuple[type, ...] = (Chunk, ReasoningChunk, ToolCallEvent, ToolResultEvent, Retracted, TurnDone)


class UnknownEvent(TypeError):
    """A turn streamed something outside `TurnEvent`: a bug in the engine or a stage, never text
    to show."""


def unknown_event(item: object) -> NoReturn:
    """The last case of every front-end's match over a turn's events."""
    raise UnknownEvent(f"a turn streamed {type(item).__name__!r}, which is not one of the turn events "
                       f"({', '.join(t.__name__ for t in EVENT_TYPES)})")


@dataclass
class TurnFold:
    """What a front-end keeps of one turn, fed every event with `take`: the current answer's chunks
    and thinking (emptied by a retraction), every answer that ended (a retracted one's too: its
    tokens were computed, so they count in usage), and the retractions."""

    chunks: list[Chunk] = field(default_factory=list)  # the current answer's, since the last retraction
    thinking: list[ReasoningChunk] = field(default_factory=list)
    answers: list[TurnDone] = field(default_factory=list)  # tool rounds, retracted and final answers
    retracted: list[Retracted] = field(default_factory=list)

    def take(self, item: TurnEvent) -> TurnEvent:
        """Fold `item` in and give it back (so a front-end can `match fold.take(item)`).

        Raises:
            UnknownEvent: `item` is not a turn event.
        """
        match item:
            case Chunk():
                self.chunks.append(item)
            case ReasoningChunk():
                self.thinking.append(item)
            case ToolCallEvent() | ToolResultEvent():
                pass
            case Retracted():
                self.chunks, self.thinking = [], []
                self.answers.append(item.answer)
                self.retracted.append(item)
            case TurnDone():
                self.answers.append(item)
            case _:
                unknown_event(item)
        return item

    @property
    def final(self) -> TurnDone | None:
        """The answer that stands: the last one that ended and was not taken back (a round of tool
        calls, when the turn stopped between rounds), or None."""
        taken = {id(r.answer) for r in self.retracted}
        return next((d for d in reversed(self.answers) if id(d) not in taken), None)

    @property
    def text(self) -> str:
        """The current answer's text as streamed."""
        return "".join(c.text for c in self.chunks)
