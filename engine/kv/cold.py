"""The cold tier: one snapshot file per (conversation, model) on disk, checked before it is
loaded, and pruned to a disk budget. A file is written whole (atomically) the first time; after
that, a state that extends the file's tokens adds only its new cells as a segment of their own,
so an exit after a short turn on a long chat writes that turn, not the chat (issue 25)."""

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

import numpy as np

from engine.config.buffers import unfilled
from engine.config.paths import private_dir, private_file
from engine.kv import state_format
from engine.kv.snapshot import Snapshot, common_prefix

log = logging.getLogger(__name__)

MIN_COLD_TOKENS = 256    # a shorter chat re-evaluates faster than a file round trip is worth
MAGIC = b"OAKV"
FORMAT = 2  # 1: one payload after the header, no segments (such files are rejected, then re-made)
_HEAD = struct.Struct("<4sI")  # magic, header length
SEGMENT = b"OSEG"
_SEG = struct.Struct("<4sIIQI")  # magic, first token index, tokens, payload bytes, CRC-32 of the payload
MAX_SEGMENTS = 16  # a restore joins them all; past this the file is rewritten whole
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
    appended: int = 0
    loaded: int = 0
    rejected: dict[str, int] = field(default_factory=dict)  # reason -> count
    pruned: int = 0
    write_errors: int = 0


