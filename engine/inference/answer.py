"""`Answer`: one answer as it is sampled, token by token: its ids and text, how much of the text has
been streamed, why it ended, and when its tokens came.

A reasoning model's tokens go through a `Splitter` first: thinking streams as `ReasoningChunk`s and
is kept apart (its ids, its own loop guard, its budget), and only the answer meets the stop strings,
the repetition guard and the logprobs that confidence reads.
"""

from __future__ import annotations

import codecs
import time
from typing import Generator, Iterator

from engine.inference.backend import Backend
from engine.inference.events import Chunk, GenerateParams, GenerationStats, ReasoningChunk, StopFlag
from engine.inference.reasoning import ReasoningFormat, Splitter
from engine.inference.repetition import RepetitionGuard
from engine.inference.structured import response_grammar
from engine.inference.tokens import Drafting, TokenSource
from engine.inference.tool_calls import CallSplitter, call_grammar

# With no budget asked for, thinking may take the answer's max_tokens but this share of it, so
# that an answer always has room after the thinking.
ANSWER_SHARE = 4  # a quarter
MIN_ANSWER_ROOM = 32


def _stop_hold(text: str, stops: tuple[str, ...]) -> int:
    """How many trailing chars of `text` could be the start of a stop string (held back)."""
    hold = 0
    for s in stops:
        for k in range(min(len(s) - 1, len(text)), hold, -1):
            if text.endswith(s[:k]):
                hold = k
                break
    return hold


class _Thinking:
    """A reasoning model's block as it is sampled: its ids, text, loop guard and budget."""

    def __init__(self, fmt: ReasoningFormat, inside: bool, budget: int):
        self.fmt = fmt
        self.splitter = Splitter(fmt, inside)
        self.budget = budget
        self.ids: list[int] = []
        self.logprobs: list[float] = []
        self.text = ""
        self.guard = RepetitionGuard()
        self.looped = False
        self.closed: str | None = None  # why the engine closed the block
        self.t_end: float | None = None

    def over(self) -> bool:
        """The block is open and has had its tokens (or loops): the engine closes it now."""
        return self.splitter.state == "reasoning" and (self.looped or len(self.ids) >= self.budget)


