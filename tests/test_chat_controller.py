"""ChatController (app/chat_controller.py) without Qt and without an engine: a recording port
stands in for the engine thread (its calls run at once on a scripted assistant), a recording
screen for the window. What a turn sends to the engine is checked by running the turn's start
against the scripted assistant."""

import subprocess
import sys

import pytest

from app.chat_controller import ChatController, Fork, TurnOptions
from app.transcript import Answer
from engine.api import MessageRecord, MessageTooLong, Retracted, ToolCallEvent, ToolResultEvent, TurnDone, UnknownEvent


def record(mid, role, content, parent=None, branches=None, superseded=False, tool_calls=None, tool_call_id=None,
           stats=None):
    return MessageRecord(mid, role, content, None, stats or {}, superseded, tool_calls, tool_call_id, parent,
                         branches, None)


class Assistant:
    """What the controller's engine calls reach: a stored chat, and the turns asked for."""

    def __init__(self):
        self.records: dict[int, list[MessageRecord]] = {}
        self.asked: list[tuple] = []

    def messages(self, cid):
        return list(self.records.get(cid, []))

    def send(self, cid, text, params, **options):
        self.asked.append(("send", cid, text, options))
        return iter(())

    def resend_edited(self, cid, text, params, **options):
        self.asked.append(("resend_edited", cid, text, options))
        return iter(())

    def regenerate(self, cid, params, **options):
        self.asked.append(("regenerate", cid, options))
        return iter(())

    def delete_turn(self, cid, mid):
        self.asked.append(("delete_turn", cid, mid))

    def switch_branch(self, cid, mid):
        self.asked.append(("switch_branch", cid, mid))
        return {"tokens": {"reused": 10, "read": 3}}


class Engine:
    """EnginePort: calls run now; a turn is recorded, its start run against the assistant."""

    def __init__(self):
        self.assistant = Assistant()
        self.turns: list[tuple] = []
        self.stops = 0

    def call(self, fn, on_done=None, refresh=False):
        result = fn(self.assistant)
        if on_done is not None:
            on_done(result)

    def turn(self, cid, start, options, on_event, on_error):
        list(start(self.assistant, "params", "cancel", None))
        self.turns.append((cid, options))

    def stop(self):
        self.stops += 1


class Screen:
    """ChatScreen: everything the controller asks, in order."""

    def __init__(self):
        self.log: list[tuple] = []
        self.answer_overflow = None  # what the user picks when a message is too long
        self.confirmed = True

    def __getattr__(self, name):
        return lambda *args, **kwargs: self.log.append((name, *args))

    def turn_options(self):
        return TurnOptions(0.2, 64, None, False)

    def route(self):
        return "auto"

    def confirm(self, title, text):
        return self.confirmed

    def ask_overflow(self, exc, chosen):
        self.log.append(("ask_overflow",))
        chosen(self.answer_overflow)

    def said(self, kind):
        return [entry[1] for entry in self.log if entry[0] == kind]


@pytest.fixture
def chat():
    engine, screen = Engine(), Screen()
    controller = ChatController(engine, screen)
    made = iter(range(1, 100))
    controller.make_chat = lambda created: created(next(made))
    controller.engine_ready()
    return controller


def answer(text="Paris.", level="L1", message_id=None, tool_calls=()):
    return Answer(text, {"ttft_ms": 12.0, "finish_reason": "stop"}, level, "demo-small", message_id=message_id,
                  tool_calls=tuple(tool_calls))


def shown(chat):
    return [(m.role, m.content, m.streaming) for m in chat.transcript]


