"""A chat as a tree of messages: each follows its parent, and a message answered again, or edited
and sent again, gets a sibling. The chat shows one path from its first message to a leaf; the
other messages wait off it (`superseded_by` set), each a branch the user can go back to.

The tree is read from the stored rows (`Database.messages`). Turns that start a branch (send
after an answer, answer again, edit) are engine/chat/core.py's, through `forked`; switching and
deleting are `Branches`'.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Callable, Iterator

from engine.chat.conversation import Conversation
from engine.chat.memory_recall import MemoryRecall
from engine.chat.summary_chain import SummaryChain
from engine.chat.targets import InputError
from engine.inference.errors import ModelLoadError
from engine.inference.generate import common_prefix
from engine.models.catalog import ModelNotFound
from engine.storage import Database


def children(rows: list[dict]) -> dict[int | None, list[int]]:
    """Each message's children in the order they were written (None: the chat's first messages)."""
    out: dict[int | None, list[int]] = defaultdict(list)
    for r in rows:  # rows come in id order, so each list does too
        out[r["parent_id"]].append(r["id"])
    return out


def path_to(rows: list[dict], leaf: int) -> list[int]:
    """The message ids from the chat's first message down to `leaf`."""
    parent = {r["id"]: r["parent_id"] for r in rows}
    path = []
    node: int | None = leaf
    while node is not None:
        path.append(node)
        node = parent[node]
    return path[::-1]


def newest_leaf(rows: list[dict], top: int) -> int:
    """The last message written under `top` (itself when nothing follows it): switching to a
    branch shows it as it was left, down to its newest message."""
    return max(subtree(rows, top))  # ids grow as messages are written


def subtree(rows: list[dict], top: int) -> list[int]:
    """`top` and every message under it."""
    kids = children(rows)
    out, stack = [], [top]
    while stack:
        node = stack.pop()
        out.append(node)
        stack.extend(kids.get(node, ()))
    return sorted(out)


def siblings(rows: list[dict]) -> dict[int, list[int]]:
    """For each message with siblings (answers given again, messages edited), every message at
    its place, oldest first: the ‹ 2 / 3 › a front-end shows."""
    out = {}
    for ids in children(rows).values():
        if len(ids) > 1:
            for i in ids:
                out[i] = ids
    return out


def on_path(conv: Conversation, message_id: int) -> int:
    """Where `message_id` is in the chat's path.

    Raises:
        InputError: it is not there (another branch's, or no such message).
    """
    at = next((i for i, m in enumerate(conv.messages) if m.id == message_id), None)
    if at is None:
        raise InputError(f"message {message_id} is not on the chat's current path")
    return at


def forked(conv: Conversation, at: int, run: Callable[[tuple[int, ...]], Iterator]) -> Iterator:
    """Run a turn on the path cut before `at`: the messages from there on leave it when the turn
    stores its first message (`run` gets their ids, for the stage that stores it to mark them);
    if it stores none (refused, failed before), they stand."""
    newest = max((m.id or 0 for m in conv.messages), default=0)  # a row stored now has a larger id
    old, conv.messages = conv.messages[at:], conv.messages[:at]
    try:
        yield from run(tuple(m.id for m in old if m.id is not None))
    except BaseException:
        if not any((m.id or 0) > newest for m in conv.messages):  # nothing was stored: they stand
            conv.messages[at:] = old
        raise


class Branches:
    """The operations that change a chat's path without a turn: switch to another branch, delete
    a turn. The conversation cache entry is dropped after each (rebuilt from the new path).

    Args:
        conversations: the engine's cache of loaded conversations.
        load: the conversation as the models see it (loaded into the cache).
        render: the L1 model's tokens for a conversation and the markers that open its next user
            turn (what a finished turn leaves in the KV state, `read_ahead`).
    """

    def __init__(self, *, db: Database, conversations: dict[int, Conversation],
                 load: Callable[[int], Conversation], memory: MemoryRecall, summaries: SummaryChain,
                 render: Callable[[Conversation], list[int]]):
        self.db, self._cache, self._load = db, conversations, load
        self.memory, self.summaries, self._render = memory, summaries, render

    def switch(self, conversation_id: int, message_id: int) -> dict:
        """Show the branch `message_id` is on, down to the newest message written under it. The
        KV state keeps what the two paths share: `tokens` says, for the L1 model, how many of the
        path's tokens the next turn reuses and how many it reads (None: no model loaded).

        Returns:
            {"path": the message ids shown, "shared": how many of them the path before began
            with too, "tokens": {"reused", "read"} or None}.

        Raises:
            InputError: no such message in the conversation.
        """
        before = self._load(conversation_id)
        rows = self.db.messages(conversation_id)
        if message_id not in {r["id"] for r in rows}:
            raise InputError(f"message {message_id} is not in conversation {conversation_id}")
        path = path_to(rows, newest_leaf(rows, message_id))
        self.db.set_path(conversation_id, path)
        self._cache.pop(conversation_id, None)
        after = self._load(conversation_id)
        shared = common_prefix([m.stored_id for m in before.messages], [m.stored_id for m in after.messages])
        for m in before.messages[shared:]:  # the memory follows the path
            self.memory.forget_message(m.stored_id)
        for m in after.messages[shared:]:
            if m.role == "user":
                self.memory.index(after, m)
        return {"path": path, "shared": shared, "tokens": self._reuse(before, after)}

    def delete_turn(self, conv: Conversation, at: int) -> list[int]:
        """Delete the turn the path's message `at` is part of (a user message, its answer and the
        answer's tool rounds); the turns after it follow the one before it. Its other branches go
        with it. Returns the ids deleted."""
        path = conv.messages
        start = max((i for i in range(at + 1) if path[i].role == "user"), default=at)
        end = next((i for i in range(at + 1, len(path)) if path[i].role == "user"), len(path))
        rows = self.db.messages(conv.id)
        before = path[start - 1].stored_id if start else None
        if end < len(path):  # the next turn follows the one before this
            self.db.reparent([path[end].stored_id], before)
            rows = [dict(r, parent_id=before) if r["id"] == path[end].id else r for r in rows]
        gone = subtree(rows, path[start].stored_id)
        self.db.delete_messages(conv.id, gone)
        for mid in gone:
            self.memory.forget_message(mid)
        kept = [m.stored_id for m in path[:start] + path[end:]]
        left = [r for r in rows if r["id"] not in set(gone)]
        if not kept and left:  # the chat's first turn went, and another first message waits
            kept = path_to(left, newest_leaf(left, left[0]["id"]))
        if kept:
            self.db.set_path(conv.id, kept)
        self._cache.pop(conv.id, None)
        self.summaries.forget(conv.id)  # the summaries from the turn on went with it
        return gone

    def _reuse(self, before: Conversation, after: Conversation) -> dict | None:
        try:
            old, new = self._render(before), self._render(after)
        except (ModelNotFound, ModelLoadError, AttributeError, KeyError):
            return None  # no local model loaded yet
        reused = common_prefix(old, new)
        return {"reused": reused, "read": len(new) - reused}
