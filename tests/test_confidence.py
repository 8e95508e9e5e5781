"""confidence_report: the arithmetic, EN/ZH sentence splitting, token-to-sentence mapping, edge cases."""

import math

import pytest

from engine.routing.confidence import confidence_report, geometric_mean_prob, split_sentences, token_offsets


def _geo(lps):
    # Independent of the module: product of probabilities, then the n-th root.
    return math.prod(math.exp(x) for x in lps) ** (1 / len(lps))


def _sentences(text):
    return [text[a:b] for a, b in split_sentences(text)]


def test_overall_figure_is_the_geometric_mean_of_token_probabilities():
    pieces = ["Paris", " is", " the", " capital", "."]
    lps = [-0.05, -0.4, -0.01, -1.3, -0.2]
    r = confidence_report(pieces, lps, 0.5)
    assert r["geo_mean_prob"] == pytest.approx(_geo(lps), rel=1e-12)
    assert r["geo_mean_prob"] == pytest.approx(0.6757041139606261, rel=1e-12)  # exp(-1.96 / 5), by hand
    assert r["n_tokens"] == 5 and r["text"] == "Paris is the capital." and r["low"] is False
    assert geometric_mean_prob(lps) == pytest.approx(r["geo_mean_prob"], rel=1e-15)


def test_per_sentence_figures_use_only_their_own_tokens():
    pieces = ["The", " sky", " is", " blue", ".", " Grass", " is", " purple", "."]
    lps = [-0.1, -0.1, -0.1, -0.1, -0.1, -2.0, -0.5, -3.0, -0.5]
    r = confidence_report(pieces, lps, 0.5)
    a, b = r["sentences"]
    assert (a["text"], a["start"], a["end"], a["n_tokens"]) == ("The sky is blue.", 0, 16, 5)
    assert (b["text"], b["start"], b["end"], b["n_tokens"]) == ("Grass is purple.", 17, 33, 4)
    assert r["text"][b["start"]:b["end"]] == b["text"]
    assert a["geo_mean_prob"] == pytest.approx(math.exp(-0.1))
    assert b["geo_mean_prob"] == pytest.approx(math.exp(-6.0 / 4))
    assert r["weak_spans"] == [b] and b["low"] and not a["low"]


def test_english_split_keeps_decimals_abbreviations_and_list_numbers():
    assert _sentences("It is 3.14 wide. Use e.g. a ruler! Really?! Yes") == \
        ["It is 3.14 wide.", " Use e.g. a ruler!", " Really?!", " Yes"]
    assert _sentences("1. Paris\n2. London\n\nDone.") == ["1. Paris", "\n2. London", "\n\nDone."]
    assert _sentences('He said "stop." Then left.') == ['He said "stop."', " Then left."]


def test_chinese_split_on_full_width_terminators_without_spaces():
    assert _sentences("北京是中国的首都。它很大！你去过吗？去过") == ["北京是中国的首都。", "它很大！", "你去过吗？", "去过"]
    assert _sentences("他说：“你好。”然后走了。") == ["他说：“你好。”", "然后走了。"]
    assert _sentences("混合 mixed.中文？English! 完") == ["混合 mixed.", "中文？", "English!", " 完"]
    assert _sentences("你好!世界?好的") == ["你好!", "世界?", "好的"]  # ASCII marks in Chinese text


def test_regions_tile_the_text_and_whitespace_joins_the_following_sentence():
    text = "  First.\n\n  Second!  \n"
    regions = split_sentences(text)
    assert regions[0][0] == 0 and regions[-1][1] == len(text)
    assert all(a[1] == b[0] for a, b in zip(regions, regions[1:]))
    assert [text[a:b] for a, b in regions] == ["  First.", "\n\n  Second!  \n"]
    assert split_sentences("") == [] and split_sentences(" \n\t ") == []


def test_a_token_spanning_a_boundary_counts_where_its_text_starts():
    # ".\n" starts in sentence 1; " The" starts in the gap, which belongs to sentence 2.
    pieces = ["Yes", ".\n", "The", " end", ". Ok", "!"]
    lps = [-1.0, -2.0, -0.1, -0.1, -0.3, -0.7]
    r = confidence_report(pieces, lps, 0.0)
    assert [s["text"] for s in r["sentences"]] == ["Yes.", "The end.", "Ok!"]
    assert [s["n_tokens"] for s in r["sentences"]] == [2, 3, 1]
    assert r["sentences"][0]["geo_mean_prob"] == pytest.approx(math.exp(-1.5))
    assert r["sentences"][1]["geo_mean_prob"] == pytest.approx(math.exp(-0.5 / 3))
    # "Ok" has no token of its own start... "!" starts inside it: one token, the "!".
    assert r["sentences"][2]["geo_mean_prob"] == pytest.approx(math.exp(-0.7))


