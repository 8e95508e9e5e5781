"""The tools that need no server: the date and time, a safe calculator, a search of the user's
documents (excerpts with where they come from, to cite) and a recall from the memory. Shaped like
an MCP server's, so the loop has one kind of tool."""

from __future__ import annotations

import json
import threading
from datetime import datetime
from typing import Callable

from engine.inference.tool_calls import Tool
from engine.tools.base import ToolFailed, ToolResult, ToolSource
from engine.tools.calculator import CalculatorError, calculate

NAME = "builtin"
MAX_HITS = 5
EXCERPT_CHARS = 800  # per excerpt: a search result is read in full by the model


def _tool(name: str, description: str, properties: dict, required: list[str]) -> Tool:
    schema = {"type": "object", "properties": properties, "required": required}
    return Tool(name, description, json.dumps(schema, ensure_ascii=False))


DATETIME = _tool("current_datetime", "The current local date, time, weekday and time zone.", {}, [])
CALCULATOR = _tool("calculator", "Evaluate an arithmetic expression exactly, e.g. \"(3 + 4) * 2 ** 10\" or "
                   "\"sqrt(2) / 2\". Numbers, + - * / // % **, parentheses, pi, e and sqrt, exp, ln, log10, "
                   "sin, cos, tan, round, floor, ceil, factorial, min, max.",
                   {"expression": {"type": "string", "maxLength": 500}}, ["expression"])
SEARCH = _tool("search_documents", "Search the user's own local documents (PDF, Word, Markdown, text) and "
               "return the best excerpts with their file and page, to cite.",
               {"query": {"type": "string", "maxLength": 500}}, ["query"])
RECALL = _tool("recall_memory", "Recall what the user told you in earlier chats or asked you to remember.",
               {"query": {"type": "string", "maxLength": 500}}, ["query"])


class BuiltinTools(ToolSource):
    """Args:
        search: query → excerpts ({"path", "page", "text", ...}, best first), or None when the
            documents are off (the tool is then not offered).
        recall: query → memory texts, best first, or None when the memory is off.
        now: the clock (tests pass a fixed one).
    """

    name = NAME
    inline = True  # runs on the turn's thread: quick, and its searches read stores that thread owns

    def __init__(self, search: Callable[[str], list[dict]] | None = None,
                 recall: Callable[[str], list[str]] | None = None, now: Callable[[], datetime] | None = None):
        self._search, self._recall = search, recall
        self._now = now or (lambda: datetime.now().astimezone())

    def tools(self) -> tuple[Tool, ...]:
        return (DATETIME, CALCULATOR) + ((SEARCH,) if self._search else ()) + ((RECALL,) if self._recall else ())

    # ---- a kind of source of its own (engine/tools/base.py SourceKind): one, always on
    def sources(self) -> list[ToolSource]:
        return [self]

    def panel(self) -> list[dict]:
        return [{"name": self.name, "state": "running", "error": "", "transport": "built-in", "target": "",
                 "stderr": "", "config": {}, "tools": self.tools()}]

    def close(self) -> None:
        pass

    def call(self, name: str, arguments: dict, cancel: threading.Event) -> ToolResult:
        if name == DATETIME.name:
            now = self._now()
            return ToolResult(f"{now:%Y-%m-%d %H:%M} ({now:%A}), time zone {now.tzname() or 'local'}")
        if name == CALCULATOR.name:
            try:
                value = calculate(str(arguments.get("expression", "")))
            except CalculatorError as exc:
                return ToolResult(str(exc), error=True)
            return ToolResult(repr(value) if isinstance(value, float) else str(value))
        if name == SEARCH.name and self._search:
            hits = self._search(str(arguments.get("query", "")))[:MAX_HITS]
            if not hits:
                return ToolResult("No excerpt of the user's documents matches.")
            return ToolResult("\n\n".join(f"[{n}] {h['path']}" + (f", page {h['page']}" if h.get("page") else "")
                                          + f"\n{h['text'][:EXCERPT_CHARS]}" for n, h in enumerate(hits, 1)))
        if name == RECALL.name and self._recall:
            texts = self._recall(str(arguments.get("query", "")))[:MAX_HITS]
            return ToolResult("\n".join(f"- {t}" for t in texts) if texts else "Nothing in the memory matches.")
        raise ToolFailed(f"no built-in tool {name!r}")
