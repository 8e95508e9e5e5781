"""A loop detector for the decode loop: notices an answer that repeats itself and says where to cut.

Small base models (demo-int4's Gemma 3 270M) fall into loops such as
"The fruit is a fruit.\\n" written until max_tokens. `RepetitionGuard.feed()` is called once per
sampled token (its id and the text it added) and returns the number of tokens to keep when the
tail of the answer is a loop, else None. Two rules, either fires:

* **Period rule (token ids).** The last L tokens have period p (token j equals token j-p for each
  j in the tail), 4 <= p <= 200, with L >= 3p (the block occurs three times) and L >= 48 tokens.
  The span floor keeps short periodic stretches alive: a Markdown separator `| --- | --- |`, a run
  of `}` lines, a refrain of a few words. A block without at least 4 letters (digits, punctuation,
  whitespace: rows of a zero matrix, ASCII rules) needs 512 tokens, as code and data legitimately
  repeat such rows (a 9x9 grid of zeros as a Python literal is ~250 Gemma tokens).
* **Line rule (text).** The same line, normalised (case, spacing, a leading list marker or
  number), four times in a row, blank lines between them ignored, outside ``` code fences, and
  with at least 4 letters. Four, not three: songs repeat a line three times ("Glory, glory,
  hallelujah!"), and loops of long lines are caught by the period rule anyway; this rule is for
  short lines, which would take many repeats to reach 48 tokens.

Where to cut: after the first occurrence of the repeated block (period rule: the start of the
periodic tail plus one period) or of the repeated line (the token that ended it).

Cost: O(1) amortised per token. Candidate periods come from a dict of the last position of every
4-gram of ids (the most recent earlier occurrence of the last four tokens gives a shift p); each
live candidate is checked with one comparison per token and dropped at its first mismatch, so
only a handful are alive at a time. History is a ring of 256 ids; the dict is pruned to that
window every 4096 tokens.
"""

from __future__ import annotations

import codecs
import re

MIN_PERIOD = 4  # also the n-gram length that proposes candidate periods
MAX_PERIOD = 200
MIN_REPEATS = 3
MIN_SPAN = 48  # tokens of periodic tail before the period rule fires
LONG_SPAN = 512  # the same for blocks without letters (numbers, punctuation, whitespace)
MIN_LETTERS = 4  # letters (any script: str.isalpha) a block or line needs to count as words
LINE_REPEATS = 4

_RING = 256  # > MAX_PERIOD + MIN_PERIOD: the history the checks look back into
_MASK = _RING - 1
_PRUNE_EVERY = 4096
# A leading list marker or number: "- ", "* ", "+ ", "> ", "1. ", "2) ", "### ".
_MARKER = re.compile(r"^(?:[-*+>#]+\s*|\d+[.)]\s*)+")
_SPACES = re.compile(r"\s+")


def _letters(text: str) -> int:
    return sum(1 for c in text if c.isalpha())


