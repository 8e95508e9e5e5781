"""`EngineConfig`: every value that shapes the engine, typed, in one frozen object.

`engine.api.Assistant.from_settings` makes it from the user's settings; tests build it by hand.
Live changes (engine.api `apply_setting`) replace it whole (`dataclasses.replace`), and each turn
reads the one it started with, so a turn never sees half a change.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from engine.inference.backend import LoadParams
from engine.inference.remote import RemoteConfig


@dataclass(frozen=True, kw_only=True)
class EngineConfig:
    """Args:
        model: one model (catalog id or .gguf path) for every local tier, or None for `tiers`.
        tiers: level → model for L1/L2 (used when `model` is None; default demo-small for both).
        remote: the L3 endpoint, if the user configured one.
        cascade: re-ask an auto-routed L1 answer on L2 when its geometric-mean token probability
            is below `cascade_threshold` (None: the L1 model's catalog calibration, else
            engine/chat/stages/cascade.py DEFAULT_THRESHOLD).
        vram_budget_mb: VRAM for the GPU tier (None: free VRAM minus a margin).
        n_ctx_max: a longer context each model may load with where it was trained for it and it is
            cheap (ModelManager._longer); None: exactly `load.n_ctx`.
        base_models: let auto routing, its fallbacks and the cascade answer with a tier whose model
            is a base model (not instruction-tuned). Off: only the user's explicit route reaches it.
        summary_every: write a background summary of older turns every this many turns (0 = off).
        memory_k: memories retrieved per message.
        kv_tiers: keep conversations' KV state across switches and restarts (engine/kv/tiers.py);
            kv_warm_mb, kv_cold_mb: their RAM and disk budgets (None: 10 % of RAM up to 1 GB, 2 GB);
            kv_checkpoint: after each turn, append its cells to the chat's cold file (off: the state
            reaches disk when it leaves RAM or at exit only).
        warn_threshold: flag answers whose geometric-mean token probability is below this, at any
            temperature (None: the model's catalog calibration, applied to greedy answers only).
        docs_allow_remote: a turn carrying the user's documents may go to L3.
        retrieval_max_tokens: memories + document excerpts per user turn.
        quick_no_think: a message the router sends to L1 by its quick-request rules is answered
            without thinking (engine/routing/router.py `quick`).
        speculative: speculative decoding, "auto" | "off" | "ngram" | "draft"
            (engine/inference/speculation.py).
    """

    model: str | None = None
    tiers: Mapping[str, str] | None = None
    load: LoadParams = LoadParams()
    debug: bool = False
    remote: RemoteConfig | None = None
    cascade: bool = False
    cascade_threshold: float | None = None
    max_switch_s: float = 1.5
    vram_budget_mb: float | None = None
    gpu_device: str = "auto"
    n_gpu_layers: int | None = None
    n_ctx_max: int | None = None
    base_models: bool = False
    summary_every: int = 0
    memory_k: int = 3
    kv_tiers: bool = True
    kv_warm_mb: float | None = None
    kv_cold_mb: float | None = None
    kv_checkpoint: bool = True
    warn_threshold: float | None = None
    docs_allow_remote: bool = False
    retrieval_max_tokens: int = 256
    quick_no_think: bool = True
    speculative: str = "auto"

    def tier_models(self) -> dict[str, str]:
        """Level → model for the local tiers."""
        if self.model is not None:
            return {"L1": self.model, "L2": self.model}
        # Both tiers on the instruction-tuned demo: demo-int4 is a base model (tests and benchmarks
        # name it for its MQA mechanics; a chat never gets it by default).
        return dict(self.tiers or {"L1": "demo-small", "L2": "demo-small"})
