"""Where a draft model goes beside its target (speculative decoding, issue 40; docs/planner.md).

The target is planned first and never gives anything up for its draft: a draft speeds up a model
that is already placed, it cannot make up for target layers pushed to the CPU. The draft then goes
to the GPU whole when its weights, KV cache and compute buffer fit in what the target's plan leaves
of the budget, else to the CPU: all or nothing, as a split draft would pay a copy between devices on
every token it guesses. It reads the same tokens as its target, so it gets the target's context; on
the GPU it also gets the target's KV type (a tight budget chose it), on the CPU f16, as the planner
gives a CPU-only load.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.models import kv_math
from engine.models.kv_math import MIB, ModelFacts


@dataclass(frozen=True)
class DraftPlan:
    model: str
    placement: str  # "gpu" (every layer, beside the target) | "cpu"
    n_gpu_layers: int  # llama.cpp's value: n_layers + 1 on the GPU, 0 on the CPU
    n_ctx: int  # the target's
    n_ubatch: int
    type_k: str
    type_v: str
    flash_attn: bool
    swa_full: bool
    weights_bytes: int  # GPU + CPU (the token embedding stays on the CPU either way)
    kv_bytes: int  # as allocated: padded cells, sliding-window layers capped
    compute_buffer_bytes_estimate: int  # ESTIMATE (kv_math.compute_buffer_estimate)
    gpu_bytes: int  # weights + KV + compute on the GPU; 0 on the CPU
    host_bytes: int  # RAM at a full context: what is not on the GPU, CPU compute pages, one vocabulary
    explanation: str

    def load_kwargs(self) -> dict:
        """Keyword arguments for engine.inference.backend.LoadParams, as Plan.load_kwargs."""
        return dict(n_ctx=self.n_ctx, n_gpu_layers=self.n_gpu_layers, n_batch=self.n_ubatch,
                    type_k=self.type_k, type_v=self.type_v, flash_attn=self.flash_attn, swa_full=self.swa_full)


def place_draft(f: ModelFacts, *, left_bytes: int, n_ctx: int, kv: str, flash_attn: bool, n_ubatch: int,
                swa_full: bool) -> DraftPlan:
    """Plan the draft `f` beside a target already planned.

    Args:
        f: the draft's facts (planner.load_facts).
        left_bytes: what the target's plan leaves of the VRAM budget (<= 0: nothing, or no GPU).
        n_ctx, kv, flash_attn, n_ubatch, swa_full: the target's plan's choices.
    """
    full = f.n_layers + 1
    ub = min(n_ubatch, n_ctx)
    weights, weights_host = kv_math.weights_split(f, full)
    kv_gpu = kv_math.kv_bytes(f, n_ctx, kv, kv, flash_attn, n_ubatch, swa_full)
    compute = kv_math.compute_buffer_estimate(f, n_ctx, n_ubatch, flash_attn)
    need = weights + kv_gpu + compute
    vocab = kv_math.vocab_bytes(f.n_vocab)  # one copy: the draft's own tokenizer is never used apart
    note = (f"; its {f.context_length}-token training context is shorter than the target's {n_ctx}, so it "
            f"guesses less well late in a long chat" if f.context_length and n_ctx > f.context_length else "")
    if 0 < need <= left_bytes:
        text = (f"Draft {f.name}: on the GPU beside the target, {need / MIB:.0f} of the {left_bytes / MIB:.0f} MiB "
                f"it leaves (weights {weights / MIB:.0f}, KV {kv_gpu / MIB:.0f}, compute ~{compute / MIB:.0f} "
                f"estimated){note}.")
        return DraftPlan(f.name, "gpu", full, n_ctx, ub, kv, kv, flash_attn, swa_full, weights + weights_host,
                         kv_gpu, compute, need, weights_host + vocab, text)
    weights_cpu = kv_math.weights_split(f, 0)[1]
    kv_cpu = kv_math.kv_bytes(f, n_ctx, "f16", "f16", False, n_ubatch, swa_full)
    compute_cpu = kv_math.compute_buffer_estimate(f, n_ctx, n_ubatch, False)
    host = weights_cpu + kv_cpu + kv_math.compute_resident_estimate(f, n_ctx, n_ubatch, False) + vocab
    why = ("nothing of the VRAM budget is left for it" if left_bytes <= 0 else
           f"it needs {need / MIB:.0f} MiB on the GPU, the target leaves {left_bytes / MIB:.0f} MiB of the budget")
    text = (f"Draft {f.name}: on the CPU, {why}; RAM: weights {weights_cpu / MIB:.0f} MiB, KV {kv_cpu / MIB:.0f} "
            f"MiB{note}.")
    return DraftPlan(f.name, "cpu", 0, n_ctx, ub, "f16", "f16", False, swa_full, weights_cpu, kv_cpu, compute_cpu, 0,
                     host, text)
