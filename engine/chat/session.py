"""A conversation as the exact token sequence one model sees.

Message contents keep their token ids (sampled ids for answers), so the sequence rebuilt from
storage in a new process is the one the KV cache held, token for token.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.inference.backend import Backend, VocabTokenizer
from engine.inference.templates import ChatTemplate


@dataclass
class Message:
    role: str  # "system" | "user" | "assistant"
    content: str
    ids: dict[str, list[int]] = field(default_factory=dict)  # model identity -> content token ids
    id: int | None = None  # database id
    level: str | None = None  # tier that answered (assistant messages)
    # What the models read when it differs from `content`: a user turn with the memories
    # retrieved for it. The ids (and the KV cache) are of this text; the UI shows `content`.
    model_text: str | None = None

    @property
    def text_for_model(self) -> str:
        return self.content if self.model_text is None else self.model_text


class Session:
    """Renders messages to token ids for one model and template.

    `backend` tokenizes: a model's `Backend` on that model's own thread, or its `VocabTokenizer`
    (`Worker.vocab`) on any thread; both give the same ids under the same identity."""

    def __init__(self, backend: Backend | VocabTokenizer, template: ChatTemplate,
                 messages: list[Message] | None = None):
        self.backend = backend
        self.template = template
        self.messages: list[Message] = list(messages or [])

    def content_ids(self, message: Message) -> list[int]:
        """The message's ids for this model: sampled/stored ones if it has them, else tokenized once."""
        ids = message.ids.get(self.backend.identity)
        if ids is None:
            ids = message.ids[self.backend.identity] = self.backend.tokenize(message.text_for_model, special=False)
        return ids

    def render(self, messages: list[Message], add_generation_prompt: bool) -> list[int]:
        """Token ids of `messages` under the template: control text parsed for special tokens,
        contents never."""
        return self._ids(self.template.render([m.role for m in messages], add_generation_prompt).pieces, messages)

    def next_user_prefix(self) -> list[int]:
        """The ids a next user message's content will follow: the messages, then the template's
        markers that open a user turn (what a turn can evaluate ahead, while the user reads)."""
        roles = [m.role for m in self.messages]
        pieces = self.template.render(roles + ["user"], add_generation_prompt=True).pieces
        return self._ids(pieces[:pieces.index(len(roles))], self.messages)  # cut where its content goes

    def _ids(self, pieces: list[str | int], messages: list[Message]) -> list[int]:
        ids: list[int] = []
        for piece in pieces:
            if isinstance(piece, int):
                ids.extend(self.content_ids(messages[piece]))
            else:
                ids.extend(self.backend.tokenize_control(piece))
        bos = self.backend.bos_id
        if self.backend.add_bos and bos >= 0 and (not ids or ids[0] != bos):
            ids.insert(0, bos)
        return ids

    def prompt(self, new_user: Message | None = None) -> list[int]:
        """The full prompt for the next answer: history (+ the new user message) + assistant header."""
        history = self.messages + ([new_user] if new_user else [])
        return self.render(history, add_generation_prompt=True)
