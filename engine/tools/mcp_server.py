"""MCP servers as tool sources, through the official SDK (`mcp`, 2.x).

Every server's session lives on one thread, "mcp", that runs an asyncio loop (the SDK is async):
that thread owns the sessions and their processes. Other threads (the engine's turn, a tool
call's worker, the window's Tools panel through the engine) hand it coroutines and wait on the
answer with a deadline; `snapshot()` only reads what the loop last published, under a lock, so the
window can poll it without waiting.

Lifecycle:
- A server starts on demand: at the first turn that lists tools, or a Refresh in the Tools panel.
  A stdio server runs in its own process group (the SDK starts it with a new session and kills
  the group on close), its stderr going to a log file the panel shows.
- It stops on `stop()` (disabled in the panel) and on `close()` (the app quits).
- A server that dies is reported ("crashed", with its exit and stderr's last line) and started
  again on its next use. One that fails to start is not tried again for RETRY_S, unless the user
  asks, so a broken command does not slow every turn.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from concurrent.futures import Future, TimeoutError as FutureTimeout
from pathlib import Path
from typing import TYPE_CHECKING, Any, Coroutine, Protocol

from engine.config.version import __version__
from engine.inference.tool_calls import Tool
from engine.tools.base import ToolFailed, ToolResult, ToolSource
from engine.tools.mcp_config import MASK, McpServerConfig, masked_url

if TYPE_CHECKING:
    from mcp import Client  # the SDK loads with the first server, not with the engine

log = logging.getLogger(__name__)
# The SDK and its HTTP client log a server's URL (INFO: every request; DEBUG: the connection), and a
# URL may carry a key in its query: those loggers say only warnings.
for _name in ("httpx2", "httpcore2", "mcp.client.streamable_http"):
    logging.getLogger(_name).setLevel(logging.WARNING)

START_TIMEOUT_S = 60.0  # a first `npx -y …` downloads its package; a handshake is otherwise < 1 s
RETRY_S = 30.0
STOP_TIMEOUT_S = 8.0    # the SDK's own escalation: stdin closed, 2 s, SIGTERM to the group, 2 s, SIGKILL
LOG_KEEP_BYTES = 256 * 1024
POLL_S = 0.05
MAX_DESCRIPTION = 1024  # characters of a tool's description a prompt carries
MAX_SCHEMA = 8192       # characters of its arguments' JSON schema

# States a server is in, as the Tools panel shows them.
STOPPED, STARTING, RUNNING, CRASHED, FAILED, DISABLED = "stopped", "starting", "running", "crashed", "failed", "disabled"


class Submits(Protocol):
    """Where a server's coroutines run: the hub's loop (`McpLoop`), made at the first start."""

    def submit(self, coro: Coroutine) -> Future: ...


class McpLoop:
    """The "mcp" thread and its asyncio loop, started with the first server, ended by `close`."""

    def __init__(self):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._main, name="mcp", daemon=True)
        self.thread.start()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def submit(self, coro: Coroutine) -> Future:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


def _wait(future: Future, timeout: float, cancel: threading.Event | None = None) -> Any:
    """The future's result within `timeout`, given up early when `cancel` is set (the coroutine is
    cancelled on the loop either way)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return future.result(POLL_S)
        except FutureTimeout:
            if (cancel is not None and cancel.is_set()) or time.monotonic() > deadline:
                future.cancel()
                raise


