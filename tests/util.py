"""Helpers shared by tests (not fixtures)."""

import os
import sys
from pathlib import Path


def cli(*args: str) -> list[str]:
    """argv for running the CLI in a subprocess with this interpreter."""
    return [sys.executable, "-m", "engine.cli.main", *args]


def cli_env(home: Path) -> dict:
    env = dict(os.environ)
    env["ASSISTANT_HOME"] = str(home)
    env["PYTHONIOENCODING"] = "utf-8"
    return env
