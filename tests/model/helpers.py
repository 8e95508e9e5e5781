"""Shared steps for model tests: run a turn to completion, greedy parameters."""

from engine.inference.backend import SamplingParams
from engine.api import Assistant, TurnDone
from engine.inference.events import GenerateParams, TurnResult
from engine.inference.generate import generate

GREEDY = SamplingParams(temperature=0.0, repeat_penalty=1.0, seed=1)
# llama.cpp threads per model in tests: the default (all cores) oversubscribes a shared 2-core
# machine (test runners, other models and background threads all want them).
THREADS = 2


def greedy(max_tokens=24) -> GenerateParams:
    return GenerateParams(sampling=GREEDY, max_tokens=max_tokens)


def turn(assistant: Assistant, cid: int, text: str, max_tokens=24, cancel=None, params=None) -> TurnDone:
    done = None
    for item in assistant.send(cid, text, params or greedy(max_tokens), cancel=cancel):
        if isinstance(item, TurnDone):
            done = item
    assert done is not None
    return done


def run_prompt(backend, prompt, max_tokens=24) -> TurnResult:
    return [r for r in generate(backend, prompt, greedy(max_tokens)) if isinstance(r, TurnResult)][0]


def on_model(assistant: Assistant, fn):
    """fn(backend) run as a job on the L1 model's own thread, which owns its backend
    (engine/config/ownership.py), and what it returned: a test touches a loaded model's context this way."""
    from engine.inference.runtime import FOREGROUND

    worker = assistant.manager.find_loaded(assistant.tiers["L1"])
    assert worker is not None, "the L1 model is not loaded"
    box = []
    for _ in worker.submit(lambda w, job: box.append(fn(w.backend)), FOREGROUND):
        pass  # the job emits nothing; iterating waits for it and raises what it raised
    return box[0]


def kv_tokens(assistant: Assistant) -> list[int]:
    """The ids the L1 model's KV cache holds now (read on the model's thread)."""
    return on_model(assistant, lambda backend: backend.kv_tokens)


USER_TURNS = [
    "Hi! What is the capital of France?",
    "And what river flows through it?",
    "Name one famous museum there.",
    "How many people live in that city, roughly?",
    "Give me one tip for visiting in winter.",
    "Thanks. Summarise our chat in one sentence.",
]


# ---- what reuse guarantees: logits, teacher-forced, within a measured bound ---------------------
# llama.cpp's sums round differently with the batch split (a prompt in one batch vs turn by turn) and
# with the CPU kernel ggml loads (x64, haswell, zen4, ...), so free-running greedy text from two
# evaluation orders is no invariant: one near-tie and the texts part. What holds is that the logits,
# fed the same tokens, agree within a bound. Measured with bench/logit_agreement.py under the zen4,
# haswell, sandybridge and x64 variants (docs/testing.md): reused vs fresh, max |Δlogit|
# ≤ 1.32 (SmolLM2) and ≤ 2.66 (Gemma-3, over its 262k-token vocabulary), mean ≤ 0.28, top-1 agreement
# ≥ 0.93, and where the argmaxes differ the reference's gap between them ≤ 0.45. A wrong KV (a token
# at the wrong position, a stale cell) moves every logit: the mean and the top-1 rate catch it.
LOGIT_TOLERANCE = 4.0       # max |Δlogit| at any position, any token
MEAN_LOGIT_TOLERANCE = 0.5  # mean |Δlogit| over positions and vocabulary
MIN_TOP1_AGREEMENT = 0.85   # share of positions whose argmax agrees (checked from 10 positions on)
TIE_GAP = 1.0               # where the argmaxes differ, the reference's logit gap between the two
TOP_K = 40                  # "max_top": max |Δlogit| over the reference's 40 likeliest tokens


def forced_logits(backend, prompt: list[int], answer: list[int]):
    """Row i: the logits predicting answer[i] from prompt + answer[:i]. The prompt is brought into the
    KV the way `prefill` does (reusing what matches), the answer fed one token at a time as decoding
    feeds it. The KV then holds prompt + answer[:-1]."""
    import numpy as np

    from engine.inference.generate import prefill

    prefill(backend, prompt)
    rows = [backend.first_logits()]
    for token in answer[:-1]:
        backend.eval([token])
        rows.append(backend.first_logits())
    return np.stack(rows)


def logit_agreement(ref, got) -> dict:
    """How two teacher-forced logit matrices (positions × vocabulary) agree: top-1 agreement rate,
    max and mean |Δlogit|, and the largest gap, in `ref`, between the two argmaxes where they differ
    (a near-tie is a gap within the rounding bound)."""
    import numpy as np

    diff = np.abs(ref - got)
    a, b = ref.argmax(axis=1), got.argmax(axis=1)
    rows = np.arange(len(ref))
    gap = ref[rows, a] - ref[rows, b]
    top = np.argpartition(ref, -TOP_K, axis=1)[:, -TOP_K:]  # the candidates a sampler looks at
    return {"positions": len(ref), "top1": float((a == b).mean()), "max": float(diff.max()),
            "max_top": float(np.take_along_axis(diff, top, axis=1).max()), "mean": float(diff.mean()),
            "tie_gap": float(gap[a != b].max(initial=0.0))}


def assert_logits_agree(ref, got, what: str = "") -> dict:
    """The bound reuse guarantees (see above): near-equal logits, argmaxes that differ only at ties."""
    stats = logit_agreement(ref, got)
    assert stats["max"] < LOGIT_TOLERANCE and stats["mean"] < MEAN_LOGIT_TOLERANCE, (what, stats)
    assert stats["top1"] >= MIN_TOP1_AGREEMENT or len(ref) < 10, (what, stats)
    assert stats["tie_gap"] < TIE_GAP, (what, stats)  # a differing argmax: only at a near-tie
    return stats
