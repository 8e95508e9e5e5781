"""Tools in the window (issue 26), driven as a user would: an MCP server configured in mcp.json
(the real test server, tests/mcp_servers/toolbench.py, over stdio), "Tools" on under the chat, a
question the model answers with a call. The approval dialog shows the server, the tool and the
exact arguments; Allow once runs it, Deny tells the model so, Always is remembered and revocable
in the Tools panel. Calls and results show as collapsed blocks in the answer, also when the chat is
read back. The model is the scripted fake backend (the turn logic and the window are under test;
tests/model/test_tool_calls.py has the real model's calls). Screenshots of the dialog, the panel
and an answer with a call, in English and Chinese (ASSISTANT_SCREENSHOTS=docs/screenshots
refreshes the docs')."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from PySide6.QtCore import QUrl

from engine.api import Settings, Tool, mcp_config_path
from engine.tools.toolbox import prompt_entry
from tests.fake_backend import Answer, fakes, make_assistant  # noqa: F401

from .helpers import fake_window, in_language, save_screenshot, screenshot_dir
from .test_message_actions import click, settled

ROOT = Path(__file__).resolve().parents[2]
SECRET = "sk-window-secret"


def call_text(name: str, args: dict) -> str:
    return f'<tool_call>\n{json.dumps({"name": name, "arguments": args})}\n</tool_call>'



@pytest.fixture
def window(qtbot, fakes, make_assistant):
    path = mcp_config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"mcpServers": {"bench": {
        "command": sys.executable, "args": ["-m", "tests.mcp_servers.toolbench"], "cwd": str(ROOT),
        "env": {"BENCH_TOKEN": SECRET}}}}))
    Settings.shared().set("tools.enabled", True)
    model = str(fakes.model_file("m"))
    w = fake_window(qtbot, lambda: make_assistant(model), max_tokens=400, welcome_done=False)
    # The fake model's file has no vocabulary for Assistant.count_tokens: the panel counts with the
    # fake backend's (a token per byte), as the app counts with the L1 model's.
    w.worker.toolbox.count_tokens = lambda text: len(fakes.backend("m").vocab.tokenize(text, special=False))
    yield w
    w.close()
    Settings.shared().set("tools.enabled", False)


def ask(qtbot, w, text: str):
    w.composer.edit.setPlainText(text)
    w.composer.send_button.click()
    assert w.busy


def approval(qtbot, w):
    qtbot.waitUntil(lambda: w.approvals.dialog is not None and w.approvals.dialog.isVisible(), timeout=60_000)
    return w.approvals.dialog


def finished(qtbot, w):
    qtbot.waitUntil(lambda: not w.busy, timeout=60_000)
    return w.last_done


def test_approve_deny_and_always_in_the_window(qtbot, window, fakes):
    w, script, fake = window, fakes.script("m"), fakes.backend("m")
    assert w.tools_toggle.isChecked()
    # Allow once: the dialog says which server, which tool, the exact arguments
    script.enqueue(Answer("Let me add them." + call_text("add", {"a": 2, "b": 3})), Answer("2 + 3 = 5."))
    ask(qtbot, w, "What is 2 + 3?")
    dialog = approval(qtbot, w)
    assert dialog.approval.server == "bench" and dialog.approval.tool == "add"
    assert json.loads(dialog.arguments.toPlainText()) == {"a": 2, "b": 3}
    dialog.once_button.click()
    done = finished(qtbot, w)
    assert done.text == "2 + 3 = 5."
    (block,) = w.chat.transcript.tool_blocks()
    assert (block.status, block.text, block.server) == ("ok", "5", "bench")
    shown = w.view.toPlainText()
    assert "Let me add them." in shown and "Tool: add · bench" in shown and "2 + 3 = 5." in shown
    assert '"a": 2' not in shown  # collapsed: the arguments show on click
    i = len(w.view.messages) - 1
    w.view._on_link(QUrl(f"tool:{i}.1"))
    assert '"a": 2' in w.view.toPlainText() and "5" in w.view.toPlainText()
    # Deny: the model is told, and answers without it
    script.enqueue(Answer(call_text("echo", {"text": "secret plans"})), Answer("Understood, I won't."))
    ask(qtbot, w, "Echo my secret plans")
    approval(qtbot, w).deny_button.click()
    finished(qtbot, w)
    assert w.chat.transcript.tool_blocks()[-1].status == "denied"
    assert b"The user declined this call." in bytes(t for t in fake.prompts[-1] if t < 256)
    # Always: remembered, no dialog the next time
    script.enqueue(Answer(call_text("add", {"a": 1, "b": 1})), Answer("Two."),
                   Answer(call_text("add", {"a": 2, "b": 2})), Answer("Four."))
    ask(qtbot, w, "1 + 1?")
    approval(qtbot, w).always_button.click()
    finished(qtbot, w)
    assert "bench/add" in w.worker.toolbox.permissions.always
    ask(qtbot, w, "2 + 2?")
    finished(qtbot, w)
    assert w.approvals.dialog is None and w.chat.transcript.tool_blocks()[-1].text == "4"
    # read back: the blocks are there, folded into their answers
    cid, seen = w.conversation_id, []
    w.worker.call(lambda a: a.messages(cid), seen.append)
    qtbot.waitUntil(lambda: bool(seen), timeout=10_000)
    w.chat.show_history(cid, seen[0])
    assert [b.tool for b in w.chat.transcript.tool_blocks()] == ["add", "echo", "add", "add"]
    assert [m.role for m in w.view.messages] == ["user", "assistant"] * 4
    # the Tools panel: the server running, its tools with their cost, "always" revocable; no secret shown
    panel = w.open_tools()
    qtbot.waitUntil(lambda: any(s["name"] == "bench" and s["state"] == "running" for s in panel.sources), timeout=30_000)
    bench = next(s for s in panel.sources if s["name"] == "bench")
    add = next(t for t in bench["tools"] if t["name"] == "add")
    assert add["always"] and add["tokens"] == len(prompt_entry(Tool("add", add["description"], next(
        t for t in w.worker.toolbox.servers.get("bench").tools() if t.name == "add").parameters)).encode())
    assert SECRET not in json.dumps(panel.sources) and "toolbench started" in bench["stderr"]
    top = next(panel.tree.topLevelItem(k) for k in range(panel.tree.topLevelItemCount())
               if panel.tree.topLevelItem(k).text(0) == "bench")
    panel.tree.setCurrentItem(next(top.child(k) for k in range(top.childCount()) if top.child(k).text(0) == "add"))
    assert panel.revoke_button.isEnabled()
    panel.revoke_button.click()
    qtbot.waitUntil(lambda: "bench/add" not in w.worker.toolbox.permissions.always, timeout=10_000)
    panel.set_tool_enabled("bench", "echo", False)
    qtbot.waitUntil(lambda: "bench/echo" in w.worker.toolbox.permissions.disabled, timeout=10_000)
    panel.close()


def test_regenerate_edit_and_branch_run_the_tools_in_the_window(qtbot, window, fakes):
    """Tools on: every action that asks the model again runs the calls it makes (issue 39), not
    only Send. Each is driven as a user would: the message's toolbar, then the approval dialog."""
    w, script = window, fakes.script("m")

    def calls_then(a: int, b: int, words: str) -> None:
        script.enqueue(Answer(call_text("add", {"a": a, "b": b})), Answer(words))

    def approved_answer() -> str:
        approval(qtbot, w).once_button.click()
        text = finished(qtbot, w).text
        settled(qtbot, w)  # the messages shown carry their stored ids again
        return text

    calls_then(2, 3, "Five.")
    ask(qtbot, w, "What is 2 + 3?")
    assert approved_answer() == "Five."
    # Regenerate
    calls_then(2, 3, "It is five.")
    click(qtbot, w.view, len(w.view.messages) - 1, "regenerate")
    assert approved_answer() == "It is five." and w.chat.transcript.tool_blocks()[-1].text == "5"
    # Edit the message and send it again
    calls_then(4, 4, "Eight.")
    click(qtbot, w.view, w.chat.transcript.last_user_index(), "edit")
    ask(qtbot, w, "What is 4 + 4?")
    assert approved_answer() == "Eight." and w.chat.transcript.tool_blocks()[-1].text == "8"
    # A branch after the answer: its first message's calls run too
    calls_then(8, 1, "Nine.")
    click(qtbot, w.view, len(w.view.messages) - 1, "branch")
    ask(qtbot, w, "And 8 + 1?")
    assert approved_answer() == "Nine." and w.chat.transcript.tool_blocks()[-1].text == "9"
    rows = w.worker.assistant.transcript(w.conversation_id)  # the turn is over: nothing runs on the engine
    path = [(m["role"], m["content"]) for m in rows if not m["superseded"]]
    assert [c for r, c in path if r == "tool"] == ["8", "9"] and path[-1] == ("assistant", "Nine.")


