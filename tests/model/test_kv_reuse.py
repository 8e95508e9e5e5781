"""Turns evaluate only their new tokens; the reused KV holds the rendered tokens exactly and gives the
logits a fresh context gives, within the bound measured across CPU kernels (helpers.py)."""

import threading

import pytest

from engine.api import TurnDone
from engine.chat.session import Message, Session
from engine.inference.backend import ABORT_WATCH_THREAD, Backend, LoadParams
from engine.inference.generate import prefill

from .conftest import open_backend
from .helpers import (THREADS, USER_TURNS, assert_logits_agree, forced_logits, greedy, kv_tokens, logit_agreement,
                      on_model, turn)

OVERHEAD = 16  # template tokens allowed on top of the new user message


def test_multiturn_evaluates_only_new_tokens(assistant):
    cid = assistant.new_conversation("You are a concise assistant.")
    for i, text in enumerate(USER_TURNS):
        kv_before = kv_tokens(assistant)
        done = turn(assistant, cid, text)
        s = done.stats
        n_user = len(assistant.vocab.tokenize(text, special=False))
        assert s.prompt_tokens == s.prompt_tokens_evaluated + s.prompt_tokens_cached
        if i == 0:
            continue
        assert s.cache_mode == "append", s
        assert s.prompt_tokens_cached == len(kv_before), s
        assert s.prompt_tokens_evaluated <= n_user + OVERHEAD, (s, n_user)
    # The KV cache holds exactly the conversation's tokens (bar the last sampled one, not yet evaluated).
    session = assistant.session(cid)
    full = session.render(session.messages, add_generation_prompt=False)
    kv = kv_tokens(assistant)
    assert full[: len(kv)] == kv and len(full) - len(kv) <= OVERHEAD


def test_read_ahead_evaluates_the_next_turns_opening_and_the_next_turn_uses_it(assistant):
    cid = assistant.new_conversation("Answer briefly.")
    for text in USER_TURNS[:2]:
        done = [i for i in assistant.send(cid, text, greedy(12), read_ahead=True) if isinstance(i, TurnDone)][-1]
    session = assistant.session(cid)
    ahead = session.next_prefix()
    kv = kv_tokens(assistant)
    if assistant.backend.n_swa:  # Gemma 3's sliding-window cache cannot always roll back: not read ahead
        assert done.stats.read_ahead == 0 and len(kv) < len(ahead)
        return
    # The real tokenizer's ids: exactly the conversation, then the markers that open a user turn.
    assert kv == ahead and 0 < done.stats.read_ahead <= 8
    nxt = turn(assistant, cid, "Thanks!")
    assert nxt.stats.prompt_tokens_cached == len(ahead) and nxt.stats.cache_mode == "append"
    assert nxt.stats.prompt_tokens_evaluated == nxt.stats.prompt_tokens - len(ahead)


def test_incremental_rendering_equals_full_rendering(assistant):
    cid = assistant.new_conversation("Answer briefly.")
    for text in USER_TURNS[:4]:
        done = turn(assistant, cid, text, max_tokens=12)
        live = assistant.session(cid)
        prompt_then = live.render(live.messages[:-1], add_generation_prompt=True)
        # Incremental: the prompt of this turn + the sampled ids ...
        incremental = prompt_then + done.token_ids
        # ... equals the full rendering of the same history (answer ids as stored in SQLite).
        rebuilt = Session(assistant.vocab, assistant.template, [
            Message(r["role"], r["content"], {r["token_model"]: r["token_ids"]}) for r in assistant.db.messages(cid)])
        rebuilt.messages.insert(0, Message("system", "Answer briefly."))
        full_with_next = rebuilt.prompt(Message("user", "next"))
        assert full_with_next[: len(incremental)] == incremental
        assert rebuilt.render(rebuilt.messages, False) == live.render(live.messages, False)


