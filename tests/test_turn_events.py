"""The closed set of turn events (engine/chat/events.py): `TurnFold` applies the cascade's
retraction once for every front-end, and the API server and the terminal treat an event outside
the set as an error, never as text. (The window's worker: tests/app/test_chat_controller_window.py.)"""

import argparse
import dataclasses
import math

import httpx
import pytest

from engine.api import (Chunk, ReasoningChunk, Retracted, ToolCallEvent, ToolResultEvent, TurnDone, TurnFold,
                        UnknownEvent)
from engine.chat.pipeline import relay
from engine.cli.chat import ChatLoop, Output
from tests.fake_backend import Answer, fakes, make_assistant  # noqa: F401
from tests.server_util import KEY, serve  # noqa: F401
from tests.test_pipeline import with_stage

MESSAGES = [{"role": "user", "content": "Hello there, how are you today?"}]


def answer(text: str, level: str = "L1") -> TurnDone:
    return TurnDone(1, 7, "m", text, [1, 2], level=level)


def test_the_fold_keeps_the_answer_that_stands_and_drops_the_one_taken_back():
    weak, strong = answer("Maybe.", "L1"), answer("Surely.", "L2")
    fold = TurnFold()
    events = [ReasoningChunk("hm", 1, 0.0), Chunk("May", 2, -1.0), Chunk("be.", 3, -1.0),
              Retracted(weak, "cascade: L1 confidence 0.20 < 0.35"), Chunk("Surely.", 4, 0.0), strong]
    assert [fold.take(e) for e in events] == events  # each event comes back, for the front-end's match
    assert (fold.text, [c.token for c in fold.chunks], fold.thinking) == ("Surely.", [4], [])
    assert fold.final is strong and fold.answers == [weak, strong]  # usage counts both answers computed
    assert [r.answer for r in fold.retracted] == [weak]


def test_a_turn_stopped_after_its_retraction_has_no_final_answer():
    fold = TurnFold()
    for e in (Chunk("May", 2, -1.0), Retracted(answer("Maybe."), "cascade"), Chunk("Sur", 4, 0.0)):
        fold.take(e)
    assert fold.final is None and fold.text == "Sur"


def test_tool_events_pass_and_an_unknown_event_is_an_error():
    fold = TurnFold()
    call = ToolCallEvent("c1", "builtin", "clock", "{}")
    assert fold.take(call) is call and fold.take(ToolResultEvent("c1", "builtin", "clock", "ok", "12:00")).text
    with pytest.raises(UnknownEvent, match="'str'"):
        fold.take("stray text")  # a string is not an answer's chunk: never shown as text


@dataclasses.dataclass(frozen=True)
class Stray:
    """An event no front-end knows (a stage's bug), carrying text a careless front-end would show."""

    text: str = "leaked"


class Leak:
    """A stage that streams a `Stray` before the answer's first chunk."""

    name = "leak"

    def __call__(self, turn, rest):
        first = True

        def each(item):
            nonlocal first
            if first:
                first = False
                return Stray()
            return item

        return (yield from relay(rest(turn), each))


def leaky(fakes, make_assistant):
    a = make_assistant(str(fakes.model_file("m")))
    a.use_stages(with_stage(a.stages, Leak(), before="generate"))
    return a


def test_the_api_server_answers_an_unknown_event_with_an_error_not_text(serve, fakes, make_assistant):
    server = serve(leaky(fakes, make_assistant))
    headers = {"Authorization": f"Bearer {KEY}"}
    body = {"model": "L1", "messages": MESSAGES}
    whole = httpx.post(f"{server.url}/chat/completions", json=body, headers=headers, timeout=30)
    assert whole.status_code >= 500 and "leaked" not in whole.text
    streamed = httpx.post(f"{server.url}/chat/completions", json=body | {"stream": True}, headers=headers,
                          timeout=30)
    assert "leaked" not in streamed.text and "error" in streamed.text and "[DONE]" not in streamed.text


def test_the_terminal_raises_on_an_unknown_event(fakes, make_assistant, capsys):
    a = leaky(fakes, make_assistant)
    args = argparse.Namespace(temperature=0.0, seed=1, max_tokens=16, no_repetition_guard=False, no_think=False,
                              reasoning_budget=None, route="auto", overflow="refuse", docs=None)
    chat = ChatLoop(a, args, Output(json_mode=True), a.new_conversation())
    with pytest.raises(UnknownEvent, match="Stray"):
        chat._turn("hi")
    assert "leaked" not in capsys.readouterr().out


def test_the_api_server_answers_with_the_answer_that_stands_after_a_cascade(serve, fakes, make_assistant):
    l1, l2 = fakes.model_file("l1"), fakes.model_file("l2")
    fakes.script("l1").enqueue(Answer("Maybe.", logprob=math.log(0.2)))
    fakes.script("l2").enqueue(Answer("Surely.", logprob=-0.01))
    server = serve(make_assistant(tiers={"L1": str(l1), "L2": str(l2)}, cascade=True, cascade_threshold=0.5))
    r = httpx.post(f"{server.url}/chat/completions", json={"model": "auto", "messages": MESSAGES},
                   headers={"Authorization": f"Bearer {KEY}"}, timeout=30)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["choices"][0]["message"]["content"] == "Surely."
    assert body["usage"]["completion_tokens"] == len("Maybe.") + len("Surely.")  # both answers were computed
