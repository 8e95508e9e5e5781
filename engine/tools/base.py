"""What every tool source offers: its tools, described as MCP describes them (a name, a
description, a JSON schema of the arguments), and a call that returns text or an error."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Protocol

from engine.inference.tool_calls import Tool


class ToolFailed(RuntimeError):
    """A call that could not run: the source is down, the arguments are wrong, it timed out."""


@dataclass(frozen=True)
class ToolResult:
    text: str
    error: bool = False  # the tool ran and reported a failure (MCP's isError): still the model's to read


DEFAULT_TIMEOUT_S = 30.0


class ToolSource(Protocol):
    """A set of tools under one name: "builtin", or an MCP server's name in mcp.json. A source
    may subclass this to take the defaults below.

    Attributes:
        name: the source's name: what the approval dialog and the Tools panel show, and the
            "source/tool" keys of tools.json.
        inline: its calls run on the turn's own thread (quick, and they may read stores that
            thread owns: the built-ins' searches); else each call runs on a thread of its own,
            abandoned at `timeout_s` or Stop.
        timeout_s: seconds a call may take (the user's per-source setting comes first).
    """

    name: str
    inline: bool = False
    timeout_s: float = DEFAULT_TIMEOUT_S

    def tools(self) -> tuple[Tool, ...]: ...

    def call(self, name: str, arguments: dict, cancel: threading.Event) -> ToolResult:
        """Run one tool; raise ToolFailed when it cannot run. `cancel`: Stop was pressed."""
        ...


class SourceKind(Protocol):
    """One kind of tool source — the built-in tools, MCP servers, a plugin — registered with the
    Toolbox (engine/tools/toolbox.py): a new kind is one file that implements this, and one
    `register` call."""

    def sources(self) -> list[ToolSource]:
        """The sources a turn may call now (the switched-off ones left out); the turn's thread."""
        ...

    def panel(self) -> list[dict]:
        """The Tools panel's entry for each source, read without waiting: {"name", "state",
        "error", "transport", "target", "stderr", "config" (secrets masked), "tools" (Tool,
        each as the source names it)}."""
        ...

    def close(self) -> None:
        """The app quits: stop what runs."""
        ...
