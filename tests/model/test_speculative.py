"""Speculative decoding on a real model (demo-small): what it guarantees, not what it happens to give.

- Greedy: every token of a drafted answer is the target's argmax under teacher forcing from a fresh
  context (or a near-tie within the measured bound, helpers.TIE_GAP), however many drafts were
  rejected on the way: a stale cell left by a rejection would move the rows after it.
- The cache after rejections holds exactly the prompt and the tokens taken (ids, and positions:
  its next row agrees with a fresh context's), and the next turn appends to it.
- Sampling: the drafted tokens follow the plain sampler's distribution (a chi-square test of
  homogeneity over disjoint seeds).
- Stop, JSON schema, tool calls and a reasoning budget hold with drafts that are often wrong.
Drafts come from the n-gram index, a draft model (the same file: a pair that overstates acceptance,
for the mechanism), or `Scripted`, which proposes what a test chooses, wrong tokens included.
"""

from __future__ import annotations

import json
import math

import jsonschema
import numpy as np
import pytest

from engine.api import LoadParams, SamplingParams, ToolUse, parse_tools
from engine.inference.draft_model import DraftModel
from engine.inference.events import GenerateParams, TurnResult
from engine.inference.generate import generate, prefill
from engine.inference.reasoning import ReasoningFormat
from engine.inference.speculation import Speculation
from engine.inference.tokens import Drafting

from .conftest import open_backend
from .helpers import GREEDY, TIE_GAP, assert_logits_agree, forced_logits

pytestmark = pytest.mark.model

PARAGRAPH = ("The committee met on Tuesday to review the budget for the coming year. After a long discussion, "
             "members agreed to increase funding for the public library by ten percent, while cutting the parks "
             "maintenance budget slightly. The chair noted that the library had seen record attendance.")
COPY = f"<|im_start|>user\nRepeat this paragraph exactly:\n\n{PARAGRAPH}<|im_end|>\n<|im_start|>assistant\n"
OPEN = "<|im_start|>user\nWrite a short story about a cat who learns to swim.<|im_end|>\n<|im_start|>assistant\n"


class Scripted:
    """A drafter proposing `script[len(sequence) - start:]`, every `wrong`-th token replaced by
    `junk`: passes that are accepted in part, rejected at a known place."""

    kind = "draft"

    def __init__(self, start: int, script: list[int], junk: int, wrong: int = 4):
        self.start, self.script, self.junk, self.wrong = start, script, junk, wrong

    def propose(self, sequence: list[int], k: int) -> list[int]:
        at = len(sequence) - self.start
        out = list(self.script[at:at + k])
        return [self.junk if (at + i) % self.wrong == self.wrong - 1 else t for i, t in enumerate(out)]


def drafting(mode: str, drafter=None) -> Drafting:
    return Drafting(mode, Speculation().tuner(1, mode), drafter)


def answer(backend, prompt, params, how: Drafting | None = None, cancel=None) -> TurnResult:
    backend.reset()
    return [r for r in generate(backend, prompt, params, cancel, drafting=how or Drafting())
            if isinstance(r, TurnResult)][-1]


@pytest.fixture(scope="module")
def small(model_paths):
    backend = open_backend(str(model_paths["demo-small"]))
    yield backend
    backend.close()


@pytest.fixture(scope="module")
def fresh(model_paths):
    backend = open_backend(str(model_paths["demo-small"]))
    yield backend
    backend.close()


def assert_greedy(fresh, prompt: list[int], ids: list[int]) -> None:
    """Each token the target's argmax from a fresh context, teacher-forced, or a near-tie."""
    fresh.reset()
    ref = forced_logits(fresh, prompt, ids)
    rows = np.arange(len(ids))
    gap = ref.max(axis=1) - ref[rows, ids]
    assert gap.max() < TIE_GAP, [(i, float(g)) for i, g in enumerate(gap) if g >= TIE_GAP]


@pytest.mark.numerics
def test_a_greedy_answer_from_ngram_drafts_is_the_targets_argmax(small, fresh):
    prompt = small.tokenize(COPY, special=True)
    params = GenerateParams(GREEDY, max_tokens=80)
    result = answer(small, prompt, params, drafting("ngram"))
    s = result.stats
    assert s.speculation == "ngram" and s.draft_tokens > 0 and 0 < s.draft_accepted <= s.draft_tokens, s
    assert_greedy(fresh, prompt, result.token_ids)