def test_multibyte_characters_split_across_byte_pieces():
    raw = "你好。世界！".encode()  # 3 bytes per character
    pieces = [raw[0:2], raw[2:4], raw[4:9], raw[9:13], raw[13:18]]
    lps = [-0.2, -0.2, -0.2, -1.0, -1.0]
    text, starts = token_offsets(pieces)
    assert text == "你好。世界！"
    assert starts == [0, 0, 1, 3, 4]  # a piece ending mid-character starts at that character
    r = confidence_report(pieces, lps, 0.5)
    assert [(s["text"], s["n_tokens"]) for s in r["sentences"]] == [("你好。", 3), ("世界！", 2)]
    assert r["weak_spans"][0]["text"] == "世界！"
    assert r["geo_mean_prob"] == pytest.approx(_geo(lps))


def test_emoji_only_and_truncated_utf8():
    emoji = "🙂".encode()
    r = confidence_report([emoji[:1], emoji[1:3], emoji[3:]], [-0.5, -0.5, -0.5], 0.9)
    assert r["text"] == "🙂" and r["sentences"][0]["text"] == "🙂" and r["sentences"][0]["n_tokens"] == 3
    cut = confidence_report(["ok ", emoji[:2]], [-0.1, -0.1], 0.0)  # answer cut inside a character
    assert cut["text"] == "ok \ufffd" and cut["sentences"][0]["n_tokens"] == 2


def test_str_and_bytes_pieces_agree():
    s = ["Hé", "llo", " 世界", "。"]
    a = confidence_report(s, [-0.1, -0.2, -0.3, -0.4], 0.8)
    b = confidence_report([p.encode() for p in s], [-0.1, -0.2, -0.3, -0.4], 0.8)
    assert a == b


def test_empty_and_whitespace_only_answers():
    r = confidence_report([], [], 0.5)
    assert r["geo_mean_prob"] is None and r["low"] is False and r["sentences"] == [] and r["weak_spans"] == []
    w = confidence_report([" ", "\n\n"], [-3.0, -3.0], 0.5)
    assert w["geo_mean_prob"] == pytest.approx(math.exp(-3.0)) and w["low"] is True
    assert w["sentences"] == [] and w["weak_spans"] == []


def test_thresholds_and_weak_span_order_and_cap():
    pieces, lps = [], []
    for i, lp in enumerate([-0.1, -2.0, -0.3, -3.0, -1.0, -2.5]):
        pieces += [f" S{i}", "."]
        lps += [lp, lp]
    r = confidence_report(pieces, lps, math.exp(-0.2))
    assert [s["text"] for s in r["weak_spans"]] == ["S3.", "S5.", "S1."]  # weakest first, at most 3
    assert [s["low"] for s in r["sentences"]] == [False, True, True, True, True, True]
    assert confidence_report(pieces, lps, math.exp(-0.2), max_weak=5)["weak_spans"][-1]["text"] == "S2."
    none = confidence_report(pieces, lps, 0.0)  # uncalibrated: nothing flagged
    assert none["low"] is False and none["weak_spans"] == []
    # The threshold is strict: a figure equal to it is not low.
    eq = confidence_report(["a."], [-1.0], math.exp(-1.0))
    assert eq["low"] is False and eq["weak_spans"] == []


def test_mismatched_lengths_are_rejected():
    with pytest.raises(ValueError, match="2 token pieces but 1 logprobs"):
        confidence_report(["a", "b"], [-0.1], 0.5)


def test_report_is_json_serialisable():
    import json

    r = confidence_report(["Hi", "!", " 你好", "。"], [-0.1, -0.2, -0.3, -0.4], 0.9)
    assert json.loads(json.dumps(r, ensure_ascii=False)) == r


def test_demo_models_carry_a_calibrated_warn_threshold():
    from engine.models.catalog import load_catalog

    cat = load_catalog()
    for model_id in ("demo-small", "demo-int4"):
        assert 0.0 < cat.get(model_id).warn_threshold < 1.0
    assert cat.get("qwen2.5-7b-instruct-q4_k_m").warn_threshold == 0.0  # not measured: never warns


def test_calibration_set_is_balanced_and_bilingual():
    import csv
    from pathlib import Path

    path = Path(__file__).parent / "data" / "confidence_calibration.tsv"
    with path.open(encoding="utf-8", newline="") as fh:
        rows = list(csv.DictReader(fh, delimiter="\t", quoting=csv.QUOTE_NONE))
    zh = lambda s: any("\u4e00" <= ch <= "\u9fff" for ch in s)  # noqa: E731
    for kind in ("known", "nonsense"):
        prompts = [r["prompt"] for r in rows if r["kind"] == kind]
        assert len(prompts) == 30 and len(set(prompts)) == 30
        assert 14 <= sum(map(zh, prompts)) <= 16  # about half Chinese
    assert {r["kind"] for r in rows} == {"known", "nonsense"}
