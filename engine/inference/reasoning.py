"""Reasoning models: which models think in a `<think>` block, and the stream split into thinking and
answer as it is sampled.

Qwen3, QwQ and the DeepSeek-R1 distills write their reasoning between `<think>` and `</think>`
before the answer. R1's template opens the block in the generation prompt, so the model starts
inside it; Qwen3's template reads `enable_thinking` and, when it is false, puts an empty block in the
prompt. A model is a reasoning model when its template or its vocabulary knows the tags (the catalog's
`reasoning` field overrides either way).
"""

from __future__ import annotations

from dataclasses import dataclass

OPEN, CLOSE = "<think>", "</think>"


@dataclass(frozen=True)
class ReasoningFormat:
    """How a model marks its reasoning. `toggle`: its template reads `enable_thinking` (Qwen3);
    without it thinking cannot be asked off, only cut short (a budget of 0 closes the block at once).
    `reasoning_content`: its template reads a message's `reasoning_content` (else it parses the
    tags out of the content, as R1's does)."""

    open: str = OPEN
    close: str = CLOSE
    toggle: bool = False
    reasoning_content: bool = False

    def closing_text(self) -> str:
        """What ends a block the engine cuts short (a budget, a loop): the tag on its own line, then
        the blank line the models put before their answer."""
        return f"\n{self.close}\n\n"


def detect(template_source: str | None, single_token, override: bool | None = None) -> ReasoningFormat | None:
    """The model's reasoning format, or None for a model that does not think in tags.

    Args:
        template_source: the chat template the model is rendered with.
        single_token: text -> True when the vocabulary holds it as one token (Qwen3's and R1's do
            for both tags).
        override: the catalog's `reasoning` field (None: detect).
    """
    source = template_source or ""
    if override is False:
        return None
    knows = OPEN in source or CLOSE in source or (single_token(OPEN) and single_token(CLOSE))
    if not knows and not override:
        return None
    return ReasoningFormat(toggle="enable_thinking" in source, reasoning_content="reasoning_content" in source)


def opens_block(generation_prompt: str, fmt: ReasoningFormat) -> bool:
    """True when the prompt's last control text leaves a block open (R1: `<｜Assistant｜><think>\\n`):
    the model's first tokens are reasoning."""
    return generation_prompt.rfind(fmt.open) > generation_prompt.rfind(fmt.close)


def tag_tail(token_bytes, ids: list[int], tag: str) -> int:
    """How many of the last `ids` spell `tag` and the whitespace after it (0 if they do not):
    the ids of a block the prompt opened."""
    text = ""
    for n in range(1, min(len(ids), 32) + 1):
        text = token_bytes(ids[-n]).decode("utf-8", "replace") + text
        if text.rstrip() == tag:
            return n
        if len(text.strip()) > len(tag):
            break
    return 0


def _partial_suffix(text: str, tag: str) -> int:
    """How many trailing chars of `text` could begin `tag` (held back until the next token)."""
    for k in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:k]):
            return k
    return 0


class Splitter:
    """Splits sampled text into reasoning and answer, incrementally.

    States: "start" (no text yet: a block may open, after whitespace), "reasoning" (inside a
    block), "gap" (the block closed: whitespace before the answer is dropped), "answer". A tag split
    across tokens is held back until it is whole; a block never closed stays reasoning (cut at the
    limit); text that does not open with the tag is all answer.
    """

    def __init__(self, fmt: ReasoningFormat, inside: bool):
        self.fmt = fmt
        self.state = "reasoning" if inside else "start"
        self._held = ""
        self._fresh = inside  # at a block's start: leading newlines are dropped

    @property
    def thinking(self) -> bool:
        return self.state in ("start", "reasoning")

    def feed(self, text: str) -> tuple[str, str]:
        """(reasoning, answer) text that may be shown now."""
        buf = self._held + text
        self._held = ""
        reasoning, answer = "", ""
        while buf:
            if self.state == "start":
                stripped = buf.lstrip()
                if stripped.startswith(self.fmt.open):
                    buf = stripped[len(self.fmt.open):]
                    self.state, self._fresh = "reasoning", True
                elif not stripped or self.fmt.open.startswith(stripped):
                    self._held = buf
                    return reasoning, answer
                else:
                    self.state = "answer"
            elif self.state == "reasoning":
                if self._fresh:
                    buf = buf.lstrip("\n")
                    if not buf:
                        return reasoning, answer
                    self._fresh = False
                at = buf.find(self.fmt.close)
                if at >= 0:
                    reasoning += buf[:at]
                    buf = buf[at + len(self.fmt.close):]
                    self.state = "gap"
                else:
                    hold = _partial_suffix(buf, self.fmt.close)
                    reasoning += buf[:len(buf) - hold]
                    self._held = buf[len(buf) - hold:]
                    return reasoning, answer
            elif self.state == "gap":
                buf = buf.lstrip()
                if buf:
                    self.state = "answer"
            else:
                answer += buf
                buf = ""
        return reasoning, answer

    def flush(self) -> tuple[str, str]:
        """What is held back once the stream ends: an unfinished tag is text after all."""
        held, self._held = self._held, ""
        if self.state == "start":
            return "", held.lstrip()
        if self.state == "reasoning":
            return held, ""
        return "", held if self.state == "answer" else ""
