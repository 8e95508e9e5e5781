"""The repetition guard's price and its aim: cost per token next to a real decode step, false
positives on normal answers, and where it stops demo-int4's loops.

    .venv/bin/python bench/repetition_guard.py [--tokens 100000] [--runs 5] [--threads 2]

Cost: tests/data/normal_answers.jsonl tokenized by demo-small, repeated to `--tokens` ids, fed
through `RepetitionGuard.feed` (ids and decoded text, as `generate()` does); ns/token is the
median of `--runs` passes. Beside it, demo-small's decode time per token (greedy, 64 tokens,
guard off, median of 3) measured in the same run. False positives: every normal answer through a
fresh guard, tokenized by each demo model. Loops: demo-int4, greedy, max_tokens 300, prompts
that loop. Prints markdown tables.
"""

from __future__ import annotations

import argparse
import codecs
import json
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine.chat.session import Message, Session  # noqa: E402
from engine.inference.backend import Backend, LoadParams, SamplingParams  # noqa: E402
from engine.inference.events import GenerateParams, TurnResult  # noqa: E402
from engine.inference.generate import generate  # noqa: E402
from engine.inference.repetition import RepetitionGuard, find_loop  # noqa: E402
from engine.inference.templates import template_for  # noqa: E402

MODELS = {"demo-small": ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf",
          "demo-int4": ROOT / "models" / "gemma-3-270m-q4_k_m.gguf"}
NORMAL = ROOT / "tests" / "data" / "normal_answers.jsonl"
GREEDY = SamplingParams(temperature=0.0, repeat_penalty=1.0, seed=1)
LOOP_PROMPTS = ["Explain in two sentences why the sky is blue", "Write a story about a cat.", "List three fruits.",
                "用两句话解释为什么天空是蓝色的。", "写一个关于猫的故事。"]


def feed_cost(ids: list[int], pieces: list[str], runs: int) -> tuple[float, int]:
    """Median ns per fed token over `runs` passes, and how often the guard fired (restarted) per pass."""
    times, fired = [], 0
    for _ in range(runs):
        guard, fired = RepetitionGuard(), 0
        t0 = time.perf_counter_ns()
        for token, piece in zip(ids, pieces):
            if guard.feed(token, piece) is not None:
                guard, fired = RepetitionGuard(), fired + 1
        times.append((time.perf_counter_ns() - t0) / len(ids))
    return statistics.median(times), fired


def decode_ms_per_token(b: Backend) -> float:
    prompt = Session(b, template_for(b), [Message("user", "Write a short paragraph about autumn.")]).prompt()
    per = []
    for _ in range(3):
        b.keep_prefix(0)  # a fresh prefill each time: the same work per run
        r = [x for x in generate(b, prompt, GenerateParams(GREEDY, max_tokens=64, repetition_guard=False))
             if isinstance(x, TurnResult)][0]
        per.append(r.stats.decode_ms / max(1, r.stats.completion_tokens - 1))
    return statistics.median(per)


def tokenized(b: Backend, rows: list[dict]) -> list[tuple[dict, list[int]]]:
    return [(r, b.tokenize(r["text"], special=False)) for r in rows]


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--tokens", type=int, default=100_000)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--max-tokens", type=int, default=300)
    args = p.parse_args()
    rows = [json.loads(line) for line in NORMAL.read_text(encoding="utf-8").splitlines()]

    # (a) cost per token, next to demo-small's decode step
    small = Backend(MODELS["demo-small"], LoadParams(n_ctx=512, n_threads=args.threads))
    ids: list[int] = []
    for _, t in tokenized(small, rows):
        ids += t
    ids = (ids * (args.tokens // len(ids) + 1))[:args.tokens]
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    pieces = [decoder.decode(small.token_bytes(t)) for t in ids]
    ns, fired = feed_cost(ids, pieces, args.runs)
    ms = decode_ms_per_token(small)

    # (b) false positives, per tokenizer and kind
    fp: dict[str, Counter] = {}
    for name in MODELS:
        b = small if name == "demo-small" else Backend(MODELS[name], LoadParams(n_ctx=256, n_threads=args.threads))
        fp[name] = Counter(r["kind"] for r, t in tokenized(b, rows)
                           if find_loop(t, [b.token_bytes(x) for x in t]) is not None)
        if b is not small:
            b.close()
    small.close()

    # (c) demo-int4's loops
    gemma = Backend(MODELS["demo-int4"], LoadParams(n_ctx=1024, n_threads=args.threads))
    loops = []
    for prompt_text in LOOP_PROMPTS:
        prompt = Session(gemma, template_for(gemma), [Message("user", prompt_text)]).prompt()
        r = [x for x in generate(gemma, prompt, GenerateParams(GREEDY, max_tokens=args.max_tokens))
             if isinstance(x, TurnResult)][0]
        loops.append((prompt_text, r))
    gemma.close()

    print(f"{len(ids)} tokens of normal answers (demo-small tokenizer), {args.runs} runs; "
          f"demo-small decode with {args.threads} threads\n")
    print("| what | per token | share of a decode step |")
    print("|---|---:|---:|")
    print(f"| guard `feed` (median of {args.runs}) | {ns:.0f} ns | {ns / (ms * 1e6) * 100:.3f} % |")
    print(f"| demo-small decode step (median of 3) | {ms:.2f} ms | 100 % |")
    print(f"\nthe guard fired {fired} times in the {len(ids)}-token feed (the set repeated end to end)\n")
    kinds = sorted(Counter(r["kind"] for r in rows).items())
    print("| kind | answers | cut (demo-small) | cut (demo-int4) |")
    print("|---|---:|---:|---:|")
    for kind, n in kinds:
        print(f"| {kind} | {n} | {fp['demo-small'][kind]} | {fp['demo-int4'][kind]} |")
    total = len(rows)
    print(f"| **all** | {total} | {sum(fp['demo-small'].values())}/{total} | {sum(fp['demo-int4'].values())}/{total} |")
    print(f"\n| demo-int4 prompt (greedy) | finish | fired at token | kept tokens | max_tokens | kept text |")
    print("|---|---|---:|---:|---:|---|")
    for prompt_text, r in loops:
        s = r.stats
        kept = r.text.replace("\n", "⏎")[:60].replace("|", "\\|")
        at = s.completion_tokens + s.dropped_tokens if s.finish_reason == "repetition" else "—"
        print(f"| {prompt_text} | {s.finish_reason} | {at} | {s.completion_tokens} | {args.max_tokens} | {kept} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
