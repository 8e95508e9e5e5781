"""Memory planner: how much of a model, its KV cache and context fit a VRAM budget.

Policy (docs/planner.md): put everything on the GPU if it fits; otherwise shrink, in this order,
KV cache to q8_0 (flash attention on), context down to a floor, KV cache to q4_0, then fewer GPU
layers, and finally CPU only. A budget <= 0 means "no GPU": CPU only, f16 KV, the asked context.
Every number is computed from metadata (engine/models/kv_math.py); the plan never exceeds the budget.
"""

from __future__ import annotations

import logging
import math
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from engine.models import kv_math
from engine.models.catalog import Catalog, ModelEntry, load_catalog, resolve_model
from engine.models.devices import default_vram_budget_mb, snapshot
from engine.models.draft_plan import DraftPlan, place_draft
from engine.models.gguf_info import read_gguf
from engine.models.kv_math import MIB, ModelFacts

log = logging.getLogger(__name__)

CTX_FLOOR = 2048  # context is not shrunk below this (or below what was asked, if less)
DEFAULT_N_CTX = 4096
DEFAULT_N_UBATCH = 512  # engine.inference.backend.LoadParams.n_batch (also used as n_ubatch)


class PlanError(ValueError):
    """Bad planner input (budget, context); the message is meant for the user."""


@dataclass(frozen=True)
class Plan:
    model: str
    source: str  # "gguf" (exact tensor sizes) or "catalog" (estimated from the file size)
    budget_bytes: int  # VRAM budget the plan was made for
    n_gpu_layers: int  # llama.cpp's value: repeating layers + 1 for the output layer
    n_layers: int  # repeating layers; n_layers + 1 = everything on the GPU
    n_ctx: int  # context to load with (llama.cpp pads the cache to a multiple of 256 cells)
    n_ctx_asked: int
    n_ubatch: int
    type_k: str
    type_v: str
    flash_attn: bool
    swa_full: bool
    kv_bytes_per_token: int  # all layers, at type_k/type_v, before any sliding window
    kv_bytes_total: int  # as allocated: padded cells, sliding-window layers capped
    kv_bytes_gpu: int
    weights_bytes_gpu: int
    weights_bytes_total: int  # GPU + CPU (a tied output offloaded to the GPU is a second copy)
    compute_buffer_bytes_estimate: int  # ESTIMATE (see kv_math.compute_buffer_estimate); on GPU if offloading
    gpu_bytes_total: int  # the target's weights + KV + compute on the GPU: never above budget_bytes
    fits: bool  # the whole model, its KV cache and compute buffer are on the GPU
    offload: str  # "full" | "partial" | "cpu"
    mha_ratio: float  # KV of the same model with n_kv_heads = n_heads, over this one's
    explanation: str
    notes: tuple[str, ...] = ()
    # What a full context makes resident in RAM beyond the weights and KV (ram_bytes): the CPU
    # compute pages a turn touches (kv_math.compute_resident_estimate; reserved is above) and the
    # vocabulary, held twice (the model's, and the tokenizer other threads use).
    host_compute_bytes_estimate: int = 0
    vocab_bytes_estimate: int = 0
    # The draft model planned beside this one (plan(draft=...), engine/models/draft_plan.py): on
    # the GPU only within what gpu_bytes_total leaves of budget_bytes. None: planned without one.
    draft: DraftPlan | None = None
    # A vision model's projector (in gpu_bytes_total where any layer is on the GPU, else in RAM)
    # and a typical photo's tokens (0: a text model, or not known).
    projector_bytes: int = 0
    projector_gpu_bytes: int = 0
    image_tokens: int = 0

    def as_dict(self) -> dict:
        d = asdict(self)
        d["notes"] = list(self.notes)
        return d

    def load_kwargs(self) -> dict:
        """Keyword arguments for engine.inference.backend.LoadParams."""
        return dict(n_ctx=self.n_ctx, n_gpu_layers=self.n_gpu_layers, n_batch=self.n_ubatch,
                    type_k=self.type_k, type_v=self.type_v, flash_attn=self.flash_attn, swa_full=self.swa_full)