def test_a_first_message_makes_its_chat_then_streams_its_answer(chat):
    assert chat.send("Capital of France?")
    assert chat.conversation_id == 1 and chat.busy
    assert chat.engine.assistant.asked == [("send", 1, "Capital of France?", {"cancel": "cancel", "route": "auto",
                                                                              "tools": None})]
    assert chat.engine.turns == [(1, TurnOptions(0.2, 64, None, False))]
    assert shown(chat) == [("user", "Capital of France?", False), ("assistant", "", True)]
    assert not chat.send("again?")  # one turn at a time
    chat.on_thinking(1, "hmm")
    chat.on_tokens(1, "Par")
    chat.on_tokens(2, "another chat's")  # not the chat shown: nothing changes
    chat.on_tokens(1, "is.")
    assert shown(chat)[-1] == ("assistant", "Paris.", True) and chat.transcript[-1].reasoning == "hmm"
    chat.engine.assistant.records[1] = [record(5, "user", "Capital of France?"),
                                        record(6, "assistant", "Paris.", parent=5)]
    chat.on_event(1, answer(message_id=6))
    assert not chat.busy and chat.last_answer.text == "Paris."
    assert shown(chat)[-1] == ("assistant", "Paris.", False) and chat.transcript[-1].stats["level"] == "L1"
    assert [m.id for m in chat.transcript] == [5, 6]  # the stored ids, for the message actions
    assert chat.screen.said("answered")[0] == 1 and chat.screen.said("busy_changed")[-1] is False


def test_a_retracted_answer_is_taken_back_and_the_next_one_streams_in_its_place(chat):
    chat.send("Hello there")
    chat.on_tokens(1, "Maybe.")
    weak = TurnDone(1, 3, "demo-small", "Maybe.", [1], level="L1", confidence=0.2)
    chat.on_event(1, Retracted(weak, "cascade: L1 confidence 0.20 < 0.35", "L2"))
    assert shown(chat)[-1] == ("assistant", "", True) and chat.busy  # the turn goes on
    assert "L2" in chat.screen.said("say")[-1]
    chat.on_tokens(1, "Surely.")
    chat.engine.assistant.records[1] = [record(2, "user", "Hello there"),
                                        record(3, "assistant", "Maybe.", 2, superseded=True),
                                        record(4, "assistant", "Surely.", 2)]
    chat.on_event(1, answer("Surely.", "L2"))
    assert shown(chat) == [("user", "Hello there", False), ("assistant", "Surely.", False)]
    assert chat.last_answer.level == "L2"


def test_tool_rounds_fold_into_one_answer(chat):
    chat.send("What is 2+2?")
    call = {"id": "c1", "type": "function", "function": {"name": "add", "arguments": '{"a": 2, "b": 2}'}}
    chat.on_tokens(1, "Let me add.")
    chat.on_event(1, answer("Let me add.", tool_calls=[call]))
    assert chat.busy and chat.last_answer is None  # a round of calls: the answer goes on
    chat.on_event(1, ToolCallEvent("c1", "builtin", "add", '{"a": 2, "b": 2}'))
    chat.on_event(1, ToolResultEvent("c1", "builtin", "add", "ok", "4", 0.01))
    chat.on_tokens(1, "It is 4.")
    chat.engine.assistant.records[1] = [record(1, "user", "What is 2+2?"),
                                        record(2, "assistant", "Let me add.", 1, tool_calls=[call]),
                                        record(3, "tool", "4", 2, tool_call_id="c1"),
                                        record(4, "assistant", "It is 4.", 3)]
    chat.on_event(1, answer("It is 4."))
    (m,) = [m for m in chat.transcript if m.answer]
    assert m.content == "It is 4." and m.steps[0] == ("text", "Let me add.")
    (block,) = chat.transcript.tool_blocks()
    assert (block.tool, block.status, block.text) == ("add", "ok", "4")
    assert [m.id for m in chat.transcript] == [1, 2]  # the bubble's id: its first round's, as stored
    chat.load(1)  # the same chat read back from its record: one bubble, the call's block with its result
    (m,) = [m for m in chat.transcript if m.answer]
    (block,) = m.tool_blocks()
    assert (m.content, m.steps[0], block.tool, block.status, block.text) == ("It is 4.", ("text", "Let me add."),
                                                                            "add", "stored", "4")
    assert [e[1].tool for e in chat.screen.log if e[0] == "tool_event"] == ["add", "add"]


def test_an_unknown_event_is_an_error_never_text(chat):
    chat.send("hi")
    with pytest.raises(UnknownEvent):
        chat.on_event(1, "a string that would have been shown")
    assert shown(chat)[-1] == ("assistant", "", True)


