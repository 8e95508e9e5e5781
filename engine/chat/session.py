"""A conversation as the exact token sequence one model sees.

Message contents keep their token ids (sampled ids for answers), so the sequence rebuilt from
storage in a new process is the one the KV cache held, token for token.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Callable

from engine.inference.backend import Backend
from engine.inference.errors import NoVision
from engine.inference.media import IMAGE_TOKENS_ESTIMATE, Pixels, span_ids
from engine.inference.reasoning import tag_tail
from engine.inference.templates import ChatTemplate, Thought
from engine.inference.tool_calls import (RESULT_CLOSE, RESULT_OPEN, Tool, ToolError, arguments_value, call_markup,
                                         native, prompt_block)
from engine.inference.vocab import VocabTokenizer


@dataclass
class Message:
    role: str  # "system" | "user" | "assistant" | "tool"
    content: str
    ids: dict[str, list[int]] = field(default_factory=dict)  # model identity -> content token ids
    id: int | None = None  # database id
    level: str | None = None  # tier that answered (assistant messages)
    # What the models read when it differs from `content`: a user turn with the memories
    # retrieved for it. The ids (and the KV cache) are of this text; the UI shows `content`.
    model_text: str | None = None
    # A reasoning model's answer: its thinking (no tags), and per model identity the ids sampled
    # before the answer's (the block, its tags and the gap after: the context held them).
    reasoning: str | None = None
    reasoning_ids: dict[str, list[int]] = field(default_factory=dict)
    # An answer's tool calls (OpenAI-shaped dicts; its ids hold their markup as sampled), and a
    # tool result's call ("tool" messages).
    tool_calls: list[dict] | None = None
    tool_call_id: str | None = None
    # Images sent with it, in order: [{"digest", "at"}], `at` the offset in `content` where each
    # stands (engine/chat/image_store.py). Its ids then hold each image tile as media ids.
    images: list[dict] | None = None

    @property
    def text_for_model(self) -> str:
        return self.content if self.model_text is None else self.model_text

    @property
    def stored_id(self) -> int:
        """The id of a message read from (or written to) the database."""
        if self.id is None:
            raise LookupError(f"a {self.role} message not stored yet has no id")
        return self.id


class Session:
    """Renders messages to token ids for one model and template.

    `backend` tokenizes: a model's `Backend` on that model's own thread, or its `VocabTokenizer`
    (`Worker.vocab`) on any thread; both give the same ids under the same identity."""

    def __init__(self, backend: Backend | VocabTokenizer, template: ChatTemplate,
                 messages: list[Message] | None = None, *, history: str = "template",
                 think: bool | None = None, tools: tuple[Tool, ...] = (),
                 pixels: Callable[[str], Pixels] | None = None):
        self.backend = backend
        self.pixels = pixels  # an image's pixels by digest (the image store), for a model with vision
        self.template = template
        self.messages: list[Message] = list(messages or [])
        # Tools the prompt shows: through the template's `tools` variable when it has one, else
        # in a block this engine appends to the system prompt (engine/inference/tool_calls.py).
        self.tools = tools
        self.native_tools = native(template.source)
        self.history = history  # earlier thinking: the template's rule, "keep" or "drop"
        # Asked of a template that reads `enable_thinking` (Qwen3); None: the template's default.
        self.think = think if template.reasoning is not None and template.reasoning.toggle else None
        self.generation_text = ""  # the control text the last prompt ended with

    def _render(self, messages: list[Message], add_generation_prompt: bool) -> list[str | int | Thought]:
        thoughts = [m.reasoning is not None for m in messages]
        extras = [self._extra(m) for m in messages]
        tools = None
        if self.tools and self.native_tools:
            tools = [t.as_openai() for t in self.tools]
            self._plain([t.parameters + t.description + t.name for t in self.tools], "a tool's definition")
        return self.template.render([m.role for m in messages], add_generation_prompt, thoughts=thoughts,
                                    history=self.history, extras=extras, enable_thinking=self.think,
                                    tools=tools).pieces

    def _extra(self, m: Message) -> dict | None:
        """What a native template reads beside a message's role and content: an answer's calls
        (unless its sampled ids, markup and all, go in its content slot), a result's call id."""
        if not self.native_tools:
            return None
        if m.tool_calls and not self._sampled(m):
            self._plain([c["function"]["name"] + c["function"]["arguments"] for c in m.tool_calls],
                        "a tool call")
            extra: dict[str, object] = {"tool_calls": [_template_call(c) for c in m.tool_calls]}
            if not m.text_for_model.strip():
                extra["content"] = ""  # calls alone: templates test `if message.content`
            return extra
        if m.role == "tool":
            return {"tool_call_id": m.tool_call_id or ""}
        return None

    def _sampled(self, m: Message) -> bool:
        return self.backend.identity in m.ids

    def _plain(self, texts: list[str], what: str) -> None:
        """Text the template puts in its control text (tokenized with special tokens parsed) must
        hold no special token's text: a tool definition or call naming `<|im_start|>system` would
        otherwise open a turn of its own."""
        for text in texts:
            if self.backend.tokenize_control(text) != self.backend.tokenize(text, special=False):
                raise ToolError(f"{what} holds the model's control tokens; refused")

    def content_ids(self, message: Message) -> list[int]:
        """The message's ids for this model: sampled/stored ones if it has them, else tokenized once.
        An answer with tool calls and no sampled ids is tokenized each time, never stored as if
        sampled (its markup is the template's, or this engine's, to write)."""
        ids = message.ids.get(self.backend.identity)
        if ids is None and message.images:
            return self._with_images(message)
        if ids is None:
            ids = self.backend.tokenize(message.text_for_model, special=False)
            if not message.tool_calls:
                message.ids[self.backend.identity] = ids
        return ids

    def _with_images(self, message: Message) -> list[int]:
        """A message with images: its text with the model's marker where each image stands,
        tokenized with the pixels by the model itself (on its thread), and kept. Counted anywhere
        else (the tokenizer of another thread) as its text and IMAGE_TOKENS_ESTIMATE per image."""
        images = message.images or []
        if isinstance(self.backend, VocabTokenizer):
            words = self.backend.tokenize(message.text_for_model, special=False)
            return words + _estimate_ids() * len(images)
        vision = self.backend.vision
        if vision is None:
            raise NoVision("this model cannot read images: choose one with vision for a chat with images")
        if self.pixels is None:
            raise NoVision("this chat's images are not available to the model")
        text = message.text_for_model
        if message.model_text is None:  # each image where it stands in what the user wrote
            for image in sorted(images, key=lambda i: i["at"], reverse=True):
                at = max(0, min(len(text), int(image["at"])))
                text = text[:at] + vision.marker + text[at:]
        else:  # the text the model reads was rewritten: the images go first
            text = vision.marker * len(images) + text
        ids = self.backend.tokenize_images(text, [self.pixels(i["digest"]) for i in images])
        message.ids[self.backend.identity] = ids
        return ids

    def _for_template(self, messages: list[Message]) -> list[Message]:
        """Without a native tool format, tools and calls become text: the tools' block ends the
        system prompt, an answer's calls (not sampled here) follow its words in the markers,
        and tool results become one user turn in <tool_response> tags."""
        if self.native_tools or not (self.tools or any(m.role == "tool" or m.tool_calls for m in messages)):
            return messages
        out: list[Message] = []
        if self.tools:
            block = prompt_block(self.tools)
            if messages and messages[0].role == "system":
                head, messages = messages[0], messages[1:]
                out.append(Message("system", f"{head.text_for_model}\n\n{block}" if head.text_for_model else block))
            else:
                out.append(Message("system", block))
        results: list[Message] = []  # tool results in a row: one user turn
        for m in messages:
            if m.role == "tool":
                results.append(m)
                continue
            if results:
                out.append(self._results_turn(results))
                results = []
            if m.tool_calls and not self._sampled(m):
                markup = "".join(call_markup(c) for c in m.tool_calls)
                out.append(Message("assistant", f"{m.text_for_model}{markup}".strip(), reasoning=m.reasoning,
                                   reasoning_ids=m.reasoning_ids))
            else:
                out.append(m)
        if results:
            out.append(self._results_turn(results))
        return out

    def _results_turn(self, results: list[Message]) -> Message:
        """Tool results as one user turn, each in its tags: ids made part by part (the opening tag
        apart from the result, as `next_prefix` reads it ahead)."""
        tok = lambda text: self.backend.tokenize(text, special=False)  # noqa: E731
        ids: list[int] = []
        for k, m in enumerate(results):
            ids += (tok("\n") if k else []) + tok(RESULT_OPEN) + tok(m.content) + tok(RESULT_CLOSE)
        text = "\n".join(f"{RESULT_OPEN}{m.content}{RESULT_CLOSE}" for m in results)
        return Message("user", text, {self.backend.identity: ids})

    def render(self, messages: list[Message], add_generation_prompt: bool) -> list[int]:
        """Token ids of `messages` under the template: control text parsed for special tokens,
        contents never."""
        messages = self._for_template(messages)
        pieces = self._render(messages, add_generation_prompt)
        if add_generation_prompt:
            self.generation_text = pieces[-1] if pieces and isinstance(pieces[-1], str) else ""
        return self._ids(pieces, messages)

    def next_prefix(self, role: str = "user") -> list[int]:
        """The ids a next message's content will follow: the messages, then the template's markers
        that open a user turn, or a tool result (what a turn can evaluate ahead, while the user
        reads or the tool runs)."""
        messages = self._for_template(self.messages + [Message(role, "", tool_call_id="")])
        pieces = self._render(messages, add_generation_prompt=True)
        n = len(messages) - 1
        ids = self._ids(pieces[:pieces.index(n)], messages[:-1])  # cut where its content goes
        if role == "tool" and not self.native_tools:
            ids += self.backend.tokenize(RESULT_OPEN, special=False)
        return ids

    def _ids(self, pieces: list[str | int | Thought], messages: list[Message]) -> list[int]:
        ids: list[int] = []
        pieces = list(pieces)
        k = 0
        while k < len(pieces):
            piece = pieces[k]
            if isinstance(piece, Thought):
                k += self._thought(piece, pieces, k, messages[piece.index], ids)
            elif isinstance(piece, int):
                ids.extend(self.content_ids(messages[piece]))
            else:
                ids.extend(self.backend.tokenize_control(piece))
            k += 1
        bos = self.backend.bos_id
        if self.backend.add_bos and bos >= 0 and (not ids or ids[0] != bos):
            ids.insert(0, bos)
        return ids

    def _thought(self, slot: Thought, pieces: list, k: int, message: Message, ids: list[int]) -> int:
        """An earlier answer's thinking the template kept, at `pieces[k]`: the ids the model sampled
        there (the context holds them), so that keeping it costs no evaluation. Returns how many
        pieces after `k` it covered (the tags between the thinking and the answer's slot)."""
        fmt = self.template.reasoning
        assert fmt is not None  # a slot for thinking: the template has a reasoning format
        sampled = message.reasoning_ids.get(self.backend.identity)
        if slot.whole:  # "keep": the thinking and the answer in one slot
            if sampled is None:  # another model's answer: its thinking in this model's tags
                sampled = (self.backend.tokenize_control(f"{fmt.open}\n") + self._tokens(message.reasoning or "")
                           + self.backend.tokenize_control(fmt.closing_text()))
            ids.extend(sampled)
            ids.extend(self.content_ids(message))
            return 0
        between = pieces[k + 1] if k + 1 < len(pieces) else None
        spliceable = (sampled is not None and isinstance(between, str) and between.strip() == fmt.close
                      and k + 2 < len(pieces) and pieces[k + 2] == slot.index)
        if not spliceable or sampled is None:  # rendered its own way: the text, as the template put it
            ids.extend(self._tokens(message.reasoning or ""))
            return 0
        lead = b"".join(self.backend.token_bytes(t) for t in sampled[:16]).decode("utf-8", "replace")
        if lead.lstrip().startswith(fmt.open):  # the sampled ids hold the opening tag: not twice
            del ids[len(ids) - tag_tail(self.backend.token_bytes, ids, fmt.open):]
        ids.extend(sampled)
        ids.extend(self.content_ids(message))
        return 2

    def _tokens(self, text: str) -> list[int]:
        return self.backend.tokenize(text, special=False)

    def prompt(self, new_user: Message | None = None) -> list[int]:
        """The full prompt for the next answer: history (+ the new user message) + assistant header."""
        history = self.messages + ([new_user] if new_user else [])
        return self.render(history, add_generation_prompt=True)


@functools.cache
def _estimate_ids() -> list[int]:
    """An image as counted before its model has tokenized it: IMAGE_TOKENS_ESTIMATE media ids that
    match no real image (made once: counting re-renders a chat many times)."""
    return span_ids("0" * 64, IMAGE_TOKENS_ESTIMATE)


def _template_call(call: dict) -> dict:
    """A stored call as templates read it: arguments as an object (Qwen's writes them with
    `tojson`), the OpenAI fields kept."""
    fn = call["function"]
    args = arguments_value(fn["arguments"])
    return {"id": call.get("id", ""), "type": "function", "function": {"name": fn["name"], "arguments": args},
            "name": fn["name"], "arguments": args}
