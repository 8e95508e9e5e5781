"""confidence_report on real greedy answers equals what the model's logits say, recomputed apart.

The reference loads the model again (its own context), evaluates the prompt, then the answer one
token at a time, and takes a float64 log-softmax of each logits row in numpy (the engine uses
ggml's SIMD sum over float32). It evaluates token by token as `generate` does: evaluating
prompt + answer[:i] as one batch gives logits up to ~0.2 nats different on these quantised models
(other kernels), which is the model's own numerical noise, not the report's.
"""

import math

import numpy as np
import pytest

from engine.routing.confidence import confidence_report
from engine.chat.session import Message, Session

from .conftest import open_backend
from .helpers import forced_logits, on_model, run_prompt

PROMPTS = ["Write two short sentences about rain.", "用两句话介绍一下北京。"]


def _reference_logprobs(path, prompt: list[int], answer: list[int]) -> list[float]:
    b = open_backend(path)
    try:
        rows = forced_logits(b, prompt, answer).astype(np.float64)  # the prompt in one go, then token by token
    finally:
        b.close()
    out = []
    for logits, token in zip(rows, answer):
        peak = logits.max()
        out.append(float(logits[token] - peak - math.log(np.exp(logits - peak).sum())))
        assert logits[token] >= peak - 1e-4  # greedy: the sampled token is the most likely one
    return out


@pytest.mark.parametrize("text", PROMPTS)
@pytest.mark.numerics
def test_report_equals_exp_mean_logprob_from_the_logits(assistant, model_paths, text):
    b = assistant.vocab
    prompt = Session(b, assistant.template, [Message("user", text)]).prompt()
    result = on_model(assistant, lambda backend: run_prompt(backend, prompt, max_tokens=32))
    ids = result.token_ids
    assert len(ids) >= 4, result.text
    pieces = [b.token_bytes(t) for t in ids]
    report = confidence_report(pieces, result.logprobs, threshold=0.5)

    ref = _reference_logprobs(model_paths[assistant.model_id], prompt, ids)
    expected = math.exp(sum(ref) / len(ref))
    assert abs(report["geo_mean_prob"] - expected) < 1e-3, (report["geo_mean_prob"], expected)
    assert max(abs(a - r) for a, r in zip(result.logprobs, ref)) < 1e-3  # token by token too
    assert report["n_tokens"] == len(ids) and report["low"] == (report["geo_mean_prob"] < 0.5)

    # Offsets index the answer text exactly as generate built it.
    assert report["text"] == result.text
    for s in report["sentences"]:
        assert result.text[s["start"]:s["end"]] == s["text"] and s["text"].strip() == s["text"]
    # Every token lands in exactly one sentence, and the sentences' figures multiply back to the
    # answer's: Σ n_s · log(geo_s) = Σ log p over the reference logprobs.
    if report["sentences"]:
        assert sum(s["n_tokens"] for s in report["sentences"]) == len(ids)
        total = sum(s["n_tokens"] * math.log(s["geo_mean_prob"]) for s in report["sentences"] if s["n_tokens"])
        assert abs(total - sum(ref)) < 1e-3 * len(ids)
    weak = report["weak_spans"]
    assert len(weak) <= 3 and all(w["geo_mean_prob"] < 0.5 for w in weak)
    assert [w["geo_mean_prob"] for w in weak] == sorted(w["geo_mean_prob"] for w in weak)


def test_chinese_answer_tokens_split_characters_and_still_map(assistant):
    b = assistant.vocab
    prompt = Session(b, assistant.template, [Message("user", "中国的首都是哪里？请用中文回答。")]).prompt()
    result = on_model(assistant, lambda backend: run_prompt(backend, prompt, max_tokens=24))
    pieces = [b.token_bytes(t) for t in result.token_ids]
    report = confidence_report(pieces, result.logprobs, threshold=0.0)
    assert report["text"] == result.text
    # Str pieces decoded per token would garble a character split across tokens; bytes do not.
    partial = [p for p in pieces if p.decode("utf-8", errors="replace") != p.decode("utf-8", errors="ignore")]
    if any("\u4e00" <= ch <= "\u9fff" for ch in result.text) and assistant.model_id == "demo-small":
        assert partial, "SmolLM's byte-level BPE splits CJK characters across tokens"
    assert sum(s["n_tokens"] for s in report["sentences"]) == (len(pieces) if report["sentences"] else 0)
