"""The turn as a pipeline (engine/chat/pipeline.py): its stages in order, a new stage added with
one line, typed requests and stats. The turns run on the scripted fake backend."""

import dataclasses

import pytest

from engine.api import EngineConfig, GenerateParams, TurnRequest, TurnStats
from engine.chat.pipeline import relay, stage_names
from engine.chat.stages import turn_stages
from engine.chat.target import Capabilities
from engine.chat.turn import Placed
from engine.inference.events import Chunk, GenerationStats, TurnResult
from tests.fake_backend import dones, fakes, make_assistant, send  # noqa: F401

STAGES = ["tools", "after", "route", "recall", "cascade", "fallback", "fit", "prompt", "store", "generate"]
# The JSON shape of done.stats that the CLI's --json, the window and the stored row carry: changing it is a change to every front-end.
JSON_KEYS = {"prompt_tokens", "prompt_tokens_evaluated", "prompt_tokens_cached", "completion_tokens", "ttft_ms",
             "prompt_tps", "decode_tps", "finish_reason", "cache_mode", "prompt_ms", "decode_ms",
             "tokens_estimated", "context_shift", "restored_from", "restore_ms", "park_ms", "dropped_tokens",
             "read_ahead", "reasoning_tokens", "reasoning_ms", "reasoning_closed", "draft_tokens", "draft_accepted", "speculation", "speculation_note", "level", "route_reason", "fallback", "offload", "confidence", "context",
             "summary_used", "risk", "memories_used", "memory", "sources", "documents", "retrieval"}


class Shout:
    """A stage around the model's stream, as a reasoning parser would be: it rewrites each chunk and
    the result the stages before it store."""

    name = "shout"

    def __call__(self, turn, rest):
        done = yield from relay(rest(turn), lambda item: Chunk(item.text.upper(), item.token, item.logprob))
        return dataclasses.replace(done, text=done.text.upper()) if done is not None else None


class Twice:
    """A stage that runs the rest of the turn more than once, as a tool loop would: each round's
    answer ends the turn, the next round goes on from it."""

    name = "twice"

    def __init__(self):
        self.rounds = 0

    def __call__(self, turn, rest):
        done = None
        for _ in range(2):
            self.rounds += 1
            if done is not None:
                turn = dataclasses.replace(turn, commit_user=False, supersedes=done)
            done = yield from rest(turn)
        return done


def with_stage(stages, stage, before: str):
    names = stage_names(stages)
    at = names.index(before)
    return (*stages[:at], stage, *stages[at:])


def test_the_turn_runs_through_named_stages_in_order(fakes, make_assistant):
    a = make_assistant(str(fakes.model_file("m")))
    assert stage_names(a.stages) == STAGES
    assert turn_stages.__module__ == "engine.chat.stages"  # the one list a new stage joins


def test_a_stage_around_the_stream_is_one_line(fakes, make_assistant):
    a = make_assistant(str(fakes.model_file("m")))
    cid = a.new_conversation()
    (plain,) = dones(send(a, cid, "hi"))
    a.use_stages(with_stage(a.stages, Shout(), before="generate"))
    events = send(a, cid, "again")
    (done,) = dones(events)
    shown = "".join(e.text for e in events if isinstance(e, Chunk))
    assert shown == done.text == done.text.upper() and any(c.isalpha() for c in shown)
    assert a.transcript(cid)[-1]["content"] == done.text  # the store stage kept what the stage made
    assert plain.text != plain.text.upper()


def test_a_stage_that_loops_reuses_the_kv_each_round(fakes, make_assistant):
    a = make_assistant(str(fakes.model_file("m")))
    fake = fakes.backend("m")
    twice = Twice()
    a.use_stages(with_stage(a.stages, twice, before="fallback"))
    cid = a.new_conversation()
    start = fake.evaluated
    (done,) = dones(send(a, cid, "hi"))
    assert twice.rounds == 2
    rows = a.transcript(cid)
    assert [r["role"] for r in rows] == ["user", "assistant", "assistant"] and rows[1]["superseded"]
    assert done.message_id == rows[2]["id"]
    # The second round re-reads only what differs from the first: the prompt's cached prefix serves it.
    assert done.stats.prompt_tokens_cached > 0
    assert fake.evaluated - start < 2 * (done.stats.prompt_tokens + done.stats.completion_tokens)


