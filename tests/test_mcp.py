"""MCP servers as tool sources (issue 26), against a real server written with the SDK's MCPServer
(tests/mcp_servers/toolbench.py) over stdio and streamable HTTP on loopback: its tools listed and
called, a timeout, Stop mid-call, a crash reported and the server started again on the next use,
a megabyte cut to size, a prompt injection that stays data, secrets that never reach a log or the
panel, and the process group gone when the app quits. mcp.json in Claude Desktop's format, and
importing another app's file."""

from __future__ import annotations

import json
import logging
import os
import socket
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from engine.api import BuiltinTools, Toolbox, ToolResultEvent, ToolRunner, TurnDone, TurnTools
from engine.tools import mcp_config
from engine.tools.mcp_server import CRASHED, DISABLED, RUNNING, McpServers
from tests.fake_backend import Answer, fakes, make_assistant  # noqa: F401
from tests.mcp_servers.toolbench import INJECTION

ROOT = Path(__file__).resolve().parent.parent
SECRET = "sk-test-5ecret-value-never-shown"


def stdio_config(name: str = "bench", **extra) -> dict:
    return {"command": sys.executable, "args": ["-m", "tests.mcp_servers.toolbench"], "cwd": str(ROOT),
            "env": {"BENCH_TOKEN": SECRET}, **extra}


def servers_from(entries: dict, tmp_path: Path) -> McpServers:
    configs, problems = mcp_config.parse(json.dumps({"mcpServers": entries}))
    assert not problems
    return McpServers(configs, tmp_path / "logs")


def call(runner: ToolRunner, name: str, args: dict, cancel: threading.Event | None = None) -> ToolResultEvent:
    runner.use()
    return runner.run({"id": "call_1", "function": {"name": name, "arguments": json.dumps(args)}},
                      cancel or threading.Event(), lambda approval: "once")


@pytest.fixture
def hub(tmp_path):
    made = []

    def make(entries: dict) -> McpServers:
        made.append(servers_from(entries, tmp_path))
        return made[-1]

    yield make
    for h in made:
        h.close()


# ---- mcp.json
def test_claude_desktop_format_reads_and_a_bad_entry_costs_only_itself():
    text = json.dumps({"mcpServers": {
        "files": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"],
                  "env": {"TOKEN": SECRET}},
        "web": {"url": "https://example.com/mcp", "headers": {"Authorization": f"Bearer {SECRET}"}, "timeout": 5},
        "old": {"type": "sse", "url": "https://example.com/sse"},
        "both": {"command": "x", "url": "http://x"},
        "args": {"command": "x", "args": "not a list"},
    }, "globalShortcut": "Ctrl+Space"})
    configs, problems = mcp_config.parse(text)
    assert [c.name for c in configs] == ["files", "web"]
    files, web = configs
    assert files.transport == "stdio" and files.args[-1] == "/tmp" and web.transport == "http" and web.timeout_s == 5
    assert len(problems) == 3
    assert "SSE" in problems[0] and "either" in problems[1] and "args" in problems[2]
    for c in configs:  # secrets: masked where shown, absent from a repr
        assert SECRET not in json.dumps(c.shown()) and SECRET not in repr(c)
    assert files.shown()["env"] == {"TOKEN": mcp_config.MASK}


@pytest.mark.parametrize("text, words", [("{not json", "not valid JSON"), ("[]", "JSON object"),
                                         ('{"mcpServers": []}', "object of named servers")])
def test_an_unreadable_config_says_why(text, words):
    with pytest.raises(mcp_config.McpConfigError, match=words):
        mcp_config.parse(text)


def test_import_adds_new_servers_keeps_the_users_and_writes_owner_only(tmp_path):
    target, source = tmp_path / "mcp.json", tmp_path / "claude_desktop_config.json"
    mcp_config.write(target, [mcp_config.parse_server("files", {"command": "mine"})])
    source.write_text(json.dumps({"mcpServers": {"files": {"command": "theirs"}, "git": {"command": "uvx",
                                                                                          "args": ["mcp-server-git"]},
                                                 "bad": {"command": 3}}}))
    report = mcp_config.import_into(target, source)
    assert report.added == ["git"] and report.skipped == ["files: a different server has this name here"]
    assert len(report.problems) == 1
    configs, _ = mcp_config.read(target)
    assert [(c.name, c.command) for c in configs] == [("files", "mine"), ("git", "uvx")]
    if os.name == "posix":
        assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert mcp_config.import_into(target, source).added == []  # twice: nothing new


