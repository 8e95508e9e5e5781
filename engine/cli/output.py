"""What every `assistant` command shares: its exit codes, JSON lines on stdout, and errors on
stderr (or, under --json, as an error event a program reads where it reads the rest)."""

from __future__ import annotations

import json
import sys

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_MODEL, EXIT_NOT_FOUND = 0, 1, 2, 3, 4


def print_json(obj) -> None:
    """One JSON object on one line, flushed: a reader gets each event as it happens."""
    sys.stdout.write(json.dumps(obj, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def error(message: str, code: int, as_json: bool = False) -> int:
    """Say `message` as an error and return `code`, the command's exit code."""
    if as_json:
        print_json({"event": "error", "message": message})
    else:
        sys.stderr.write(f"error: {message}\n")
        sys.stderr.flush()
    return code
