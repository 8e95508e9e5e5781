"""The cold tier: one snapshot file per (conversation, model) on disk, written atomically, checked
before it is loaded, and pruned to a disk budget."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import struct
import threading
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from engine.config.paths import private_dir, private_file
from engine.kv.snapshot import Snapshot, common_prefix, tokens_digest

log = logging.getLogger(__name__)

MIN_COLD_TOKENS = 256    # a shorter chat re-evaluates faster than a file round trip is worth
MAGIC = b"OAKV"
FORMAT = 1
_HEAD = struct.Struct("<4sI")  # magic, header length
_NAME = re.compile(r"c(\d+)-([0-9a-f]{12})\.kvs")  # what `file_name` makes


def model_tag(identity: str) -> str:
    """The short name of a model's identity in its snapshot files' names."""
    return hashlib.sha1(identity.encode()).hexdigest()[:12]


def file_name(conversation_id: int, identity: str) -> str:
    """A conversation's snapshot file for one model: c<conversation id>-<model tag>.kvs."""
    return f"c{conversation_id}-{model_tag(identity)}.kvs"


def parse_file_name(name: str) -> tuple[int, str] | None:
    """(conversation id, model tag) of a name `file_name` made; None for anything else in the
    folder (a user's copy, another version's file), which the readers of names then skip."""
    match = _NAME.fullmatch(name)
    return (int(match[1]), match[2]) if match else None


@dataclass
class ColdStats:
    written: int = 0
    loaded: int = 0
    rejected: dict[str, int] = field(default_factory=dict)  # reason -> count
    pruned: int = 0
    write_errors: int = 0


