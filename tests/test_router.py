"""Router rules, stickiness, override, evaluation metrics and the `route` CLI (no models)."""

import argparse
import io
import json
import sys
import time
from pathlib import Path

import pytest

from engine.cli.route import EXIT_OK, EXIT_USAGE, add_route_parser
from engine.routing.router import RouteDecision, apply_stickiness, classify, override
from engine.routing.router_eval import EvalFileError, evaluate, load_tsv, render_report, report_dict

DATA = Path(__file__).resolve().parent / "data"
# The project's public set (../shared/eval/ beside the repository), copied here so that the floor is
# held on every machine, CI's clean clone included; where the shared folder exists the copy must
# still be the same file (test_the_public_set_is_the_shared_one).
PUBLIC = DATA / "router_public.tsv"
SHARED_PUBLIC = Path(__file__).resolve().parents[2] / "shared" / "eval" / "router_public.tsv"


@pytest.mark.parametrize("text", [
    "你好", "hi", "thanks!", "谢谢啦", "ok", "好的", "bye", "再见～", "good morning :)", "👍", "",
    "what time is it?", "今天星期几", "2+2?", "15 * 3 =", "7乘以8等于多少",
    'How do you say "bread" in Italian?', "“书”用英语怎么说", "who are you?", "你是谁",
])
def test_l1_small_talk_and_trivia(text):
    assert classify(text).level == "L1"


@pytest.mark.parametrize("text", [
    "How do I read a JSON file in Python?",
    "Python 怎么把字符串转成整数？",
    "Write a function that returns the n-th Fibonacci number.",
    "写一个 shell 脚本，删除七天前的日志文件",
    "What is the difference between a process and a thread?",
    "为什么铁会生锈？",
    "Fix this: print('a' + 1)",
    "hi! how do I clear my browser cache?",  # a greeting does not make a real question L1
    "你好，请问怎么修改路由器密码？",
    "Python 的列表推导式怎么写",  # 推导式 is a noun, not "derive"
    "I'm a graphic designer, what should my portfolio include?",
])
def test_l2_ordinary_questions_and_short_code(text):
    assert classify(text).level == "L2"


@pytest.mark.parametrize("text", [
    "Design a distributed rate limiter for an API gateway.",
    "设计一个支持多租户的日志收集系统",
    "Prove that there is no largest prime number.",
    "证明 sqrt(5) 是无理数",
    "Write a 2500-word essay on the history of printing.",
    "写一篇四千字的悬疑小说",
    "Compare MySQL, MongoDB and Cassandra for a time-series workload and recommend one.",
    "对比 Java、Go 和 Rust 在后端开发中的优劣，并给出选型建议",
    "帮我规划一个为期两周的欧洲旅行行程，包括交通、住宿和预算",
    "Do a SWOT analysis of a small bakery business.",
])
def test_l3_design_proof_plans_long_writing_comparisons(text):
    assert classify(text).level == "L3"


@pytest.mark.parametrize("text, level", [
    ("thanks a bunch", "L1"), ("ok, rewrite it", "L2"), ("hello, explain DNS", "L2"),
    ("好的，辛苦你啦", "L1"), ("谢谢，帮我再写一个", "L2"), ("你好，为什么天是蓝的", "L2"),
])
def test_near_small_talk_needs_an_anchor_and_no_request(text, level):
    assert classify(text).level == level


def test_decision_has_reason_and_time():
    d = classify("Design a URL shortener.")
    assert d.level == "L3" and "design" in d.reason and d.score >= 3
    assert 0 < d.micros < 100_000


def test_fenced_code_is_material_not_length():
    # 40 lines of code with a one-line question is a short-code (L2) job, not a long text.
    body = "\n".join(f"    total += item_{i} * {i}  # running sum" for i in range(40))
    text = f"Why is this slow?\n```python\ndef f(items):\n{body}\n    return total\n```"
    d = classify(text)
    assert d.level == "L2" and d.reason.startswith("code")


def test_large_code_refactor_and_long_paste_are_l3():
    body = "\n".join(f"x{i} = compute({i})" for i in range(120))
    assert classify(f"Refactor this into classes:\n```\n{body}\n```").level == "L3"
    article = "The committee discussed the budget, the schedule and the hiring plan at length. " * 60
    assert classify("Summarize this: " + article).level == "L3"


def test_quoted_material_keywords_do_not_count():
    # "report" and "strategy" inside the quoted sentence are the object of a grammar question.
    text = 'What tense is used in "She had written the report and the strategy before noon"?'
    assert classify(text).level == "L2"


@pytest.mark.parametrize("text", [
    "好的" * 29 + "x",  # once exponential backtracking in the small-talk regex
    "哈" * 59 + "?",
    "```\n" * 2000,
    "fix this\n```\n" + "x = 1;\n" * 5000,
    "word, " * 20000,
    "这是一段很长的文字，" * 50000,
])
def test_adversarial_inputs_stay_linear(text):
    # A generous stall probe, not a benchmark: each of these takes well under 50 ms.
    t0 = time.perf_counter()
    classify(text)
    assert time.perf_counter() - t0 < 1.0


