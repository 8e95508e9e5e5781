"""A turn as a pipeline of named stages.

Each stage is a callable `stage(turn, rest)` that does its part and hands the turn on with
`yield from rest(turn)`, which streams the turn's events and returns its `TurnDone` (None when
the turn ended without one). Every stage returns that one type: a stage may stand anywhere and
get what the stage after it returns. A stage may work before (route, recall, fit), around (store
the stream, pass it through a parser: `relay`) or more than once (the tool loop, cascade,
fallback) — the shape of WSGI middleware. Adding a stage is one file and one line in
engine/chat/stages/__init__.py; tests/test_pipeline.py shows it with a stage that rewrites the
stream.
"""

from __future__ import annotations

from typing import Callable, Generator, Protocol, Sequence, TypeAlias

from engine.chat.conversation import TurnDone
from engine.chat.events import TurnEvent
from engine.chat.turn import Turn

Events: TypeAlias = Generator[TurnEvent, None, TurnDone | None]
Rest: TypeAlias = Callable[[Turn], Events]


class Stage(Protocol):
    @property
    def name(self) -> str: ...

    def __call__(self, turn: Turn, rest: Rest) -> Events: ...


def compose(stages: Sequence[Stage]) -> Rest:
    """The stages as one callable: the first runs first and hands on to the second, and so on;
    the last one is the end of the line (its `rest` ends the turn without an answer)."""
    def end(turn: Turn) -> Events:
        return None
        yield  # a generator that yields nothing

    rest: Rest = end
    for stage in reversed(stages):
        rest = _link(stage, rest)
    return rest


def _link(stage: Stage, rest: Rest) -> Rest:
    return lambda turn: stage(turn, rest)


def relay(events: Events, each: Callable[[TurnEvent], TurnEvent]) -> Events:
    """`events` passed on through `each` (which notes or rewrites each one), and their TurnDone
    returned: what a stage around the stream writes instead of its own next()/StopIteration loop.
    Closing the relay closes `events` at once (the model stops now, not at garbage collection)."""
    try:
        while True:
            try:
                item = next(events)
            except StopIteration as end:
                done: TurnDone | None = end.value
                return done
            yield each(item)
    finally:
        events.close()


def stage_names(stages: Sequence[Stage]) -> list[str]:
    """The pipeline's stages in order, by name (logged at start, shown by tests)."""
    return [s.name for s in stages]
