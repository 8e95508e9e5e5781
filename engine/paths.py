"""Where the engine keeps things: one user directory, overridable for tests."""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

APP_NAME = "offline-assistant"
HOME_ENV = "ASSISTANT_HOME"
MODELS_ENV = "ASSISTANT_MODELS_DIR"

# The repository's models/ folder: the catalog lives there and `make` fetches demo files into it.
REPO_MODELS_DIR = Path(__file__).resolve().parent.parent / "models"


def user_dir() -> Path:
    """The app data directory (database, logs, snapshots); `ASSISTANT_HOME` overrides it."""
    override = os.environ.get(HOME_ENV)
    path = Path(override) if override else Path(platformdirs.user_data_dir(APP_NAME, appauthor=False))
    path.mkdir(parents=True, exist_ok=True)
    return path


def db_path() -> Path:
    return user_dir() / "assistant.db"


def models_dir() -> Path:
    """Folder holding model files: `ASSISTANT_MODELS_DIR`, else the repo's models/."""
    override = os.environ.get(MODELS_ENV)
    return Path(override) if override else REPO_MODELS_DIR


def catalog_path() -> Path:
    return REPO_MODELS_DIR / "catalog.toml"