# --- stickiness

def _want(level: str) -> RouteDecision:
    return RouteDecision(level, "rule", 10.0, 0.0)


def test_no_warm_cache_or_same_level_keeps_decision():
    for warm in (None, "L2"):
        d = apply_stickiness(_want("L2"), warm_level=warm, uncached_tokens=5000, prompt_tps=100)
        assert d == _want("L2")


def test_one_level_down_stays_and_says_why():
    d = apply_stickiness(_want("L1"), warm_level="L2", uncached_tokens=1800, prompt_tps=580)
    assert d.level == "L2" and d.wanted == "L1"
    assert d.reason == ("sticky: KV warm on L2, switching to L1 would re-evaluate 1800 tokens "
                        "(~3.1 s) (one level down)")
    # even when the switch is cheap: the warm model answers at least as well
    assert apply_stickiness(_want("L2"), warm_level="L3", uncached_tokens=10, prompt_tps=1000).level == "L3"


def test_two_levels_down_switches_only_when_cheap():
    cheap = apply_stickiness(_want("L1"), warm_level="L3", uncached_tokens=300, prompt_tps=600)
    assert cheap.level == "L1" and "switch from warm L3" in cheap.reason
    dear = apply_stickiness(_want("L1"), warm_level="L3", uncached_tokens=3000, prompt_tps=600)
    assert dear.level == "L3" and dear.reason.startswith("sticky:")


def test_up_to_l2_stays_on_l1_only_over_the_switch_budget():
    dear = apply_stickiness(_want("L2"), warm_level="L1", uncached_tokens=4000, prompt_tps=2000)  # 2.0 s
    assert dear.level == "L1" and "over the 1.5 s switch budget" in dear.reason
    cheap = apply_stickiness(_want("L2"), warm_level="L1", uncached_tokens=2000, prompt_tps=2000)  # 1.0 s
    assert cheap.level == "L2"
    loose = apply_stickiness(_want("L2"), warm_level="L1", uncached_tokens=4000, prompt_tps=2000,
                             max_switch_s=3.0)
    assert loose.level == "L2"


@pytest.mark.parametrize("warm", ["L1", "L2"])
def test_never_refuses_l3(warm):
    d = apply_stickiness(_want("L3"), warm_level=warm, uncached_tokens=100_000, prompt_tps=50)
    assert d.level == "L3" and d.wanted is None


def test_stickiness_rejects_bad_input():
    with pytest.raises(ValueError):
        apply_stickiness(_want("L2"), warm_level="L9", uncached_tokens=1, prompt_tps=1)
    with pytest.raises(ValueError):
        apply_stickiness(_want("L2"), warm_level="L1", uncached_tokens=1, prompt_tps=0)
    with pytest.raises(ValueError):
        apply_stickiness(_want("L2"), warm_level="L1", uncached_tokens=-1, prompt_tps=10)


def test_override():
    d = classify("hi")
    assert override(d, None) is d and override(d, "auto") is d
    forced = override(d, "l3")
    assert (forced.level, forced.reason, forced.wanted) == ("L3", "user override", "L1")
    with pytest.raises(ValueError):
        override(d, "L4")


# --- evaluation metrics

def _tsv(tmp_path, text: str) -> Path:
    p = tmp_path / "set.tsv"
    p.write_text(text, encoding="utf-8")
    return p


def test_metrics_on_a_synthetic_set(tmp_path):
    # Labels vs a fake classifier's answers: L1→L1, L1→L2 (over), L2→L2, L2→L1 (under),
    # L3→L2 (under), L3→L3, L3→L3. Hand count: 4/7 correct, 2 under, 1 over.
    path = _tsv(tmp_path, "level\tprompt\nL1\ta\nL1\tb\nL2\tc\nL2\td\nL3\te\nL3\tf\nL3\tg\n")
    answers = {"a": "L1", "b": "L2", "c": "L2", "d": "L1", "e": "L2", "f": "L3", "g": "L3"}
    result = evaluate(load_tsv(path), lambda t: RouteDecision(answers[t], "fake", 0.0))
    assert result.confusion == [[1, 1, 0], [1, 1, 0], [0, 1, 2]]
    assert (result.correct, result.under, result.over) == (4, 2, 1)
    assert result.accuracy == pytest.approx(4 / 7)
    assert result.under_rate == pytest.approx(2 / 7) and result.over_rate == pytest.approx(1 / 7)
    rep = report_dict(result, "synthetic")
    assert rep["confusion"]["rows_true_cols_pred"] == [[1, 1, 0], [1, 1, 0], [0, 1, 2]]
    assert [e["prompt"] for e in rep["errors"]] == ["b", "d", "e"]
    text = render_report(result, "synthetic")
    assert "accuracy 57.1%" in text and "under-routing 28.6% (2)" in text


