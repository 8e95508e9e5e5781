"""The window's tool loop on the scripted fake backend (issue 26): model → call → approval → run →
result → model, on one conversation whose KV each round extends; approval once, always and
denied; Stop during a running tool; a tool that outlives its timeout; a result cut to size; the
loop's bound; parallel calls."""

from __future__ import annotations

import json
import threading
import time

from engine.api import (BuiltinTools, ToolCallEvent, ToolFailed, ToolResult, ToolResultEvent,
                        ToolRunner, ToolSource, TurnDone, TurnTools)
from engine.tools.runner import MAX_ROUNDS
from engine.inference.tool_calls import Tool
from tests.fake_backend import Answer, fakes, make_assistant  # noqa: F401


def call_text(name: str, args: dict) -> str:
    return f'<tool_call>\n{json.dumps({"name": name, "arguments": args})}\n</tool_call>'


class Slow(ToolSource):
    """A source whose one tool waits until its call is stopped (or `seconds` pass)."""

    name = "slow"

    def __init__(self, seconds: float = 60.0):
        self.seconds, self.stopped = seconds, threading.Event()

    def tools(self):
        return (Tool("wait", "Wait a while"),)

    def call(self, name, arguments, cancel):
        if cancel.wait(self.seconds):
            self.stopped.set()
            raise ToolFailed("stopped")
        return ToolResult("waited")


class Big(ToolSource):
    name = "big"

    def tools(self):
        return (Tool("dump", "A megabyte of text"),)

    def call(self, name, arguments, cancel):
        return ToolResult("x" * (1 << 20))


def run(assistant, cid, text, runner, approve=lambda a: "once", max_rounds=MAX_ROUNDS, **kw):
    return list(assistant.send(cid, text, tools=TurnTools(runner, approve, max_rounds), **kw))


def kinds(events):
    return [type(e).__name__ for e in events if not type(e).__name__.endswith("Chunk")]


def test_a_call_is_approved_run_and_its_result_answered_on_the_same_kv(fakes, make_assistant):
    a = make_assistant(str(fakes.model_file("m")))
    fake = fakes.backend("m")
    fakes.script("m").enqueue(Answer("Let me compute. " + call_text("calculator", {"expression": "2 ** 10"})),
                              Answer("It is 1024."))
    asked = []
    cid = a.new_conversation("")
    events = run(a, cid, "What is 2 to the 10th?", ToolRunner([BuiltinTools()]), lambda ap: asked.append(ap) or "once")
    assert kinds(events) == ["TurnDone", "ToolCallEvent", "ToolResultEvent", "TurnDone"]
    (approval,) = asked
    assert (approval.server, approval.tool, approval.arguments) == ("builtin", "calculator", {"expression": "2 ** 10"})
    result = next(e for e in events if isinstance(e, ToolResultEvent))
    assert (result.status, result.text) == ("ok", "1024")
    assert [(m.role, m.content) for m in a.conversation(cid).messages] == [
        ("user", "What is 2 to the 10th?"), ("assistant", "Let me compute. "), ("tool", "1024"), ("assistant", "It is 1024.")]
    # the second round read the result turn only: its prompt extends the first's KV
    first, second = fake.prompts[-2], fake.prompts[-1]
    assert second[:len(first)] == first and "1024" in fake.text(second[len(first):])


