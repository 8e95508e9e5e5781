"""Files that more than one writer touches: settings.json, the API server's key, its map of unstored
API conversations. The window, its engine and API-server threads and `assistant serve` may all
change them at once, so every change is read-merge-write under `locked(path)`, a lock that holds
across threads and processes, and lands with `write_atomic` (a temp file renamed over the old one:
a reader never sees half a file).

The lock is filelock's: fcntl.flock on Linux and macOS, msvcrt.locking on Windows, released by the
OS when its process dies (a crash never leaves it stuck). A well-kept library that huggingface-hub
already installs, rather than per-OS locking code of our own.
"""

from __future__ import annotations

import errno
import os
import threading
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Iterator

from filelock import FileLock, Timeout

LOCK_TIMEOUT_S = 10.0  # a writer holds it for milliseconds; this long means a hung process

_locks: dict[str, tuple[threading.RLock, FileLock]] = {}
_locks_guard = threading.Lock()


class FileBusy(TimeoutError):
    """Another thread or process held the file's lock for longer than the timeout."""


def lock_path(path: Path) -> Path:
    return path.with_name(path.name + ".lock")


@contextmanager
def locked(path: Path, timeout: float = LOCK_TIMEOUT_S) -> Iterator[None]:
    """Hold `path`'s lock (`<name>.lock` beside it); re-entrant in one thread."""
    key = os.path.abspath(path)
    with _locks_guard:
        pair = _locks.get(key)
        if pair is None:
            # One thread of this process at a time takes the file lock (the RLock), so the
            # FileLock object can be shared by all threads (thread_local=False) and nest.
            pair = _locks[key] = (threading.RLock(), FileLock(lock_path(path), mode=0o600, thread_local=False))
    thread_lock, file_lock = pair
    if not thread_lock.acquire(timeout=timeout):
        raise _busy(path, timeout)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            file_lock.acquire(timeout=timeout)
        except Timeout:
            raise _busy(path, timeout) from None
        try:
            yield
        finally:
            file_lock.release()
    finally:
        thread_lock.release()


@contextmanager
def locked_for_reading(path: Path, timeout: float = LOCK_TIMEOUT_S) -> Iterator[None]:
    """`locked(path)` for a read, except in a folder no one can write in (a read-only disk, a folder
    without write permission): the lock file cannot be made there, and no writer can run either, so
    the read goes ahead unlocked and the caller's own error (the database's, say) is the one shown."""
    stack = ExitStack()
    try:
        stack.enter_context(locked(path, timeout))
    except FileBusy:
        raise
    except OSError as exc:
        if exc.errno not in (errno.EROFS, errno.EACCES, errno.EPERM):
            raise
    with stack:
        yield


def _busy(path: Path, timeout: float) -> FileBusy:
    return FileBusy(f"{path} is being changed by another program: its lock {lock_path(path)} was held "
                    f"for over {timeout:g} s")


def write_atomic(path: Path, data: bytes, mode: int = 0o600) -> None:
    """Replace `path` with `data` in one step; call it holding `locked(path)` (the temp name is fixed).
    The file is `mode` from its creation: never a chmod after writing (that left a readable
    moment, and a readable half-written file when the disk was full)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)  # a crashed writer's
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        _replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise


def _replace(tmp: Path, path: Path) -> None:
    # Windows refuses to replace a file another program has open (an editor, a virus scanner)
    # for a moment; elsewhere a PermissionError is real.
    for _ in range(40 if os.name == "nt" else 0):
        try:
            tmp.replace(path)
            return
        except PermissionError:
            time.sleep(0.05)
    tmp.replace(path)