def test_stop_while_a_call_waits_for_approval(qtbot, window, fakes):
    w = window
    fakes.script("m").enqueue(Answer(call_text("add", {"a": 5, "b": 5})), Answer("never"))
    ask(qtbot, w, "5 + 5?")
    approval(qtbot, w)
    w.stop()
    finished(qtbot, w)
    assert w.approvals.dialog is None
    assert w.chat.transcript.tool_blocks()[-1].status == "denied"


def test_screenshots_of_tools(qtbot, fakes, make_assistant, model_paths, tmp_path):
    """The approval dialog, the Tools panel and an answer with a tool call, in both languages."""
    from engine.inference.vocab import VocabTokenizer

    vocab = VocabTokenizer(model_paths["demo-small"])
    out = screenshot_dir(tmp_path)
    path = mcp_config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"mcpServers": {
        "bench": {"command": sys.executable, "args": ["-m", "tests.mcp_servers.toolbench"], "cwd": str(ROOT),
                  "env": {"BENCH_TOKEN": SECRET}},
        "files": {"command": "no-such-mcp-server", "args": ["--root", "~/Documents"]}}}))
    Settings.shared().set("tools.enabled", True)
    model = str(fakes.model_file("m"))
    for language in ("en", "zh_CN"):
        with in_language(language):
            w = fake_window(qtbot, lambda: make_assistant(model), max_tokens=400, welcome_done=False)
            w.worker.toolbox.count_tokens = vocab.count  # demo-small's, the default L1 (the fake has none)
            question = "What is 1234 × 5678?" if language == "en" else "1234 乘以 5678 等于多少？"
            answer = "1234 × 5678 = 7,006,652." if language == "en" else "1234 × 5678 = 7006652。"
            fakes.script("m").enqueue(Answer(call_text("calculator", {"expression": "1234 * 5678"})), Answer(answer))
            ask(qtbot, w, question)
            dialog = approval(qtbot, w)
            save_screenshot(qtbot, dialog, out / f"tool-approval-{language}.png", 520, 340)
            dialog.once_button.click()
            finished(qtbot, w)
            w.view._on_link(QUrl(f"tool:{len(w.view.messages) - 1}.0"))
            save_screenshot(qtbot, w, out / f"tool-answer-{language}.png", 1100, 720)
            panel = w.open_tools()
            panel.tree.setCurrentItem(panel.tree.topLevelItem(0))
            # the configured servers start when a turn lists tools: bench runs, "files" failed
            qtbot.waitUntil(lambda: any(s["name"] == "bench" and s["state"] == "running" for s in panel.sources),
                            timeout=30_000)
            item = next(panel.tree.topLevelItem(k) for k in range(panel.tree.topLevelItemCount())
                        if panel.tree.topLevelItem(k).text(0) == "bench")
            panel.tree.setCurrentItem(item)
            panel._show_details()
            save_screenshot(qtbot, panel, out / f"tools-panel-{language}.png", 860, 520)
            panel.close()
            w.close()
    vocab.close()
    Settings.shared().set("tools.enabled", False)
