"""Stateless clients on a stateful engine: which engine conversation a resent history continues.

An OpenAI client sends its whole history every time. The engine keeps conversations (and their KV
state in the hot/warm/cold tiers). After answering, the server notes a digest of the history the
client will send back next time (its messages plus the answer) → that conversation. The next
request whose history, up to its new user message(s), has that digest continues the conversation
with only the new message: the engine then evaluates only the new tokens. Anything else (a first
request, an edited or forked history, a restarted server) starts a conversation holding the
earlier turns as given, whose first answer reads them all.

Everything here runs on the engine thread (engine/server/engine_thread.py): one turn at a time,
so the index needs no lock and a conversation is never continued by two requests at once. The
pending file is shared by every server on this data dir (the window's, `assistant serve`): each
writes only its own entry, under the file's lock (engine/config/locked_file.py).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
from collections import OrderedDict
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

import psutil

from engine.api import ConversationNotFound, StorageError, locked, user_dir, write_atomic

log = logging.getLogger(__name__)

INDEX_SIZE = 128  # conversations the server can continue; the least recently used leaves first
# Unstored API conversations alive, by the server that owns them (deleted after its crash).
PENDING_FILE = "server_conversations.json"
_owners = itertools.count()


def digest(messages: list[tuple[str, str]], domain: str = "", extras: tuple[str, ...] = (),
           media: tuple[tuple[tuple["ApiImage", int], ...], ...] = ()) -> str:
    """A history's identity: (role, content) in order, content without surrounding whitespace
    (clients trim answers differently), an answer's calls and a result's call id, a message's
    images (the sha256 of each one's bytes, and its place), within the client's trust domain: a
    client that resends another's exact history (a guess) starts a conversation of its own, never
    continues theirs."""
    extras = extras or ("",) * len(messages)
    media = media or ((),) * len(messages)
    rows = []
    for (role, content), extra, images in zip(messages, extras, media):
        row: list[object] = [role, content.strip()]
        if extra:
            row.append(extra)
        if images:  # a text-only history's digest is what it was
            row.append([[image.key, at] for image, at in images])
        rows.append(row)
    data = json.dumps([domain, *rows], ensure_ascii=False)
    return hashlib.sha256(data.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class ApiImage:
    """An image from a request's image_url part: its bytes, and their sha256 (`key`), which
    matches a resent history's image without decoding it again."""

    data: bytes
    key: str


def calls_key(calls: list[dict]) -> str:
    """An answer's tool calls as one canonical string (for the digest, and to rebuild them): each
    call's id, name and arguments with keys sorted (clients re-serialise arguments their own way)."""
    out = []
    for c in calls:
        args = c["function"]["arguments"]
        try:
            args = json.dumps(json.loads(args), sort_keys=True, ensure_ascii=False)
        except ValueError:
            pass
        out.append([c["id"], c["function"]["name"], args])
    return json.dumps(out, ensure_ascii=False)


def calls_from_key(key: str) -> list[dict]:
    return [{"id": cid, "type": "function", "function": {"name": name, "arguments": args}}
            for cid, name, args in json.loads(key)]


@dataclass(frozen=True)
class History:
    """A chat request's messages, split for the engine.

    Attributes:
        messages: every message as (role, text), system messages included ("developer" → "system").
        new_from: index where the trailing user message(s), or tool results, start: the new turn.
        extras: per message (or none at all): an answer's tool calls (`calls_key`), a tool result's
            call id, else "".
        media: per message (or none at all): its images, each with the offset in its text.
    """

    messages: tuple[tuple[str, str], ...]
    new_from: int
    extras: tuple[str, ...] = ()
    media: tuple[tuple[tuple[ApiImage, int], ...], ...] = ()

    def images(self, i: int) -> tuple[tuple[ApiImage, int], ...]:
        return self.media[i] if self.media else ()

    def extra(self, i: int) -> str:
        return self.extras[i] if self.extras else ""

    @property
    def tool_turn(self) -> bool:
        """The new turn is tool results (the model goes on from its calls), not a user message."""
        return self.new_from < len(self.messages) and self.messages[self.new_from][0] == "tool"

    @property
    def results(self) -> list[tuple[str, str]]:
        """A tool turn's (call id, output) in order."""
        return [(self.extra(i), text) for i, (_, text) in enumerate(self.messages) if i >= self.new_from]

    @property
    def system(self) -> str:
        return "\n\n".join(text for role, text in self.messages if role == "system" and text.strip())

    @property
    def earlier(self) -> list[tuple[str, str, dict | None]]:
        """The turns before the new message as (role, text, tool fields): consecutive messages of
        one role merged (templates expect user and assistant to alternate), except tool results
        and answers that called tools, which stay one message each."""
        merged: list[tuple[str, str, dict | None]] = []
        for i, (role, text) in enumerate(self.messages[:self.new_from]):
            extra = self.extra(i)
            if role == "system":
                continue
            fields = None
            if extra:
                fields = {"tool_calls": calls_from_key(extra)} if role == "assistant" else {"tool_call_id": extra}
            elif self.images(i):  # the engine thread keeps them and names them by digest (`open`)
                fields = {"api_images": list(self.images(i))}
            if merged and merged[-1][0] == role and role != "tool" and not fields and not merged[-1][2]:
                merged[-1] = (role, merged[-1][1] + "\n\n" + text, None)
            else:
                merged.append((role, text, fields))
        return merged

    @property
    def new_images(self) -> list[tuple[ApiImage, int]]:
        """The new user message's images, with their offsets in `text` (the messages joined)."""
        out, start = [], 0
        for i in range(self.new_from, len(self.messages)):
            out += [(image, start + at) for image, at in self.images(i)]
            start += len(self.messages[i][1]) + 2
        return out

    @property
    def text(self) -> str:
        """The new user message (several trailing user messages as one)."""
        return "\n\n".join(text for _, text in self.messages[self.new_from:])

    def prefix_digest(self, domain: str = "") -> str:
        return digest(list(self.messages[:self.new_from]), domain, self.extras[:self.new_from],
                      self.media[:self.new_from])

    def answered_digest(self, answer: str, domain: str = "", calls: list[dict] | None = None) -> str:
        extras = (*(self.extras or ("",) * len(self.messages)), calls_key(calls) if calls else "")
        media = (*self.media, ()) if self.media else ()
        return digest([*self.messages, ("assistant", answer)], domain, extras, media)


class ApiConversations:
    """Request histories → engine conversations (engine thread only).

    Args:
        store: keep API conversations in the chat list; False: each is deleted when it leaves the
            index, when its turn fails, at `close`, or at the next start after a crash.
        size: how many conversations the index keeps.
    """

    def __init__(self, store: bool, size: int = INDEX_SIZE, pending_file: Path | None = None):
        self.store, self.size = store, size
        self._index: OrderedDict[str, tuple[int, int]] = OrderedDict()  # digest -> (conversation, last message id)
        self._alive: set[int] = set()  # unstored conversations not deleted yet
        self._pending = pending_file or user_dir() / PENDING_FILE
        self._owner = _owner_id()  # this server's entry in the pending file
        self.reused = self.replayed = 0  # counts, for /health and tests

    @property
    def unstored(self) -> set[int]:
        """Conversations that will be deleted (store off): alive now, not for a chat list."""
        return self._alive if not self.store else set()

    def recover(self, assistant) -> int:
        """Delete unstored API conversations that crashed runs left behind; how many went. Those of
        servers still running (the window's and `assistant serve` share the file) stay."""
        try:
            with locked(self._pending):
                dead = {owner: ids for owner, ids in self._read().items() if not _running(owner)}
        except OSError:
            log.warning("could not read %s; no leftover API conversations deleted", self._pending, exc_info=True)
            return 0
        gone = sum(self._delete(assistant, cid) for ids in dead.values() for cid in ids if isinstance(cid, int))
        self._save(drop=dead)
        return gone

    def open(self, assistant, history: History, domain: str = "") -> int:
        """The conversation to send `history.text` on: the one the history continues in the
        client's `domain` (taken out of the index: it moves on with this turn), else a new one
        holding the earlier turns."""
        entry = self._index.pop(history.prefix_digest(domain), None)
        if entry is not None:
            cid, last_id = entry
            if self._unchanged(assistant, cid, last_id):
                self.reused += 1
                return cid
            self._forget(assistant, cid)
        earlier = [(role, text, kept_images(assistant, fields)) for role, text, fields in history.earlier]
        cid = assistant.new_conversation_from(earlier, history.system)
        self.replayed += bool(history.earlier)
        if not self.store:
            self._alive.add(cid)
            self._save()
        return cid

    def answered(self, assistant, cid: int, history: History, answer: str, message_id: int,
                 domain: str = "", calls: list[dict] | None = None) -> None:
        """The turn finished: a request of `domain` that resends this history plus `answer` (and
        its tool `calls`) continues `cid`."""
        self._index[history.answered_digest(answer, domain, calls)] = (cid, message_id)
        while len(self._index) > self.size:
            _, (old, _) = self._index.popitem(last=False)
            self._forget(assistant, old)

    def failed(self, assistant, cid: int) -> None:
        """The turn did not finish (cancelled, an error): its conversation is not continued."""
        self._forget(assistant, cid)

    def close(self, assistant) -> None:
        """At exit: unstored conversations go."""
        for cid, _ in list(self._index.values()):
            self._forget(assistant, cid)
        self._index.clear()
        for cid in list(self._alive):
            self._forget(assistant, cid)

    # ----
    @staticmethod
    def _unchanged(assistant, cid: int, last_id: int) -> bool:
        """Still as the server left it (the user may have continued a stored one in the app)."""
        try:
            shown = [m for m in assistant.transcript(cid) if not m["superseded"]]
        except ConversationNotFound:
            return False
        return bool(shown) and shown[-1]["id"] == last_id

    def _forget(self, assistant, cid: int) -> None:
        if not self.store:
            self._delete(assistant, cid)
            self._alive.discard(cid)
            self._save()

    @staticmethod
    def _delete(assistant, cid: int) -> bool:
        try:
            assistant.delete_conversation(cid)
            return True
        except ConversationNotFound:
            return False
        except StorageError:
            log.exception("API conversation %d could not be deleted", cid)
            return False

    def _read(self) -> dict[str, list]:
        """The pending file: owner → conversation ids (the earlier format, a bare list, as a crashed
        owner's). Call it holding the file's lock."""
        try:
            data = json.loads(self._pending.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError):
            log.warning("%s is unreadable; the API conversations it listed are not deleted", self._pending)
            return {}
        if isinstance(data, list):
            return {"": data}
        return {k: v for k, v in data.items() if isinstance(v, list)} if isinstance(data, dict) else {}

    def _save(self, drop: Collection[str] = ()) -> None:
        """Write this object's entry (and remove the `drop` owners') into what the file holds now:
        other processes' entries stay."""
        try:
            with locked(self._pending):
                data = self._read()
                for owner in drop:
                    data.pop(owner, None)
                data.pop(self._owner, None)
                if self._alive:
                    data[self._owner] = sorted(self._alive)
                if data:
                    write_atomic(self._pending, json.dumps(data).encode("utf-8"))
                else:
                    self._pending.unlink(missing_ok=True)
        except OSError:
            log.warning("could not write %s", self._pending, exc_info=True)


def kept_images(assistant, fields: dict | None) -> dict | None:
    """An earlier message's fields, its request images kept by the engine and named by digest."""
    if not fields or "api_images" not in fields:
        return fields
    return {"images": [{"digest": assistant.add_image(image.data)["digest"], "at": at}
                       for image, at in fields["api_images"]]}


def _owner_id() -> str:
    """"pid:start time:n": the running process (a pid alone may be a later program's) and which of
    its servers."""
    me = psutil.Process()
    return f"{me.pid}:{me.create_time():.3f}:{next(_owners)}"


def _running(owner: str) -> bool:
    """The owner's process still runs (an entry it wrote is live, not a crash's leftover)."""
    try:
        pid, start, _ = owner.split(":")
        return abs(psutil.Process(int(pid)).create_time() - float(start)) < 0.5
    except (ValueError, psutil.NoSuchProcess):  # NoSuchProcess: a zombie too
        return False
    except psutil.Error:  # another user's process: not ours to judge
        return True