def load_facts(model: str | Path | ModelEntry | ModelFacts, catalog: Catalog | None = None) -> ModelFacts:
    """Facts for a catalog id, a catalog entry or a GGUF path: from the file when it is present,
    else from catalog facts (weights estimated).

    Raises:
        ModelNotFound: unknown id or missing file. GGUFError: not a usable GGUF. PlanError: an
        entry not downloaded whose shape the catalog doesn't give.
    """
    if isinstance(model, ModelFacts):
        return model
    if isinstance(model, ModelEntry):
        if model.present():
            facts = kv_math.facts_from_gguf(read_gguf(model.path()), model.id)
            return _with_vision(facts, model.projector_path(model.path()), model)
        if not (model.n_layers and model.n_heads and model.n_kv_heads and model.head_dim_k):
            # A hub search result: nothing is known until its GGUF header is on disk.
            raise PlanError(f"{model.id}: the model's shape is unknown until it is downloaded")
        return _with_vision(kv_math.facts_from_catalog(model), None, model)
    catalog = catalog or load_catalog()
    entry = catalog.get(str(model))
    if entry is not None:
        return load_facts(entry)
    resolved = resolve_model(str(model), catalog)  # a path; raises ModelNotFound with the reason
    return _with_vision(kv_math.facts_from_gguf(read_gguf(resolved.path), resolved.id), resolved.projector, None)


def _with_vision(facts: ModelFacts, projector: Path | None, entry: ModelEntry | None) -> ModelFacts:
    """A vision model's facts with its projector: the file's size where it is on disk, else the
    catalog's; its typical photo's tokens from the catalog (a file alone does not say)."""
    size = projector.stat().st_size if projector is not None else (entry.projector_bytes if entry else 0)
    tokens = entry.image_tokens if entry is not None and (projector is not None or entry.projector) else 0
    return replace(facts, projector_bytes=size, image_tokens=tokens) if size or tokens else facts


@dataclass(frozen=True)
class _Try:
    ngl: int
    n_ctx: int
    kv: str
    fa: bool


def _gpu_bytes(f: ModelFacts, t: _Try, n_ubatch: int, swa_full: bool) -> tuple[int, int, int]:
    """(weights, KV, compute) on the GPU for one candidate."""
    weights, _ = kv_math.weights_split(f, t.ngl)
    kv = kv_math.kv_bytes(f, t.n_ctx, t.kv, t.kv, t.fa, n_ubatch, swa_full, kv_math.gpu_layer_ids(f, t.ngl))
    compute = kv_math.compute_buffer_estimate(f, t.n_ctx, n_ubatch, t.fa) if t.ngl >= 1 else 0
    return weights, kv, compute


def plan(model, vram_budget_mb: float | None = None, n_ctx: int = DEFAULT_N_CTX, *,
         kv_type: str | None = None, n_ubatch: int = DEFAULT_N_UBATCH, swa_full: bool = False,
         catalog: Catalog | None = None, n_gpu_layers: int | None = None,
         layers_reason: str = "set by the user", draft: str | Path | ModelEntry | ModelFacts | None = None) -> Plan:
    """Plan a load of `model` into a VRAM budget.

    Args:
        model: catalog id, GGUF path, ModelEntry or ModelFacts.
        vram_budget_mb: MiB of VRAM to use; None = free VRAM of the best GPU minus a margin.
        n_ctx: wanted context in tokens (capped at the model's training context).
        kv_type: pin the KV cache type ("f16", "q8_0", "q4_0") instead of choosing it.
        n_ubatch: micro-batch the model will be loaded with (the compute buffer and SWA cache grow with it).
        swa_full: keep sliding-window layers at full context (as LoadParams.swa_full).
        n_gpu_layers: the user's layer count (-1 = all), instead of searching the budget; the plan
            then says what it costs, even beyond the budget.
        layers_reason: why n_gpu_layers was given, for the explanation.
        draft: a draft model to place beside it (catalog.resolve_draft's path or entry): the target
            is planned as without one, then the draft goes to the GPU if it fits in what is left of
            the budget, else to the CPU (engine/models/draft_plan.py); `Plan.draft` says where.

    Raises:
        PlanError: budget or context not usable numbers. ModelNotFound, GGUFError: see load_facts.
    """
    if vram_budget_mb is None:
        vram_budget_mb = default_vram_budget_mb(snapshot())
    if not isinstance(vram_budget_mb, (int, float)) or not math.isfinite(vram_budget_mb):
        raise PlanError(f"VRAM budget must be a finite number of MiB, got {vram_budget_mb!r}")
    if isinstance(n_ctx, bool) or not isinstance(n_ctx, int) or n_ctx < 1:
        raise PlanError(f"context must be a positive number of tokens, got {n_ctx!r}")
    if kv_type is not None and kv_type not in kv_math.KV_TYPES:
        raise PlanError(f"unknown KV cache type {kv_type!r} (use one of {', '.join(kv_math.KV_TYPES)})")
    f = load_facts(model, catalog)
    budget = max(0, int(vram_budget_mb * MIB))
    steps: list[str] = []
    asked = n_ctx
    if f.context_length and n_ctx > f.context_length:
        n_ctx = f.context_length
        steps.append(f"context capped at the model's {n_ctx} tokens")
    kvs = [kv_type] if kv_type else list(kv_math.KV_ORDER)
    fa_for = {k: k != "f16" for k in kvs}  # llama.cpp needs flash attention for a quantised V cache

    def fits(t: _Try) -> bool:
        projector = f.projector_bytes if t.ngl >= 1 else 0  # on the GPU with the layers (Backend.load_projector)
        return sum(_gpu_bytes(f, t, n_ubatch, swa_full)) + projector <= budget

    if n_gpu_layers is not None:
        full = f.n_layers + 1
        ngl = full if n_gpu_layers < 0 else min(n_gpu_layers, full)
        choice = _Try(ngl, n_ctx, kvs[0], fa_for[kvs[0]])
        steps.append(f"n_gpu_layers {ngl} {layers_reason}" + (" (over the budget)" if not fits(choice) and ngl else ""))
    elif vram_budget_mb <= 0:
        choice = _Try(0, n_ctx, kvs[0], fa_for[kvs[0]])
        steps.append("no VRAM budget: CPU only")
    else:
        choice = _search(f, n_ctx, kvs, fa_for, fits, steps)
    result = _make_plan(f, choice, asked, budget, n_ubatch, swa_full, steps)
    if draft is not None:
        d = place_draft(load_facts(draft, catalog), left_bytes=budget - result.gpu_bytes_total, n_ctx=result.n_ctx,
                        kv=result.type_k, flash_attn=result.flash_attn, n_ubatch=n_ubatch, swa_full=swa_full)
        result = replace(result, draft=d, explanation=f"{result.explanation} {d.explanation}")
    log.debug("plan for %s: %s", f.name, result.explanation)
    return result


