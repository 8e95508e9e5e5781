"""Store: the answer streams into SQLite as it is written (a crash keeps what was shown), and ends
with its measured `TurnStats` (engine/chat/finish.py) in the stored row and the `TurnDone`."""

from __future__ import annotations

import time

from engine.chat.finish import Finish
from engine.chat.pipeline import Events, Rest, TurnEvent, relay
from engine.chat.session import Message
from engine.chat.target import token_owner
from engine.chat.turn import Turn
from engine.inference.events import Chunk, ReasoningChunk
from engine.inference.remote import RemoteError
from engine.storage import Database


class Store:
    name = "store"

    def __init__(self, *, db: Database, finish: Finish):
        self.db, self.finish = db, finish

    def __call__(self, turn: Turn, rest: Rest) -> Events:
        answer = Message("assistant", "", {}, None, turn.target.level)
        written = _Written()
        finished = False

        def take(item: TurnEvent) -> TurnEvent:
            self._open(turn, answer)  # first output: the tier is answering, make the row
            written.add(item)
            if time.monotonic() - written.flushed >= turn.request.flush_s:
                self._save(turn, answer, written)
            return item

        try:
            done = yield from relay(rest(turn), take)
            if done is None:
                return None
            self._open(turn, answer)
            finished = True
            return self.finish(turn, answer, done)
        except RemoteError as exc:
            exc.partial = answer.id is not None
            raise
        finally:
            if answer.id is not None and not finished:
                # Consumer stopped early or an error: keep what was shown, and let the conversation
                # mirror what was sampled so the next turn's tokens extend the KV cache exactly.
                self._save(turn, answer, written, status="done", stats={"finish_reason": "interrupted"})

    def _open(self, turn: Turn, answer: Message) -> None:
        if answer.id is not None:
            return
        conv, target, old = turn.conv, turn.target, turn.supersedes
        if old is not None:
            conv.messages = [m for m in conv.messages if m.id != old.message_id]
        answer.id = self.db.add_message(conv.id, "assistant", "", model=target.model_id, level=target.level,
                                        token_ids=[] if token_owner(target) is not None else None,
                                        token_model=target.identity,
                                        status="streaming", parent_id=conv.messages[-1].id if conv.messages else None)
        if old is not None and old.message_id is not None:  # answered again: the turns after the old answer leave with it
            later = turn.request.replaces if not turn.commit_user else ()
            self.db.supersede((old.message_id, *later), answer.id)
        conv.messages.append(answer)

    def _save(self, turn: Turn, answer: Message, written: _Written, status: str | None = None,
              stats: dict[str, object] | None = None) -> None:
        assert answer.id is not None
        owner = token_owner(turn.target)
        answer.content = "".join(written.parts)
        if owner is not None:
            answer.ids = {owner: list(written.ids)}
        if written.thought:
            # Its ids are not kept while it streams (the tags' tokens show no text): a turn after an
            # interrupted one re-evaluates from the thinking's start.
            answer.reasoning = "".join(written.thought).strip()
        self.db.update_message(answer.id, content=answer.content, token_ids=written.ids if owner is not None else None,
                               reasoning=answer.reasoning, status=status, stats=stats)
        written.flushed = time.monotonic()


class _Written:
    """What the answer has streamed so far. Per token it only appends: on a laptop every cycle
    spent here is taken from the decode."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.ids: list[int] = []
        self.thought: list[str] = []  # a reasoning model's thinking
        self.flushed = time.monotonic()

    def add(self, item: TurnEvent) -> None:
        if isinstance(item, ReasoningChunk):
            self.thought.append(item.text)
        elif isinstance(item, Chunk):
            self.parts.append(item.text)
            if item.token >= 0:
                self.ids.append(item.token)
