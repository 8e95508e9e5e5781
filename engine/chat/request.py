"""`TurnRequest`: what a front-end asks of one turn, typed and keyword-only."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, replace

from engine.chat.image_store import DIGEST
from engine.chat.targets import InputError
from engine.inference.events import GenerateParams
from engine.inference.structured import SchemaUnsupported, response_grammar
from engine.inference.templates import HISTORY_RULES
from engine.kv.snapshot import WINDOW_DOMAIN
from engine.storage import MAX_MESSAGE_CHARS, clean_text
from engine.tools.runner import TurnTools

# What to do with a message too long for the context (MessageTooLong): refuse it, keep its head
# and tail (the middle cut, a marker says how much), or have the L1 model summarise it in parts.
# The stored message keeps every word typed; the shortened text is what the models read.
OVERFLOW = ("refuse", "head_tail", "summarise")
ROUTES = ("auto", "L1", "L2", "L3")


@dataclass(frozen=True, kw_only=True)
class TurnRequest:
    """Args:
        kind: "send" (a new user message; an edit is a send that `replaces` the old turn),
            "regenerate" (answer a user message again) or "tool_results" (the results of
            the last answer's tool calls, `AssistantCore.send_tool_results`: the model goes on).
        route: "auto" or a level that answers this message.
        flush_s: how often the streaming answer is written to SQLite.
        replaces: the messages that leave the chat's path once the turn stores its first message
            (an edit's old turn, the turns after an answer given again or a branch's answer); they
            stay as a branch (engine/chat/branches.py).
        overflow: a message too long for the context: "refuse" (MessageTooLong), "head_tail" or
            "summarise" (see OVERFLOW; stats.context["overflow"] says what was done).
        docs: answer from the user's documents: True (every collection), a collection name, False
            (not this message); None: the conversation's "Use my documents". Excerpts go inside the
            new user turn; `done.sources` lists what [n] cites.
        cascade: False never re-asks a weak L1 answer on L2 (a front-end that cannot take back text
            it has already passed on, e.g. an HTTP stream).
        memory: False keeps the turn out of the memory both ways: nothing recalled or pinned into
            it, no "remember that", not indexed, no background summary (a stateless API client's
            turns: the answer depends on the messages sent, and nothing is kept).
        read_ahead: once the answer is out, the model evaluates the markers that open the next user
            turn (~6 tokens), before anyone asks (engine/chat/targets.py `_read_ahead`).
        domain: the turn's trust domain: another conversation's KV state serves it only within its
            own (an API client's turns get theirs; engine/kv/tiers.py `prepare`).
        response_format: OpenAI's `json_object` or `json_schema` (engine/inference/structured.py):
            the answer is JSON that parses and fits the schema; a reasoning model answers at once.
        tools: tools the engine runs itself (`TurnTools`): each call the answer makes is approved,
            run, and its result answered, until the model answers in words; every entry point
            (send, edit, branch, regenerate, tool results) runs them (engine/chat/stages/tools.py).
            `params.tools` is the other kind: tools offered to a model whose calls the caller runs
            (an API client's).
    """

    kind: str = "send"
    conversation_id: int
    text: str = ""
    params: GenerateParams = GenerateParams()
    cancel: threading.Event | None = None
    route: str = "auto"
    flush_s: float = 1.0
    replaces: tuple[int, ...] = ()
    overflow: str = "refuse"
    docs: bool | str | None = None
    cascade: bool = True
    memory: bool = True
    read_ahead: bool = False
    domain: str = WINDOW_DOMAIN
    response_format: dict[str, object] | None = None
    tools: TurnTools | None = None
    # [{"digest", "at"}]: images kept by Assistant.add_image, each with its offset in `text`
    images: tuple[dict[str, str | int], ...] = ()

    def checked(self) -> "TurnRequest":
        """The request with its text cleaned, or InputError for what cannot be sent."""
        if self.overflow not in OVERFLOW:
            raise InputError(f"overflow must be one of {', '.join(OVERFLOW)}, not {self.overflow!r}")
        if self.params.reasoning_history not in HISTORY_RULES:
            raise InputError(f"reasoning_history must be one of {', '.join(HISTORY_RULES)}, "
                             f"not {self.params.reasoning_history!r}")
        if self.params.reasoning_budget is not None and self.params.reasoning_budget < 0:
            raise InputError("reasoning_budget must be 0 or more tokens")
        request = self
        fmt = self.response_format if self.response_format is not None else self.params.response_format
        if fmt is not None:
            try:
                response_grammar(fmt)  # a feature it cannot enforce: said now, by name
            except SchemaUnsupported as exc:
                raise InputError(str(exc)) from exc
            if self.params.tools is not None or self.tools is not None:
                raise InputError("response_format and tools cannot be combined: a call is JSON of its own")
            # Thinking is free text: a constrained answer starts at once.
            request = replace(self, params=replace(self.params, response_format=fmt, think=False))
        if self.tools is not None and self.params.tools is not None:
            raise InputError("a turn's tools are either run by the engine or by its caller, not both")
        if self.kind in ("regenerate", "tool_results"):
            return request
        text = clean_text(self.text).strip()
        if not text and not self.images:
            raise InputError("empty message")
        if len(text) > MAX_MESSAGE_CHARS:
            raise InputError(f"message too long ({len(text)} characters; at most {MAX_MESSAGE_CHARS})")
        return replace(request, text=text, images=checked_images(self.images, len(text)))


MAX_IMAGES = 16  # per message: each is hundreds of tokens to a vision model


def checked_images(images: Sequence[str | dict[str, str | int]], n_chars: int) -> tuple[dict[str, str | int], ...]:
    """[{"digest", "at"}] (a bare digest: at the start), in text order, offsets within the text."""
    if len(images) > MAX_IMAGES:
        raise InputError(f"{len(images)} images in one message; at most {MAX_IMAGES}")
    out: list[tuple[int, str]] = []
    for image in images:
        digest, at = (image, 0) if isinstance(image, str) else (image.get("digest"), image.get("at", 0))
        if not isinstance(digest, str) or not DIGEST.fullmatch(digest):
            raise InputError("an image must be added first (Assistant.add_image) and sent by its digest")
        if not isinstance(at, int) or isinstance(at, bool) or at < 0:
            raise InputError("an image's place in the text must be a character offset of 0 or more")
        out.append((min(at, n_chars), digest))
    return tuple({"digest": digest, "at": at} for at, digest in sorted(out, key=lambda pair: pair[0]))