@pytest.mark.numerics  # logits across evaluation orders
def test_reuse_matches_from_scratch(assistant, model_paths, model_id):
    """What reuse guarantees: the KV holds the rendered tokens exactly, and the logits it gives agree
    with a fresh context's within the measured bound (helpers.LOGIT_TOLERANCE), teacher-forced."""
    cid = assistant.new_conversation("You are a helpful assistant.")
    turn(assistant, cid, USER_TURNS[0])
    turn(assistant, cid, USER_TURNS[1])
    prompt3 = assistant.session(cid).prompt(Message("user", USER_TURNS[2]))
    kv = kv_tokens(assistant)
    # The conversation's KV is, token for token, the head of its next prompt: only the new turn is left.
    assert prompt3[: len(kv)] == kv and len(kv) > len(prompt3) // 2
    answer = turn(assistant, cid, USER_TURNS[2], max_tokens=48)
    assert (answer.stats.prompt_tokens_cached, answer.stats.cache_mode) == (len(kv), "append")
    ids = answer.token_ids
    reused = on_model(assistant, lambda backend: forced_logits(backend, prompt3, ids))
    scratch = open_backend(model_paths[model_id])
    try:
        fresh = forced_logits(scratch, prompt3, ids)
        assert scratch.kv_tokens == prompt3 + ids[:-1]
    finally:
        scratch.close()
    stats = assert_logits_agree(fresh, reused, "reused KV vs a fresh context")
    print(f"{model_id}: {stats}")


@pytest.mark.numerics  # logits across evaluation orders
def test_the_bound_catches_a_wrong_kv(model_paths, model_id):
    """The bound has teeth: a KV that differs from the prompt by one early token (what a reuse bug
    looks like: a stale cell, a token at the wrong position) fails it."""
    backend = open_backend(model_paths[model_id])
    try:
        prompt = backend.tokenize("<start>The user asks about the history of the city of Lyon and its food.", special=False)
        answer = backend.tokenize(" Lyon is known for its bouchons, silk weaving and the meeting of two rivers.",
                                  special=False)
        right = forced_logits(backend, prompt, answer)
        wrong_prompt = list(prompt)
        wrong_prompt[3] = backend.tokenize(" Paris", special=False)[0]
        backend.reset()
        wrong = forced_logits(backend, wrong_prompt, answer)
    finally:
        backend.close()
    stats = logit_agreement(right, wrong)
    with pytest.raises(AssertionError):
        assert_logits_agree(right, wrong)
    print(f"{model_id}, one token changed: {stats}")


class CancelAfter(threading.Event):
    """A cancel flag that trips itself after `n` checks: one before the model is asked, one per
    prompt piece, then one per token. The checks a running piece's abort watch makes (every
    ABORT_POLL_S, as many as the machine's speed allows) are not counted."""

    def __init__(self, n: int):
        super().__init__()
        self.left = n

    def is_set(self) -> bool:
        if threading.current_thread().name == ABORT_WATCH_THREAD:
            return super().is_set()
        self.left -= 1
        return self.left < 0 or super().is_set()


@pytest.mark.numerics  # logits across evaluation orders
def test_cancel_keeps_state_consistent(assistant, model_paths, model_id):
    cid = assistant.new_conversation()
    turn(assistant, cid, USER_TURNS[0])
    cancelled = turn(assistant, cid, "Write a long poem about the sea.", max_tokens=64, cancel=CancelAfter(5))
    assert cancelled.stats.finish_reason == "cancelled"
    # One check before the model is asked, one for the short prompt's single piece: 3 of the 5
    # checks went to decoded tokens.
    assert cancelled.stats.prompt_tokens_evaluated <= 128
    assert cancelled.stats.completion_tokens == 3
    row = assistant.db.messages(cid)[-1]
    assert row["token_ids"] == cancelled.token_ids and row["status"] == "done"
    session = assistant.session(cid)
    prompt = session.prompt(Message("user", USER_TURNS[2]))
    # The KV holds exactly the conversation up to the cancelled answer's last evaluated token.
    kv = kv_tokens(assistant)
    assert prompt[: len(kv)] == kv and len(prompt) - len(kv) <= OVERHEAD + 1 + len(
        assistant.vocab.tokenize(USER_TURNS[2], special=False))
    after = turn(assistant, cid, USER_TURNS[2], max_tokens=32)
    n_user = len(assistant.vocab.tokenize(USER_TURNS[2], special=False))
    # +1: the last sampled token of the cancelled answer was never evaluated.
    assert after.stats.prompt_tokens_evaluated <= n_user + OVERHEAD + 1
    assert after.stats.cache_mode == "append"
    # The state a cancel left behind gives the logits a fresh context gives, within the bound.
    reused = on_model(assistant, lambda backend: forced_logits(backend, prompt, after.token_ids))
    scratch = open_backend(model_paths[model_id])
    try:
        fresh = forced_logits(scratch, prompt, after.token_ids)
    finally:
        scratch.close()
    assert_logits_agree(fresh, reused, "after a cancel vs a fresh context")