# ---- a real server over stdio
def test_stdio_server_lists_and_calls_tools_and_keeps_its_stderr(hub, caplog):
    caplog.set_level(logging.DEBUG)
    servers = hub({"bench": stdio_config()})
    (server,) = servers.servers()
    names = [t.name for t in server.tools()]
    assert {"add", "echo", "slow", "crash", "big", "fetch_page"} <= set(names)
    assert server.state == RUNNING and server.snapshot()["started_s"] > 0
    runner = ToolRunner(servers.sources())
    assert call(runner, "add", {"a": 2, "b": 3}).text == "5"
    assert call(runner, "echo", {"text": "你好, MCP"}).text == "你好, MCP"
    # env reaches the server; our side never logs or shows it
    assert call(runner, "env_value", {"name": "BENCH_TOKEN"}).text == SECRET
    assert "toolbench started" in server.stderr_tail()
    assert SECRET not in caplog.text and SECRET not in json.dumps(server.snapshot())


def test_a_slow_tool_times_out_stop_ends_a_call_and_the_server_stays_up(hub):
    servers = hub({"bench": stdio_config(timeout=1)})
    runner = ToolRunner(servers.sources())
    t0 = time.monotonic()
    out = call(runner, "slow", {"seconds": 30})
    assert out.status == "timeout" and time.monotonic() - t0 < 5
    cancel = threading.Event()
    threading.Timer(0.3, cancel.set).start()
    t0 = time.monotonic()
    runner.timeouts["bench"] = 30
    out = call(runner, "slow", {"seconds": 30}, cancel)
    assert out.status == "cancelled" and time.monotonic() - t0 < 2
    assert call(runner, "add", {"a": 1, "b": 1}).text == "2"  # the same server, still running


def test_a_crash_is_reported_and_the_next_use_starts_the_server_again(hub):
    servers = hub({"bench": stdio_config()})
    (server,) = servers.servers()
    runner = ToolRunner(servers.sources())
    assert call(runner, "add", {"a": 1, "b": 2}).text == "3"
    out = call(runner, "crash", {})
    assert out.status == "failed"
    snap = server.snapshot()
    assert snap["state"] == CRASHED and "crashing on purpose" in snap["error"] + server.stderr_tail()
    assert call(runner, "add", {"a": 2, "b": 2}).text == "4"  # started again on its next use
    assert server.state == RUNNING


def test_a_megabyte_result_is_cut_and_an_injection_stays_a_result(hub):
    servers = hub({"bench": stdio_config()})
    runner = ToolRunner(servers.sources())
    out = call(runner, "big", {})
    assert out.status == "ok" and len(out.text) < 17_000 and "1,048,576 characters" in out.text
    assert call(runner, "fetch_page", {"url": "http://example.com"}).text == INJECTION


def test_a_missing_command_fails_clearly_and_is_not_retried_every_turn(hub):
    servers = hub({"ghost": {"command": "no-such-mcp-server-here"}})
    runner = ToolRunner(servers.sources())
    t0 = time.monotonic()
    assert runner.use() is None  # nothing offered; the turn goes on without it
    (server,) = servers.servers()
    assert server.state == "failed" and "not found" in server.snapshot()["error"]
    runner.use()
    assert time.monotonic() - t0 < 10


def test_quitting_ends_the_servers_process_group(hub):
    servers = hub({"bench": stdio_config()})
    runner = ToolRunner(servers.sources())
    assert call(runner, "add", {"a": 1, "b": 1}).text == "2"
    pid = _server_pid(servers)
    servers.close()
    deadline = time.monotonic() + 10
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(pid)


def _server_pid(servers: McpServers) -> int:
    tail = servers.servers()[0].stderr_tail()
    return int(tail.rsplit("(pid ", 1)[1].split(")")[0])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is gone for our purpose
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


# ---- streamable HTTP on loopback
@pytest.fixture
def http_server():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "tests.mcp_servers.toolbench", "http", str(port)], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            break
        except OSError:
            time.sleep(0.1)
    yield f"http://127.0.0.1:{port}/mcp"
    proc.terminate()
    proc.wait(10)