@pytest.mark.numerics
def test_rejected_drafts_leave_exactly_the_accepted_tokens_in_the_cache(small, fresh):
    prompt = small.tokenize(OPEN, special=True)
    params = GenerateParams(GREEDY, max_tokens=40)
    plain = answer(small, prompt, params)
    junk = small.tokenize(" zebra", special=False)[0]
    result = answer(small, prompt, params, drafting("draft", Scripted(len(prompt), plain.token_ids, junk)))
    s = result.stats
    assert s.draft_tokens > s.draft_accepted > 0, s  # accepted in part, rejected at every 4th
    assert_greedy(fresh, prompt, result.token_ids)
    ids = result.token_ids
    # ids: the cache is the prompt and every token taken but the last (as plain decoding leaves it)
    assert small.kv_tokens == prompt + ids[:-1]
    # positions: the next row from this cache is a fresh context's
    small.eval([ids[-1]])
    fresh.reset()
    prefill(fresh, prompt + ids)
    assert_logits_agree(fresh.first_logits()[None, :], small.first_logits()[None, :], "after rejections")
    # and the next turn appends to it
    more = small.tokenize("<|im_end|>\n<|im_start|>user\nThanks!", special=True)
    cached, mode, _ = prefill(small, prompt + ids + more)
    assert (cached, mode) == (len(prompt) + len(ids), "append")


@pytest.mark.numerics
def test_a_draft_model_drafts_and_the_answer_stays_the_targets(small, fresh, model_paths):
    prompt = small.tokenize(OPEN, special=True)
    draft = DraftModel(open_backend(str(model_paths["demo-small"])), "demo-small")
    try:
        result = answer(small, prompt, GenerateParams(GREEDY, max_tokens=32), drafting("draft", draft))
    finally:
        draft.close()
    s = result.stats
    # The same file drafting for itself: it proposes the target's own greedy tokens (overstated).
    assert s.speculation == "draft" and s.draft_tokens > 0 and s.draft_accepted > 0, s
    assert_greedy(fresh, prompt, result.token_ids)


def chi2_sf(x: float, df: int) -> float:
    """P(X > x) for X ~ chi-square(df): 1 - the regularised lower incomplete gamma, by its series."""
    s, z = df / 2, x / 2
    if z <= 0:
        return 1.0
    term = total = 1 / s
    for n in range(1, 500):
        term *= z / (s + n)
        total += term
    return max(0.0, 1 - math.exp(s * math.log(z) - z - math.lgamma(s)) * total)


@pytest.mark.numerics
def test_sampled_tokens_follow_the_plain_samplers_distribution(small):
    """The second and third tokens, drafted (the greedy continuation, verified by the rule) or
    sampled plainly, over disjoint seeds: a chi-square test of homogeneity does not reject."""
    n = 150
    prompt = small.tokenize("<|im_start|>user\nName a colour.<|im_end|>\n<|im_start|>assistant\n", special=True)
    greedy = answer(small, prompt, GenerateParams(GREEDY, max_tokens=4)).token_ids

    def tokens(seed: int, how: Drafting | None) -> tuple[int, int]:
        params = GenerateParams(SamplingParams(temperature=1.0, seed=seed), max_tokens=3, repetition_guard=False)
        ids = answer(small, prompt, params, how).token_ids + [-1, -1, -1]
        return ids[1], ids[2]

    plain = [tokens(seed, None) for seed in range(n)]
    drafted, verified = [], 0
    for seed in range(n, 2 * n):
        # the draft: the greedy tokens after whatever came first (sampled plainly)
        how = drafting("draft", Scripted(len(prompt) + 1, greedy[1:], junk=greedy[1], wrong=10**6))
        drafted.append(tokens(seed, how))
        verified += how.tuner.accept != {}
    assert verified == n  # every answer verified a draft
    for position in (0, 1):
        a = [t[position] for t in plain]
        b = [t[position] for t in drafted]
        categories = sorted(set(a) | set(b), key=lambda t: -(a.count(t) + b.count(t)))
        common = [t for t in categories if a.count(t) + b.count(t) >= 10]  # the rest pooled: expected ≥ 5
        table = [[x.count(t) for t in common] + [sum(x.count(t) for t in categories if t not in common)]
                 for x in (a, b)]
        table = [row for row in zip(*table) if sum(row)]  # categories × samples
        stat = 0.0
        for row in table:
            for j in (0, 1):
                expected = sum(row) / 2  # equal sample sizes
                stat += (row[j] - expected) ** 2 / expected
        p = chi2_sf(stat, len(table) - 1)
        assert p > 0.001, (position, table, stat, p)


class StopAfter:
    def __init__(self, n: int):
        self.n = n

    def is_set(self) -> bool:
        self.n -= 1
        return self.n < 0


def test_stop_during_drafting_leaves_the_cache_as_plain_decoding_would(small):
    prompt = small.tokenize(COPY, special=True)
    params = GenerateParams(GREEDY, max_tokens=80)
    result = answer(small, prompt, params, drafting("ngram"), cancel=StopAfter(30))
    assert result.stats.finish_reason == "cancelled" and result.stats.draft_tokens > 0, result.stats
    assert small.kv_tokens == prompt + result.token_ids[:-1]


SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20},
                                           "age": {"type": "integer", "minimum": 0, "maximum": 150}},
          "required": ["name", "age"]}


