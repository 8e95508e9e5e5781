"""How fast the engine lets go: Stop during a long prompt's prefill, a chat request pre-empting a
background summary, and decode speed through engine.api against bare llama-cpp-python.

    .venv/bin/python bench/stop_latency.py [--stops 20] [--model demo-int4] [--threads 2]

Stop: a ~1 500-token message is sent through `engine.api.Assistant.send`; another thread calls
`assistant.stop()` at a random moment within the measured prefill time; latency = stop() → the
turn's generator has ended (the engine is free). Pre-emption: a summary job reading its prompt on
the model's thread, then a foreground job is submitted; latency = submit → the foreground job
starts. Decode: tokens/s after the first token, greedy, 128 tokens, engine vs `Llama.generate`,
alternated, median of 3 each. Prints markdown tables.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("ASSISTANT_HOME", tempfile.mkdtemp(prefix="bench-stop-"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.api import Assistant, GenerateParams, SamplingParams, TurnDone  # noqa: E402

SENTENCES = ["The river bends twice before it reaches the old mill.", "Tea was first traded along mountain roads.",
             "Every library keeps a few books that nobody has opened.", "A good map leaves out almost everything.",
             "The night train stops at villages without names.", "Bread rises faster in a warm kitchen."]


def long_message(seed: int, n_sentences: int = 120) -> str:
    rng = random.Random(seed)
    return f"Note {seed}: " + " ".join(rng.choice(SENTENCES) for _ in range(n_sentences)) + \
        "\n\nSummarise the note above in one sentence."


def p95(values: list[float]) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(0.95 * (len(s) - 1))))]


def stop_latency(a: Assistant, stops: int, rng: random.Random) -> tuple[list[float], int, float]:
    params = GenerateParams(SamplingParams(temperature=0.0), max_tokens=64)
    # One full prefill first: its time bounds the random stop moments, and the prompt speed it
    # measures sets the piece size.
    cid = a.new_conversation()
    text = long_message(0)
    n_tokens = a.count_tokens(text) or 0
    t0 = time.perf_counter()
    for item in a.send(cid, text, params):
        if not isinstance(item, TurnDone):
            break  # first token: the prefill is over
    prefill_s = time.perf_counter() - t0
    for _ in a.send(cid, "ok", GenerateParams(max_tokens=1)):
        pass
    latencies = []
    for i in range(stops):
        cid = a.new_conversation()
        at = rng.uniform(0.05, prefill_s * 0.9)
        stamp = {}

        def press():
            stamp["stop"] = time.perf_counter()
            a.stop()

        timer = threading.Timer(at, press)
        timer.start()
        done = None
        for item in a.send(cid, long_message(i + 1), params):
            if isinstance(item, TurnDone):
                done = item
        end = time.perf_counter()
        timer.join()
        if "stop" in stamp and done is not None and done.stats.finish_reason == "cancelled":
            latencies.append((end - stamp["stop"]) * 1000)
    return latencies, n_tokens, prefill_s


def preemption_latency(a: Assistant, trials: int) -> list[float]:
    from engine.chat.session import Message
    from engine.chat.summaries import SummaryTask, submit_summary
    from engine.inference.runtime import FOREGROUND

    worker = a.manager.loaded()[0]
    out = []
    for i in range(trials):
        messages = [Message("user" if k % 2 == 0 else "assistant", long_message(100 + i * 10 + k, 20), id=k + 1)
                    for k in range(8)]
        handle = submit_summary(worker, a.db, SummaryTask(0, None, messages))
        while worker.current is None:  # the summary has started on the model's thread
            time.sleep(0.001)
        time.sleep(0.05)  # well into its prompt
        started = {}
        t_submit = time.perf_counter()
        job = worker.submit(lambda w, j: started.setdefault("t", time.perf_counter()), FOREGROUND)
        for _ in job:
            pass
        out.append((started["t"] - t_submit) * 1000)
        handle.done.wait(120)
    return out


def decode_speeds(a: Assistant, model_path: Path, threads: int, rounds: int = 3) -> tuple[float, float]:
    from llama_cpp import Llama

    prompt_text = "Write a long story about a lighthouse keeper and the sea."
    engine_tps, bare_tps = [], []
    bare = Llama(model_path=str(model_path), n_ctx=4096, n_batch=512, n_threads=threads, n_threads_batch=threads,
                 verbose=False)
    try:
        tokens = bare.tokenize(prompt_text.encode(), add_bos=True, special=False)
        for _ in range(rounds):
            cid = a.new_conversation()
            for item in a.send(cid, prompt_text, GenerateParams(SamplingParams(temperature=0.0), max_tokens=128)):
                if isinstance(item, TurnDone):
                    engine_tps.append(item.stats.decode_tps)
            bare.reset()
            n, t_first = 0, None
            # The engine's sampling settings (SamplingParams' defaults at temperature 0): llama.cpp's
            # repeat-penalty pass walks the whole vocabulary, so it must be on in both or neither.
            s = SamplingParams(temperature=0.0)
            for _tok in bare.generate(tokens, temp=s.temperature, top_k=s.top_k, top_p=s.top_p, min_p=s.min_p,
                                      repeat_penalty=s.repeat_penalty, reset=True):
                n += 1
                if t_first is None:
                    t_first = time.perf_counter()
                if n >= 128:
                    break
            bare_tps.append((n - 1) / (time.perf_counter() - t_first))
    finally:
        bare.close()
    return statistics.median(engine_tps), statistics.median(bare_tps)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--stops", type=int, default=20)
    p.add_argument("--preemptions", type=int, default=10)
    p.add_argument("--model", default="demo-int4")
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--seed", type=int, default=7)
    args = p.parse_args()
    rng = random.Random(args.seed)
    a = Assistant.from_settings(model=args.model, memory=False, n_threads=args.threads)
    lat, pre, n_tokens, prefill_s = [], [], 0, 0.0
    try:
        a.configure(summary_every=0)
        if args.stops:
            lat, n_tokens, prefill_s = stop_latency(a, args.stops, rng)
        if args.preemptions:
            pre = preemption_latency(a, args.preemptions)
        model_path = a.manager.loaded()[0].model.path
        eng, bare = decode_speeds(a, model_path, args.threads)
        piece = a.manager.loaded()[0].prefill_piece()
    finally:
        a.close()
    print(f"model {args.model}, {args.threads} threads, {os.cpu_count()} CPUs; message {n_tokens} tokens, "
          f"full prefill {prefill_s:.2f} s; prompt piece {piece} tokens\n")
    print("| what | n | median | p95 | max |")
    print("|---|---:|---:|---:|---:|")
    for what, values in (("Stop during prefill → engine free", lat), ("chat request pre-empts a summary", pre)):
        if values:
            print(f"| {what} | {len(values)} | {statistics.median(values):.0f} ms | {p95(values):.0f} ms | "
                  f"{max(values):.0f} ms |")
    print("\n| decode (greedy, 128 tokens, median of 3) | tokens/s |")
    print("|---|---:|")
    print(f"| through engine.api | {eng:.1f} |")
    print(f"| bare llama-cpp-python `Llama.generate` | {bare:.1f} |")
    print(f"| ratio | **{eng / bare:.3f}** |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
