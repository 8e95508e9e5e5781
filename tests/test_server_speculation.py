"""Speculative decoding in the API's `usage`, read by the official `openai` client: drafted tokens
the model kept are `completion_tokens_details.accepted_prediction_tokens`, the rest
`rejected_prediction_tokens` (OpenAI's names, as LM Studio reports drafts), whole, streamed and on
legacy completions; both are always there, 0 without drafts, and a request's answers add up."""

from __future__ import annotations

from openai import OpenAI

from engine.api import TurnDone
from engine.chat.stats import TurnStats
from engine.server.shapes import usage
from tests.drafting import drafting
from tests.fake_backend import fakes, make_assistant  # noqa: F401
from tests.server_util import KEY, serve  # noqa: F401

MESSAGES = [{"role": "user", "content": "Quote the line back."}]


def client(server) -> OpenAI:
    return OpenAI(base_url=server.url, api_key=KEY, max_retries=0, timeout=30)


def details(u) -> tuple[int, int, int]:
    d = u.completion_tokens_details
    return d.accepted_prediction_tokens, d.rejected_prediction_tokens, d.reasoning_tokens


def test_plain_decoding_reports_no_drafts(serve):
    c = client(serve())
    r = c.chat.completions.create(model="L1", messages=MESSAGES)
    assert details(r.usage) == (0, 0, 0)
    raw = r.usage.completion_tokens_details.model_dump(exclude_unset=True)
    assert {"accepted_prediction_tokens", "rejected_prediction_tokens"} <= set(raw)  # present, not defaulted
    chunks = list(c.chat.completions.create(model="L1", messages=MESSAGES, stream=True,
                                            stream_options={"include_usage": True}))
    assert details(chunks[-1].usage) == (0, 0, 0)


def test_drafted_tokens_are_accepted_and_rejected_predictions(serve, fakes, make_assistant):
    server = serve(drafting(make_assistant(str(fakes.model_file("m"))), drafted=16, accepted=12))
    c = client(server)
    r = c.chat.completions.create(model="L1", messages=MESSAGES)
    assert details(r.usage) == (12, 4, 0)
    assert r.usage.completion_tokens == len("Answer 1.")  # rejected drafts were never part of the answer
    chunks = list(c.chat.completions.create(model="L1", messages=MESSAGES, stream=True,
                                            stream_options={"include_usage": True}))
    assert chunks[-1].choices == [] and details(chunks[-1].usage) == (12, 4, 0)
    legacy = c.completions.create(model="L1", prompt="Say hi")
    assert details(legacy.usage) == (12, 4, 0)


def test_usage_adds_up_every_answer_of_a_request():
    """A cascade's re-ask: the superseded answer's drafts count too, as its tokens do."""
    def done(drafted: int, accepted: int) -> TurnDone:
        stats = TurnStats(prompt_tokens=5, prompt_tokens_evaluated=5, prompt_tokens_cached=0, completion_tokens=20,
                          ttft_ms=1.0, prompt_tps=1.0, decode_tps=1.0, finish_reason="stop", cache_mode="fresh",
                          draft_tokens=drafted, draft_accepted=accepted)
        return TurnDone(1, 1, "m", "text", [], stats=stats)

    u = usage([done(16, 12), done(10, 3), done(0, 0)])
    assert u["completion_tokens"] == 60
    assert u["completion_tokens_details"] == {"reasoning_tokens": 0, "accepted_prediction_tokens": 15,
                                              "rejected_prediction_tokens": 11}
