"""Helpers shared by tests (not fixtures)."""

import importlib.util
import os
import sys
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def cli(*args: str) -> list[str]:
    """argv for running the CLI in a subprocess with this interpreter."""
    return [sys.executable, "-m", "engine.cli.main", *args]


def packaging_module(name: str) -> types.ModuleType:
    """A script of packaging/ as a module (the folder is not a package, and `packaging` is PyPI's)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "packaging" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def cli_env(home: Path) -> dict:
    env = dict(os.environ)
    env["ASSISTANT_HOME"] = str(home)
    env["PYTHONIOENCODING"] = "utf-8"
    return env
