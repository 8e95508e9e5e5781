"""The one API the CLI and the app use: conversations, turns, persistence.

A turn: validate → commit the user message → stream the answer, writing it to SQLite at
least every `flush_s` seconds → finalise with measured stats.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Iterator

from engine.backend import Backend, ContextFull, LoadParams
from engine.catalog import Catalog, resolve_model
from engine.generate import Chunk, GenerateParams, TurnResult, generate
from engine.session import Message, Session, template_for
from engine.storage import Database

log = logging.getLogger(__name__)

MAX_MESSAGE_CHARS = 200_000  # refuse before tokenizing anything larger


class InputError(ValueError):
    """The user's message cannot be sent as it is (empty, too long, no room left)."""


class ConversationNotFound(LookupError):
    pass


@dataclass
class TurnDone:
    conversation_id: int
    message_id: int
    model: str
    text: str
    token_ids: list[int]
    logprobs: list[float] = field(default_factory=list)
    stats: dict = field(default_factory=dict)


def clean_text(text: str) -> str:
    """Text that SQLite and the tokenizer accept: lone surrogates replaced, NULs dropped."""
    return text.encode("utf-8", errors="replace").decode("utf-8").replace("\x00", "")


class Assistant:
    """Chat over one loaded model with SQLite persistence.

    Args:
        db: the database.
        model: catalog id or .gguf path (None = the default demo model).
        load: llama.cpp load parameters.

    Raises:
        ModelNotFound, ModelLoadError: with messages meant for the user.
    """

    def __init__(self, db: Database, model: str | None = None, load: LoadParams = LoadParams(),
                 debug: bool = False, catalog: Catalog | None = None):
        self.db = db
        self.model = resolve_model(model, catalog)
        self.backend = Backend(self.model.path, load, debug=debug)
        hint = self.model.entry.chat_template if self.model.entry else "gguf"
        self.template = template_for(self.backend, hint)
        self._sessions: dict[int, Session] = {}

    @property
    def model_id(self) -> str:
        return self.model.id

    def close(self) -> None:
        self.backend.close()

    # ---- conversations
    def new_conversation(self, system_prompt: str = "") -> int:
        return self.db.create_conversation(model=self.model_id, system_prompt=clean_text(system_prompt).strip())

    def session(self, conversation_id: int) -> Session:
        """The conversation's token session, rebuilt from SQLite on first use."""
        session = self._sessions.get(conversation_id)
        if session is None:
            conv = self.db.conversation(conversation_id)
            if conv is None:
                raise ConversationNotFound(f"no conversation with id {conversation_id}")
            messages = [Message("system", conv["system_prompt"])] if conv["system_prompt"] else []
            for row in self.db.messages(conversation_id):
                # Stored ids are only valid for the model that produced them; otherwise re-tokenize.
                ids = row["token_ids"] if row["token_model"] == self.backend.identity else None
                messages.append(Message(row["role"], row["content"], ids, row["id"]))
            session = self._sessions[conversation_id] = Session(self.backend, self.template, messages)
        return session

    # ---- turns
    def send(self, conversation_id: int, text: str, params: GenerateParams = GenerateParams(),
             cancel: threading.Event | None = None, flush_s: float = 1.0) -> Iterator[Chunk | TurnDone]:
        """Send a user message and stream the answer: `Chunk`s, then one `TurnDone`.

        Raises:
            InputError: empty or oversized message, or no room left in the context.
            ConversationNotFound: unknown id.
        """
        session = self.session(conversation_id)
        text = clean_text(text).strip()
        if not text:
            raise InputError("empty message")
        n_ctx = self.backend.n_ctx
        if len(text) > MAX_MESSAGE_CHARS:
            raise InputError(f"message too long ({len(text)} characters; at most {MAX_MESSAGE_CHARS})")
        user = Message("user", text)
        n_user = len(session.content_ids(user))
        if n_user > n_ctx // 2:
            raise InputError(f"message too long for this model: {n_user} tokens, the context holds {n_ctx}")
        prompt = session.prompt(user)
        if len(prompt) + 1 >= n_ctx:
            raise InputError(f"this conversation is full ({len(prompt)} of {n_ctx} tokens); start a new one")
        user.id = self.db.add_message(conversation_id, "user", text, model=self.model_id,
                                      token_ids=user.token_ids, token_model=self.backend.identity)
        session.messages.append(user)
        answer = Message("assistant", "", [])
        answer.id = self.db.add_message(conversation_id, "assistant", "", model=self.model_id, token_ids=[],
                                        token_model=self.backend.identity, status="streaming")
        session.messages.append(answer)
        yield from self._stream(conversation_id, session, answer, prompt, params, cancel, flush_s)

    def _stream(self, conversation_id: int, session: Session, answer: Message, prompt: list[int],
                params: GenerateParams, cancel: threading.Event | None, flush_s: float) -> Iterator[Chunk | TurnDone]:
        parts: list[str] = []
        ids: list[int] = []
        finished = False
        last_flush = time.monotonic()
        try:
            for item in generate(self.backend, prompt, params, cancel):
                if isinstance(item, TurnResult):
                    answer.content, answer.token_ids = item.text, item.token_ids
                    stats = item.stats.as_dict()
                    self.db.update_message(answer.id, content=item.text, token_ids=item.token_ids,
                                           logprobs=item.logprobs, status="done", stats=stats)
                    finished = True
                    yield TurnDone(conversation_id, answer.id, self.model_id, item.text, item.token_ids,
                                   item.logprobs, stats)
                    return
                parts.append(item.text)
                if item.token >= 0:
                    ids.append(item.token)
                # The session mirrors what was sampled, so an interrupted turn stays consistent.
                answer.content, answer.token_ids = "".join(parts), list(ids)
                if time.monotonic() - last_flush >= flush_s:
                    self.db.update_message(answer.id, content=answer.content, token_ids=ids)
                    last_flush = time.monotonic()
                yield item
        except ContextFull as exc:
            raise InputError(f"this conversation is full: {exc}; start a new one") from exc
        finally:
            if not finished:  # consumer stopped early or an error: keep what was shown
                self.db.update_message(answer.id, content=answer.content, token_ids=answer.token_ids,
                                       status="done", stats={"finish_reason": "interrupted"})