class ColdTier:
    """One snapshot file per (conversation, model) in `folder`, LRU-pruned to `budget_bytes`.

    File: MAGIC, header length, JSON header (facts, token count and digest, payload length and
    CRC-32), then the payload: int32 token ids followed by llama.cpp's sequence state.

    The token ids decode back to the chat's text, as the database holds it: the files get the
    database's protection, 0600 in a 0700 folder, and go when their conversation is deleted. Not
    encrypted: the key would sit beside them in the same folder (or need an OS keyring the
    database does not use either), and a cache file must load in milliseconds.
    """

    def __init__(self, folder: Path, budget_bytes: int, min_tokens: int = MIN_COLD_TOKENS):
        self.folder = Path(folder)
        self.budget_bytes = budget_bytes
        self.min_tokens = min_tokens
        self.stats = ColdStats()
        self._lock = threading.Lock()  # renames, deletes and pruning one at a time
        self._counts: dict[str, tuple[float, int]] = {}  # file name -> (mtime, n_tokens) from headers
        for path, _, _ in self.files():  # an older version's files were made 0644
            private_file(path)

    def path(self, conversation_id: int, identity: str) -> Path:
        return self.folder / file_name(conversation_id, identity)

    def write(self, snap: Snapshot, facts: dict, wanted: Callable[[int], bool] | None = None) -> Path | None:
        """Write atomically (temp file, fsync, rename); None when the chat is too short to keep,
        the disk refused, or `wanted(conversation_id)` is False at the rename (deleted meanwhile)."""
        if snap.conversation_id is None or len(snap.tokens) < self.min_tokens:
            return None
        payload_tokens = struct.pack(f"<{len(snap.tokens)}i", *snap.tokens)
        crc = zlib.crc32(snap.data, zlib.crc32(payload_tokens))
        header = json.dumps({"format": FORMAT, "identity": snap.identity, "conversation_id": snap.conversation_id,
                             "facts": facts, "n_tokens": len(snap.tokens), "tokens_sha256": tokens_digest(snap.tokens),
                             "payload_bytes": len(payload_tokens) + len(snap.data), "crc32": crc}).encode()
        path = self.path(snap.conversation_id, snap.identity)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        try:  # outside the lock: a delete need not wait for a large write (the temp name is this thread's)
            private_dir(self.folder)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_BINARY", 0), 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(_HEAD.pack(MAGIC, len(header)))
                f.write(header)
                f.write(payload_tokens)
                f.write(snap.data)
                f.flush()
                os.fsync(f.fileno())
        except OSError as exc:
            return self._write_failed(path, tmp, exc)
        with self._lock:
            # Asked under the lock `delete` holds: a conversation deleted during the write gets no file.
            if wanted is not None and not wanted(snap.conversation_id):
                tmp.unlink(missing_ok=True)
                return None
            try:
                os.replace(tmp, path)
            except OSError as exc:
                return self._write_failed(path, tmp, exc)
            self.stats.written += 1
            self._prune_locked()
        return path

    def _write_failed(self, path: Path, tmp: Path, exc: OSError) -> None:
        # Disk full, read-only: the snapshot is only a cache.
        self.stats.write_errors += 1
        log.warning("could not write KV snapshot %s: %s", path.name, exc)
        tmp.unlink(missing_ok=True)

    def delete(self, conversation_id: int) -> None:
        """Remove a conversation's files, every model's. A write racing with this either renamed
        its file before (removed here) or finds its `wanted` False after."""
        prefix = f"c{conversation_id}-"
        with self._lock:
            # One pattern for every id: fnmatch caches each pattern it compiles (up to 32 768), and
            # a server deletes a conversation per request.
            for path in [p for p in self.folder.glob("c*.kvs") if p.name.startswith(prefix)]:
                try:
                    path.unlink(missing_ok=True)
                except OSError as exc:
                    log.warning("could not delete KV snapshot %s: %s", path.name, exc)
                self._counts.pop(path.name, None)

    def _reject(self, path: Path, reason: str) -> None:
        self.stats.rejected[reason] = self.stats.rejected.get(reason, 0) + 1
        log.info("KV snapshot %s rejected (%s); it is deleted and the history re-evaluated", path.name, reason)
        self._counts.pop(path.name, None)
        try:
            path.unlink()
        except OSError:
            pass

    def _read_header(self, f) -> dict:
        magic, n = _HEAD.unpack(f.read(_HEAD.size))
        if magic != MAGIC or n > 1 << 20:
            raise ValueError("not a snapshot file")
        return json.loads(f.read(n))

    def _matches(self, path: Path, header: dict, identity: str, facts: dict) -> bool:
        """True when the file was written for this model, context and format; else it is rejected."""
        if header.get("format") == FORMAT and header.get("facts") == facts and header.get("identity") == identity:
            return True
        self._reject(path, "different model, context or version")
        return False

    def peek(self, conversation_id: int, identity: str, facts: dict, prompt: list[int]) -> int:
        """How many prompt tokens this conversation's file would cover (0: none, or unusable)."""
        path = self.path(conversation_id, identity)
        try:
            with open(path, "rb") as f:
                header = self._read_header(f)
                if not self._matches(path, header, identity, facts):
                    return 0
                n = int(header["n_tokens"])
                raw = f.read(4 * n)
        except FileNotFoundError:
            return 0
        except (OSError, ValueError, KeyError, struct.error) as exc:
            self._reject(path, f"unreadable header ({type(exc).__name__})")
            return 0
        if len(raw) != 4 * n:
            self._reject(path, "truncated")
            return 0
        return common_prefix(list(struct.unpack(f"<{n}i", raw)), prompt)

    def load(self, conversation_id: int, identity: str, facts: dict) -> Snapshot | None:
        """The verified snapshot, or None (missing; anything wrong → deleted and counted)."""
        path = self.path(conversation_id, identity)
        try:
            with open(path, "rb") as f:
                header = self._read_header(f)
                if not self._matches(path, header, identity, facts):
                    return None
                n, size = int(header["n_tokens"]), int(header["payload_bytes"])
                payload = bytearray(size)
                got = f.readinto(payload)
                extra = f.read(1)
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, struct.error) as exc:
            self._reject(path, f"unreadable ({type(exc).__name__})")
            return None
        if got != size or extra:
            self._reject(path, "truncated" if got != size else "trailing bytes")
            return None
        if zlib.crc32(payload) != header["crc32"]:
            self._reject(path, "checksum mismatch")
            return None
        view = memoryview(payload)
        tokens = list(struct.unpack(f"<{n}i", view[:4 * n]))
        if tokens_digest(tokens) != header["tokens_sha256"]:
            self._reject(path, "token digest mismatch")
            return None
        del view
        del payload[:4 * n]  # the state stays in the same buffer: restored without another copy
        os.utime(path)  # LRU by mtime
        self.stats.loaded += 1
        return Snapshot(identity, conversation_id, tokens, payload)

    def token_count(self, path: Path, mtime: float) -> int | None:
        """Tokens a file holds, from its header (cached per mtime); None if unreadable."""
        cached = self._counts.get(path.name)
        if cached and cached[0] == mtime:
            return cached[1]
        try:
            with open(path, "rb") as f:
                n = int(self._read_header(f)["n_tokens"])
        except (OSError, ValueError, KeyError, struct.error):
            return None
        self._counts[path.name] = (mtime, n)
        return n

    def counted_files(self) -> dict[str, tuple[int, int | None]]:
        """name -> (bytes, tokens or None if unreadable) of every file on disk now; the header
        cache keeps only these (a file deleted while its header was read leaves no entry for long)."""
        out = {p.name: (size, self.token_count(p, mtime)) for p, size, mtime in self.files()}
        for name in [n for n in list(self._counts) if n not in out]:
            self._counts.pop(name, None)
        return out

    def files(self) -> list[tuple[Path, int, float]]:
        out = []
        try:
            for p in self.folder.glob("c*.kvs"):
                try:
                    st = p.stat()
                    out.append((p, st.st_size, st.st_mtime))
                except OSError:
                    pass
        except OSError:
            pass
        return out

    def prune(self) -> None:
        with self._lock:
            self._prune_locked()

    def _prune_locked(self) -> None:
        files = sorted(self.files(), key=lambda t: t[2])  # oldest first
        total = sum(size for _, size, _ in files)
        for path, size, _ in files:
            if total <= self.budget_bytes:
                break
            try:
                path.unlink()
                total -= size
                self.stats.pruned += 1
                self._counts.pop(path.name, None)  # one entry per file on disk, not per file ever written
            except OSError:
                pass
        for stale in self.folder.glob(".c*.tmp"):  # a writer killed mid-write: never loaded, removed
            try:
                if time.time() - stale.stat().st_mtime > 60:
                    stale.unlink()
            except OSError:
                pass