def test_deny_always_and_parallel_calls(fakes, make_assistant):
    a = make_assistant(str(fakes.model_file("m")))
    two = call_text("current_datetime", {}) + call_text("current_datetime", {})
    fakes.script("m").enqueue(Answer(two), Answer("Done."), Answer(call_text("current_datetime", {})), Answer("Ok."),
                              Answer(call_text("calculator", {"expression": "1+1"})), Answer("No."))
    kept = []
    runner = ToolRunner([BuiltinTools()], remember=kept.append)
    asked = []
    events = run(a, a.new_conversation(""), "Time twice?", runner, lambda ap: asked.append(ap.key) or "always")
    assert asked == ["builtin/current_datetime"] and kept == ["builtin/current_datetime"]  # asked once for both
    assert [e.status for e in events if isinstance(e, ToolResultEvent)] == ["ok", "ok"]
    run(a, a.new_conversation(""), "Time?", runner, lambda ap: asked.append(ap.key) or "once")
    assert asked == ["builtin/current_datetime"]  # always: not asked again
    events = run(a, a.new_conversation(""), "1+1?", runner, lambda ap: "deny")
    denied = next(e for e in events if isinstance(e, ToolResultEvent))
    assert denied.status == "denied" and "declined" in denied.text
    assert isinstance(events[-1], TurnDone) and events[-1].text == "No."  # the model goes on from the refusal


def test_stop_ends_a_running_tool_and_the_loop(fakes, make_assistant):
    a = make_assistant(str(fakes.model_file("m")))
    fakes.script("m").enqueue(Answer(call_text("wait", {})), Answer("never"))
    slow = Slow()
    cancel = threading.Event()
    threading.Timer(0.3, cancel.set).start()
    t0 = time.monotonic()
    events = run(a, a.new_conversation(""), "wait", ToolRunner([slow]), cancel=cancel)
    assert time.monotonic() - t0 < 5 and slow.stopped.wait(2)
    assert [e.status for e in events if isinstance(e, ToolResultEvent)] == ["cancelled"]
    assert kinds(events)[-1] == "ToolResultEvent"  # no round after Stop


def test_a_tool_past_its_timeout_is_reported_and_the_model_goes_on(fakes, make_assistant):
    a = make_assistant(str(fakes.model_file("m")))
    fakes.script("m").enqueue(Answer(call_text("wait", {})), Answer("It took too long."))
    events = run(a, a.new_conversation(""), "wait", ToolRunner([Slow()], timeouts={"slow": 0.2}))
    result = next(e for e in events if isinstance(e, ToolResultEvent))
    assert result.status == "timeout" and "0.2 s" in result.text
    assert events[-1].text == "It took too long."


def test_a_megabyte_result_is_cut_to_size(fakes, make_assistant):
    a = make_assistant(str(fakes.model_file("m")))
    fakes.script("m").enqueue(Answer(call_text("dump", {})), Answer("Long."))
    cid = a.new_conversation("")
    events = run(a, cid, "dump", ToolRunner([Big()], max_result_chars=1000))
    result = next(e for e in events if isinstance(e, ToolResultEvent))
    assert len(result.text) < 1200 and "1,048,576 characters" in result.text
    assert a.conversation(cid).messages[2].content == result.text  # what the model read is what is kept


def test_the_loop_is_bounded_and_its_last_round_offers_no_call(fakes, make_assistant):
    a = make_assistant(str(fakes.model_file("m")))
    again = call_text("current_datetime", {})
    fakes.script("m").enqueue(*[Answer(again) for _ in range(4)])
    events = run(a, a.new_conversation(""), "loop", ToolRunner([BuiltinTools()]), max_rounds=3)
    assert sum(isinstance(e, ToolCallEvent) for e in events) == 3
    assert events[-1].tool_calls == [] and "<tool_call>" in events[-1].text  # choice none: words, not a call


