"""Settings → `EngineConfig`: the one place the user's settings become the engine's shape."""

from __future__ import annotations

from engine.chat.config import EngineConfig
from engine.config.settings import DEFAULTS, Settings
from engine.inference.backend import LoadParams
from engine.inference.remote import RemoteConfig


def engine_config(settings: Settings, *, remote: RemoteConfig | None, model: str | None = None,
                  n_ctx: int | None = None, n_threads: int | None = None, debug: bool = False,
                  cascade: bool | None = None, cascade_threshold: float | None = None,
                  vram_budget_mb: float | None = None, n_gpu_layers: int | None = None,
                  gpu_device: str | None = None) -> EngineConfig:
    """The engine's config from `settings`; each keyword given overrides its setting."""
    get = settings.get
    vram = vram_budget_mb if vram_budget_mb is not None else get("runtime.vram_budget_mb")
    return EngineConfig(
        model=model, tiers={"L1": get("tier.L1"), "L2": get("tier.L2")}, remote=remote, debug=debug,
        load=LoadParams(n_ctx=n_ctx or get("runtime.n_ctx"), n_threads=n_threads or get("runtime.n_threads") or None),
        cascade=get("cascade.enabled") if cascade is None else cascade,
        cascade_threshold=cascade_threshold if cascade_threshold is not None else get("cascade.threshold") or None,
        max_switch_s=get("router.max_switch_s"), base_models=get("router.base_models"),
        vram_budget_mb=None if vram < 0 else vram, gpu_device=gpu_device or get("runtime.gpu_device") or "auto",
        n_gpu_layers=n_gpu_layers,
        # An explicit n_ctx is taken as asked; the settings' is a floor the plan may raise.
        n_ctx_max=None if n_ctx else get("runtime.n_ctx_max") or None,
        summary_every=get("summary.every_turns"), memory_k=get("memory.k"),
        kv_warm_mb=get("kv.warm_budget_mb") or None, kv_cold_mb=get("kv.cold_budget_mb"),
        warn_threshold=get("confidence.warn_threshold") or None,
        docs_allow_remote=get("docs.allow_remote"), retrieval_max_tokens=get("retrieval.max_tokens"),
        quick_no_think=get("reasoning.quick_off"), speculative=get("speculative.mode"))


def reasoning_options(settings: Settings | None, *, think: bool | None = None,
                      budget: int | None = None) -> dict:
    """A turn's reasoning fields of `GenerateParams` from the reasoning.* settings (None: the
    defaults); `think` and `budget`, when given, are the front-end's own choice (a chat's switch, a
    flag) over the setting."""
    get = (lambda key: DEFAULTS[key]) if settings is None else settings.get
    return {"think": bool(get("reasoning.think")) if think is None else think,
            "reasoning_budget": budget or int(get("reasoning.budget_tokens")) or None,
            "reasoning_history": get("reasoning.history")}


# Settings that are `EngineConfig` fields, with the field and its conversion: `apply_setting` sets
# them on a running engine, so each must be in LIVE_SETTINGS too (tests/test_live_settings.py).
CONFIG_SETTINGS = {
    "router.max_switch_s": ("max_switch_s", float), "router.base_models": ("base_models", bool),
    "summary.every_turns": ("summary_every", int), "memory.k": ("memory_k", int),
    "retrieval.max_tokens": ("retrieval_max_tokens", int), "docs.allow_remote": ("docs_allow_remote", bool),
    "confidence.warn_threshold": ("warn_threshold", lambda v: float(v) or None),
    "cascade.enabled": ("cascade", bool), "cascade.threshold": ("cascade_threshold", lambda v: float(v) or None),
    "reasoning.quick_off": ("quick_no_think", bool),
    "speculative.mode": ("speculative", str),
}
