"""One configuration of bench/contention.py, in a process of its own (so no llama.cpp or OpenMP
state leaks between configurations): load, warm up, time one prompt eval and single-token evals.

    .venv/bin/python bench/contention_worker.py ours|bare|calibrate MODEL.gguf [--threads N]
                                                [--batch-threads N] [--prompt-tokens 256] [--decode-tokens 64]

"ours" is `Backend` with n_threads None in $ASSISTANT_HOME (its calibration and thread policy), or
`--threads N` fixed (the engine before issue 38 ran every core);
"bare" is `llama_cpp.Llama` with the given counts; "calibrate" loads ours and reports the
calibration kept in $ASSISTANT_HOME. Prints one line of JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from llama_cpp import Llama  # noqa: E402

from engine.inference.backend import Backend, LoadParams  # noqa: E402
from engine.inference.thread_calibration import FILE as CALIBRATION_FILE  # noqa: E402
from engine.models.ggml_registry import registry  # noqa: E402

N_CTX = 1024
TEXT = ("The river bends twice before it reaches the old mill, where the miller keeps a ledger of every "
        "sack of grain. Tea was first traded along mountain roads by caravans that rested in stone inns. ")


def prompt_ids(tokens: list[int], bos: int, n: int) -> list[int]:
    return [bos] + [tokens[i % len(tokens)] for i in range(n - 1)]


def worker(kind: str, path: Path, threads: int, batch: int, n_prompt: int, n_decode: int) -> dict:
    """Load, warm up, time one n_prompt-token eval and n_decode one-token evals."""
    registry().load()  # the backend modules, before llama_cpp opens a model file
    if kind == "bare":
        llm = Llama(model_path=str(path), n_ctx=N_CTX, n_batch=512, n_ubatch=512, n_threads=threads,
                    n_threads_batch=batch, verbose=False)
        ids = prompt_ids(llm.tokenize(TEXT.encode(), add_bos=False), max(llm.token_bos(), 0), n_prompt)
        step, reset, backend = llm.eval, llm.reset, None
    else:
        backend = Backend(path, LoadParams(n_ctx=N_CTX, n_threads=threads or None))  # 0: automatic
        ids = prompt_ids(backend.tokenize(TEXT, special=False), max(backend.bos_id, 0), n_prompt)
        step, reset = backend.eval, backend.reset
    out: dict = {}
    if kind == "calibrate":
        home = Path(os.environ["ASSISTANT_HOME"])
        kept = json.loads((home / CALIBRATION_FILE).read_text()) if (home / CALIBRATION_FILE).is_file() else {}
        out["calibration"] = next((v for k, v in kept.items() if k.startswith(backend.identity)), None)
        out["threads"] = asdict(backend.threads)
        return out
    step([ids[0]])  # compute buffers allocated, weights paged in
    reset()
    t = time.perf_counter()
    step(ids)
    out["prompt_tps"] = len(ids) / (time.perf_counter() - t)
    if backend is not None:
        out["prompt_threads"] = backend.threads.batch
    used: dict[int, int] = {}
    t = time.perf_counter()
    for i in range(n_decode):
        step([ids[1 + i % (len(ids) - 1)]])
        if backend is not None:
            used[backend.threads.decode] = used.get(backend.threads.decode, 0) + 1
    out["decode_tps"] = n_decode / (time.perf_counter() - t)
    if backend is not None:
        out["decode_threads"] = used
        out["threads"] = asdict(backend.threads)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("kind", choices=["ours", "bare", "calibrate"])
    ap.add_argument("model", type=Path)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--batch-threads", type=int, default=0)
    ap.add_argument("--prompt-tokens", type=int, default=256)
    ap.add_argument("--decode-tokens", type=int, default=64)
    args = ap.parse_args()
    got = worker(args.kind, args.model, args.threads, args.batch_threads, args.prompt_tokens, args.decode_tokens)
    sys.stdout.write(json.dumps(got) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