def test_export_keeps_calls_and_results_and_escapes_everything_in_html(fakes, make_assistant):
    """Markdown, JSON and HTML exports carry an answer's calls and the tool results; the HTML page
    shows a model's or a tool's markup as text, never as markup (no script survives)."""
    from html.parser import HTMLParser

    a = make_assistant(str(fakes.model_file("m")))
    hostile = "<script>alert(1)</script><img src=x onerror=alert(2)>"
    fakes.script("m").enqueue(Answer(call_text("calculator", {"expression": "6 * 7"})), Answer(f"42 {hostile}"))
    cid = a.new_conversation("")
    run(a, cid, f"What is 6 * 7? {hostile}", ToolRunner([BuiltinTools()]))
    data = json.loads(a.export(cid, "json"))
    assert [m["role"] for m in data["messages"]] == ["user", "assistant", "tool", "assistant"]
    assert data["messages"][1]["tool_calls"][0]["function"]["name"] == "calculator"
    assert data["messages"][2]["content"] == "42" and data["messages"][2]["tool_call_id"]
    md = a.export(cid, "markdown")
    assert "**Tool result**" in md and "*Called `calculator`*" in md
    page = a.export(cid, "html")

    class Tags(HTMLParser):
        def __init__(self):
            super().__init__()
            self.tags = set()

        def handle_starttag(self, tag, attrs):
            self.tags.add(tag)

    parsed = Tags()
    parsed.feed(page)
    assert "script" not in parsed.tags and "img" not in parsed.tags
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "Tool call: calculator" in page


# ---- every entry point runs the tools (issue 39): the loop is a stage of the turn, not of `send`

def _calls_then_answer(fakes, answer: str) -> None:
    fakes.script("m").enqueue(Answer("Computing. " + call_text("calculator", {"expression": "6 * 7"})),
                              Answer(answer))


def _tool_rounds(events) -> list[str]:
    return [e.status for e in events if isinstance(e, ToolResultEvent)]


def _path(a, cid) -> list[tuple[str, str]]:
    return [(m.role, m.content) for m in a.conversation(cid).messages]


def test_regenerate_runs_the_tools(fakes, make_assistant):
    a = make_assistant(str(fakes.model_file("m")))
    cid = a.new_conversation("")
    fakes.script("m").enqueue(Answer("A guess: 40."))
    run(a, cid, "What is 6 * 7?", ToolRunner([]))  # no source: a plain turn
    _calls_then_answer(fakes, "It is 42.")
    events = list(a.regenerate(cid, tools=TurnTools(ToolRunner([BuiltinTools()]), lambda ap: "once")))
    assert _tool_rounds(events) == ["ok"]
    assert _path(a, cid) == [("user", "What is 6 * 7?"), ("assistant", "Computing. "), ("tool", "42"),
                             ("assistant", "It is 42.")]
    old = [r for r in a.transcript(cid) if r["superseded"]]
    assert [r["content"] for r in old] == ["A guess: 40."]  # the first answer stays as a branch


def test_an_edit_runs_the_tools(fakes, make_assistant):
    a = make_assistant(str(fakes.model_file("m")))
    cid = a.new_conversation("")
    fakes.script("m").enqueue(Answer("Seven."))
    run(a, cid, "What is 3 + 4?", ToolRunner([]))
    _calls_then_answer(fakes, "It is 42.")
    events = list(a.resend_edited(cid, "What is 6 * 7?", tools=TurnTools(ToolRunner([BuiltinTools()]),
                                                                         lambda ap: "once")))
    assert _tool_rounds(events) == ["ok"]
    assert _path(a, cid)[0] == ("user", "What is 6 * 7?") and _path(a, cid)[-1] == ("assistant", "It is 42.")


def test_a_branch_runs_the_tools(fakes, make_assistant):
    a = make_assistant(str(fakes.model_file("m")))
    cid = a.new_conversation("")
    fakes.script("m").enqueue(Answer("Hello."), Answer("Later turn."))
    run(a, cid, "Hi", ToolRunner([]))
    first_answer = a.conversation(cid).messages[1].id
    run(a, cid, "Something else", ToolRunner([]))
    _calls_then_answer(fakes, "It is 42.")
    events = list(a.send(cid, "What is 6 * 7?", after=first_answer,
                         tools=TurnTools(ToolRunner([BuiltinTools()]), lambda ap: "once")))
    assert _tool_rounds(events) == ["ok"]
    assert _path(a, cid) == [("user", "Hi"), ("assistant", "Hello."), ("user", "What is 6 * 7?"),
                             ("assistant", "Computing. "), ("tool", "42"), ("assistant", "It is 42.")]