def with_a_chat(chat):
    """Chat 1, stored and shown: hi → Hello. → how are you? → Fine."""
    chat.send("hi")
    chat.on_event(1, answer("Hello."))
    chat.engine.assistant.records[1] = [record(1, "user", "hi"), record(2, "assistant", "Hello.", 1),
                                        record(3, "user", "how are you?", 2), record(4, "assistant", "Fine.", 3)]
    chat.load(1)
    chat.engine.assistant.asked.clear()
    return chat


def test_an_edited_message_replaces_its_turn(chat):
    with_a_chat(chat)
    chat.act("edit", 0)
    assert chat.fork == Fork("edit", 1) and chat.screen.said("put_back")[-1] == "hi"
    chat.send("hello!")
    assert chat.engine.assistant.asked == [("send", 1, "hello!", {"cancel": "cancel", "route": "auto", "tools": None,
                                                                  "replacing": 1})]
    assert shown(chat) == [("user", "hello!", False), ("assistant", "", True)]  # the edited turn and those after
    assert chat.fork == Fork()


def test_a_branch_previews_and_esc_brings_the_turns_back(chat):
    with_a_chat(chat)
    chat.act("branch", 1)
    assert [m.content for m in chat.transcript] == ["hi", "Hello."]
    chat.stop()  # Esc before the branch's first message
    assert [m.content for m in chat.transcript] == ["hi", "Hello.", "how are you?", "Fine."]
    assert chat.engine.stops == 0
    chat.act("branch", 1)
    chat.send("tell me a joke")
    assert chat.engine.assistant.asked[-1][3]["after"] == 2
    assert [m.content for m in chat.transcript] == ["hi", "Hello.", "tell me a joke", ""]


def test_regenerate_drops_the_answer_and_what_followed(chat):
    with_a_chat(chat)
    chat.act("regenerate", 1)
    assert chat.engine.assistant.asked == [("regenerate", 1, {"cancel": "cancel", "route": "auto", "tools": None,
                                                              "message_id": 2})]
    assert shown(chat) == [("user", "hi", False), ("assistant", "", True)] and chat.sent is None


def test_delete_asks_first(chat):
    with_a_chat(chat)
    chat.screen.confirmed = False
    chat.act("delete", 3)
    assert chat.engine.assistant.asked == []
    chat.screen.confirmed = True
    chat.act("delete", 3)
    assert chat.engine.assistant.asked == [("delete_turn", 1, 4)]


def test_a_message_too_long_goes_back_to_the_composer_or_is_shortened(chat):
    with_a_chat(chat)
    chat.screen.answer_overflow = None  # Cancel
    chat.send("a very long text")
    chat.on_error(1, MessageTooLong(9000, 1500, 2048))
    assert chat.screen.said("put_back")[-1] == "a very long text" and not chat.busy
    assert [m.content for m in chat.transcript] == ["hi", "Hello.", "how are you?", "Fine."]
    chat.screen.answer_overflow = "summarise"
    chat.send("a very long text")
    chat.on_error(1, MessageTooLong(9000, 1500, 2048))
    assert chat.engine.assistant.asked[-1][3]["overflow"] == "summarise" and chat.busy
    assert shown(chat)[-2:] == [("user", "a very long text", False), ("assistant", "", True)]


def test_a_failed_turn_says_why_and_keeps_the_message(chat):
    with_a_chat(chat)
    chat.send("and now?")
    chat.on_error(1, OSError("disk full"))
    assert not chat.busy and "disk full" in chat.screen.said("alert")[-1]
    assert shown(chat)[-1] == ("user", "and now?", False)  # the empty answer went; the message stays


def test_switching_branch_reloads_and_says_what_is_reused(chat):
    with_a_chat(chat)
    chat.switch_branch(7)
    assert chat.engine.assistant.asked == [("switch_branch", 1, 7)]
    assert "10" in chat.screen.said("say")[-1]


def test_the_controller_imports_no_qt():
    code = ("import sys, app.chat_controller, app.transcript; "
            "sys.exit(any(m.startswith('PySide6') for m in sys.modules))")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