def _search(f: ModelFacts, n_ctx: int, kvs: list[str], fa_for: dict, fits, steps: list[str]) -> _Try:
    full, floor = f.n_layers + 1, min(CTX_FLOOR, n_ctx)
    first = _Try(full, n_ctx, kvs[0], fa_for[kvs[0]])
    if fits(first):
        steps.append(f"everything fits on the GPU with {kvs[0]} KV")
        return first
    steps.append(f"all layers with {kvs[0]} KV at {n_ctx} tokens do not fit")
    # KV to q8_0 (flash attention on) at the asked context
    if len(kvs) > 1:
        if fits(t := _Try(full, n_ctx, kvs[1], True)):
            steps.append(f"KV cache to {kvs[1]} with flash attention: fits")
            return t
        steps.append(f"{kvs[1]} KV with flash attention at {n_ctx} tokens does not fit either")
    # context down towards the floor, at the second type (or the pinned one)
    mid = kvs[1] if len(kvs) > 1 else kvs[0]
    fa = fa_for[mid]
    best = _largest_ctx(lambda c: fits(_Try(full, c, mid, fa)), floor, n_ctx)
    if best is not None:
        steps.append(f"context reduced to {best} tokens with {mid} KV: fits")
        return _Try(full, best, mid, fa)
    steps.append(f"{mid} KV does not fit even at {floor} tokens")
    # most quantised KV at the floor, then fewer layers
    last = kvs[-1]
    fa = fa_for[last]
    if len(kvs) > 2:
        if fits(t := _Try(full, floor, last, fa)):
            steps.append(f"KV cache to {last} at {floor} tokens: fits")
            return t
        steps.append(f"{last} KV at {floor} tokens does not fit")
    ngl = _largest_ngl(lambda n: fits(_Try(n, floor, last, fa)), full - 1)
    if ngl >= 1:
        steps.append(f"partial offload: {ngl} of {full} layers (output first) on the GPU")
        return _Try(ngl, floor, last, fa)
    steps.append("not even the output layer fits: CPU only")
    return _Try(0, floor, last, fa)


def _largest_ctx(ok, lo: int, hi: int) -> int | None:
    """Largest context in [lo, hi] (multiples of 256, or hi itself) that is ok; ok is monotone."""
    if not ok(lo):
        return None
    cands = sorted({lo, hi, *range(kv_math.pad(lo), hi, kv_math.CELL_PAD)})
    cands = [c for c in cands if lo <= c <= hi]
    a, b = 0, len(cands) - 1  # cands[a] ok; find the last ok
    while a < b:
        m = (a + b + 1) // 2
        a, b = (m, b) if ok(cands[m]) else (a, m - 1)
    return cands[a]


def _largest_ngl(ok, hi: int) -> int:
    a, b = 0, hi  # ok(0) holds trivially (nothing on the GPU)
    while a < b:
        m = (a + b + 1) // 2
        a, b = (m, b) if ok(m) else (a, m - 1)
    return a


