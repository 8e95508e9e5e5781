"""Where the engine keeps things: one user directory, overridable for tests.

Two kinds of place, never mixed:
- the *install* (read-only): the catalog and, in a bundle built with demo models, their files.
  From a source checkout that is the repository; in a PyInstaller build it is the bundle's folder.
- the *user data dir* (platformdirs, or `ASSISTANT_HOME`): database, settings, logs, KV snapshots.
  A frozen app downloads models there too: it never writes inside its install folder. It holds the
  user's chats (and KV files that decode back to them): the folder is the user's only (0700) and
  its private files are made 0600 (`private_file`); a folder found wider is narrowed, once a process.
"""

from __future__ import annotations

import functools
import logging
import os
import stat
import sys
import threading
from pathlib import Path

import platformdirs

log = logging.getLogger(__name__)

APP_NAME = "offline-assistant"
HOME_ENV = "ASSISTANT_HOME"
MODELS_ENV = "ASSISTANT_MODELS_DIR"
PRIVATE_DIR = 0o700
POSIX = os.name == "posix"  # Windows keeps a user's AppData theirs by its ACLs; its chmod only sets read-only

_private_dirs: set[Path] = set()  # made or narrowed by this process: user_dir() stats once, not every call
_private_lock = threading.Lock()


def frozen() -> bool:
    """True inside a PyInstaller build."""
    return bool(getattr(sys, "frozen", False))


def install_dir() -> Path:
    """The read-only root holding `models/` and `assets/`: the bundle, or the repository."""
    if frozen():
        return Path(getattr(sys, "_MEIPASS", Path(sys.executable).resolve().parent))
    return _checkout()


@functools.cache  # fixed for the process; resolving it cost ~3 ms a call (an lstat per component), every turn
def _checkout() -> Path:
    return Path(__file__).resolve().parent.parent.parent  # engine/config/paths.py → the repository


def install_models_dir() -> Path:
    """The install's models/ folder: the catalog, and demo files (`make models`, or bundled)."""
    return install_dir() / "models"


def user_dir() -> Path:
    """The app data directory (database, logs, snapshots); `ASSISTANT_HOME` overrides it."""
    override = os.environ.get(HOME_ENV)
    path = Path(override) if override else Path(platformdirs.user_data_dir(APP_NAME, appauthor=False))
    path.mkdir(mode=PRIVATE_DIR, parents=True, exist_ok=True)  # each call, as before: a test may remove it
    if path not in _private_dirs:
        private_dir(path)
    return path


def private_dir(path: Path) -> Path:
    """`path` made (parents too) or narrowed to the user's only (0700): other users of the computer
    can neither list nor open what it holds, whatever each file's own mode."""
    path = Path(path)
    path.mkdir(mode=PRIVATE_DIR, parents=True, exist_ok=True)
    with _private_lock:
        if path in _private_dirs:
            return path
        _private_dirs.add(path)
    _narrow(path)
    return path


def private_file(path: Path) -> None:
    """Make an existing file of ours the user's only (0600) if it is wider (an older version's file,
    or one created under a loose umask); a missing file is left to its creator."""
    _narrow(Path(path))


def _narrow(path: Path) -> None:
    """Take the group's and others' bits off a file or folder of ours."""
    if not POSIX:
        return
    try:
        st = path.stat()
        if stat.S_IMODE(st.st_mode) & 0o077 and st.st_uid == os.getuid():
            os.chmod(path, stat.S_IMODE(st.st_mode) & ~0o077)
            log.info("%s was open to other users (mode %o); it is now the user's only", path, stat.S_IMODE(st.st_mode))
    except FileNotFoundError:
        pass
    except OSError as exc:
        log.warning("could not make %s the user's only: %s", path, exc)


def db_path() -> Path:
    return user_dir() / "assistant.db"


def models_dir() -> Path:
    """Where model files are written (downloads, exports): `ASSISTANT_MODELS_DIR`; in a frozen app
    `<user data>/models`; from a source checkout the repository's models/ (what `make models` fills)."""
    override = os.environ.get(MODELS_ENV)
    if override:
        return Path(override)
    return user_dir() / "models" if frozen() else install_models_dir()


def find_model_file(relative: str | Path) -> Path:
    """`relative` under the writable models dir if it is there, else under the install's models/
    (bundled demo models), else where a download would put it. `ASSISTANT_MODELS_DIR` is the one
    place when set (tests point it at an empty folder to see a fresh install)."""
    writable = models_dir() / relative
    if writable.exists() or os.environ.get(MODELS_ENV):
        return writable
    bundled = install_models_dir() / relative
    return bundled if bundled.exists() else writable


def catalog_path() -> Path:
    return install_models_dir() / "catalog.toml"
