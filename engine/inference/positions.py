"""Where each id of the KV cache sits, for models whose images advance the position by less than
their tokens: M-RoPE (Qwen2-VL, Qwen2.5-VL) gives an image of w × h tokens max(w, h) positions,
and the text after it goes on from there. For every other model an id's position is its index in
the cache, and Backend keeps no Positions.

`ends[i]` is the position after id i. A cut is only ever made at a span's edge (media.py's
common_prefix never splits an image), so the ids inside a span need no position of their own: they
carry its start, and its last id carries the end.
"""

from __future__ import annotations

from typing import Callable

from engine.inference.media import spans


class Positions:
    def __init__(self) -> None:
        self.ends: list[int] = []

    def next(self) -> int:
        """The position the next id goes to."""
        return self.ends[-1] if self.ends else 0

    def at(self, n: int) -> int:
        """The position after the first n ids (where a cut at n starts removing)."""
        return self.ends[n - 1] if n else 0

    def add_text(self, n: int) -> None:
        start = self.next()
        self.ends.extend(range(start + 1, start + n + 1))

    def add_span(self, length: int, n_pos: int) -> None:
        start = self.next()
        self.ends.extend([start] * (length - 1) + [start + n_pos])

    def cut(self, n: int) -> None:
        del self.ends[n:]

    def clear(self) -> None:
        self.ends.clear()

    def rebuild(self, ids: list[int], span_pos: Callable[[int], int | None]) -> bool:
        """The positions of `ids` (a restored cache): each text id one, each image span what
        `span_pos(its first id)` says. False (and empty) when a span is unknown here."""
        self.clear()
        at = 0
        for start, end in spans(ids):
            self.add_text(start - at)
            n_pos = span_pos(ids[start])
            if n_pos is None:
                self.clear()
                return False
            self.add_span(end - start, n_pos)
            at = end
        self.add_text(len(ids) - at)
        return True
