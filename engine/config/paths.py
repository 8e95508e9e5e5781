"""Where the engine keeps things: one user directory, overridable for tests.

Two kinds of place, never mixed:
- the *install* (read-only): the catalog and, in a bundle built with demo models, their files.
  From a source checkout that is the repository; in a PyInstaller build it is the bundle's folder.
- the *user data dir* (platformdirs, or `ASSISTANT_HOME`): database, settings, logs, KV snapshots.
  A frozen app downloads models there too: it never writes inside its install folder.
"""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path

import platformdirs

APP_NAME = "offline-assistant"
HOME_ENV = "ASSISTANT_HOME"
MODELS_ENV = "ASSISTANT_MODELS_DIR"


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
    path.mkdir(parents=True, exist_ok=True)
    return path


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


def asset_path(name: str) -> Path:
    return install_dir() / "assets" / name
