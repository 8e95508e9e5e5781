"""What a root holds now: the files the index should have, found without reading them.

A scan only stats files; `changed` then decides which ones must be read again: size or mtime
differ from the stored row *and* the content hash differs (a copy or `touch` costs one hash, not a
re-parse).
"""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from engine.docs.parse import kind_of

HASH_BLOCK = 1 << 20
# Folders nobody means to index: version control, caches, virtual environments, build output.
SKIP_DIRS = frozenset({".git", ".hg", ".svn", "__pycache__", "node_modules", ".venv", "venv", ".tox",
                       ".mypy_cache", ".pytest_cache", ".cache", ".Trash", "$RECYCLE.BIN"})
LINK_OUTSIDE = "a link to a file outside the added folder"


@dataclass(frozen=True)
class Found:
    path: str
    size: int
    mtime_ns: int
    kind: str | None  # None: a type we do not read (only reported when the file was named itself)


def walk(root: Path, *, code: bool = False, within: Path | None = None) -> tuple[list[Found], list[tuple[str, str]]]:
    """(files under `root` the index takes, [(path, reason)] for what could not be looked at).

    Symlinked folders are not followed (a link loop, or the same tree twice); symlinked files are
    when their target is inside `within` (the folder the user added; default `root`), else they
    are skipped (LINK_OUTSIDE): a link in a shared folder must not index, and quote back, a file
    the user never added (~/.ssh/id_rsa). Hidden folders and SKIP_DIRS are left out; a named file
    is taken whatever its type.
    """
    found: list[Found] = []
    problems: list[tuple[str, str]] = []
    try:
        st = os.stat(root)
    except FileNotFoundError:
        return [], [(str(root), "not found")]
    except OSError as exc:
        return [], [(str(root), _os_reason(exc))]
    base = os.path.realpath(within if within is not None else root)
    if within is not None and Path(root) != Path(within) and _outside(root, base):
        return [], [(str(root), LINK_OUTSIDE)]  # a link under the added folder, to elsewhere
    if not stat.S_ISDIR(st.st_mode):
        return [Found(str(root), st.st_size, st.st_mtime_ns, kind_of(root, code=code))], []

    def on_error(exc: OSError) -> None:
        problems.append((exc.filename or str(root), _os_reason(exc)))

    for folder, dirs, files in os.walk(root, onerror=on_error):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in SKIP_DIRS)
        for name in sorted(files):
            path = Path(folder, name)
            kind = kind_of(path, code=code)
            if kind is None or name.startswith((".", "~$")):  # hidden files, Office lock files
                continue
            try:
                if os.path.islink(path) and _outside(path, base):
                    problems.append((str(path), LINK_OUTSIDE))
                    continue
                st = os.stat(path)
            except OSError as exc:
                problems.append((str(path), _os_reason(exc)))
                continue
            if stat.S_ISREG(st.st_mode):
                found.append(Found(str(path), st.st_size, st.st_mtime_ns, kind))
    return found, problems


def _outside(path: Path, base: str) -> bool:
    """`path` resolves (every link followed) to a place outside the real folder `base`."""
    target = os.path.realpath(path)
    try:
        return os.path.commonpath([target, base]) != base
    except ValueError:  # another drive (Windows)
        return True


def sha256_of(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(HASH_BLOCK):
            h.update(block)
    return h.hexdigest()


def _os_reason(exc: OSError) -> str:
    if isinstance(exc, PermissionError):
        return "no permission to read it"
    if isinstance(exc, FileNotFoundError):
        return "not found"
    if exc.errno == 40:  # ELOOP
        return "link loop (the link points back to itself)"
    return f"could not be read ({exc.strerror or type(exc).__name__})"
