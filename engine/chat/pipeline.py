"""A turn as a pipeline of named stages.

Each stage is a callable `stage(turn, rest)` that does its part and hands the turn on with
`yield from rest(turn)`, which streams the answer's `Chunk`s and returns its `TurnDone` (None when
the turn ended without one). A stage may work before (route, recall, fit), around (store the
stream, pass it through a parser) or more than once (cascade, fallback, a tool loop) — the shape of
WSGI middleware. Adding a stage is one file and one line in `stages()`; the tests in
tests/test_pipeline.py show it with a stage that rewrites the stream.
"""

from __future__ import annotations

from typing import Callable, Generator, Protocol, Sequence

from engine.chat.conversation import TurnDone
from engine.chat.turn import Turn
from engine.inference.generate import Chunk

Events = Generator[Chunk | TurnDone, None, TurnDone | None]
Rest = Callable[[Turn], Events]


class Stage(Protocol):
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


def stage_names(stages: Sequence[Stage]) -> list[str]:
    """The pipeline's stages in order, by name (logged at start, shown by tests)."""
    return [getattr(s, "name", type(s).__name__) for s in stages]