def test_requests_and_calls_take_their_options_by_name(fakes, make_assistant):
    a = make_assistant(str(fakes.model_file("m")))
    cid = a.new_conversation()
    with pytest.raises(TypeError):
        TurnRequest(cid, "hi")  # noqa - keyword-only: a new field can never bind to the wrong slot
    with pytest.raises(TypeError):
        a.send(cid, "hi", GenerateParams(), None)  # cancel by name only
    with pytest.raises(TypeError):
        EngineConfig("demo-small")
    with pytest.raises(TypeError):
        list(a.send(cid, "hi", no_such_option=True))


def test_stats_are_typed_and_their_json_shape_is_made_in_one_place(fakes, make_assistant):
    a = make_assistant(str(fakes.model_file("m")))
    cid = a.new_conversation()
    (done,) = dones(send(a, cid, "hi"))
    assert isinstance(done.stats, TurnStats)
    shape = done.stats.as_json()
    assert set(shape) == JSON_KEYS
    assert shape["retrieval"] == {"memory_tokens": 0, "document_tokens": 0, "max_tokens": 256}
    assert a.transcript(cid)[-1]["stats"] == shape  # the stored row holds the same shape
    assert done.stats.level == shape["level"] == "L1" and done.stats.finish_reason in ("stop", "length")


def test_a_turn_keeps_the_config_it_started_with(fakes, make_assistant):
    a = make_assistant(str(fakes.model_file("m")))
    cid = a.new_conversation()
    events = a.send(cid, "hi", GenerateParams(max_tokens=8))
    next(events)  # the turn has started
    a.configure(retrieval_max_tokens=7)
    done = [e for e in events if not isinstance(e, (Chunk, TurnResult))][-1]
    assert done.stats.retrieval.max_tokens == 256
    (after,) = dones(send(a, cid, "and now?"))
    assert after.stats.retrieval.max_tokens == 7 and a.config.retrieval_max_tokens == 7


class Echo:
    """A target the stages know only through the Target protocol (engine/chat/target.py): it
    answers with the user's words, declares no tokens, no offload and no confidence."""

    level = "L1"
    capabilities = Capabilities(checkpoint=True)  # told after each stored answer

    def __init__(self):
        self.after = []

    model_id = "echo"
    identity = None

    def fit(self, system, turns, user, params, first_kept=0):
        return None

    def count_text(self, text):
        return len(text.split())

    def stream(self, history, user, params, cancel, window_moved=False, *, conversation_id, read_ahead=False,
               domain=""):
        yield Chunk(user.content, -1, 0.0)
        yield TurnResult([], user.content, [], GenerationStats(1, 1, 0, 1, 1.0, 1.0, 1.0, "stop", "fresh"))

    def offload(self):
        raise AssertionError("not asked: capabilities.offload is False")

    def confidence(self, done, sampled, warn):
        raise AssertionError("not asked: capabilities.confidence is False")

    def after_turn(self, done):
        self.after.append(done.message_id)


class PlaceEcho:
    """Stands in for Fallback: every turn goes to the one target."""

    name = "fallback"

    def __init__(self, target):
        self.target = target

    def __call__(self, turn, rest):
        return (yield from rest(dataclasses.replace(turn, placed=Placed(self.target))))


def test_a_target_is_asked_only_what_it_declares(fakes, make_assistant):
    a = make_assistant(str(fakes.model_file("m")))
    echo = Echo()
    a.use_stages(tuple(PlaceEcho(echo) if s.name == "fallback" else s for s in a.stages))
    cid = a.new_conversation()
    (done,) = dones(send(a, cid, "hello there"))
    assert done.text == "hello there" and done.model == "echo"
    assert done.stats.offload is None and done.stats.confidence is None and done.stats.context is None
    assert echo.after == [done.message_id]
    row = a.transcript(cid)[-1]
    assert row["content"] == "hello there" and a.db.messages(cid)[-1]["token_ids"] is None  # no ids: none known


def test_a_checked_request_carries_its_response_format_into_the_models_params():
    fmt = {"type": "json_object"}
    request = TurnRequest(conversation_id=1, text="hi", response_format=fmt, params=GenerateParams(think=True)).checked()
    assert request.params.response_format == fmt and request.params.think is False  # constrained: no thinking
