"""Quantised KV (q8_0) as an option: what it saves, what it costs, and how far its logits drift.

    .venv/bin/python bench/kv_quant.py [--models demo-small demo-int4] [--n-ctx 2048]

For each demo model, the same chats (fixed texts, rendered with the model's template) are fed to
three contexts: f16 KV (the default, the reference), f16 with flash attention, and q8_0 K and V
with flash attention (llama.cpp needs flash attention for a quantised V). Each chat's fixed answer
is teacher-forced, and its logits compared with the reference's: top-1 agreement, max and mean
|Δlogit|, max over the 40 likeliest. The f16 + FA row separates flash attention's own drift from
the quantisation's.

Then the state a warm or cold tier holds for each chat: its bytes (llama.cpp's sequence state), the
time to copy it out, the time to put it back into an emptied context (median of 5), and the
decode speed after it (16 tokens fed one at a time).

Drift columns: top-1 agreement, mean |Δlogit|, max |Δlogit| over the 40 likeliest tokens, and the
largest logit gap (in the reference) between two argmaxes that differ: a small gap means the
disagreements are near-ties. Prints one markdown table per model (docs/benchmarks.md, "Quantised KV").
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
os.environ.setdefault("ASSISTANT_HOME", tempfile.mkdtemp(prefix="bench-kvq-"))
sys.path.insert(0, str(ROOT))

from engine.chat.session import Message, Session  # noqa: E402
from engine.inference.backend import Backend, LoadParams  # noqa: E402
from engine.inference.templates import template_for  # noqa: E402
from engine.models.catalog import resolve_model  # noqa: E402
from engine.models.ggml_registry import registry  # noqa: E402
from tests.model.helpers import forced_logits, logit_agreement  # noqa: E402

# A long chat in two languages, so the state is big enough for its copy to be timed.
TURNS = [
    ("Hi! What is the capital of France?", "The capital of France is Paris, on the river Seine."),
    ("Name one famous museum there.", "The Louvre, which holds the Mona Lisa, is the best known."),
    ("你好，请介绍一下长城。", "长城是中国古代的防御工程，东起山海关，西至嘉峪关，全长两万多公里。"),
    ("Explain what a prime number is.", "A prime is a whole number above one whose only divisors are one and itself."),
]
LAST = "Give me three tips for a first trip to Paris, and one for the Great Wall."
ANSWER = (" First, buy a museum pass to skip the lines. Second, walk along the Seine at dusk. Third, learn a"
          " few words of French. 在长城，请穿舒适的鞋，早上去人少。")
CONFIGS = [  # label, LoadParams fields
    ("f16 (default)", dict(type_k="f16", type_v="f16", flash_attn=False)),
    ("f16 + flash attention", dict(type_k="f16", type_v="f16", flash_attn=True)),
    ("q8_0 K+V + flash attention", dict(type_k="q8_0", type_v="q8_0", flash_attn=True)),
]


def chats(backend: Backend, repeats: int) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, answer ids) per chat: the turns above, repeated to lengthen the history."""
    template = template_for(backend)
    out = []
    for n in range(1, repeats + 1):
        history = [Message("system", "You are a helpful assistant.")]
        for _ in range(n):
            for user, assistant in TURNS:
                history += [Message("user", user), Message("assistant", assistant)]
        prompt = Session(backend, template, history).prompt(Message("user", LAST))
        out.append((prompt, backend.tokenize(ANSWER, special=False)))
    return out


def measure(path: str, n_ctx: int, repeats: int) -> list[str]:
    logits, rows = {}, []
    for label, fields in CONFIGS:
        backend = Backend(path, LoadParams(n_ctx=n_ctx, n_threads=2, **fields))
        try:
            got, sizes = [], []
            for prompt, answer in chats(backend, repeats):
                backend.reset()
                got.append(forced_logits(backend, prompt, answer))
                t0 = time.perf_counter()
                saved = backend.save_sequence()
                save_ms = (time.perf_counter() - t0) * 1000
                sizes.append(len(saved[0]) / len(saved[1]))
                times = []
                for _ in range(5):
                    backend.reset()
                    t0 = time.perf_counter()
                    assert backend.restore_sequence(saved), f"{label}: the state did not restore"
                    times.append((time.perf_counter() - t0) * 1000)
            t0 = time.perf_counter()  # decode speed at the longest chat: 16 tokens, one at a time
            for token in answer[:16]:
                backend.eval([token])
            decode_tps = 16 / (time.perf_counter() - t0)
        finally:
            backend.close()
        logits[label] = np.concatenate(got)
        drift = []
        for ref in (CONFIGS[0][0], CONFIGS[1][0]):  # against f16, and against f16 with the same attention
            s = logit_agreement(logits[ref], logits[label]) if ref != label and ref in logits else None
            drift.append(f"{s['top1']:.3f} / {s['mean']:.3f} / {s['max_top']:.2f} / {s['tie_gap']:.2f}" if s else "—")
        rows.append(f"| {label} | {statistics.mean(sizes):,.0f} | {len(saved[1])} | {len(saved[0]) / 2**20:.2f} | "
                    f"{save_ms:.1f} | {statistics.median(times):.1f} | {decode_tps:.1f} | {len(logits[label])} | {drift[0]} | "
                    f"{drift[1]} |")
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["demo-small", "demo-int4"])
    ap.add_argument("--n-ctx", type=int, default=2048)
    ap.add_argument("--repeats", type=int, default=4, help="chats of 1..N copies of the turns")
    args = ap.parse_args()
    registry().load()
    print(f"CPU variant {registry().cpu_variant() or 'static'}, n_ctx {args.n_ctx}, 2 threads\n")
    for model in args.models:
        print(f"### {model}\n")
        print("| KV cache | state B/token | tokens (longest chat) | state MiB | copy out ms | restore ms | "
              "decode tok/s | positions | vs f16: top-1 / mean / max top-40 / gap | vs f16 + FA: the same |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---|---|")
        print("\n".join(measure(str(resolve_model(model).path), args.n_ctx, args.repeats)) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
