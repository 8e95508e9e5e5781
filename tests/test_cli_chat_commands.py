"""`assistant chat`'s in-session commands on the fake backend: /pin and /unpin keep a chat at the
top of /list (the window's order), in text and JSON; a bad id is an error that leaves the rest. The
line after an answer says how many drafted tokens were kept."""

from __future__ import annotations

import json

import pytest

from engine.cli.main import ChatLoop, Output, build_parser
from tests.drafting import drafting
from tests.fake_backend import fakes, make_assistant  # noqa: F401


@pytest.mark.parametrize("json_mode", [True, False])
def test_pin_and_unpin_order_the_list(capsys, fakes, make_assistant, json_mode):
    a = make_assistant(str(fakes.model_file("m")))
    older, newer = a.new_conversation(), a.new_conversation()
    a.rename_conversation(older, "Older chat")
    a.rename_conversation(newer, "Newer chat")
    args = build_parser().parse_args(["chat"] + (["--json"] * json_mode))
    loop = ChatLoop(a, args, Output(json_mode), newer)
    assert loop.run(iter([f"/pin {older}", "/list", "/unpin", "/pin 99999", "/pin x", f"/unpin {older}", "/list"]),
                    interactive=False) == 1  # two failures: no such chat, not an id
    out, err = capsys.readouterr()
    assert [r["id"] for r in a.conversations()] == [newer, older]  # unpinned again: newest first
    if json_mode:
        events = [json.loads(line) for line in out.splitlines()]
        first, second = [e["conversations"] for e in events if e["event"] == "conversations"]
        assert [(c["id"], c["pinned"]) for c in first] == [(older, True), (newer, False)]
        assert [(c["id"], c["pinned"]) for c in second] == [(newer, False), (older, False)]
        assert [(e["conversation_id"], e["pinned"]) for e in events if e["event"] == "pinned"] == \
            [(older, True), (newer, False), (older, False)]
        errors = [e["message"] for e in events if e["event"] == "error"]
    else:
        lists = out.split(f"[conversation {older} pinned]")[1]
        first = [line for line in lists.splitlines() if "chat" in line][:2]
        assert "pinned  Older chat" in first[0] and first[1].startswith("*") and "pinned" not in first[1]
        errors = err.splitlines()
    assert len(errors) == 2 and "99999" in errors[0] and "usage: /pin [ID]" in errors[1]


@pytest.mark.parametrize("drafted", [True, False])
def test_the_answer_line_says_how_many_drafted_tokens_were_kept(capsys, fakes, make_assistant, drafted):
    """Beside the decode speed, as the window's line: only for an answer that was drafted."""
    a = make_assistant(str(fakes.model_file("m")))
    if drafted:
        a = drafting(a, drafted=16, accepted=12)
    loop = ChatLoop(a, build_parser().parse_args(["chat"]), Output(False), a.new_conversation())
    assert loop.run(iter(["Hello"]), interactive=False) == 0
    meta = next(line for line in capsys.readouterr().out.splitlines() if "tok/s" in line)
    assert meta.endswith(" tok/s · drafted 12/16 accepted]" if drafted else " tok/s]"), meta
