"""N-gram drafts: the tokens that followed the last time the sequence's tail occurred.

An answer that quotes a document, rewrites pasted text, edits code or restates a tool result
repeats runs of tokens the context already holds. `NgramIndex` remembers, for every n-gram of the
sequence (n = MIN_N..MAX_N), where its latest earlier occurrence ended; it is updated per token as
the sequence grows (and cut back when a new prompt diverges), never rebuilt. A draft is what came
after the longest tail that occurred before: llama.cpp's `ngram-simple` and llama-cpp-python's
prompt lookup do the same search over the whole sequence each time.
"""

from __future__ import annotations

from dataclasses import dataclass

MIN_N, MAX_N = 2, 4  # a 1-gram tail predicts little; longer tails are rarer and no better at copying
LOOK_BACK = 4  # occurrences of a tail weighed when the latest one's continuation is short


@dataclass(frozen=True)
class Draft:
    tokens: list[int]
    key: str  # what kind of match proposed it ("ngram3"): acceptance is tracked per key


class NgramIndex:
    """The positions after each n-gram's occurrences in `tokens`, latest last."""

    def __init__(self) -> None:
        self.tokens: list[int] = []
        # n-gram -> positions just after its occurrences (where its continuation starts), ascending
        self._after: dict[tuple[int, ...], list[int]] = {}

    def __len__(self) -> int:
        return len(self.tokens)

    def extend(self, tokens: list[int]) -> None:
        after, seq = self._after, self.tokens
        for token in tokens:
            p = len(seq)  # the n-grams ending just before `token` now have a continuation: it
            for n in range(MIN_N, min(MAX_N, p) + 1):
                after.setdefault(tuple(seq[p - n:p]), []).append(p)
            seq.append(token)

    def truncate(self, n_keep: int) -> None:
        """Forget the tokens from position `n_keep` on (a prompt that diverges from the last one)."""
        after, seq = self._after, self.tokens
        while len(seq) > n_keep:
            seq.pop()
            p = len(seq)
            for n in range(MIN_N, min(MAX_N, p) + 1):
                key = tuple(seq[p - n:p])
                places = after[key]
                places.pop()  # p was its latest: positions are appended in order
                if not places:
                    del after[key]

    def sync(self, sequence: list[int]) -> None:
        """Make the index hold `sequence`: keep the common prefix, cut the rest, add what is new."""
        seq, n = self.tokens, 0
        limit = min(len(seq), len(sequence))
        while n < limit and seq[n] == sequence[n]:
            n += 1
        self.truncate(n)
        self.extend(sequence[n:])

    def draft(self, k: int) -> Draft | None:
        """Up to `k` tokens that followed the longest tail (MAX_N..MIN_N tokens) seen before; None
        where no tail occurred earlier.

        Of the tail's occurrences the latest is taken, unless its continuation runs into the end of
        the sequence within `k` (the answer is repeating what it just wrote): then the latest of the
        last few whose continuation is longest. A continuation that reaches the end goes on with the
        period it repeats (a list being counted out, a loop the repetition guard will cut)."""
        seq = self.tokens
        for n in range(min(MAX_N, len(seq)), MIN_N - 1, -1):
            places = self._after.get(tuple(seq[-n:]))
            if not places:
                continue
            start = max(places[-LOOK_BACK:], key=lambda p: (min(len(seq) - p, k), p))
            out = seq[start:start + k]
            period = len(seq) - start
            while len(out) < k:
                out.append(out[len(out) - period] if len(out) >= period else seq[start + len(out)])
            if min(out) < 0:  # an image's media ids (engine/inference/media.py): no token to propose
                out = out[:next(i for i, t in enumerate(out) if t < 0)]
                if not out:
                    continue
            return Draft(out, f"ngram{n}")
        return None
