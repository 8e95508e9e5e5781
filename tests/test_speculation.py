"""Speculation's parts alone: the n-gram index (updated per token, cut back, never rebuilt), and the
tuner's choice of draft length from measured costs and acceptance (engine/inference/speculation.py)."""

import random

import pytest

from engine.inference.ngram import MAX_N, MIN_N, NgramIndex
from engine.inference.speculation import MAX_DRAFT, PROBE_EVERY, PROBE_LEN, PROBE_MAX, Costs, Speculation, expected_tokens


def rebuilt(tokens: list[int]) -> NgramIndex:
    index = NgramIndex()
    index.extend(tokens)
    return index


def test_a_draft_is_what_followed_the_longest_tail_seen_before():
    index = rebuilt([7, 1, 2, 3, 4, 5, 6, 9, 2, 3, 4])
    draft = index.draft(3)
    assert draft.tokens == [5, 6, 9] and draft.key == "ngram3"
    assert rebuilt([1, 2, 3]).draft(4) is None  # its tail never occurred before
    assert rebuilt([5, 1, 2, 8, 8, 1, 2]).draft(2).tokens == [8, 8]  # a 2-gram is enough


def test_a_continuation_that_reaches_the_end_repeats_its_period():
    assert rebuilt([9, 1, 2, 1, 2, 1, 2]).draft(5).tokens == [1, 2, 1, 2, 1]


def test_the_index_updated_per_token_and_cut_back_equals_one_built_whole():
    rng = random.Random(4)
    seq = [rng.randrange(6) for _ in range(400)]
    index = NgramIndex()
    for token in seq:
        index.extend([token])
    index.truncate(250)
    index.extend(seq[250:300])
    whole = rebuilt(seq[:300])
    assert index.tokens == whole.tokens and index._after == whole._after
    index.sync(seq[:120] + [99, 98])  # a prompt that diverges: cut to the common prefix, add the rest
    assert index._after == rebuilt(seq[:120] + [99, 98])._after
    assert all(MIN_N <= len(key) <= MAX_N for key in index._after)


def test_expected_tokens():
    assert expected_tokens(0.0, 5) == 1 and expected_tokens(1.0, 5) == 6
    assert expected_tokens(0.5, 2) == pytest.approx(1.75)


def test_a_pass_size_not_measured_is_read_off_its_neighbours():
    costs = Costs(step_s=0.01)
    costs.note_pass("ngram", 1, 0.018)  # n = 2: 1.8 steps
    costs.note_pass("ngram", 7, 0.046)  # n = 8: 4.6 steps
    assert costs.of_pass("ngram", 1) == pytest.approx(1.8) and costs.of_pass("ngram", 0) == 1.0
    assert 1.8 < costs.of_pass("ngram", 3) < 4.6  # n = 4 lies between
    assert costs.of_pass("ngram", 15) > 4.6 and costs.of_pass("draft", 3) > 1  # beyond: the prior's slope


def tuner(mode="auto", step=0.01, curve=lambda n: n ** 0.73):
    spec = Speculation()
    spec.costs.step_s = step
    for n in (2, 4, 8, 16, 33):
        spec.costs.ratio.setdefault("ngram", {})[n] = curve(n)
    return spec.tuner(1, mode)


def test_auto_drafts_far_when_drafts_are_accepted_and_not_at_all_when_they_are_not():
    t = tuner()
    t.accept["ngram4+"] = 0.98
    assert t.length("ngram4+", "ngram", MAX_DRAFT) >= 16
    t.accept["ngram2"] = 0.2
    assert t.length("ngram2", "ngram", MAX_DRAFT) == 0 and "off" in t.note
    # on a machine where a pass costs about one step (a GPU), even poor drafts pay a little
    cheap = tuner(curve=lambda n: 1 + 0.02 * n)
    cheap.accept["ngram2"] = 0.2
    assert cheap.length("ngram2", "ngram", MAX_DRAFT) >= 1


def test_a_pass_stays_short_enough_for_stop():
    slow = tuner(step=0.05)  # a big model on the CPU: 50 ms a step, a 16-token pass 0.38 s
    slow.accept["ngram4+"] = 0.99
    k = slow.length("ngram4+", "ngram", MAX_DRAFT)
    assert 1 <= k and 0.05 * slow.costs.of_pass("ngram", k) <= 0.25


def test_auto_probes_a_kind_it_wrote_off_and_a_mode_asked_for_always_drafts():
    t = tuner()
    t.accept["ngram2"] = 0.1
    lengths = [t.length("ngram2", "ngram", 10) for _ in range(PROBE_EVERY)]
    assert lengths[:-1] == [0] * (PROBE_EVERY - 1) and lengths[-1] == PROBE_LEN
    # Each probe that leaves it off doubles the wait for the next, up to PROBE_MAX.
    probes = [i for i in range(1, 4 * PROBE_MAX) if t.length("ngram2", "ngram", 10)]
    gaps = [b - a for a, b in zip([0] + probes, probes)]
    assert gaps[:3] == [2 * PROBE_EVERY, 4 * PROBE_EVERY, 8 * PROBE_EVERY] and max(gaps) == PROBE_MAX
    t.accept["ngram2"] = 0.99  # a probe accepted: it is on, and when it is written off again the wait starts over
    assert t.length("ngram2", "ngram", 10) >= 1
    t.accept["ngram2"] = 0.1
    assert [t.length("ngram2", "ngram", 10) for _ in range(PROBE_EVERY)][-1] == PROBE_LEN
    forced = tuner("ngram")
    forced.accept["ngram2"] = 0.1
    assert forced.length("ngram2", "ngram", 10) == 1 and "asked for" in forced.note


def test_acceptance_is_learned_per_chat_from_the_models_start():
    spec = Speculation()
    first = spec.tuner(1, "auto")
    for _ in range(20):
        first.judged("ngram3", 8, 8)
    assert first.accept["ngram3"] > 0.95 and first.run
    second = spec.tuner(2, "auto")
    assert "ngram3" not in second.accept and second._accept("ngram3") > 0.6  # the model's, not the prior
    second.judged("ngram3", 0, 8)  # the first token rejected: one judged position, the rest teach nothing
    assert second.accept["ngram3"] < second.model_accept["ngram3"] and not second.run
    with pytest.raises(ValueError):
        spec.tuner(3, "fast")


def test_a_draft_stops_before_an_image():
    from engine.inference.media import span_ids

    index = NgramIndex()
    image = span_ids("c" * 64, 4)
    index.extend([7, 8, 9] + image + [7, 8])
    draft = index.draft(6)  # the tail "7 8" was followed by 9, then the image
    assert draft is not None and draft.tokens == [9]
    index.extend([1, 2] + span_ids("d" * 64, 3) + [1, 2])
    assert index.draft(4) is None  # "1 2" led only into an image: nothing to propose