@pytest.mark.parametrize("content, message", [
    ("prompt\tlevel\nL1\thi\n", "header"),
    ("level\tprompt\nL1 hi\n", ":2: expected"),
    ("level\tprompt\nL1\thi\nL2\ta\tb\n", ":3: expected"),
    ("level\tprompt\nL7\thi\n", "unknown level"),
    ("level\tprompt\nL1\t  \n", "empty prompt"),
    ("level\tprompt\n\n", "no labelled prompts"),
])
def test_malformed_tsv(tmp_path, content, message):
    with pytest.raises(EvalFileError, match=message):
        load_tsv(_tsv(tmp_path, content))


def test_accuracy_floor_on_private_set():
    result = evaluate(load_tsv(DATA / "router_private.tsv"))
    assert result.total >= 150
    assert result.accuracy >= 0.9, render_report(result, "private")
    assert result.under_rate <= 0.03, render_report(result, "private")


@pytest.mark.parametrize("path", [DATA / "router_holdout.tsv", PUBLIC], ids=["holdout", "public"])
def test_loose_floor_on_unseen_sets(path):
    result = evaluate(load_tsv(path))
    assert result.accuracy >= 0.8 and result.under_rate <= 0.1, render_report(result, path.name)


def test_the_public_set_is_the_shared_one():
    if not SHARED_PUBLIC.is_file():
        pytest.skip(f"no {SHARED_PUBLIC} to compare the copy with (the floor above holds on the copy)")
    assert PUBLIC.read_bytes() == SHARED_PUBLIC.read_bytes(), "copy ../shared/eval/router_public.tsv again"


# --- CLI

def _run(argv, monkeypatch, capsys, stdin: bytes | None = None, tty: bool = False):
    parser = argparse.ArgumentParser(prog="assistant")
    add_route_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["route", *argv])
    if stdin is not None or tty:
        fake = io.TextIOWrapper(io.BytesIO(stdin or b""), encoding="utf-8")
        fake.isatty = lambda: tty
        monkeypatch.setattr(sys, "stdin", fake)
    code = args.func(args)
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_text_json_and_human(monkeypatch, capsys):
    code, out, _ = _run(["--json", "Design a URL shortener."], monkeypatch, capsys)
    obj = json.loads(out)
    assert code == EXIT_OK and obj["level"] == "L3" and set(obj) == {"level", "reason", "micros"}
    code, out, _ = _run(["你好"], monkeypatch, capsys)
    assert code == EXIT_OK and out.startswith("L1  ")


def test_cli_stdin_lines_with_invalid_utf8(monkeypatch, capsys):
    code, out, err = _run([], monkeypatch, capsys, stdin=b"hi\nDesign a chat system\n\xff\xfe oops\n\n")
    rows = [json.loads(line) for line in out.splitlines()]
    assert code == EXIT_OK and [r["level"] for r in rows] == ["L1", "L3", "L2", "L1"]
    assert "Traceback" not in err


def test_cli_needs_input_on_a_tty(monkeypatch, capsys):
    code, out, err = _run([], monkeypatch, capsys, tty=True)
    assert code == EXIT_USAGE and out == "" and err.startswith("error: ")


def test_cli_eval_report(monkeypatch, capsys, tmp_path):
    path = _tsv(tmp_path, "level\tprompt\nL1\thello\nL2\tHow do I sort a list in Python?\n"
                          "L3\tDesign a global CDN\nL3\t你好\n")
    code, out, _ = _run(["--eval", str(path)], monkeypatch, capsys)
    assert code == EXIT_OK and "3/4 correct" in out and "under-routing 25.0% (1)" in out
    code, out, _ = _run(["--eval", str(path), "--json"], monkeypatch, capsys)
    obj = json.loads(out)
    assert obj["accuracy"] == 0.75 and obj["confusion"]["rows_true_cols_pred"][2] == [1, 0, 1]
    assert obj["by_language"]["zh"]["total"] == 1


@pytest.mark.parametrize("content", [None, "level\tprompt\nL1\thi\textra\n", "level\tprompt\nL5\thi\n"])
def test_cli_eval_bad_input_exit_2(monkeypatch, capsys, tmp_path, content):
    path = tmp_path / "missing.tsv" if content is None else _tsv(tmp_path, content)
    code, out, err = _run(["--eval", str(path)], monkeypatch, capsys)
    assert code == EXIT_USAGE and out == "" and err.startswith("error: ") and "Traceback" not in err


def test_cli_text_and_eval_together_is_usage_error(monkeypatch, capsys, tmp_path):
    code, _, err = _run(["hi", "--eval", str(tmp_path / "x.tsv")], monkeypatch, capsys)
    assert code == EXIT_USAGE and "not both" in err
