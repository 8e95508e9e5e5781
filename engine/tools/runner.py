"""The runner: which tools a turn is offered, and one call run the way the user allows — asked
first (once, always, or denied), within its source's timeout, stopped by Stop, its output cut to a
size the context can take. The output is the tool's, untrusted: it reaches the model as a tool
result (data), never as the user's or the system's words."""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass
from typing import Callable, Iterable

from engine.inference.tool_calls import Tool, ToolUse
from engine.tools.base import ToolFailed, ToolResult, ToolSource

log = logging.getLogger(__name__)

ONCE, ALWAYS, DENY = "once", "always", "deny"
MAX_ROUNDS = 8  # rounds of calls a turn may make before the model must answer in words
MAX_RESULT_CHARS = 16_000  # ~4k tokens: what one result may take of a laptop's context
POLL_S = 0.05


@dataclass(frozen=True)
class Approval:
    """What the user is asked before a call runs: the server, the tool and the exact arguments."""

    server: str
    tool: str
    arguments: dict
    description: str

    @property
    def key(self) -> str:
        return f"{self.server}/{self.tool}"


@dataclass(frozen=True)
class ToolCallEvent:
    """A call the model made, streamed before it is approved and run."""

    call_id: str
    server: str
    tool: str
    arguments: str


@dataclass(frozen=True)
class ToolResultEvent:
    """How a call ended: status "ok", "error" (the tool reported a failure), "denied", "failed"
    (it could not run), "timeout" or "cancelled"; `text` is what the model was given."""

    call_id: str
    server: str
    tool: str
    status: str
    text: str
    seconds: float = 0.0


@dataclass(frozen=True)
class TurnTools:
    """The tools the engine runs itself during a turn (the window's Tools switch; a field of
    `TurnRequest`): what `runner` offers, each call put to `approve` (on the turn's thread: "once",
    "always" or "deny"), for at most `max_rounds` rounds of calls (engine/chat/stages/tools.py)."""

    runner: "ToolRunner"
    approve: Callable[[Approval], str]
    max_rounds: int = MAX_ROUNDS