def test_json_schema_holds_with_drafts_that_break_it(small):
    prompt = small.tokenize("<|im_start|>user\nDescribe a person as JSON.<|im_end|>\n<|im_start|>assistant\n",
                            special=True)
    fmt = {"type": "json_schema", "json_schema": {"schema": SCHEMA}}
    junk = small.tokenize("Hello", special=False)
    liar = Scripted(len(prompt), junk * 200, junk[0], wrong=3)
    result = answer(small, prompt, GenerateParams(GREEDY, max_tokens=64, response_format=fmt), drafting("draft", liar))
    assert result.stats.draft_tokens > result.stats.draft_accepted, result.stats
    jsonschema.validate(json.loads(result.text), SCHEMA)


TOOLS = [{"type": "function", "function": {
    "name": "add", "description": "Add two numbers",
    "parameters": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                   "required": ["a", "b"]}}}]


def test_a_tool_call_parses_with_drafts_that_break_it(small):
    prompt = small.tokenize("<|im_start|>user\nAdd 2 and 40.<|im_end|>\n<|im_start|>assistant\n", special=True)
    junk = small.tokenize(" zebra", special=False)
    liar = Scripted(len(prompt), junk * 200, junk[0], wrong=2)
    use = ToolUse(parse_tools(TOOLS), "required", parallel=False)
    result = answer(small, prompt, GenerateParams(GREEDY, max_tokens=64, tools=use), drafting("draft", liar))
    assert result.stats.finish_reason == "tool_calls" and result.stats.draft_tokens > 0, result.stats
    (call,) = result.tool_calls
    jsonschema.validate(json.loads(call.arguments), TOOLS[0]["function"]["parameters"])


def test_a_reasoning_budget_closes_the_block_mid_pass(small):
    """The prompt opens a thinking block (as R1's does); its budget of 12 tokens runs out in the
    middle of a pass of accepted drafts: the closing tag goes in after the taken tokens."""
    fmt = ReasoningFormat()
    prompt = small.tokenize(COPY + "<think>\n", special=True)
    params = GenerateParams(GREEDY, max_tokens=60, reasoning_budget=12)
    plain = answer(small, prompt, GenerateParams(GREEDY, max_tokens=20, repetition_guard=False))  # no format
    oracle = Scripted(len(prompt), plain.token_ids, junk=0, wrong=10**6)
    small.reset()
    out = [r for r in generate(small, prompt, params, reasoning=fmt, inside=True, drafting=drafting("draft", oracle))
           if isinstance(r, TurnResult)]
    result = out[-1]
    closing = small.tokenize_control(fmt.closing_text())
    s = result.stats
    assert s.reasoning_closed == "budget" and s.draft_accepted > 0, s
    ids = result.reasoning_ids  # the prompt's opening tag, the thinking, the closing tag, the gap
    start = next(i for i in range(len(ids)) if ids[i:i + 12] == plain.token_ids[:12])
    assert ids[start + 12:start + 12 + len(closing)] == closing
    assert small.kv_tokens == prompt + ids[start:] + result.token_ids[:-1]


def test_a_sliding_window_cache_never_speculates(model_paths):
    gemma = open_backend(str(model_paths["demo-int4"]))
    try:
        prompt = gemma.tokenize("The capital of France is Paris. The capital of France is", special=False)
        result = answer(gemma, prompt, GenerateParams(GREEDY, max_tokens=8), drafting("ngram"))
    finally:
        gemma.close()
    assert result.stats.speculation is None and result.stats.draft_tokens == 0
    assert "sliding-window" in result.stats.speculation_note


def test_the_manager_loads_a_paired_draft_beside_its_target(tmp_path, monkeypatch, model_paths):
    """A catalog pair whose files are downloaded (both the demo model's bytes here: the same
    vocabulary) loads together: the draft on the target's thread, closed with it."""
    from engine.inference.manager import ModelManager
    from engine.inference.runtime import FOREGROUND
    from engine.models.catalog import load_catalog

    from .helpers import THREADS

    catalog = load_catalog()
    target, draft = catalog.get("qwen2.5-7b-instruct-q4_k_m"), catalog.get("qwen2.5-0.5b-instruct")
    monkeypatch.setenv("ASSISTANT_MODELS_DIR", str(tmp_path))
    for entry in (target, draft):
        (tmp_path / entry.file).symlink_to(model_paths["demo-small"])
    manager = ModelManager(budget_bytes=4 << 30, params=LoadParams(n_ctx=1024, n_threads=THREADS), vram_budget_mb=0)
    try:
        worker = manager.get(target.id, gpu=False)
        assert isinstance(worker.draft, DraftModel) and worker.draft.model_id == draft.id
        assert worker.plan.draft is not None and worker.plan.draft.placement == "cpu"

        def run(w, job):
            prompt = w.backend.tokenize(OPEN, special=True)
            how = Drafting("draft", w.speculation.tuner(1, "draft"), w.draft)
            job.emit([r for r in generate(w.backend, prompt, GenerateParams(GREEDY, max_tokens=16), drafting=how)
                      if isinstance(r, TurnResult)][-1])

        (result,) = list(worker.submit(run, FOREGROUND))
        assert result.stats.speculation == "draft" and result.stats.draft_accepted > 0, result.stats
    finally:
        manager.close()