def test_diverging_prompt_rolls_back_only_the_difference(assistant):
    """Editing the last message: evaluation restarts at the first differing token."""
    vocab = assistant.vocab
    first = Session(vocab, assistant.template, [Message("user", "Tell me about cats and their habits.")]).prompt()
    edited = Session(vocab, assistant.template, [Message("user", "Tell me about dogs and their habits.")]).prompt()
    common = next(i for i, (a, b) in enumerate(zip(first, edited)) if a != b)

    def edit(backend):  # on the model's thread, which owns its context
        prefill(backend, first)
        return prefill(backend, edited)[:2], backend.kv_tokens

    (cached, mode), kv = on_model(assistant, edit)
    assert (cached, mode) == (common, "rollback")
    assert kv == edited


def _long_prompt(backend, n_items=700):
    ids = backend.tokenize(" ".join(f"item{i}" for i in range(n_items)), special=False)
    return ([backend.bos_id] if backend.add_bos else []) + ids


@pytest.mark.numerics  # logits across evaluation orders
def test_sliding_window_rollback_is_exact_or_honestly_reevaluated(model_paths):
    backend = open_backend(model_paths["demo-int4"], n_ctx=4096)
    try:
        assert backend.n_swa == 512
        prompt = _long_prompt(backend)
        assert len(prompt) > 3 * backend.n_swa
        prefill(backend, prompt)
        # Diverging inside the window: the SWA cells are still there, keep the prefix.
        near = prompt[:-10] + backend.tokenize(" a different ending", special=False)
        assert prefill(backend, near)[:2] == (len(prompt) - 10, "rollback")
        near_logits = backend.first_logits()
        # Diverging far back: SWA layers have dropped those cells; re-evaluate and say so.
        far = prompt[:50] + backend.tokenize(" something else", special=False)
        assert prefill(backend, far)[:2] == (0, "reeval")
        assert backend.kv_tokens == far
    finally:
        backend.close()
    fresh = open_backend(model_paths["demo-int4"], n_ctx=4096)
    try:
        prefill(fresh, near)
        assert_logits_agree(fresh.first_logits()[None], near_logits[None], "rolled back inside the window")
    finally:
        fresh.close()


def _assert_rolls_back_far(backend):
    """Diverging 50 tokens into a long prompt keeps exactly those 50 cached tokens."""
    try:
        prompt = _long_prompt(backend)
        prefill(backend, prompt)
        far = prompt[:50] + backend.tokenize(" something else", special=False)
        assert prefill(backend, far)[:2] == (50, "rollback")
    finally:
        backend.close()


def test_full_swa_cache_can_roll_back_anywhere(model_paths):
    _assert_rolls_back_far(Backend(model_paths["demo-int4"], LoadParams(n_ctx=4096, swa_full=True, n_threads=THREADS)))


def test_no_window_model_rolls_back_anywhere(model_paths):
    backend = open_backend(model_paths["demo-small"], n_ctx=4096)
    assert backend.n_swa == 0
    _assert_rolls_back_far(backend)