class Answer:
    def __init__(self, backend: Backend, params: GenerateParams, reasoning: ReasoningFormat | None = None,
                 inside: bool = False, drafting: Drafting = Drafting()):
        self.backend, self.params = backend, params
        self.max_tokens = params.max_tokens
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.ids: list[int] = []
        self.logprobs: list[float] = []
        self.ends: list[int] = []  # text length after each token, to cut ids at a stop string or a loop
        self.text, self.emitted = "", 0
        self.finish = "length"
        # A constrained answer is never cut: a cut JSON would not parse (the grammar bounds it anyway).
        self.guard = RepetitionGuard() if params.repetition_guard and not params.response_format else None
        self.dropped = 0
        self.t_first: float | None = None
        self.t_last: float | None = None
        self.n_sampled = 0
        self.think: _Thinking | None = None
        if reasoning is not None:
            room = max(MIN_ANSWER_ROOM, self.max_tokens // ANSWER_SHARE)
            budget = max(0, self.max_tokens - room)
            if params.reasoning_budget is not None:
                budget = min(budget, params.reasoning_budget)
            self.think = _Thinking(reasoning, inside, budget if params.think else 0)
        # Tool calls: split out of the text as it streams; a grammar holds each call to the tools
        # once its opening marker is written (from the first token when a call is required).
        self.use = params.tools if params.tools is not None and params.tools.offered() else None
        self.calls = CallSplitter(self.use.offered()) if self.use else None
        self.source: TokenSource | None = None
        self.constrained = False
        self.drafting = drafting

    @property
    def tool_calls(self) -> list:
        return self.calls.calls if self.calls is not None else []

    @property
    def reasoning_ids(self) -> list[int]:
        return self.think.ids if self.think else []

    @property
    def reasoning(self) -> str:
        return self.think.text.strip() if self.think else ""

    def stream(self, prompt: list[int], cancel: StopFlag | None) -> Iterator[Chunk | ReasoningChunk]:
        """Take tokens from the source until the answer ends; yield the text as it may be shown."""
        backend = self.backend
        grammar = response_grammar(self.params.response_format)
        if self.use is not None and self.use.forced:
            grammar, self.constrained = call_grammar(self.use, with_open=True), True
        sampler = (backend.make_sampler(self.params.sampling, grammar=grammar) if grammar
                   else backend.make_sampler(self.params.sampling))
        self.source = source = TokenSource(backend, sampler, prompt, drafting=self.drafting)
        max_tokens = min(self.max_tokens, backend.n_ctx - len(prompt))
        try:
            while (taken := len(self.ids) + len(self.reasoning_ids)) < max_tokens:
                if cancel is not None and cancel.is_set():
                    self.finish = "cancelled"
                    break
                if self.think is not None and self.think.over():
                    yield from self._close_block(source)
                    continue
                step = source.next(max_tokens - taken)
                self.t_last = time.perf_counter()
                self.n_sampled += 1
                if self.t_first is None:
                    self.t_first = self.t_last
                if backend.is_eog(step.token):
                    self.finish = "stop"
                    break
                if (yield from self._add(step.token, step.logprob)):
                    break
            else:
                if len(self.ids) + len(self.reasoning_ids) >= backend.n_ctx - len(prompt):
                    self.finish = "context_full"
        finally:
            source.finish()
        yield from self._flush()
        if self.tool_calls and self.finish in ("stop", "length", "context_full"):
            self.finish = "tool_calls"

    def _close_block(self, source: TokenSource) -> Iterator[ReasoningChunk | Chunk]:
        """End the thinking where it is (its budget is spent, or it loops): the closing tag goes in
        as if sampled, evaluated with the next token, and the answer starts after it."""
        think = self.think
        think.closed = "loop" if think.looped else "budget"
        closing_text = think.fmt.closing_text()
        closing = self.backend.tokenize_control(closing_text)
        source.put(closing)
        think.ids.extend(closing)
        text = self.decoder.decode(b"", final=True) + closing_text
        self.decoder.reset()
        reasoning, answer = think.splitter.feed(text)
        think.text += reasoning
        if reasoning:
            yield ReasoningChunk(reasoning, -1, 0.0)
        if answer:  # none: the closing text ends with the gap before the answer
            self.text += answer
        think.t_end = time.perf_counter()

    def _flush(self) -> Iterator[Chunk | ReasoningChunk]:
        if self.finish in ("stop_string", "repetition"):  # the cut text needs no pending bytes
            return
        tail = self.decoder.decode(b"", final=True)
        if self.think is not None:
            reasoning, answer = self.think.splitter.feed(tail)
            more_r, more_a = self.think.splitter.flush()
            reasoning, tail = reasoning + more_r, answer + more_a
            self.think.text += reasoning
            if reasoning:
                yield ReasoningChunk(reasoning, -1, 0.0)
        if self.calls is not None:  # held text shown; a call cut short parsed as it stands
            tail = self.calls.feed(tail) + self.calls.flush()
        self.text += tail
        if len(self.text) > self.emitted:  # held-back text; token -1 marks a flush, not a token
            yield Chunk(self.text[self.emitted:], -1, 0.0)

    def _add(self, token: int, logprob: float) -> Generator[Chunk | ReasoningChunk, None, bool]:
        """Take one sampled token; yield what of the text may be shown now. True: the answer ends."""
        piece = self.decoder.decode(self.backend.token_bytes(token))
        think = self.think
        if think is None or think.splitter.state == "answer":
            if self.calls is not None:
                return (yield from self._add_tools(token, logprob, piece))
            return (yield from self._add_answer(token, logprob, piece))
        opened = think.splitter.state != "start"
        reasoning, answer = think.splitter.feed(piece)
        think.text += reasoning
        if think.splitter.state != "answer":  # a thinking token (its tags and the gap after count too)
            think.ids.append(token)
            think.logprobs.append(logprob)
            think.looped = think.guard.feed(token, reasoning) is not None
            if reasoning:
                yield ReasoningChunk(reasoning, token, logprob)
            return False
        if reasoning:
            yield ReasoningChunk(reasoning, -1, 0.0)
        if not opened:  # no block after all: the whitespace tokens before the text are the answer's
            self.ids.extend(think.ids)
            self.logprobs.extend(think.logprobs)
            self.ends.extend([0] * len(think.ids))
            think.ids.clear(), think.logprobs.clear()
        elif think.t_end is None:
            think.t_end = time.perf_counter()
        return (yield from self._add_answer(token, logprob, answer))

    def _add_tools(self, token: int, logprob: float, piece: str) -> Generator[Chunk, None, bool]:
        """An answer token where tools may be called: the call's text is held back, never shown;
        the grammar starts once its opening marker is complete and ends with its closing one."""
        calls = self.calls
        was, done = calls.state, len(calls.calls) + len(calls.errors)
        shown = calls.feed(piece)
        if was == "text" and calls.state == "call" and not self.constrained:
            past = calls.body + calls.held  # text past the marker, within this token
            written = self.backend.tokenize(past, special=False) if past else []
            self.constrained = self.source.constrain(call_grammar(self.use), written)
        ended = len(calls.calls) + len(calls.errors) > done
        if ended and self.constrained:
            self.source.constrain(None)
            self.constrained = False
        inside = calls.state == "call" or ended
        stop = yield from self._add_answer(token, logprob, shown, guard=not inside)
        if ended and calls.calls and not self.use.parallel:
            self.finish = "tool_calls"
            return True
        return stop

    def _add_answer(self, token: int, logprob: float, piece: str, guard: bool = True) -> Generator[Chunk, None, bool]:
        self.ids.append(token)
        self.logprobs.append(logprob)
        self.text += piece
        self.ends.append(len(self.text))
        stops = self.params.stop
        if stops:
            hit = min((i for i in (self.text.find(s, max(0, self.emitted - len(s))) for s in stops) if i >= 0),
                      default=-1)
            if hit >= 0:
                # Keep the tokens wholly before the stop string; the model never sees the rest.
                self._cut(sum(1 for e in self.ends if e <= hit), hit, "stop_string")
                yield Chunk(self.text[self.emitted:], token, logprob)
                self.emitted = len(self.text)
                return True
            safe = len(self.text) - _stop_hold(self.text, stops)
        else:
            safe = len(self.text)
        keep = self.guard.feed(token, piece) if self.guard is not None and guard else None
        if keep is not None:
            # A loop: keep its first occurrence. Repeats already streamed stay on screen until
            # the TurnResult (trimmed) replaces the streamed text; held-back text up to the cut
            # still goes out, as a flush (token -1).
            self.dropped = len(self.ids) - keep
            cut = self.ends[keep - 1] if keep else 0
            self._cut(keep, cut, "repetition")
            if cut > self.emitted:
                yield Chunk(self.text[self.emitted:], -1, 0.0)
            self.emitted = max(self.emitted, cut)
            return True
        yield Chunk(self.text[self.emitted:safe], token, logprob)
        self.emitted = max(self.emitted, safe)
        return False

    def _cut(self, keep: int, at: int, finish: str) -> None:
        del self.ids[keep:], self.logprobs[keep:], self.ends[keep:]
        self.text, self.finish = self.text[:at], finish

    def stats(self, prompt: list[int], cached: int, mode: str, t0: float, t_prompt: float) -> GenerationStats:
        t_end = time.perf_counter()
        n_eval = len(prompt) - cached
        t_first, t_last = self.t_first, self.t_last
        decode_s = (t_last - t_first) if (t_first is not None and t_last is not None) else 0.0
        think = self.think
        thinking_ms = 0.0
        if think is not None and think.ids and t_first is not None:
            thinking_ms = round(((think.t_end or t_last or t_end) - t_first) * 1000, 2)
        return GenerationStats(
            prompt_tokens=len(prompt),
            prompt_tokens_evaluated=n_eval,
            prompt_tokens_cached=cached,
            completion_tokens=len(self.ids) + len(self.reasoning_ids),
            ttft_ms=round(((t_first or t_end) - t0) * 1000, 2),
            prompt_tps=round(n_eval / (t_prompt - t0), 1) if t_prompt > t0 else 0.0,
            # Tokens after the first, over the time after the first: the steady decode rate.
            decode_tps=round((self.n_sampled - 1) / decode_s, 1) if decode_s > 0 else 0.0,
            finish_reason=self.finish,
            cache_mode=mode,
            prompt_ms=round((t_prompt - t0) * 1000, 2),
            decode_ms=round(decode_s * 1000, 2),
            dropped_tokens=self.dropped,
            reasoning_tokens=len(self.reasoning_ids),
            reasoning_ms=thinking_ms,
            reasoning_closed=think.closed if think else None,
            draft_tokens=self.source.drafted if self.source else 0,
            draft_accepted=self.source.accepted if self.source else 0,
            speculation=self.source.speculation if self.source else None,
            speculation_note=self.source.why if self.source else "",
        )
