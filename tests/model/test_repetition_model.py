"""The repetition guard on real models: demo-int4's loop ends early and trimmed; normal answers,
tokenized by both demo models, are never cut."""

import json
from pathlib import Path

import pytest

from engine.api import Assistant, EngineConfig
from engine.chat.session import Message, Session
from engine.config.paths import db_path
from engine.inference.backend import LoadParams
from engine.inference.events import Chunk, GenerateParams, TurnResult
from engine.inference.generate import generate
from engine.inference.repetition import find_loop
from engine.inference.templates import template_for
from engine.storage import Database

from .conftest import open_backend
from .helpers import GREEDY, THREADS, turn

SKY = "Explain in two sentences why the sky is blue"
NORMAL = Path(__file__).resolve().parent.parent / "data" / "normal_answers.jsonl"


@pytest.fixture(scope="module")
def gemma(model_paths):
    b = open_backend(model_paths["demo-int4"])
    yield b
    b.close()


def sky_prompt(backend) -> list[int]:
    return Session(backend, template_for(backend), [Message("user", SKY)]).prompt()


def test_sky_loop_ends_with_repetition_and_keeps_one_copy(gemma):
    gemma.reset()  # a fresh context, as the module's other test gets: the same evaluation, the same loop
    items = list(generate(gemma, sky_prompt(gemma), GenerateParams(GREEDY, max_tokens=300)))
    result = items[-1]
    assert isinstance(result, TurnResult)
    s = result.stats
    assert s.finish_reason == "repetition"
    fired = s.completion_tokens + s.dropped_tokens
    assert fired <= 60, fired  # the loop line is 11 tokens: the line rule fires on its 4th copy (44)
    assert result.text.count(SKY) == 1
    assert result.text == gemma.detokenize(result.token_ids)
    assert len(result.logprobs) == len(result.token_ids) == s.completion_tokens
    streamed = "".join(c.text for c in items[:-1] if isinstance(c, Chunk))
    assert streamed.startswith(result.text) and streamed.count(SKY) >= 3  # the repeats were shown


def test_guard_off_runs_to_length(gemma):
    # Cleared, not the cache the other test left: reusing it would evaluate the prompt's last token
    # alone, round differently from a fresh context and may part from the loop at a near-tie.
    gemma.reset()
    result = list(generate(gemma, sky_prompt(gemma), GenerateParams(GREEDY, max_tokens=100,
                                                                    repetition_guard=False)))[-1]
    assert result.stats.finish_reason == "length"
    assert result.stats.completion_tokens == 100 and result.stats.dropped_tokens == 0
    assert result.text.count(SKY) >= 8


def test_stored_message_is_the_trimmed_answer(model_paths):
    a = Assistant(Database(db_path()), EngineConfig(model="demo-int4", load=LoadParams(n_ctx=1024, n_threads=THREADS)))
    try:
        cid = a.new_conversation()
        done = turn(a, cid, SKY, params=GenerateParams(GREEDY, max_tokens=120))
        assert done.stats.finish_reason == "repetition"
        assert done.text.count(SKY) == 1
        stored = a.db.messages(cid)[-1]
        assert stored["content"] == done.text
    finally:
        a.close()
        a.db.close()


@pytest.mark.parametrize("model", ["demo-small", "demo-int4"])
def test_normal_answers_are_never_cut(model, model_paths):
    rows = [json.loads(line) for line in NORMAL.read_text(encoding="utf-8").splitlines()]
    assert len(rows) >= 60
    b = open_backend(model_paths[model], n_ctx=256)
    try:
        cut = {}
        for r in rows:
            ids = b.tokenize(r["text"], special=False)
            hit = find_loop(ids, [b.token_bytes(t) for t in ids])
            if hit is not None:
                cut[r["id"]] = b.detokenize(ids[:hit[1]])[-60:]
    finally:
        b.close()
    assert cut == {}
