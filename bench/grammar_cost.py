"""What a response_format grammar costs per decoded token, on both demo models (Gemma's vocabulary
has 262k entries): decode speed with a JSON schema's grammar against the same model unconstrained,
alternated runs, the median of each. Target: decode time with a grammar ≤ 1.3× without.

    .venv/bin/python bench/grammar_cost.py [--runs 3] [--tokens 128]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.inference.backend import Backend, LoadParams, SamplingParams  # noqa: E402
from engine.inference.events import GenerateParams, TurnResult  # noqa: E402
from engine.inference.generate import generate  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MODELS = {"demo-small": ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf",
          "demo-int4": ROOT / "models" / "gemma-3-270m-q4_k_m.gguf"}
PROMPT = "List twenty fruits with their colour and a short note on each, as JSON:\n"
SCHEMA = {"type": "object", "properties": {"fruits": {"type": "array", "items": {
    "type": "object", "properties": {"name": {"type": "string", "maxLength": 20}, "colour": {"type": "string",
                                                                                          "maxLength": 12},
                                     "note": {"type": "string", "maxLength": 60}},
    "required": ["name", "colour", "note"], "additionalProperties": False}, "minItems": 8}}, "required": ["fruits"],
    "additionalProperties": False}


def decode(backend: Backend, tokens: int, fmt: dict | None) -> tuple[float, int]:
    """(decode tokens/s, tokens) of one answer from a fresh prompt."""
    backend.reset()
    prompt = backend.tokenize(PROMPT, special=False)
    params = GenerateParams(SamplingParams(temperature=0.0, seed=1, repeat_penalty=1.0), max_tokens=tokens,
                            repetition_guard=False, response_format=fmt)
    result = [r for r in generate(backend, prompt, params) if isinstance(r, TurnResult)][-1]
    return result.stats.decode_tps, result.stats.completion_tokens


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    args = p.parse_args()
    fmt = {"type": "json_schema", "json_schema": {"schema": SCHEMA}}
    rows = []
    for name, path in MODELS.items():
        backend = Backend(path, LoadParams(n_ctx=1024, n_threads=args.threads))
        try:
            decode(backend, 8, fmt)  # warm up (the grammar is compiled once, cached)
            free, constrained, counts = [], [], []
            for _ in range(args.runs):
                tps, _n = decode(backend, args.tokens, None)
                free.append(tps)
                tps, n = decode(backend, args.tokens, fmt)
                constrained.append(tps)
                counts.append(n)
        finally:
            backend.close()
        f, c = statistics.median(free), statistics.median(constrained)
        rows.append((name, f, c, f / c if c else float("inf"), min(counts)))
    print(f"Decode with a JSON schema's grammar vs unconstrained, greedy, up to {args.tokens} tokens, "
          f"median of {args.runs} alternated runs, {args.threads} threads\n")
    print("| model | unconstrained tok/s | with grammar tok/s | time per token, grammar / none (target ≤ 1.3) "
          "| constrained tokens |")
    print("|---|---:|---:|---:|---:|")
    for name, f, c, ratio, n in rows:
        print(f"| {name} | {f:.1f} | {c:.1f} | **{ratio:.2f}×** | {n} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
