"""Answers that say they were drafted: an Assistant (on the scripted fake backend) whose turns'
TurnDones report speculative decoding's counts, for the front-ends' tests (the API's usage, the
window's stats line, the terminal's). What the engine's own drafting measures is tested on real
models (tests/model/); here the counts are fixed, so each front-end's arithmetic is exact.

    a = drafting(make_assistant(model), drafted=16, accepted=12)
"""

from __future__ import annotations

from engine.api import Assistant, TurnDone

TURNS = ("send", "regenerate", "resend_edited", "send_tool_results")  # the door's entry points


def drafting(assistant: Assistant, drafted: int = 16, accepted: int = 12, kind: str | None = "ngram",
             note: str = "") -> Assistant:
    """`assistant`, each answer's stats reporting `drafted` draft tokens verified, `accepted` kept,
    decoded by `kind` ("ngram" | "draft" | None) for the reason `note`. The answer's stored row
    keeps what the engine measured; only the TurnDone the front-end gets says this."""
    for name in TURNS:
        turn = getattr(assistant, name)

        def drafted_turn(*args, _turn=turn, **kwargs):
            for event in _turn(*args, **kwargs):
                if isinstance(event, TurnDone) and event.stats is not None:
                    event.stats.draft_tokens, event.stats.draft_accepted = drafted, accepted
                    event.stats.speculation, event.stats.speculation_note = kind, note
                yield event

        setattr(assistant, name, drafted_turn)
    return assistant
