"""`TokenSource`: where an answer's tokens come from, one accepted token at a time.

It owns the decoding: it evaluates what is pending, samples, and, where a draft exists and pays,
verifies several draft tokens in one pass. `Answer` (engine/inference/answer.py) reads `Step`s
and does everything textual; as mlx-lm's `generate_step` / `speculative_generate_step` both yield
(token, logprobs, from_draft), a plain and a speculative source look the same to it.

Exactness. A pass evaluates the pending token and k draft tokens in one batch, logits on every
row. Row i is then sampled with the answer's own sampler chain (penalties, temperature, top-k/p,
min-p and the grammar when one is active), lazily: only once the consumer has taken the token
before it, so a grammar it swaps in on a marker (tool calls) applies to the next row as to the next
plain step. The token sampled is kept whatever the draft said; the pass goes on while it equals
the draft. Each token is thus drawn from the target's distribution given the accepted tokens,
with one draw of the chain's generator per token, as a plain step draws: greedy answers are the
plain ones, and a seeded one is the seed's plain answer, up to the batch's rounding of logits.
For drafts that are deterministic (n-gram lookups, a greedy draft model) this is the rejection
rule of Leviathan et al. 2023 / Chen et al. 2023, with the draft's distribution a point mass:
accept the draft token x with probability p(x), else draw from p without x renormalised; drawing
from p and comparing is the same distribution (llama.cpp's common_sampler_sample_and_accept_n).

After a rejection the cache drops the rows past the accepted ones (llama_memory_seq_rm), so it
holds exactly the prompt and the accepted tokens, and Backend's token mirror with it.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Protocol

from engine.inference.speculation import Tuner

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Step:
    token: int
    logprob: float  # the target's raw log-probability of the token
    drafted: bool  # the draft proposed it and the target agreed


class Drafter(Protocol):
    """Proposes the tokens that may come next (engine/inference/draft_model.py)."""

    kind: str  # "draft": costs and acceptance are tracked under this name

    def propose(self, sequence: list[int], k: int) -> list[int]: ...


@dataclass(frozen=True)
class Drafting:
    """What a source may draft with: its mode ("auto", "off", "ngram", "draft"), this chat's `Tuner`
    (`Speculation.tuner`) and a draft model where one is paired and loaded."""

    mode: str = "off"
    tuner: Tuner | None = None
    drafter: Drafter | None = None
    no_drafter: str = "no draft model is paired with this model"  # why `drafter` is None


def no_speculation(backend, drafting: Drafting) -> str:
    """Why `backend` cannot speculate as `drafting` asks ("" where it can)."""
    if drafting.mode == "off" or drafting.tuner is None:
        return "off in Settings" if drafting.mode == "off" else "off"
    if backend.n_swa > 0 and not backend.params.swa_full:
        # Sliding-window layers forget cells a rollback would need: no suffix can be dropped.
        return "sliding-window cache: a rejected draft could not be rolled back"
    if drafting.mode == "draft" and drafting.drafter is None:
        return f"draft: {drafting.no_drafter}"
    return ""


class TokenSource:
    """An answer's tokens on `backend`'s thread, after a prompt whose last logits are fresh.

    Args:
        backend: the target's Backend (its context and KV mirror).
        sampler: the answer's sampler chain (`constrain` swaps its grammar).
        prompt: the tokens the context holds (the drafts' start).
        drafting: what it may draft with; none: one token a pass.
    """

    def __init__(self, backend, sampler, prompt: list[int], drafting: Drafting = Drafting()):
        self.backend, self.sampler = backend, sampler
        self.pending: list[int] = []  # sampled or put in, not evaluated yet
        self.drafted = self.accepted = 0
        self.note = no_speculation(backend, drafting)
        self.tuner = None if self.note else drafting.tuner
        self.ngram = self.tuner is not None and drafting.mode in ("auto", "ngram")
        self.drafter = drafting.drafter if self.tuner is not None and drafting.mode in ("auto", "draft") else None
        self.kind: str | None = None  # the kind of the last draft verified
        if self.tuner is not None:
            self.tuner.index.sync(prompt)
        self._sequence = list(prompt) if self.drafter is not None else None
        self._pass: _Pass | None = None
        if self.note:
            log.debug("no speculation: %s", self.note)

    # ---- what the consumer calls
    def next(self, room: int) -> Step:
        """The next accepted token; `room`: tokens the answer may still take (drafts stay within)."""
        live = self._pass
        if live is None:
            return self._start(room)
        row = live.first + live.judged
        token, logprob = self.backend.sample(self.sampler, row)
        if live.judged < len(live.draft) and token == live.draft[live.judged]:
            live.judged += 1
            self.accepted += 1
            self._took(token)
            return Step(token, logprob, True)
        self._end_pass()
        self.pending = [token]
        self._took(token)
        return Step(token, logprob, False)

    def put(self, tokens: list[int]) -> None:
        """Tokens the engine writes into the answer (a closing tag): evaluated before the next sample."""
        if self._pass is not None:
            self._end_pass()
        self.pending.extend(tokens)
        self._took(*tokens)

    def constrain(self, grammar: str | None, written: list[int] = ()) -> bool:
        """Swap the sampler's grammar from the next token on (Backend.constrain)."""
        return self.backend.constrain(self.sampler, grammar, written)

    def finish(self) -> None:
        """The answer ended: the cache keeps what plain decoding would have evaluated, the prompt and
        every token taken but the last, so the next turn finds the same state whether or not this
        answer was drafted. The rows the consumer did not take were never judged: no rejection."""
        live = self._pass
        if live is not None:
            self._end_pass(keep=live.base + live.judged - 1, rejected=False)

    @property
    def speculation(self) -> str | None:
        """How the answer was decoded: the kind of draft verified ("ngram", "draft"), None if none."""
        return self.kind if self.drafted else None

    @property
    def why(self) -> str:
        """Why speculation was on or off, as last decided."""
        return self.note or (self.tuner.note if self.tuner is not None else "")

    # ---- inside
    def _start(self, room: int) -> Step:
        backend = self.backend
        if not self.pending:  # the prompt's last logits are fresh: the first token is plain
            token, logprob = backend.sample(self.sampler)
            self.pending = [token]
            self._took(token)
            return Step(token, logprob, False)
        draft, key, kind, t = self._draft(room)
        if not draft:
            backend.eval(self.pending)
            token, logprob = backend.sample(self.sampler)
            if self.tuner is not None:
                self.tuner.costs.note_step(time.perf_counter() - t)
            self.pending = [token]
            self._took(token)
            return Step(token, logprob, False)
        batch = self.pending + draft
        backend.eval_rows(batch, len(self.pending) - 1)
        self.drafted += len(draft)
        self.kind = kind
        self._pass = _Pass(draft, len(self.pending) - 1, backend.n_kv - len(draft), key, kind, t)
        self.pending = []
        return self.next(room)

    def _draft(self, room: int) -> tuple[list[int], str, str, float]:
        """(draft tokens, match key, kind, when the pass began) — an empty draft: a plain step."""
        t = time.perf_counter()
        tuner = self.tuner
        if tuner is None:
            return [], "", "", t
        # Within the answer's room and the context: the pass's last row may sample one more.
        fits = min(room - 1, self.backend.n_ctx - self.backend.n_kv - len(self.pending) - 1)
        fits = min(fits, self.backend.params.n_batch - len(self.pending))
        if fits <= 0:
            return [], "", "", t
        if self.drafter is not None:
            key = "draft" + ("+" if tuner.run else "")
            k = tuner.length(key, self.drafter.kind, fits)
            if k:
                proposal = self.drafter.propose(self._sequence, k)[:k]
                if proposal:
                    return proposal, key, self.drafter.kind, t
        if self.ngram:
            found = tuner.index.draft(fits)
            if found is not None:
                key = found.key + ("+" if tuner.run else "")
                k = tuner.length(key, "ngram", len(found.tokens))
                if k:
                    return found.tokens[:k], key, "ngram", t
        return [], "", "", t

    def _end_pass(self, keep: int | None = None, rejected: bool = True) -> None:
        """Close the live pass: the cache keeps the pending tokens and the draft tokens accepted
        (or `keep` tokens)."""
        live, self._pass = self._pass, None
        keep = live.base + live.judged if keep is None else keep
        if self.backend.n_kv > keep and not self.backend.keep_prefix(keep):
            raise RuntimeError("the cache could not drop a rejected draft")  # ruled out by no_speculation
        if self.tuner is not None:
            self.tuner.judged(live.key, live.judged, len(live.draft) if rejected else live.judged)
            self.tuner.costs.note_pass(live.kind, len(live.draft), time.perf_counter() - live.t)

    def _took(self, *tokens: int) -> None:
        if self.tuner is not None:
            self.tuner.index.extend(list(tokens))
        if self._sequence is not None:
            self._sequence.extend(tokens)


@dataclass
class _Pass:
    """A verification pass in progress: its draft, the batch row of its first sample, where the
    draft starts in the cache, and how many draft tokens were accepted so far."""

    draft: list[int]
    first: int
    base: int
    key: str
    kind: str
    t: float
    judged: int = 0