class RepetitionGuard:
    """Feed one token at a time; `feed` returns how many tokens to keep once the answer loops."""

    def __init__(self, text: bool = True) -> None:
        self.text = text  # False: ids only (no letters to check, no lines): the period rule on its own
        self.n = 0  # tokens fed
        self._ids = [0] * _RING
        self._pieces = [""] * _RING
        self._last: dict[tuple[int, ...], int] = {}  # 4-gram -> index of its last token
        self._runs: dict[int, int] = {}  # live candidate period -> tokens j in the tail with ids[j] == ids[j-p]
        self._wordless: set[int] = set()  # live periods whose block has too few letters
        self._line: list[str] = []  # pieces of the line being written
        self._line_key: str | None = None  # the last non-blank line, normalised (None: does not count)
        self._line_count = 0
        self._line_keep = 0  # tokens up to the end of the first line of the current run
        self._in_code = False
        self.rule: str | None = None  # "period" | "line" once fired

    def feed(self, token: int, piece: str = "") -> int | None:
        """Add one sampled token and the text it produced (may be "" mid-character).

        Returns:
            None while the answer does not loop; else the number of tokens to keep (the answer
            up to the end of the first occurrence of the repeated block or line).
        """
        i = self.n
        self.n += 1
        ids = self._ids
        ids[i & _MASK] = token
        self._pieces[i & _MASK] = piece
        keep = self._period(i, token) if i >= MIN_PERIOD else None
        if keep is None and piece:
            keep = self._lines(piece)
        return keep

    def _period(self, i: int, token: int) -> int | None:
        ids = self._ids
        runs = self._runs
        for p in list(runs):
            if ids[(i - p) & _MASK] == token:
                runs[p] += 1
            else:
                del runs[p]
                self._wordless.discard(p)
        gram = (ids[(i - 3) & _MASK], ids[(i - 2) & _MASK], ids[(i - 1) & _MASK], token)
        prev = self._last.get(gram)
        self._last[gram] = i
        if prev is not None:
            p = i - prev
            if p < MIN_PERIOD:  # a loop of 1-3 tokens ("!!!!", " very very") also has this period
                p *= -(-MIN_PERIOD // p)
            if p <= MAX_PERIOD and p not in runs:
                # Count the matches back from here (bounded by the ring): a candidate found late,
                # or re-found after a nearer occurrence hid it, keeps its true run.
                run, j = 0, i
                while j - p >= 0 and j > i - _RING + p and ids[j & _MASK] == ids[(j - p) & _MASK]:
                    run, j = run + 1, j - 1
                if run:
                    runs[p] = run
                    if self.text and _letters("".join(self._pieces[(i - k) & _MASK] for k in range(p))) < MIN_LETTERS:
                        self._wordless.add(p)
        if i % _PRUNE_EVERY == _PRUNE_EVERY - 1:
            self._last = {g: k for g, k in self._last.items() if k > i - _RING}
        for p, run in runs.items():
            span = run + p
            if span >= MIN_REPEATS * p and span >= (LONG_SPAN if p in self._wordless else MIN_SPAN):
                self.rule = "period"
                return i + 1 - run  # the periodic tail's start plus one period
        return None

    def _lines(self, piece: str) -> int | None:
        if "\n" not in piece:
            self._line.append(piece)
            return None
        *done, rest = piece.split("\n")
        for part in done:
            self._line.append(part)
            line = "".join(self._line)
            self._line = []
            if self._end_line(line):
                self.rule = "line"
                return self._line_keep
        self._line = [rest] if rest else []
        return None

    def _end_line(self, line: str) -> bool:
        stripped = line.strip()
        if not stripped:
            return False  # blank lines neither count nor break a run
        if stripped.startswith("```"):
            self._in_code = not self._in_code
            self._line_key, self._line_count = None, 0
            return False
        key = _SPACES.sub(" ", _MARKER.sub("", stripped.lower())).strip()
        if self._in_code or _letters(key) < MIN_LETTERS:
            self._line_key, self._line_count = None, 0
            return False
        if key == self._line_key:
            self._line_count += 1
            return self._line_count >= LINE_REPEATS
        self._line_key, self._line_count, self._line_keep = key, 1, self.n
        return False


def find_loop(ids: list[int], pieces: list[bytes] | None = None) -> tuple[int, int] | None:
    """Run a fresh guard over a whole answer, as `generate()` does token by token.

    Args:
        ids: the answer's token ids.
        pieces: each token's bytes (`Backend.token_bytes`); None checks the ids alone.

    Returns:
        (tokens fed when it fired, tokens to keep), or None when it never fires.
    """
    guard = RepetitionGuard(text=pieces is not None)
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    for k, token in enumerate(ids):
        keep = guard.feed(token, decoder.decode(pieces[k]) if pieces is not None else "")
        if keep is not None:
            return k + 1, keep
    return None