class ColdTier:
    """One snapshot file per (conversation, model) in `folder`, LRU-pruned to `budget_bytes`.

    File: MAGIC, header length, JSON header (format, identity, conversation, facts), then
    segments: each a _SEG header (first token index, tokens, payload bytes, CRC-32) and its payload,
    int32 token ids followed by llama.cpp's sequence state of those tokens' cells
    (engine/kv/state_format.py joins them for a restore). A torn or damaged segment ends the file:
    the segments before it still load (a kill during an append loses that append only).

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
        """Append the cells `snap` adds to its file, or write the file whole (temp file, fsync,
        rename); None when the chat is too short to keep, the disk refused, or
        `wanted(conversation_id)` is False at the end (deleted meanwhile)."""
        if snap.conversation_id is None or len(snap.tokens) < self.min_tokens:
            return None
        path = self.path(snap.conversation_id, snap.identity)
        appended = self._append(path, snap, facts, wanted)
        if appended is not False:
            return appended
        header = json.dumps({"format": FORMAT, "identity": snap.identity, "conversation_id": snap.conversation_id,
                             "facts": facts}).encode()
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        try:  # outside the lock: a delete need not wait for a large write (the temp name is this thread's)
            private_dir(self.folder)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_BINARY", 0), 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(_HEAD.pack(MAGIC, len(header)))
                f.write(header)
                _write_segment(f, 0, snap.tokens, snap.data)
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

    def _append(self, path: Path, snap: Snapshot, facts: dict, wanted) -> Path | None | bool:
        """Add the cells of `snap` past the file's tokens as a new segment. False where that does
        not apply (no file, another model or format, tokens that do not extend the file's, a state
        `state_format` cannot split, too many segments): the caller writes the file whole."""
        try:
            f = open(path, "r+b")
        except OSError:
            return False
        with f:
            try:
                header = self._read_header(f)
                if header.get("format") != FORMAT or header.get("facts") != facts or \
                        header.get("identity") != snap.identity:
                    return False
                segments, tokens, end = self._scan(f)
                if len(segments) > 1 and not _crc_ok(f, segments[-1][3]):
                    # An append a crash left complete in length but not in content (the first
                    # segment came by rename, whole): it goes, this one takes its place.
                    first, n_bad, _, end = segments.pop()
                    del tokens[first:first + n_bad]
            except (OSError, ValueError, KeyError, struct.error):
                return False
            n_old = len(tokens)
            if segments and tokens == snap.tokens:
                return path  # it holds this state already (a checkpoint wrote it)
            if not segments or len(segments) >= MAX_SEGMENTS or n_old >= len(snap.tokens) or \
                    snap.tokens[:n_old] != tokens:
                return False
            state = state_format.parse(snap.data)
            if state is None or state.n_cells != len(snap.tokens) or \
                    not np.array_equal(np.sort(state.positions()), np.arange(len(snap.tokens))):
                return False
            added = state_format.to_bytes(state_format.select(state, state.positions() >= n_old))
            try:
                f.seek(end)
                f.truncate()  # a torn segment a killed append left
                _write_segment(f, n_old, snap.tokens[n_old:], added)
                f.flush()
                os.fsync(f.fileno())
            except OSError as exc:
                self.stats.write_errors += 1
                log.warning("could not append to KV snapshot %s: %s", path.name, exc)
                return None
        with self._lock:
            if wanted is not None and not wanted(snap.conversation_id):
                path.unlink(missing_ok=True)  # deleted during the append
                return None
            self.stats.appended += 1
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

    def _scan(self, f, payloads: bool = False) -> tuple[list[tuple[int, int, bytearray | None, int]], list[int], int]:
        """The file's whole segments after its header: ([(first, n_tokens, payload or None,
        offset)], tokens, offset where they end). Reading stops at the first torn, damaged or
        out-of-order segment (its payload is checked when `payloads`, else only its tokens' place)."""
        segments, tokens = [], []
        end = f.tell()
        while True:
            start = f.tell()
            raw = f.read(_SEG.size)
            if len(raw) < _SEG.size:
                break
            magic, first, n, size, crc = _SEG.unpack(raw)
            if magic != SEGMENT or first != len(tokens) or size < 4 * n:
                break
            if payloads:
                payload = unfilled(size)  # a short read is dropped below
                if f.readinto(payload) != size or zlib.crc32(payload) != crc:
                    break
                ids = list(struct.unpack(f"<{n}i", memoryview(payload)[:4 * n]))
            else:
                raw_ids = f.read(4 * n)
                if len(raw_ids) != 4 * n:
                    break
                ids, payload = list(struct.unpack(f"<{n}i", raw_ids)), None
                f.seek(size - 4 * n, os.SEEK_CUR)
                if f.tell() > os.fstat(f.fileno()).st_size:
                    break
            segments.append((first, n, payload, start))
            tokens += ids
            end = f.tell()
        return segments, tokens, end

    def covers(self, conversation_id: int, identity: str, facts: dict, tokens: list[int]) -> bool:
        """Whether this conversation's file holds exactly `tokens` (its ids only are read)."""
        try:
            with open(self.path(conversation_id, identity), "rb") as f:
                header = self._read_header(f)
                if header.get("format") != FORMAT or header.get("facts") != facts or header.get("identity") != identity:
                    return False
                return self._scan(f)[1] == tokens
        except (OSError, ValueError, KeyError, struct.error):
            return False

    def peek(self, conversation_id: int, identity: str, facts: dict, prompt: list[int]) -> int:
        """How many prompt tokens this conversation's file would cover (0: none, or unusable)."""
        path = self.path(conversation_id, identity)
        try:
            with open(path, "rb") as f:
                header = self._read_header(f)
                if not self._matches(path, header, identity, facts):
                    return 0
                segments, tokens, _ = self._scan(f)
        except FileNotFoundError:
            return 0
        except (OSError, ValueError, KeyError, struct.error) as exc:
            self._reject(path, f"unreadable header ({type(exc).__name__})")
            return 0
        if not segments:
            self._reject(path, "truncated")
            return 0
        return common_prefix(tokens, prompt)

    def load(self, conversation_id: int, identity: str, facts: dict) -> Snapshot | None:
        """The verified snapshot, or None (missing; anything wrong → deleted and counted). A file
        of several segments is joined into one state; a damaged later segment only shortens it."""
        path = self.path(conversation_id, identity)
        try:
            with open(path, "rb") as f:
                header = self._read_header(f)
                if not self._matches(path, header, identity, facts):
                    return None
                segments, tokens, _ = self._scan(f, payloads=True)
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, struct.error) as exc:
            self._reject(path, f"unreadable ({type(exc).__name__})")
            return None
        if not segments:
            self._reject(path, "truncated or checksum mismatch")
            return None
        if len(segments) == 1:
            payload = segments[0][2]
            del payload[:4 * len(tokens)]  # the state stays in the same buffer: restored without another copy
        else:
            parts = [state_format.parse(memoryview(p)[4 * n:]) for _, n, p, _ in segments]
            if any(part is None for part in parts):
                self._reject(path, "a segment's state does not parse")
                return None
            try:
                payload = state_format.joined_bytes(parts)
            except ValueError:
                self._reject(path, "segments of different shapes")
                return None
        os.utime(path)  # LRU by mtime
        self.stats.loaded += 1
        return Snapshot(identity, conversation_id, tokens, payload)

    def token_count(self, path: Path, mtime: float) -> int | None:
        """Tokens a file holds, from its segments (cached per mtime); None if unreadable."""
        cached = self._counts.get(path.name)
        if cached and cached[0] == mtime:
            return cached[1]
        try:
            with open(path, "rb") as f:
                self._read_header(f)
                n = len(self._scan(f)[1])
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


def _write_segment(f, first: int, tokens: list[int], state) -> None:
    ids = struct.pack(f"<{len(tokens)}i", *tokens)
    crc = zlib.crc32(state, zlib.crc32(ids))
    f.write(_SEG.pack(SEGMENT, first, len(tokens), len(ids) + len(state), crc))
    f.write(ids)
    f.write(state)


def _crc_ok(f, offset: int) -> bool:
    """Whether the segment at `offset` holds the payload its CRC-32 says."""
    f.seek(offset)
    _, _, _, size, crc = _SEG.unpack(f.read(_SEG.size))
    payload = f.read(size)
    return len(payload) == size and zlib.crc32(payload) == crc
