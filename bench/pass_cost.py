"""What one verification pass costs on this CPU, per weight type (issue 40): the ceiling of speculative
decoding before any draft is made.

A pass evaluates the pending token plus n - 1 drafted ones in one decode, with logits on every row.
If all n are accepted it yields n tokens, so n × cost(1) / cost(n) is the most any draft, n-gram or
model, can gain here. On a CPU that ratio depends on whether the weight type has batched kernels:
llama.cpp's tinyBLAS (llamafile sgemm) covers F16 and Q8_0/Q4_0 on x86, and Q4_0/Q4_K/IQ4_NL have
repacked AVX2 layouts; Q4_1 (demo-small's file) has neither, so its batched matmul is one vec_dot
per row and a pass of n costs close to n plain steps.

Rows: demo-small as shipped (Q4_1), the same file re-quantized by llama.cpp to Q4_0, Q8_0 and F16,
and with `--real-size` the catalog's Qwen2.5-1.5B Q4_K_M shape with random weights
(bench/real_size_model.py; its tokens are gibberish, its times are the real shape's).

    .venv/bin/python bench/pass_cost.py [--runs 9] [--real-size]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.inference import llama_seam  # noqa: E402
from engine.inference.backend import Backend, LoadParams, SamplingParams  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
THREADS = 2
SIZES = (1, 2, 3, 4, 6, 8, 12, 16)
PROMPT = ("<|im_start|>user\nHere is a paragraph about the history of lighthouses and the people who kept "
          "them, from the ancient world to the automated lights of today.<|im_end|>\n<|im_start|>assistant\n")


def pass_ms(path: Path, runs: int) -> dict[int, float]:
    """Median milliseconds of a pass of n tokens, logits on every row, each size alternated with the others
    within a run so that other programs' load falls on all of them."""
    backend = Backend(path, LoadParams(n_ctx=2048, n_threads=THREADS))
    try:
        prompt = backend.tokenize(PROMPT, special=True)
        backend.eval(prompt)
        base = backend.n_kv
        sampler = backend.make_sampler(SamplingParams(temperature=0.0, repeat_penalty=1.0, seed=1))
        times: dict[int, list[float]] = {n: [] for n in SIZES}
        for _ in range(runs + 1):  # the first run warms caches and is dropped
            for n in SIZES:
                t = time.perf_counter()
                backend.eval_rows((prompt * n)[:n], 0)
                for row in range(n):  # verification reads every row
                    backend.sample(sampler, row)
                times[n].append(time.perf_counter() - t)
                backend.keep_prefix(base)
        return {n: statistics.median(v[1:]) * 1000 for n, v in times.items()}
    finally:
        backend.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=9)
    ap.add_argument("--real-size", action="store_true", help="add the Qwen2.5-1.5B Q4_K_M shape (made once, ~1 GiB)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="pass-cost-"))
    models = {"demo-small Q4_1 (as shipped)": MODEL}
    for kind in ("q4_0", "q8_0", "f16"):
        path = work / f"smollm2-135m-{kind}.gguf"
        llama_seam.quantize(MODEL, path, kind)
        models[f"demo-small {kind.upper()}"] = path
    if args.real_size:
        sys.path.insert(0, str(ROOT / "bench"))
        from real_size_model import synthesize

        models["Qwen2.5-1.5B Q4_K_M shape"] = synthesize("qwen2.5-1.5b-instruct-q4_k_m")
    print(f"{THREADS} threads, median of {args.runs}; a pass of n = the pending token + n - 1 drafted, all rows read")
    print("cell: ms per pass (ceiling at full acceptance, n × cost(1) / cost(n))\n")
    print("| weights | " + " | ".join(f"n={n}" for n in SIZES) + " |")
    print("|---|" + "---:|" * len(SIZES))
    for name, path in models.items():
        ms = pass_ms(path, args.runs)
        print(f"| {name} | " + " | ".join(f"{ms[n]:.1f} ({n * ms[1] / ms[n]:.2f}×)" for n in SIZES) + " |",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
