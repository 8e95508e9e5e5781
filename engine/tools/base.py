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


class ToolSource(Protocol):
    """A set of tools under one name: "builtin", or an MCP server's name in mcp.json."""

    name: str

    def tools(self) -> tuple[Tool, ...]: ...

    def call(self, name: str, arguments: dict, cancel: threading.Event) -> ToolResult:
        """Run one tool; raise ToolFailed when it cannot run. `cancel`: Stop was pressed."""
        ...