def _make_plan(f: ModelFacts, t: _Try, asked: int, budget: int, n_ubatch: int, swa_full: bool,
               steps: list[str]) -> Plan:
    w_gpu, kv_gpu, compute = _gpu_bytes(f, t, n_ubatch, swa_full)
    w_cpu = kv_math.weights_split(f, t.ngl)[1]
    kv_total = kv_math.kv_bytes(f, t.n_ctx, t.kv, t.kv, t.fa, n_ubatch, swa_full)
    full = f.n_layers + 1
    offload = "full" if t.ngl >= full else "partial" if t.ngl >= 1 else "cpu"
    if t.n_ctx < asked and not any("context" in s for s in steps):
        steps.append(f"context {t.n_ctx} instead of {asked}")
    if f.has_swa and not swa_full:
        full_c, swa_c = kv_math.kv_cells(f, t.n_ctx, n_ubatch, swa_full)
        steps.append(f"{sum(f.swa_layers)} of {f.n_layers} layers use a {f.n_swa}-token sliding window "
                     f"({swa_c} cells = window + micro-batch, padded to {kv_math.CELL_PAD})")
    where = {"full": f"all {full} layers ({f.n_layers} repeating + output) on the GPU",
             "partial": f"{t.ngl} of {full} layers on the GPU, {full - t.ngl} on the CPU",
             "cpu": "everything on the CPU"}[offload]
    host_compute = kv_math.compute_resident_estimate(f, t.n_ctx, n_ubatch, t.fa) if offload == "cpu" else 0
    vocab = 2 * kv_math.vocab_bytes(f.n_vocab)
    if offload == "cpu":
        use = (f"RAM: weights {w_cpu / MIB:.0f} MiB, KV {kv_total / MIB:.0f} MiB, compute "
               f"~{host_compute / MIB:.0f} MiB estimated (of "
               f"~{kv_math.compute_buffer_estimate(f, t.n_ctx, n_ubatch, t.fa) / MIB:.0f} MiB reserved), "
               f"vocabulary ~{vocab / MIB:.0f} MiB")
    else:
        use = (f"GPU {(w_gpu + kv_gpu + compute) / MIB:.0f} of {budget / MIB:.0f} MiB: weights {w_gpu / MIB:.0f}, "
               f"KV {kv_gpu / MIB:.0f}, compute ~{compute / MIB:.0f} estimated")
    summary = (f"Plan: {where}, {t.n_ctx}-token context, {t.kv} KV cache, flash attention "
               f"{'on' if t.fa else 'off'}; {use}.")
    proj_gpu = f.projector_bytes if offload != "cpu" else 0
    if f.projector_bytes:
        summary += (f" Vision projector {f.projector_bytes / MIB:.0f} MiB on the {'GPU' if proj_gpu else 'CPU'}"
                    + (f"; a photo takes ~{f.image_tokens} of the {t.n_ctx} tokens" if f.image_tokens else "")
                    + " (the image encoder's own compute buffer is not counted).")
    text = "; ".join(steps)
    explanation = text[:1].upper() + text[1:] + ". " + summary
    return Plan(
        model=f.name, source=f.source, budget_bytes=budget, n_gpu_layers=t.ngl, n_layers=f.n_layers,
        n_ctx=t.n_ctx, n_ctx_asked=asked, n_ubatch=min(n_ubatch, t.n_ctx), type_k=t.kv, type_v=t.kv,
        flash_attn=t.fa, swa_full=swa_full,
        kv_bytes_per_token=kv_math.kv_bytes_per_token(f, t.kv, t.kv, t.fa), kv_bytes_total=kv_total,
        kv_bytes_gpu=kv_gpu, weights_bytes_gpu=w_gpu, weights_bytes_total=w_gpu + w_cpu,
        compute_buffer_bytes_estimate=kv_math.compute_buffer_estimate(f, t.n_ctx, n_ubatch, t.fa),
        gpu_bytes_total=w_gpu + kv_gpu + compute + proj_gpu, fits=offload == "full", offload=offload,
        mha_ratio=kv_math.mha_ratio(f), explanation=explanation, notes=f.notes,
        host_compute_bytes_estimate=host_compute, vocab_bytes_estimate=vocab, projector_bytes=f.projector_bytes,
        projector_gpu_bytes=proj_gpu, image_tokens=f.image_tokens)


def ram_bytes(p: Plan) -> int:
    """Host memory a planned load takes at a full context: weights and KV left on the CPU, the CPU
    compute pages a turn touches, and the vocabulary's two copies; and its draft model's. Within 10 %
    of the peak RSS of both demo models and a synthetic Qwen2.5-1.5B on a CPU load (bench/real_size.py
    --only rss; without a draft)."""
    return ((p.weights_bytes_total - p.weights_bytes_gpu) + (p.kv_bytes_total - p.kv_bytes_gpu)
            + p.host_compute_bytes_estimate + p.vocab_bytes_estimate + (p.draft.host_bytes if p.draft else 0)
            + (p.projector_bytes - p.projector_gpu_bytes))
