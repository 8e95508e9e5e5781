"""The tool loop: model → calls → approval → run → results → model, on the same conversation
(each round evaluates only the results and a few markers: the KV holds the rest). Bounded to
`max_rounds` rounds of calls; the round after the last shows the same tools with tool_choice
"none", so the model answers in words (and the prompt, and its KV, stay as they were). Stop ends
it anywhere, a running tool included."""

from __future__ import annotations

import threading
from typing import Callable, Iterator

from engine.chat.conversation import TurnDone
from engine.inference.tool_calls import ToolUse
from engine.tools.runner import Approval, ToolCallEvent, ToolRunner

MAX_ROUNDS = 8


def tool_loop(first: Iterator, runner: ToolRunner, approve: Callable[[Approval], str],
              send_results: Callable[[list[tuple[str, str]], ToolUse | None], Iterator],
              cancel: threading.Event, max_rounds: int = MAX_ROUNDS) -> Iterator:
    """The events of every round: the answers' own (Chunk, TurnDone, …), and a ToolCallEvent then
    a ToolResultEvent for each call. `send_results(results, use)` starts the next round."""
    events = first
    for rounds in range(max_rounds + 1):
        done = None
        for item in events:
            yield item
            if isinstance(item, TurnDone) and not item.superseded:
                done = item
        if done is None or not done.tool_calls or cancel.is_set():
            return
        results = []
        for call in done.tool_calls:
            fn = call["function"]
            found = runner.resolve(fn["name"])
            yield ToolCallEvent(call["id"], found[0].name if found else "", fn["name"], fn["arguments"])
            outcome = runner.run(call, cancel, approve)
            yield outcome
            results.append((call["id"], outcome.text))
            if cancel.is_set():
                return
        # The same tools every round (the prompt, and so the KV, stays as it was); after the last
        # round none may be called.
        events = send_results(results, runner.use("none" if rounds + 1 >= max_rounds else "auto"))
