"""Store: the answer streams into SQLite as it is written (a crash keeps what was shown), and ends
with its measured `TurnStats` (engine/chat/finish.py) in the stored row and the `TurnDone`."""

from __future__ import annotations

import time

from engine.chat.finish import Finish
from engine.chat.pipeline import Rest
from engine.chat.session import Message
from engine.chat.turn import Turn
from engine.inference.generate import ReasoningChunk
from engine.inference.remote import RemoteError
from engine.storage import Database


class Store:
    name = "store"

    def __init__(self, *, db: Database, finish: Finish):
        self.db, self.finish = db, finish

    def __call__(self, turn: Turn, rest: Rest):
        answer = Message("assistant", "", {}, None, turn.target.level)
        parts: list[str] = []
        ids: list[int] = []
        thought: list[str] = []  # a reasoning model's thinking
        finished = False
        last_flush = time.monotonic()
        stream = rest(turn)
        try:
            while True:
                try:
                    item = next(stream)
                except StopIteration as end:
                    result = end.value
                    break
                self._open(turn, answer)  # first output: the tier is answering, make the row
                # Per token only appends: on a laptop every cycle spent here is taken from the decode.
                if isinstance(item, ReasoningChunk):
                    thought.append(item.text)
                else:
                    parts.append(item.text)
                    if item.token >= 0:
                        ids.append(item.token)
                if time.monotonic() - last_flush >= turn.request.flush_s:
                    self._save(turn, answer, parts, ids, thought)
                    last_flush = time.monotonic()
                yield item
            if result is None:
                return None
            self._open(turn, answer)
            finished = True
            return self.finish(turn, answer, result)
        except RemoteError as exc:
            exc.partial = answer.id is not None
            raise
        finally:
            stream.close()
            if answer.id is not None and not finished:
                # Consumer stopped early or an error: keep what was shown, and let the conversation
                # mirror what was sampled so the next turn's tokens extend the KV cache exactly.
                self._save(turn, answer, parts, ids, thought, status="done", stats={"finish_reason": "interrupted"})

    def _open(self, turn: Turn, answer: Message) -> None:
        if answer.id is not None:
            return
        conv, target, old = turn.conv, turn.target, turn.supersedes
        if old is not None:
            conv.messages = [m for m in conv.messages if m.id != old.message_id]
        answer.id = self.db.add_message(conv.id, "assistant", "", model=target.model_id, level=target.level,
                                        token_ids=[] if target.identity else None, token_model=target.identity,
                                        status="streaming", parent_id=conv.messages[-1].id if conv.messages else None)
        if old is not None:  # answered again: the turns after the old answer leave with it
            later = turn.request.replaces if not turn.commit_user else ()
            self.db.supersede((old.message_id, *later), answer.id)
        conv.messages.append(answer)

    def _save(self, turn: Turn, answer: Message, parts: list[str], ids: list[int], thought: list[str],
              **final) -> None:
        identity = turn.target.identity
        answer.content = "".join(parts)
        if identity:
            answer.ids = {identity: list(ids)}
        if thought:
            # Its ids are not kept while it streams (the tags' tokens show no text): a turn after an
            # interrupted one re-evaluates from the thinking's start.
            answer.reasoning = "".join(thought).strip()
        self.db.update_message(answer.id, content=answer.content, token_ids=ids if identity else None,
                               reasoning=answer.reasoning, **final)