def test_streamable_http_server_with_secret_headers(hub, http_server, caplog):
    caplog.set_level(logging.DEBUG)
    servers = hub({"web": {"url": http_server + f"?key={SECRET}", "headers": {"Authorization": f"Bearer {SECRET}"}}})
    runner = ToolRunner(servers.sources())
    assert call(runner, "add", {"a": 20, "b": 22}).text == "42"
    assert call(runner, "echo", {"text": "over HTTP"}).text == "over HTTP"
    assert SECRET not in caplog.text and SECRET not in json.dumps(servers.servers()[0].snapshot())


def test_an_http_server_that_is_not_there_fails_clearly(hub):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    servers = hub({"gone": {"url": f"http://127.0.0.1:{port}/mcp"}})
    assert ToolRunner(servers.sources()).use() is None
    assert servers.servers()[0].state == "failed"


# ---- the toolbox the window uses, and the loop
def test_toolbox_switches_always_and_server_off(tmp_path):
    path = tmp_path / "mcp.json"
    mcp_config.write(path, [mcp_config.parse_server("bench", stdio_config())])
    box = Toolbox(BuiltinTools(), lambda text: len(text) // 4,
                  config_path=path, log_dir=tmp_path / "logs")
    try:
        offered = {t.name for t in box.runner().use().tools}
        assert {"calculator", "current_datetime", "add", "echo"} <= offered
        snap = {s["name"]: s for s in box.snapshot()}
        assert snap["bench"]["state"] == RUNNING and snap["bench"]["config"]["env"] == {"BENCH_TOKEN": mcp_config.MASK}
        add = next(t for t in snap["bench"]["tools"] if t["name"] == "add")
        assert add["enabled"] and not add["always"] and add["tokens"] > 10
        box.set_tool_enabled("bench/add", False)
        assert "add" not in {t.name for t in box.runner().use().tools}
        runner = box.runner()
        call_ = {"id": "c", "function": {"name": "echo", "arguments": '{"text": "hi"}'}}
        runner.use()
        assert runner.run(call_, threading.Event(), lambda a: "always").text == "hi"
        assert "bench/echo" in json.loads((box.permissions.path).read_text())["always"]
        box.revoke("bench/echo")
        asked = []
        box.runner().run(call_, threading.Event(), lambda a: asked.append(a) or "deny")
        assert asked and asked[0].server == "bench" and asked[0].arguments == {"text": "hi"}
        box.set_server_enabled("bench", False)
        assert json.loads(path.read_text())["mcpServers"]["bench"]["disabled"] is True
        assert box.servers.get("bench").state == DISABLED
        assert "add" not in {t.name for t in box.runner().use().tools} and "echo" not in {
            t.name for t in box.runner().use().tools}
    finally:
        box.close()


def test_an_mcp_call_in_the_loop_and_its_injection_stored_as_a_tool_message(fakes, make_assistant, hub):
    """The window's loop with a real server: approved, run, its output back to the model as a tool
    result (data) and stored in the tool role, and the answer uses it."""
    a = make_assistant(str(fakes.model_file("m")))
    fake = fakes.backend("m")
    call_text = '<tool_call>\n{"name": "fetch_page", "arguments": {"url": "http://example.com"}}\n</tool_call>'
    fakes.script("m").enqueue(Answer(call_text), Answer("The page asks me to ignore you; I won't."))
    runner = ToolRunner(hub({"bench": stdio_config()}).sources())
    cid = a.new_conversation("")
    asked = []
    events = list(a.send(cid, "Read example.com", tools=TurnTools(runner, lambda ap: asked.append(ap) or "once")))
    assert [(ap.server, ap.tool, ap.arguments) for ap in asked] == [("bench", "fetch_page", {"url": "http://example.com"})]
    result = next(e for e in events if isinstance(e, ToolResultEvent))
    assert result.status == "ok" and result.text == INJECTION
    assert [e for e in events if isinstance(e, TurnDone)][-1].text.startswith("The page")
    stored = [m for m in a.transcript(cid) if m["role"] == "tool"]
    assert len(stored) == 1 and stored[0]["content"] == INJECTION
    plain = fake.vocab.tokenize(INJECTION, special=False)
    prompt = fake.prompts[-1]
    assert any(prompt[i:i + len(plain)] == plain for i in range(len(prompt)))  # the bytes, as text
