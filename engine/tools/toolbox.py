"""The window's tools in one place: the kinds of tool source registered with it (the built-in
tools bound to an Assistant's documents and memory, the MCP servers of mcp.json, and any other
kind: engine/tools/base.py `SourceKind`), and what the user decided (tools.json). It makes each
turn's ToolRunner, and gives the Tools panel a snapshot it can read without waiting: every source
with its state, stderr and tools, each tool with on/off, "always" and what its description costs
in every prompt.

Threads: `runner()` and the built-in tools run on the engine's thread (the turn's). `snapshot`,
the switches and `close` may come from any thread; `restart` and `import_config` may wait on a
server's start, so the window calls them off its GUI thread.
"""

from __future__ import annotations

import json
import threading
from dataclasses import replace
from pathlib import Path
from typing import Callable

from engine.config.paths import user_dir
from engine.inference.tool_calls import Tool
from engine.tools import mcp_config
from engine.tools.base import SourceKind
from engine.tools.builtin import BuiltinTools
from engine.tools.mcp_server import DISABLED, McpServers
from engine.tools.permissions import Permissions
from engine.tools.runner import ToolRunner


class Toolbox:
    """Args:
        builtin: the built-in tools (bound to documents and memory, or not).
        count_tokens: text → tokens for the L1 model (None while no vocabulary is loaded).
        config_path: mcp.json (default: the data dir's).
        permissions: tools.json (default: the data dir's).
    """

    def __init__(self, builtin: BuiltinTools, count_tokens: Callable[[str], int | None] = lambda text: None,
                 config_path: Path | None = None, permissions: Permissions | None = None,
                 log_dir: Path | None = None):
        self.builtin = builtin
        self.count_tokens = count_tokens
        self.config_path = config_path or mcp_config.config_path()
        self.permissions = permissions or Permissions()
        self.problems: list[str] = []
        self._lock = threading.Lock()
        self.servers = McpServers(self._read(), log_dir or user_dir() / "logs" / "mcp")
        self.kinds: list[SourceKind] = [builtin, self.servers]  # in the order their tools are offered

    def register(self, kind: SourceKind) -> None:
        """Offer another kind of source's tools from the next turn on, after those registered."""
        self.kinds.append(kind)

    @classmethod
    def for_assistant(cls, assistant, **kw) -> "Toolbox":
        """Built-ins over the assistant's documents and memory (each offered only when it is on).
        Made on the engine thread, whose stores the searches read."""
        search = assistant.search_documents if assistant.docs is not None else None
        memory = assistant.memory
        recall = (lambda q: [h.text for h in memory.search(q, k=5)]) if memory is not None else None
        return cls(BuiltinTools(search=search, recall=recall), assistant.count_tokens, **kw)

    def _read(self) -> list[mcp_config.McpServerConfig]:
        try:
            configs, self.problems = mcp_config.read(self.config_path)
        except mcp_config.McpConfigError as exc:
            configs, self.problems = [], [str(exc)]
        return configs

    def reload(self) -> list[str]:
        """Read mcp.json again (the user edited it): changed servers restart on their next use.
        Returns the problems found in it."""
        with self._lock:
            self.servers.configure(self._read())
            return list(self.problems)

    # ---- a turn's tools (engine thread)
    def runner(self) -> ToolRunner:
        p = self.permissions
        sources = [source for kind in self.kinds for source in kind.sources()]
        # each source's timeout is its own (ToolSource.timeout_s), which the runner reads
        return ToolRunner(sources, always=p.always, disabled=p.disabled, remember=p.allow_always)

    # ---- the Tools panel
    def snapshot(self) -> list[dict]:
        """Every source, built-in first: {"name", "state", "error", "transport", "target",
        "stderr", "config" (secrets masked), "tools": [{"name", "description", "key", "enabled",
        "always", "tokens"}]}. Reads what is known; starts nothing."""
        p = self.permissions
        return [entry | {"tools": self._tools(entry["name"], entry["tools"], p)}
                for kind in self.kinds for entry in kind.panel()]

    def _tools(self, source: str, tools: tuple[Tool, ...], p: Permissions) -> list[dict]:
        return [{"name": t.name, "description": t.description, "key": f"{source}/{t.name}",
                 "enabled": f"{source}/{t.name}" not in p.disabled, "always": f"{source}/{t.name}" in p.always,
                 "tokens": self.count_tokens(prompt_entry(t))} for t in tools]

    def set_tool_enabled(self, key: str, enabled: bool) -> None:
        self.permissions.set_enabled(key, enabled)

    def revoke(self, key: str) -> None:
        self.permissions.revoke(key)

    def set_server_enabled(self, name: str, enabled: bool) -> None:
        """On or off, kept in mcp.json ("disabled", as Cline writes it); off stops it now."""
        with self._lock:
            configs = self._read()
            changed = [c if c.name != name else replace(c, disabled=not enabled) for c in configs]
            mcp_config.write(self.config_path, changed)
            self.servers.configure(changed)  # a changed entry's server is stopped and made again, off or on

    def restart(self, name: str) -> None:
        """Start (or start again) one server now; ToolFailed says why it did not."""
        server = self.servers.get(name)
        if server is None or server.state == DISABLED:
            return
        server.stop()
        server.ensure_started(force=True)

    def import_config(self, path: Path) -> mcp_config.ImportReport:
        report = mcp_config.import_into(self.config_path, path)
        self.reload()
        return report

    def close(self) -> None:
        """Stop every source that runs (the app quits): each MCP server's process group ends."""
        for kind in self.kinds:
            kind.close()


def prompt_entry(tool: Tool) -> str:
    """What one tool adds to every prompt that offers it: its line in the tools list."""
    return json.dumps(tool.as_openai(), ensure_ascii=False)
