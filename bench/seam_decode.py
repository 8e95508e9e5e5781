"""Decode through the engine's llama.cpp seam alone, against llama-cpp-python's `Llama.eval`, in one
process on the same file and context, alternated: where a decode gap is not (issue 25).

    .venv/bin/python bench/seam_decode.py [TOKENS]   # default 4000; ~2 min of prompt each side

Both contexts are filled with the same TOKENS ids (n_ctx TOKENS + 256, 2 threads); then 24 single
tokens are decoded on each, three alternated rounds: ms per token. Ours samples after each token
(greedy, with the logprob, as the engine's answer loop does); llama-cpp-python's `eval` copies the
logits itself.
"""

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from real_size_model import synthesize  # noqa: E402

from engine.inference.backend import Backend, LoadParams, SamplingParams  # noqa: E402
from engine.models.ggml_registry import registry  # noqa: E402

N = int(sys.argv[1]) if len(sys.argv) > 1 else 4000
ROUNDS, TOKENS = 3, 24


def main() -> int:
    path = str(synthesize("qwen2.5-1.5b-instruct-q4_k_m"))
    registry().load()
    ours = Backend(path, LoadParams(n_ctx=N + 256, n_threads=2))
    ids = [(i * 7919) % 30000 + 100 for i in range(N)]
    ours.eval(ids)
    from llama_cpp import Llama  # after the seam loaded ggml's backends

    bare = Llama(model_path=path, n_ctx=N + 256, n_batch=512, n_ubatch=512, n_threads=2, n_threads_batch=2,
                 verbose=False)
    bare.eval(ids)
    print(f"synthetic Qwen2.5-1.5B, {N} tokens in the context, {TOKENS} tokens a round\n")
    print("| round | seam ms/token | llama-cpp-python ms/token |\n|---:|---:|---:|")
    sampler = ours.make_sampler(SamplingParams(temperature=0.0, seed=1))
    for r in range(ROUNDS):
        t = time.perf_counter()
        for i in range(TOKENS):
            ours.eval([1000 + i])
            ours.sample(sampler)
        seam = (time.perf_counter() - t) / TOKENS * 1000
        ours.keep_prefix(N)
        t = time.perf_counter()
        for i in range(TOKENS):
            bare.eval([1000 + i])
        theirs = (time.perf_counter() - t) / TOKENS * 1000  # its context grows by 24 a round: no rollback
        print(f"| {r + 1} | {seam:.1f} | {theirs:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
