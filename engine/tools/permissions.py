"""What the user decided about tools, kept in tools.json in the data dir: the "source/tool" keys
allowed for good ("Always allow"), and those switched off in the Tools panel. One file for the
built-in tools and every MCP server, so mcp.json stays as the user (or another app) wrote it.
Written under its lock and atomically: the window and `assistant` commands may both change it."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from engine.config.locked_file import locked, write_atomic
from engine.config.paths import user_dir

log = logging.getLogger(__name__)


class Permissions:
    def __init__(self, path: Path | None = None):
        self.path = path or user_dir() / "tools.json"
        self.always: set[str] = set()
        self.disabled: set[str] = set()
        self.problem = ""  # why the file could not be read (it is then left as it is until a change)
        self.reload()

    def reload(self) -> None:
        try:
            data = json.loads(self.path.read_text("utf-8"))
            if not isinstance(data, dict):
                raise ValueError("not a JSON object")
            self.always = {k for k in data.get("always", []) if isinstance(k, str)}
            self.disabled = {k for k in data.get("disabled", []) if isinstance(k, str)}
            self.problem = ""
        except FileNotFoundError:
            self.always, self.disabled = set(), set()
        except (OSError, ValueError) as exc:
            self.problem = f"{self.path} could not be read ({exc}); every call is asked and every tool is on"
            log.warning("%s", self.problem)
            self.always, self.disabled = set(), set()

    def allow_always(self, key: str) -> None:
        self._change(lambda: self.always.add(key))

    def revoke(self, key: str) -> None:
        """Ask again before each call of this tool."""
        self._change(lambda: self.always.discard(key))

    def set_enabled(self, key: str, enabled: bool) -> None:
        self._change(lambda: self.disabled.discard(key) if enabled else self.disabled.add(key))

    def _change(self, change) -> None:
        with locked(self.path):
            if not self.problem:
                self.reload()  # another writer's change is kept
            change()
            data = {"always": sorted(self.always), "disabled": sorted(self.disabled)}
            write_atomic(self.path, (json.dumps(data, indent=2) + "\n").encode("utf-8"))
            self.problem = ""
