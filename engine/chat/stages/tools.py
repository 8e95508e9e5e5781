"""The tool loop: model → calls → approval → run → results → model, on the same conversation
(each round evaluates only the results and a few markers: the KV holds the rest). It wraps the
rest of the turn, so every entry point that carries `request.tools` runs it: send, an edit, a
branch, regenerate, and tool results sent back. Bounded to `max_rounds` rounds of calls; the
round after the last shows the same tools with tool_choice "none", so the model answers in words
(and the prompt, and its KV, stay as they were). Stop ends it anywhere, a running tool included."""

from __future__ import annotations

import threading
from dataclasses import replace

from engine.chat.config import EngineConfig
from engine.chat.conversation import Conversation
from engine.chat.pipeline import Events, Rest
from engine.chat.request import TurnRequest
from engine.chat.session import Message
from engine.chat.turn import Turn
from engine.inference.tool_calls import ToolUse
from engine.storage import Database, clean_text


class ToolLoop:
    name = "tools"

    def __init__(self, *, db: Database):
        self.db = db

    def __call__(self, turn: Turn, rest: Rest) -> Events:
        tools = turn.request.tools
        use = tools.runner.use() if tools is not None else None
        if tools is None or use is None:  # no tools, or none switched on: one round
            return (yield from rest(turn))
        cancel = turn.cancel or threading.Event()
        turn = replace(turn, request=_offering(turn.request, use, cancel))
        done = None
        for rounds in range(tools.max_rounds + 1):
            done = yield from rest(turn)
            if done is None or not done.tool_calls or cancel.is_set():
                return done
            results = []
            for call in done.tool_calls:
                yield tools.runner.announce(call)
                outcome = tools.runner.run(call, cancel, tools.approve)
                yield outcome
                results.append((outcome.call_id, clean_text(outcome.text)))  # a server's text, as a typed result is
                if cancel.is_set():
                    return done
            # The same tools every round (the prompt, and so the KV, stays as it was); after the
            # last round none may be called.
            use = tools.runner.use("none" if rounds + 1 >= tools.max_rounds else "auto")
            request = replace(turn.request, kind="tool_results", text="", replaces=(), route=done.level or "auto",
                              memory=False, docs=False, params=replace(turn.request.params, tools=use))
            turn = results_turn(self.db, turn.conv, turn.config, request, results)
        return done


def _offering(request: TurnRequest, use: ToolUse, cancel: threading.Event) -> TurnRequest:
    """The request with the runner's tools offered to the model and one Stop for every round."""
    return replace(request, params=replace(request.params, tools=use), cancel=cancel)


def results_turn(db: Database, conv: Conversation, config: EngineConfig, request: TurnRequest,
                 results: list[tuple[str, str]]) -> Turn:
    """The turn that answers the last answer's calls with `results` (call id, output text), in the
    calls' order: all but the last stored now, the last the turn's own message (a result is the
    tool role's turn, shown to the model as data, never as the user's words)."""
    for cid, text in results[:-1]:
        mid = db.add_message(conv.id, "tool", text, tool_call_id=cid, parent_id=conv.messages[-1].id)
        conv.messages.append(Message("tool", text, id=mid, tool_call_id=cid))
    cid, text = results[-1]
    return Turn(request, config, conv, Message("tool", text, tool_call_id=cid))