class ToolRunner:
    """Args:
        sources: the built-in tools and each MCP server (a tool's name is its own; where two
            sources name a tool alike, the first keeps the name and later ones are offered as
            "<source>.<name>").
        always: "source/tool" keys the user allowed for good.
        disabled: "source/tool" keys switched off in the Tools panel.
        timeouts: seconds per source (default: the source's own `timeout_s`).
        remember: called with a key the user just allowed for good (to keep it in the settings).
    """

    def __init__(self, sources: Iterable[ToolSource], *, always: Iterable[str] = (), disabled: Iterable[str] = (),
                 timeouts: dict[str, float] | None = None, remember: Callable[[str], None] | None = None,
                 max_result_chars: int = MAX_RESULT_CHARS):
        self.sources = list(sources)
        self.always, self.disabled = set(always), set(disabled)
        self.timeouts = dict(timeouts or {})
        self.remember = remember
        self.max_result_chars = max_result_chars
        self._turn: dict[str, tuple[ToolSource, Tool]] | None = None  # what the last `use` offered

    def offered(self) -> dict[str, tuple[ToolSource, Tool]]:
        """Offered name → (source, tool as the source names it), enabled ones only."""
        out: dict[str, tuple[ToolSource, Tool]] = {}
        for source in self.sources:
            try:
                tools = source.tools()
            except ToolFailed as exc:  # a server that is down offers nothing this turn
                log.warning("tools of %s unavailable: %s", source.name, exc)
                continue
            for tool in tools:
                if f"{source.name}/{tool.name}" in self.disabled:
                    continue
                name = tool.name if tool.name not in out else f"{source.name}.{tool.name}"
                out[name] = (source, tool)
        return out

    def use(self, choice: str = "auto", parallel: bool = True) -> ToolUse | None:
        """The turn's tools (None: none enabled). Its calls are resolved against this list: the
        sources are asked once a round (an MCP server's list is a request), and a call can only
        reach a tool the model was shown."""
        self._turn = offered = self.offered()
        tools = tuple(Tool(name, t.description, t.parameters) for name, (_, t) in offered.items())
        return ToolUse(tools, choice, parallel) if tools else None

    def resolve(self, name: str) -> tuple[ToolSource, Tool] | None:
        """The source and tool an offered name stands for, as the last `use` offered it."""
        return (self._turn if self._turn is not None else self.offered()).get(name)

    def announce(self, call: dict) -> ToolCallEvent:
        """A call the model made, as it is shown before it is approved and run."""
        fn = call["function"]
        found = self.resolve(fn["name"])
        return ToolCallEvent(call["id"], found[0].name if found else "", fn["name"], fn["arguments"])

    def run(self, call: dict, cancel: threading.Event, approve: Callable[[Approval], str]) -> ToolResultEvent:
        """Ask, run and report one call (an OpenAI-shaped dict from TurnDone.tool_calls)."""
        name, cid = call["function"]["name"], call["id"]
        found = self.resolve(name)
        if found is None:
            return ToolResultEvent(cid, "", name, "failed", f"There is no tool named {name!r}.")
        source, tool = found
        try:
            arguments = json.loads(call["function"]["arguments"] or "{}")
        except ValueError:
            arguments = None
        if not isinstance(arguments, dict):
            return ToolResultEvent(cid, source.name, tool.name, "failed", "The call's arguments are not a JSON object.")
        asked = Approval(source.name, tool.name, arguments, tool.description)
        if asked.key not in self.always:
            decision = approve(asked)
            if decision == DENY:
                return ToolResultEvent(cid, source.name, tool.name, "denied", "The user declined this call.")
            if decision == ALWAYS:
                self.always.add(asked.key)
                if self.remember is not None:
                    self.remember(asked.key)
        return self._run(cid, source, tool, arguments, cancel)

    def _run(self, cid: str, source: ToolSource, tool: Tool, arguments: dict,
             cancel: threading.Event) -> ToolResultEvent:
        t0 = time.monotonic()
        if source.inline:
            # the built-ins: quick, and their searches read stores the turn's own thread owns
            return self._outcome(cid, source, tool, _call(source, tool, arguments, cancel), time.monotonic() - t0)
        box: list = []
        stop = threading.Event()  # the call's own: set on Stop or at its timeout
        limit = self.timeouts.get(source.name, source.timeout_s)
        worker = threading.Thread(target=lambda: box.append(_call(source, tool, arguments, stop)),
                                  name=f"tool-{source.name}", daemon=True)
        worker.start()
        while worker.is_alive():
            worker.join(POLL_S)
            if cancel.is_set() or time.monotonic() - t0 > limit:
                stop.set()  # the source ends its call; the thread is not waited for
                status = "cancelled" if cancel.is_set() else "timeout"
                text = "Stopped by the user." if status == "cancelled" else f"The tool did not answer within {limit:g} s."
                return ToolResultEvent(cid, source.name, tool.name, status, text, time.monotonic() - t0)
        return self._outcome(cid, source, tool, box[0], time.monotonic() - t0)

    def _outcome(self, cid: str, source: ToolSource, tool: Tool, called: ToolResult | str,
                 seconds: float) -> ToolResultEvent:
        """A finished call as the model and the window see it; `called`: the result, or why the
        call could not run."""
        if isinstance(called, str):
            return ToolResultEvent(cid, source.name, tool.name, "failed", f"The tool could not run: {called}", seconds)
        return ToolResultEvent(cid, source.name, tool.name, "error" if called.error else "ok", self._cut(called.text),
                               seconds)

    def _cut(self, text: str) -> str:
        if len(text) <= self.max_result_chars:
            return text
        return (text[:self.max_result_chars] + f"\n[… cut: the tool returned {len(text):,} characters, "
                f"the first {self.max_result_chars:,} are shown]")


def _call(source: ToolSource, tool: Tool, arguments: dict, stop: threading.Event) -> ToolResult | str:
    """One call: its result, or why it could not run (ToolFailed's words; a tool's bug is logged
    and named, the call's failure, never the turn's)."""
    try:
        return source.call(tool.name, arguments, stop)
    except ToolFailed as exc:
        return str(exc)
    except Exception as exc:  # noqa: BLE001
        log.exception("tool %s/%s failed", source.name, tool.name)
        return f"{exc.__class__.__name__}: {exc}"
