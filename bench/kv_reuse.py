"""KV reuse across turns vs a naive baseline, and engine decode speed vs a bare llama-cpp-python loop.

Run: `make bench` (or `.venv/bin/python bench/kv_reuse.py [--turns 10] [--answer-tokens 96]`).
Prints markdown tables; docs/benchmarks.md quotes them.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from llama_cpp import Llama  # noqa: E402 - the bare baseline, deliberately outside the engine

from engine.inference.backend import Backend, LoadParams, SamplingParams  # noqa: E402
from engine.models.catalog import resolve_model  # noqa: E402
from engine.api import Assistant, EngineConfig, TurnDone  # noqa: E402
from engine.inference.events import GenerateParams, TurnResult  # noqa: E402
from engine.inference.generate import generate  # noqa: E402
from engine.chat.session import Message  # noqa: E402
from engine.storage import Database  # noqa: E402

log = logging.getLogger("bench.kv_reuse")

QUESTIONS = [
    "Hi! Can you explain what a black hole is?",
    "How do they form?",
    "What happens at the event horizon?",
    "Can anything escape from one?",
    "What is Hawking radiation?",
    "How big can black holes get?",
    "Is there one at the centre of our galaxy?",
    "How did astronomers take a picture of one?",
    "Could a black hole ever threaten Earth?",
    "Summarise everything we discussed in three sentences.",
]
N_CTX = 4096


def kv_reuse_table(model: str, turns: int, answer_tokens: int) -> list[str]:
    home = tempfile.mkdtemp(prefix="bench-")
    assistant = Assistant(Database(Path(home) / "bench.db"), EngineConfig(model=model, load=LoadParams(n_ctx=N_CTX)))
    naive = Backend(assistant.backend.path, LoadParams(n_ctx=N_CTX))
    params = GenerateParams(SamplingParams(temperature=0.0, seed=1), max_tokens=answer_tokens)
    cid = assistant.new_conversation("You are a knowledgeable, concise assistant.")
    rows = [f"### {model}: {turns}-turn conversation, answers ≤ {answer_tokens} tokens, n_ctx {N_CTX}", "",
            "| turn | prompt tokens | new user tokens | evaluated (ours) | evaluated (naive) | TTFT ours ms | TTFT naive ms | TTFT ratio naive/ours |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for i, question in enumerate(QUESTIONS[:turns], start=1):
        prompt = assistant.session(cid).prompt(Message("user", question))
        n_new = len(assistant.vocab.tokenize(question, special=False))
        done = next(x for x in assistant.send(cid, question, params) if isinstance(x, TurnDone))
        ours = done.stats
        naive.reset()  # a fresh context: the whole prompt is evaluated again
        base = next(x for x in generate(naive, prompt, GenerateParams(params.sampling, max_tokens=1))
                    if isinstance(x, TurnResult)).stats
        rows.append(f"| {i} | {len(prompt)} | {n_new} | {ours.prompt_tokens_evaluated} | "
                    f"{base.prompt_tokens_evaluated} | {ours.ttft_ms:.0f} | {base.ttft_ms:.0f} | "
                    f"{base.ttft_ms / ours.ttft_ms:.1f}× |")
    naive.close()
    assistant.close()
    return rows


def _bare_decode_tps(bare: Llama, prompt: list[int], n_tokens: int, is_eog) -> float:
    bare.reset()
    count, t_first, now = 0, None, 0.0
    for tok in bare.generate(prompt, temp=0.0, repeat_penalty=1.0, top_k=40, top_p=0.95, min_p=0.05):
        now = time.perf_counter()
        t_first = t_first or now
        count += 1
        if count >= n_tokens or is_eog(tok):
            break
    return (count - 1) / (now - t_first)


def _logprob_cost_us(engine: Backend, sampling: SamplingParams, calls: int = 300) -> tuple[float, float]:
    """Per-token cost of sampling alone vs sampling + logprob, on the same logits row."""
    sampler = engine.make_sampler(sampling)
    t0 = time.perf_counter()
    for _ in range(calls):
        sampler.sample()
    t1 = time.perf_counter()
    for _ in range(calls):
        engine.sample(sampler)
    t2 = time.perf_counter()
    return (t1 - t0) / calls * 1e6, (t2 - t1) / calls * 1e6


def decode_speed_table(model: str, n_tokens: int, repeats: int) -> list[str]:
    path = resolve_model(model).path
    threads = os.cpu_count() or 1
    engine = Backend(path, LoadParams(n_ctx=2048, n_threads=threads))
    bare = Llama(model_path=str(path), n_ctx=2048, n_batch=512, n_ubatch=512, n_threads=threads,
                 n_threads_batch=threads, swa_full=False, verbose=False)
    prompt = engine.tokenize("Write a long, detailed story about a dragon who learns to paint.", special=False)
    sampling = SamplingParams(temperature=0.0, repeat_penalty=1.0, seed=1)
    facade = Assistant(Database(Path(tempfile.mkdtemp(prefix="bench-")) / "bench.db"), EngineConfig(model=model, load=LoadParams(n_ctx=2048, n_threads=threads)))
    ours_tps, bare_tps, facade_tps = [], [], []
    text = "Write a long, detailed story about a dragon who learns to paint."
    for i in range(repeats):  # interleaved, rotating who goes first, so machine noise hits all alike
        for who in [(0, 1, 2), (1, 2, 0), (2, 0, 1)][i % 3]:
            if who == 0:
                engine.reset()
                result = [x for x in generate(engine, prompt, GenerateParams(sampling, max_tokens=n_tokens))
                          if isinstance(x, TurnResult)][0]
                ours_tps.append(result.stats.decode_tps)
            elif who == 1:
                bare_tps.append(_bare_decode_tps(bare, prompt, n_tokens, engine.is_eog))
            else:  # the whole path a user gets: model thread, queue, SQLite writes
                cid = facade.new_conversation()
                done = [x for x in facade.send(cid, text, GenerateParams(sampling, max_tokens=n_tokens))
                        if isinstance(x, TurnDone)][-1]
                facade_tps.append(done.stats.decode_tps)
    facade.close()
    sample_us, with_logprob_us = _logprob_cost_us(engine, sampling)
    engine.close()
    bare.close()
    o, b, f = statistics.median(ours_tps), statistics.median(bare_tps), statistics.median(facade_tps)
    paired = statistics.median(x / y for x, y in zip(ours_tps, bare_tps))
    paired_f = statistics.median(x / y for x, y in zip(facade_tps, bare_tps))
    log.info("%s runs: engine %s bare %s facade %s", model, ours_tps, [round(x, 1) for x in bare_tps], facade_tps)
    step_us = 1e6 / b
    return [f"| {model} | {result.stats.completion_tokens} | {b:.1f} | {o:.1f} | {paired:.3f} | {f:.1f} | "
            f"{paired_f:.3f} | {with_logprob_us - sample_us:.0f} µs ({(with_logprob_us - sample_us) / step_us:.1%}) |"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--turns", type=int, default=10)
    ap.add_argument("--answer-tokens", type=int, default=96)
    ap.add_argument("--decode-tokens", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--models", nargs="+", default=["demo-small", "demo-int4"])
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="# %(message)s", stream=sys.stderr)
    out = []
    for model in args.models if args.turns > 0 else []:
        out += kv_reuse_table(model, args.turns, args.answer_tokens) + [""]
    out += [f"### Decode speed, median of {args.repeats} interleaved runs ({os.cpu_count()} threads, greedy)", "",
            "| model | tokens | bare `Llama.generate` tok/s | engine `generate()` tok/s | engine/bare (median of paired ratios) | full facade tok/s | facade/bare | logprob cost per token (share of a step) |",
            "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for model in args.models:
        out += decode_speed_table(model, args.decode_tokens, args.repeats)
    sys.stdout.write("\n".join(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
