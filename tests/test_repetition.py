"""The loop detector on synthetic answers: where it fires, where it cuts, and what it leaves alone."""

import random

from engine.inference.repetition import LINE_REPEATS, LONG_SPAN, MIN_SPAN, RepetitionGuard, find_loop

SKY = [155122, 528, 1156, 23974, 3217, 506, 7217, 563, 3730, 217716, 107]  # demo-int4's looping line, 11 ids


def words(n: int, seed: int) -> list[int]:
    """n ids that never repeat a 4-gram (stand-ins for ordinary prose)."""
    rng = random.Random(seed)
    return [rng.randrange(1000, 50000) for _ in range(n)]


def test_periodic_tail_fires_at_the_span_floor_and_keeps_the_first_block():
    intro = words(20, 1)
    fired, keep = find_loop(intro + SKY * 20)
    # Period 11: three blocks are 33 ids, so the 48-token floor decides: it fires at 48 periodic ids.
    assert fired == len(intro) + MIN_SPAN
    assert keep == len(intro) + len(SKY)


def test_long_block_fires_after_three_occurrences():
    intro, block = words(10, 2), words(100, 3)
    fired, keep = find_loop(intro + block * 5)
    assert (fired, keep) == (len(intro) + 300, len(intro) + 100)


def test_alternating_lines_fire_as_one_block():
    a, b = words(9, 4), words(6, 5)  # "Write a story…\nPurchase a cat.\n" alternating: period 15
    fired, keep = find_loop(a + (a + b) * 10)
    assert (fired, keep) == (len(a) + MIN_SPAN, len(a) + 15)  # the loop starts at the second "a"


def test_one_token_loop_fires_and_keeps_a_minimum_block():
    fired, keep = find_loop([1, 2, 3] + [7] * 100)
    assert (fired, keep) == (3 + MIN_SPAN, 3 + 4)


def test_near_repeats_do_not_fire():
    # The same template with one id changing each time, like a numbered list or a table of values.
    template = words(12, 6)
    ids = []
    for k in range(40):
        ids += template[:5] + [900 + k] + template[6:]
    assert find_loop(ids) is None


def test_short_repeats_under_the_span_floor_do_not_fire():
    # A refrain of 5 ids sung three times, twice: 15-id runs, never 48.
    refrain = words(5, 7)
    ids = words(30, 8) + refrain * 3 + words(30, 9) + refrain * 3 + words(30, 10)
    assert find_loop(ids) is None


def test_a_repeat_that_breaks_resets_the_run():
    block = words(10, 11)
    assert find_loop(block * 4 + [5] + block * 4) is None  # 40 periodic ids, a break, 40 more
    assert find_loop(block * 4 + [5] + block * 5) is not None  # 50 in a row after the break


def pieces(text_tokens: list[str]) -> list[bytes]:
    return [t.encode() for t in text_tokens]


def test_repeated_short_line_fires_on_its_fourth_occurrence():
    line = ["The", " fruit", " is", " a", " fruit", ".", "\n"]
    toks = ["List", " three", " fruits", ".", "\n"] + line * 10
    ids = [hash(t) % 100000 for t in toks]
    fired, keep = find_loop(ids, pieces(toks))
    assert fired == 5 + LINE_REPEATS * len(line)  # 33 ids: the period rule alone would wait for 48
    assert keep == 5 + len(line)


def test_lines_in_code_fences_and_wordless_lines_do_not_count():
    toks = ["```", "\n"] + ["print", "(x)", "\n"] * 5 + ["```", "\n", "}", "\n"] * 1 + ["}", "\n"] * 6
    ids = list(range(len(toks)))  # distinct ids: only the line rule could fire
    assert find_loop(ids, pieces(toks)) is None


def test_numbered_copies_of_one_line_fire():
    toks = []
    for k in range(1, 6):
        toks += [f"{k}.", " Describe", " the", " scene", ".", "\n"]
    fired, keep = find_loop(list(range(len(toks))), pieces(toks))
    assert keep == 6 and fired == 24


def test_wordless_blocks_need_the_long_span():
    row = ["[", "0", ",", " 0", ",", " 0", "],", "\n"]
    toks = ["grid", " =", " ["] + row * 80
    ids = [hash(t) % 100000 for t in toks]
    fired, keep = find_loop(ids, pieces(toks))
    assert (fired, keep) == (3 + LONG_SPAN, 3 + len(row))
    n = 3 + 40 * len(row)  # 320 ids of zero rows: a big grid literal, not a loop
    assert find_loop(ids[:n], pieces(toks[:n])) is None


def test_feed_is_incremental_and_reports_the_rule():
    g = RepetitionGuard(text=False)
    results = [g.feed(t) for t in SKY * 6]
    assert results.index(next(r for r in results if r is not None)) == MIN_SPAN - 1
    assert g.rule == "period"


def test_long_random_text_never_fires():
    assert find_loop(words(100_000, 13)) is None
