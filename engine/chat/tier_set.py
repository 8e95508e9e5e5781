"""`TierSet`: which model answers for each level, and the targets a turn tries, nearest first.

L1 and L2 are local models (`ModelManager` loads them on demand); L3 is the remote endpoint the
user configured. A missing or broken tier falls back to a local one before L3 (FALLBACK_ORDER); a
turn carrying the user's documents never goes to L3 unless allowed; auto routing and fallbacks avoid
a tier holding a base model (not instruction-tuned) unless the user allows it.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from types import MappingProxyType
from typing import Iterator, Mapping

from engine.chat.targets import LocalTarget, RemoteTarget
from engine.inference.errors import ModelLoadError
from engine.inference.manager import ModelManager
from engine.inference.remote import RemoteClient
from engine.kv.tiers import KVTiers
from engine.models.catalog import ModelNotFound, load_catalog, resolve_model
from engine.models.instruct import is_instruct
from engine.models.planner import ram_bytes
from engine.routing.router import RouteDecision

log = logging.getLogger(__name__)

LEVELS = ("L1", "L2", "L3")
# When a tier is missing: local before remote (this computer's models are private, free and work
# offline, so a broken L2 is answered by L1, not sent away), and of two local ones the stronger first.
FALLBACK_ORDER = {"L1": ("L1", "L2", "L3"), "L2": ("L2", "L1", "L3"), "L3": ("L3", "L2", "L1")}


class TierSet:
    """The Assistant's: its owner (the thread that drives turns) changes it; other threads read
    `published`."""

    def __init__(self, *, manager: ModelManager, models: Mapping[str, str], single_model: bool,
                 remote: RemoteClient | None, kv: KVTiers | None):
        self.manager, self.single_model, self.remote, self.kv = manager, single_model, remote, kv
        self.models = dict(models)
        self.warm: dict[int, str] = {}  # conversation -> level whose model last held its tokens

    @property
    def models(self) -> dict[str, str]:
        """Level → model (catalog id or .gguf path) for L1 and L2."""
        return self._models

    @models.setter
    def models(self, models: dict[str, str]) -> None:
        self._models = dict(models)
        # Replaced whole, never changed in place: a reader on another thread (the server's event
        # loop, the status thread) takes the reference and has one consistent pair.
        self.published: Mapping[str, str] = MappingProxyType(dict(models))

    def set(self, level: str, model: str) -> None:
        self.models = self.models | {level: model}

    def local(self, level: str) -> LocalTarget | None:
        """The level's model, loaded if it is not (ModelNotFound, ModelLoadError)."""
        model = self.models.get(level)
        if not model:
            return None
        # L2 is the GPU tier; a distinct L1 model stays on the CPU so the GPU's memory goes to L2.
        # One file serving both tiers (one model, or L2 standing in for a broken L1) is loaded
        # once, planned for the GPU: the manager keeps one worker per file.
        worker = self.manager.get(model, gpu=level != "L1" or model == self.models.get("L2"))
        if self.kv is not None and worker.before_close is None:
            kv = self.kv
            worker.before_close = lambda w: kv.release(w.backend)  # evicted or exiting: keep its state
        return LocalTarget(level, worker, self.kv)

    def loaded(self, level: str):
        """The level's worker if its model is loaded now (nothing is loaded), else None."""
        return self.manager.find_loaded(self.models.get(level, ""))

    def fits(self, ram_available: int) -> dict[str, str]:
        """How each tier's model runs on this machine, in engine/models/fit.py's words: "gpu",
        "partial", "cpu", "too_big" (more than `ram_available`), "unknown" (it cannot be
        planned); "remote" for L3. A loaded model says how it was loaded; another is planned as
        it would load now, without loading it."""
        out = {}
        for level, model in self.models.items():
            if level == "L3":
                out[level] = "remote"
                continue
            worker = self.loaded(level)
            try:
                p = worker.plan if worker is not None else None
                if p is None:
                    gpu = level != "L1" or model == self.models.get("L2")
                    p = self.manager.plan_for(self.manager.resolve(model), gpu=gpu)
            except (ModelNotFound, ModelLoadError, OSError) as exc:
                log.info("cannot plan %s for %s: %s", model, level, exc)
                out[level] = "unknown"
                continue
            word = {"full": "gpu", "partial": "partial"}.get(p.offload, "cpu")
            out[level] = "too_big" if worker is None and ram_bytes(p) > ram_available else word
        return out

    def is_instruct(self, level: str) -> bool | None:
        """Whether `level`'s model is instruction-tuned (None: no model, or it can't be told)."""
        model = self.models.get(level)
        return is_instruct(model, self.manager.catalog) if model else None

    def instruct_tier(self, decision: RouteDecision, base_models: bool) -> RouteDecision:
        """The router's pick, moved off a local tier that holds a base model when the other local
        tier's model is instruction-tuned: only a user's explicit route (per message or per
        conversation) sends a chat to a base model."""
        other = {"L1": "L2", "L2": "L1"}.get(decision.level)
        if base_models or other is None or self.models.get(decision.level) == self.models.get(other):
            return decision
        if self.is_instruct(decision.level) is False and self.is_instruct(other):
            why = f"{decision.reason}; {decision.level} holds a base model (not instruction-tuned) → {other}"
            return replace(decision, level=other, reason=why, wanted=decision.wanted or decision.level)
        return decision

    def can_call_tools(self, level: str) -> bool | None:
        """The catalog's word on `level`'s model calling tools (None: no model, or not known)."""
        model = self.models.get(level)
        entry = (self.manager.catalog or load_catalog()).get(model) if model else None
        return entry.tools if entry is not None else None

    def tool_tier(self, decision: RouteDecision) -> RouteDecision:
        """A turn that offers tools, moved off a local tier whose model the catalog says cannot
        call them, to the other local tier when its model can (L3 passes tools to its endpoint)."""
        other = {"L1": "L2", "L2": "L1"}.get(decision.level)
        if other is None or self.can_call_tools(decision.level) is not False or not self.can_call_tools(other):
            return decision
        why = f"{decision.reason}; tools: {decision.level}'s model does not call tools → {other}"
        return replace(decision, level=other, reason=why, wanted=decision.wanted or decision.level)

    def sees_images(self, level: str) -> bool | None:
        """Whether `level`'s model reads images: a local model with a vision projector beside it,
        or L3 when the user says its model does (l3.images) (None: no model, or not found)."""
        if level == "L3":
            return bool(self.remote is not None and self.remote.config.images)
        model = self.models.get(level)
        if not model:
            return None
        try:
            return resolve_model(model, self.manager.catalog or load_catalog()).projector is not None
        except ModelNotFound:
            return None

    def vision_tier(self, decision: RouteDecision) -> RouteDecision:
        """A turn with images, moved off a tier that cannot read them to a local tier whose model
        can, the larger first, else to L3 where its model reads them (a user's own route stays
        theirs: the turn then says why)."""
        if self.sees_images(decision.level) is not False:
            return decision
        for other in ("L2", "L1", "L3"):  # local first; L3 where the user says its model reads images
            if other != decision.level and self.sees_images(other):
                why = f"{decision.reason}; images: {decision.level} cannot read them → {other}"
                return replace(decision, level=other, reason=why, wanted=decision.wanted or decision.level)
        return decision

    def targets(self, level: str, *, local_only: bool = False,
                base_models: bool = False) -> Iterator[tuple[LocalTarget | RemoteTarget, str | None]]:
        """Targets to try for `level`, nearest first, each with the fallback note if not `level`.
        `local_only`: never the remote tier (a turn carrying the user's documents)."""
        reasons: list[str] = []
        for candidate in FALLBACK_ORDER[level]:
            note = f"{level} {reasons[-1]} → {candidate}" if candidate != level and reasons else None
            if candidate == "L3":
                if local_only:
                    reasons.append("not used: documents stay on this computer")
                elif self.remote is None:
                    reasons.append("not configured")
                else:
                    yield RemoteTarget(self.remote), note
                    reasons.append("unreachable")
                continue
            target = self._try_local(candidate, reasons)
            if target is None:
                continue
            if candidate != level and self._skip_base(candidate, FALLBACK_ORDER[level], base_models):
                # A fallback is the engine's choice, not the user's: not to a base model while
                # an instruction-tuned tier is further down the list.
                reasons[-1:] = [", ".join(reasons[-1:] + [f"{candidate} holds a base model"])]
                continue
            yield target, note

    def _try_local(self, level: str, reasons: list[str]) -> LocalTarget | None:
        try:
            target = self.local(level)
        except (ModelNotFound, ModelLoadError) as exc:
            log.warning("tier %s unavailable: %s", level, exc)
            reasons.append("unavailable")
            return None
        if target is None:
            reasons.append("not configured")
        return target

    def _skip_base(self, candidate: str, order: tuple[str, ...], base_models: bool) -> bool:
        if base_models or self.is_instruct(candidate) is not False:
            return False
        later = order[order.index(candidate) + 1:]
        return any(self.models.get(c) not in (None, self.models.get(candidate)) and self.is_instruct(c)
                   for c in later if c != "L3") or ("L3" in later and self.remote is not None)

    def forget(self, conversation_id: int) -> None:
        self.warm.pop(conversation_id, None)
