"""The context budget under random conversations (hypothesis), counted with a real tokenizer:
the prompt never exceeds n_ctx − reserve, the system block is always there, turns stay whole and
in order, and the window only moves forward."""

import pytest
from hypothesis import HealthCheck, event, given, settings, strategies as st

from engine.inference.backend import Backend, LoadParams
from engine.chat.window import fit_window, session_counter, turn_starts
from engine.chat.session import Message, Session
from engine.inference.templates import template_for

from .helpers import THREADS

# Any printable text, emoji, CJK, RTL, combining marks; no lone surrogates (cleaned before this).
TEXT = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=300)


@pytest.fixture(scope="module")
def session(model_paths):
    backend = Backend(model_paths["demo-small"], LoadParams(n_ctx=512, n_threads=THREADS))
    yield Session(backend, template_for(backend))
    backend.close()


def turns_from(pairs):
    turns = []
    for question, answer in pairs:
        turns += [Message("user", question), Message("assistant", answer)]
    return turns


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(system=TEXT, pairs=st.lists(st.tuples(TEXT, TEXT), max_size=12), new=TEXT,
       reserve=st.integers(16, 200), moves=st.integers(0, 3))
def test_window_fits_keeps_system_and_order(session, system, pairs, new, reserve, moves):
    count = session_counter(session)
    n_ctx = session.backend.n_ctx
    sys_block = [Message("system", system)]
    turns, user = turns_from(pairs), Message("user", new)
    first_kept = 0
    for step in range(moves + 1):  # the same conversation over several turns: the window only moves on
        try:
            w = fit_window(count, n_ctx, sys_block, turns, user, reserve, first_kept)
        except ValueError as exc:
            # Only when the system block and the new message alone overflow, and it says so.
            assert count(sys_block + [user]) > n_ctx - reserve and "the message alone" in str(exc)
            return
        assert w.prompt_tokens <= n_ctx - reserve == w.budget
        assert w.prompt_tokens == count(w.messages + [user])  # the count is the real prompt
        assert w.messages[0] is sys_block[0]  # system always present
        kept = w.messages[1:]
        assert kept == turns[w.first_kept:]  # a suffix of the turns: order kept, nothing reordered
        assert w.first_kept >= first_kept and (w.first_kept in turn_starts(turns) or w.first_kept in
                                                (first_kept, len(turns)))  # whole turns only
        event("window moved" if w.first_kept > first_kept else "window kept")
        first_kept = w.first_kept
        turns = turns + [user, Message("assistant", new[::-1])]
        user = Message("user", new)