class McpServer(ToolSource):
    """One configured server, a ToolSource: `tools()` starts it if it is not running; `call()` runs
    one tool with the server's timeout and stops when its `cancel` is set."""

    def __init__(self, config: McpServerConfig, loop: Submits, log_dir: Path):
        self.config = config
        self.name = config.name
        self.timeout_s = config.timeout_s
        self._loop = loop
        self.log_path = log_dir / f"{config.name}.log"
        self._lock = threading.Lock()  # guards what snapshot() reads; the loop writes it
        self._state = DISABLED if config.disabled else STOPPED
        self._error = ""
        self._tools: tuple[Tool, ...] = ()
        self._failed_at = 0.0
        self._started_s: float | None = None  # the last start's seconds to a listed set of tools
        self._session: _Session | None = None  # the running one (loop thread only)
        self._start_lock = threading.Lock()  # one start at a time across calling threads

    # ---- what any thread may read
    def snapshot(self) -> dict:
        with self._lock:
            return {"name": self.name, "state": self._state, "error": self._error, "transport": self.config.transport,
                    "target": self.config.key, "timeout_s": self.timeout_s, "started_s": self._started_s,
                    "tools": [{"name": t.name, "description": t.description, "parameters": t.parameters}
                              for t in self._tools]}

    def stderr_tail(self, max_bytes: int = 16_384) -> str:
        """The last lines the server wrote to stderr (an HTTP server has none here)."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(0, 2)
                size = f.tell()
                f.seek(max(0, size - max_bytes))
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    @property
    def state(self) -> str:
        with self._lock:
            return self._state

    def _publish(self, state: str, error: str = "", tools: tuple[Tool, ...] | None = None) -> None:
        with self._lock:
            self._state, self._error = state, error
            if tools is not None:
                self._tools = tools

    # ---- ToolSource
    def tools(self) -> tuple[Tool, ...]:
        self.ensure_started()
        with self._lock:
            return self._tools

    def call(self, name: str, arguments: dict, cancel: threading.Event) -> ToolResult:
        self.ensure_started()
        future = self._loop.submit(self._call(name, arguments))
        try:
            return _wait(future, self.timeout_s + 1.0, cancel)  # the runner's own timeout comes first
        except FutureTimeout:
            raise ToolFailed("stopped" if cancel.is_set() else f"no answer within {self.timeout_s:g} s") from None

    # ---- lifecycle (any thread; the work runs on the loop)
    def ensure_started(self, force: bool = False) -> None:
        """Running on return, or ToolFailed saying why not. `force`: try again now after a
        failed start (the panel's Restart)."""
        with self._start_lock:
            state = self.state
            if state == RUNNING:
                return
            if state == DISABLED:
                raise ToolFailed(f"the MCP server {self.name!r} is turned off")
            if state == FAILED and not force and time.monotonic() - self._failed_at < RETRY_S:
                with self._lock:
                    raise ToolFailed(self._error)
            ready: Future = Future()
            self._publish(STARTING)
            self._loop.submit(self._run_session(ready))
            try:
                _wait(ready, START_TIMEOUT_S)
            except FutureTimeout:
                self._loop.submit(self._close_session())
                self._fail(f"did not start within {START_TIMEOUT_S:g} s")
            except ToolFailed as exc:
                self._fail(str(exc))
            if self.state != RUNNING:
                with self._lock:
                    raise ToolFailed(self._error)

    def _fail(self, error: str) -> None:
        self._failed_at = time.monotonic()
        self._publish(FAILED, error)
        log.warning("MCP server %s failed to start: %s", self.name, error)

    def stop(self) -> None:
        """Stop the server (its process group, for stdio) and wait for it. Turning a server off is
        a config change: `McpServers.configure` stops it and makes it again, disabled."""
        if self._session is not None or self.state in (STARTING, RUNNING, CRASHED):
            try:
                self._loop.submit(self._close_session()).result(STOP_TIMEOUT_S)
            except (FutureTimeout, Exception) as exc:  # noqa: BLE001 - stopping goes on regardless
                log.warning("MCP server %s did not stop cleanly: %s", self.name, exc)
        self._publish(STOPPED)

    # ---- on the loop thread
    async def _run_session(self, ready: Future) -> None:
        from mcp import Client  # the SDK loads with the first server, not with the engine

        if self._session is not None:  # a crashed one still unwinding
            await self._close_session()
        task = asyncio.current_task()
        assert task is not None  # this runs as a task on the loop
        session = self._session = _Session(task, asyncio.Event())
        t0 = time.monotonic()
        errlog = http = None
        try:
            target, errlog, http = self._target()
            async with Client(target, read_timeout_seconds=self.timeout_s, client_info=_client_info()) as client:
                session.client = client
                listed = await client.list_tools()
                tools = tuple(_tool(t) for t in listed.tools)
                if ready.done():  # the caller gave up waiting (start timeout): this start ends here
                    return
                self._started_s = time.monotonic() - t0
                self._publish(RUNNING, tools=tools)
                log.info("MCP server %s: %d tools in %.2f s", self.name, len(tools), self._started_s)
                ready.set_result(None)
                await session.closing.wait()
        except asyncio.CancelledError:
            pass
        except BaseException as exc:  # noqa: BLE001 - a server's failure is reported, never the app's
            said = self._scrub(_said(exc))
            if not ready.done():
                ready.set_exception(ToolFailed(said + _last_line(self.stderr_tail(2048))))
            elif self.state == RUNNING:
                self._publish(CRASHED, said)
        finally:
            session.client = None
            if self._session is session:
                self._session = None
            if errlog is not None:
                errlog.close()
            if http is not None:  # given to the SDK, so not closed by it
                await http.aclose()

    def _target(self):
        """What the SDK connects to, and what to close afterwards: the stderr log file (stdio) or
        the HTTP client (streamable HTTP)."""
        if self.config.url:
            import httpx2  # the SDK's HTTP client
            from mcp.client.streamable_http import streamable_http_client

            http = httpx2.AsyncClient(headers=dict(self.config.headers),
                                      timeout=httpx2.Timeout(self.timeout_s, read=self.timeout_s + 5))
            return streamable_http_client(self.config.url, http_client=http), None, http
        from mcp.client.stdio import StdioServerParameters, stdio_client

        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        _trim(self.log_path)
        errlog = open(self.log_path, "a", encoding="utf-8", errors="replace")
        errlog.write(f"--- started {time.strftime('%Y-%m-%d %H:%M:%S')}: {self.config.command}\n")
        errlog.flush()
        params = StdioServerParameters(command=self.config.command, args=list(self.config.args),
                                       env=dict(self.config.env) or None, cwd=self.config.cwd or None)
        return stdio_client(params, errlog=errlog), errlog, None

    async def _call(self, name: str, arguments: dict) -> ToolResult:
        session = self._session
        if session is None or session.client is None:
            raise ToolFailed(f"the MCP server {self.name!r} is not running")
        client = session.client
        try:
            result = await client.call_tool(name, arguments)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - the connection, a protocol error, the server's
            said = self._scrub(_said(exc))
            if _connection_lost(exc):
                said = f"the MCP server stopped during the call ({said})" + _last_line(self.stderr_tail(2048))
                self._publish(CRASHED, said)
                session.closing.set()  # the session unwinds; the next use starts the server again
            raise ToolFailed(said) from None
        return ToolResult(_text(result), bool(result.is_error))

    def _scrub(self, text: str) -> str:
        """An error's text with the config's secrets masked (an HTTP error quotes its URL)."""
        c = self.config
        if c.url:
            text = text.replace(c.url, masked_url(c.url))
        for value in (*c.env.values(), *c.headers.values()):
            if len(value) >= 4:
                text = text.replace(value, MASK)
        return text

    async def _close_session(self) -> None:
        session = self._session
        if session is None:
            return
        session.closing.set()
        try:
            await asyncio.wait_for(asyncio.shield(session.task), STOP_TIMEOUT_S - 1)
        except (asyncio.TimeoutError, Exception):  # noqa: BLE001
            session.task.cancel()


class _Session:
    """One start of a server: its task on the loop, the SDK client once connected, and the event
    that ends it."""

    def __init__(self, task: asyncio.Task, closing: asyncio.Event):
        self.task, self.closing = task, closing
        self.client: Client | None = None  # once connected


class McpServers:
    """The configured servers, one McpServer each on a shared "mcp" loop (started with the first
    use). `sources()` are the enabled ones, for the ToolRunner."""

    def __init__(self, configs: list[McpServerConfig], log_dir: Path):
        self.log_dir = log_dir
        self._loop: McpLoop | None = None
        self._servers: dict[str, McpServer] = {}
        self._lock = threading.RLock()  # the engine's turn lists sources while the panel may reconfigure
        self.configure(configs)

    def _get_loop(self) -> McpLoop:
        with self._lock:
            if self._loop is None:
                self._loop = McpLoop()
            return self._loop

    def configure(self, configs: list[McpServerConfig]) -> None:
        """Take a new config (mcp.json changed): a server whose entry changed or went is stopped."""
        new = {c.name: c for c in configs}
        with self._lock:
            self._configure(new)

    def _configure(self, new: dict[str, McpServerConfig]) -> None:
        for name, server in list(self._servers.items()):
            if name not in new or new[name] != server.config:
                server.stop()
                del self._servers[name]
        for name, config in new.items():
            if name not in self._servers:
                self._servers[name] = McpServer(config, _LazyLoop(self._get_loop), self.log_dir)

    def servers(self) -> list[McpServer]:
        with self._lock:
            return list(self._servers.values())

    def get(self, name: str) -> McpServer | None:
        with self._lock:
            return self._servers.get(name)

    # ---- a kind of source (engine/tools/base.py SourceKind): each configured server
    def sources(self) -> list[ToolSource]:
        return [s for s in self.servers() if s.state != DISABLED]

    def panel(self) -> list[dict]:
        out = []
        for server in self.servers():
            snap = server.snapshot()
            tools = tuple(Tool(t["name"], t["description"], t["parameters"]) for t in snap.pop("tools"))
            out.append({**snap, "stderr": server.stderr_tail(), "config": server.config.shown(), "tools": tools})
        return out

    def close(self) -> None:
        """Stop every server (the app quits) and end the loop."""
        with self._lock:
            servers, self._servers = list(self._servers.values()), {}
        for server in servers:
            server.stop()
        with self._lock:
            loop, self._loop = self._loop, None
        if loop is not None:
            loop.close()


class _LazyLoop:
    """The hub's loop, made at a server's first start rather than with the hub."""

    def __init__(self, get):
        self._get = get

    def submit(self, coro: Coroutine) -> Future:
        return self._get().submit(coro)


def self_check() -> dict:
    """The SDK works in this install (the bundle's selftest): a server made in-process, its tool
    listed and called through the client, over the SDK's in-memory transport."""
    from mcp import Client
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("selftest")

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    async def run() -> tuple[list[str], str]:
        async with Client(server) as client:
            listed = await client.list_tools()
            result = await client.call_tool("add", {"a": 2, "b": 3})
            return [t.name for t in listed.tools], _text(result)

    t0 = time.monotonic()
    names, text = asyncio.run(run())
    return {"ok": names == ["add"] and text == "5", "tools": names, "result": text,
            "ms": round((time.monotonic() - t0) * 1000)}


def _client_info():
    from mcp.types import Implementation

    return Implementation(name="offline-assistant", version=__version__)


def _tool(t) -> Tool:
    """A server's tool as a turn offers it. Its description and schema go into every prompt, so a
    server cannot make them huge: a description past MAX_DESCRIPTION is cut, and a schema past
    MAX_SCHEMA becomes "any object" (the call still parses)."""
    schema = t.input_schema if isinstance(t.input_schema, dict) else {"type": "object"}
    text = json.dumps(schema, ensure_ascii=False)
    if len(text) > MAX_SCHEMA:
        text = json.dumps({"type": "object"})
    description = (t.description or "").strip()
    if len(description) > MAX_DESCRIPTION:
        description = description[:MAX_DESCRIPTION] + "…"
    return Tool(t.name, description, text)


def _text(result) -> str:
    """A tool result's content as the text the model reads: text parts as they are, anything else
    named (an image cannot be read by a text model)."""
    parts = []
    for part in result.content or ():
        kind = getattr(part, "type", "")
        if kind == "text":
            parts.append(part.text)
        elif kind == "resource" and hasattr(part.resource, "text"):
            parts.append(part.resource.text)
        elif kind in ("image", "audio"):
            parts.append(f"[{kind}: {part.mime_type}, {len(part.data) * 3 // 4:,} bytes, not shown to the model]")
        elif kind == "resource_link":
            parts.append(f"[resource: {part.uri}]")
        else:
            parts.append(f"[{kind or 'unknown'} content]")
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    return "\n".join(parts)


def _said(exc: BaseException) -> str:
    """An exception as a line for the user; a group (anyio's) by its first real member."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, FileNotFoundError):
        return f"the command was not found: {exc.filename or exc}"
    if isinstance(exc, PermissionError):
        return f"the command may not be run: {exc.filename or exc}"
    text = str(exc) or type(exc).__name__
    return text if len(text) <= 300 else text[:300] + "…"


def _connection_lost(exc: BaseException) -> bool:
    text = str(exc).lower()
    return ("connection closed" in text or isinstance(exc, (ConnectionError, EOFError))
            or "connect" in type(exc).__name__.lower())  # httpx2's ConnectError and kin


def _last_line(text: str) -> str:
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("--- started")]
    return f" (stderr: {lines[-1][:200]})" if lines else ""


def _trim(path: Path) -> None:
    """Keep the log's last LOG_KEEP_BYTES: a chatty server does not fill the disk."""
    try:
        if path.stat().st_size > LOG_KEEP_BYTES * 2:
            with open(path, "rb") as f:
                f.seek(-LOG_KEEP_BYTES, 2)
                tail = f.read()
            path.write_bytes(tail)
    except OSError:
        pass