def test_tool_results_sent_back_go_on_running_the_tools(fakes, make_assistant):
    """Continue: the chat ends with calls its caller ran; sending their results with the engine's
    tools on runs the next round's calls too."""
    from engine.api import GenerateParams

    a = make_assistant(str(fakes.model_file("m")))
    cid = a.new_conversation("")
    fakes.script("m").enqueue(Answer(call_text("current_datetime", {})))
    offered = ToolRunner([BuiltinTools()]).use()  # the caller's tools: it runs the calls itself
    list(a.send(cid, "What time is it, and what is 6 * 7?", GenerateParams(tools=offered)))
    (call,) = a.conversation(cid).messages[-1].tool_calls
    _calls_then_answer(fakes, "Noon, and 42.")
    events = list(a.send_tool_results(cid, [(call["id"], "12:00")],
                                      tools=TurnTools(ToolRunner([BuiltinTools()]), lambda ap: "once")))
    assert _tool_rounds(events) == ["ok"]
    assert [role for role, _ in _path(a, cid)] == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
    assert _path(a, cid)[-1] == ("assistant", "Noon, and 42.")


def test_tools_run_by_the_engine_and_by_the_caller_are_not_mixed(fakes, make_assistant):
    from engine.api import GenerateParams, InputError, ToolUse
    import pytest

    a = make_assistant(str(fakes.model_file("m")))
    cid = a.new_conversation("")
    offered = ToolUse((Tool("lookup", "Look it up"),))
    with pytest.raises(InputError, match="not both"):
        list(a.send(cid, "hi", GenerateParams(tools=offered), tools=TurnTools(ToolRunner([]), lambda ap: "once")))


def test_a_branch_after_an_answer_that_called_tools_follows_its_last_round(fakes, make_assistant):
    """The window shows an answer's rounds as one bubble, whose id is its first round's: a branch
    from it starts after the answer in words that ends the turn."""
    a = make_assistant(str(fakes.model_file("m")))
    cid = a.new_conversation("")
    _calls_then_answer(fakes, "It is 42.")
    run(a, cid, "What is 6 * 7?", ToolRunner([BuiltinTools()]))
    fakes.script("m").enqueue(Answer("Later."), Answer("Branched."))
    run(a, cid, "Next", ToolRunner([]))
    first_round = a.conversation(cid).messages[1]
    assert first_round.tool_calls
    list(a.send(cid, "Another way?", after=first_round.id))
    assert [role for role, _ in _path(a, cid)] == ["user", "assistant", "tool", "assistant", "user", "assistant"]
    assert _path(a, cid)[-2:] == [("user", "Another way?"), ("assistant", "Branched.")]


def test_a_registered_kind_of_source_is_offered_listed_and_closed(tmp_path):
    """A new kind of tool source (a plugin, another server protocol) is a SourceKind registered
    with the Toolbox: its tools are offered to a turn, listed in the Tools panel, and it is closed
    with the rest."""
    from engine.api import Toolbox
    from engine.tools.permissions import Permissions

    class Plugin:
        closed = False

        def sources(self):
            return [Big()]

        def panel(self):
            return [{"name": "big", "state": "running", "error": "", "transport": "plugin", "target": "",
                     "stderr": "", "config": {}, "tools": Big().tools()}]

        def close(self):
            self.closed = True

    box = Toolbox(BuiltinTools(), config_path=tmp_path / "mcp.json", permissions=Permissions(tmp_path / "tools.json"),
                  log_dir=tmp_path / "logs")
    plugin = Plugin()
    box.register(plugin)
    offered = {t.name for t in box.runner().use().tools}
    assert "dump" in offered and "calculator" in offered
    panel = box.snapshot()
    assert [s["name"] for s in panel] == ["builtin", "big"]
    assert panel[1]["tools"][0]["key"] == "big/dump" and panel[1]["tools"][0]["enabled"]
    box.close()
    assert plugin.closed
