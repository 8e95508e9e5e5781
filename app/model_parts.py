"""What the model manager and the first-start welcome share: model labels, fit badges, the hub
choice, plain-word errors, and `Task`, a search or download on their Runner (app/background.py;
only the GUI thread touches widgets)."""

from __future__ import annotations

import logging
import threading
from typing import Callable

import psutil
from PySide6.QtCore import QLocale, Qt
from PySide6.QtWidgets import QComboBox

from app.background import Runner
from app.i18n import tr
from engine.api import (DownloadCancelled, DownloadError, HubError, ModelEntry, Settings, default_hub,
                        default_vram_budget_mb, device_snapshot, hubs, plan_fit, ram_bytes, search_hub, size_fit)

log = logging.getLogger(__name__)


def entry_label(e: ModelEntry) -> str:
    """A catalog model's name as lists show it: the flags, not the name, say demo, base model and
    whether it reads images (a projector comes with it)."""
    return (e.name + (tr(" (demo)") if e.demo else "") + ("" if e.instruct else tr(" (base model)"))
            + (tr(" · reads images") if getattr(e, "projector", "") else ""))


def companions(e: ModelEntry, catalog) -> list[ModelEntry]:
    """What comes with `e` in a download: its vision projector, and the draft model the catalog
    pairs with it (a bundled demo draft is not downloaded)."""
    draft = catalog.draft_of(e)
    projector = e.projector_entry() if getattr(e, "projector", "") else None
    return ([projector] if projector is not None else []) + ([draft] if draft is not None and not draft.pypi_wheels
                                                             else [])


def draft_size(e: ModelEntry) -> str:
    """A draft model's size as its family names it: "0.5B", "0.6B", "270M"."""
    return f"{e.params_b * 1000:.0f}M" if e.params_b < 0.4 else f"{e.params_b:.1f}B"


def pair_label(e: ModelEntry, catalog) -> str:
    """entry_label, and the draft model the catalog (engine Catalog) pairs with it:
    "Qwen2.5 7B Instruct · with 0.5B draft (faster answers)"."""
    draft = catalog.draft_of(e)
    return entry_label(e) + (tr(" · with {size} draft (faster answers)").format(size=draft_size(draft))
                             if draft is not None else "")


def draft_note(e: ModelEntry, catalog) -> str:
    """What a draft model is for, in one sentence, for a row's tooltip ("" for other models)."""
    targets = catalog.targets_of(e)
    if not targets:
        return ""
    return tr("A draft model: it guesses a few words ahead and {targets} checks them in one step, so answers come "
              "faster and read the same. It is downloaded with its model and is not a chat model here.").format(
        targets=" / ".join(t.name for t in targets))


def _badge(word: str) -> str:
    """The engine's fit word (engine/models/fit.py) as the tables show it."""
    return {"gpu": tr("fits on the GPU"), "partial": tr("partly on the GPU"), "cpu": tr("runs on the CPU"),
            "too_big": tr("too big for free RAM")}.get(word, "?")


def fit_badge(entry: ModelEntry, vram_budget_mb: float | None) -> tuple[str, str]:
    """(needs, badge) for the table, from the planner and the available RAM."""
    fit = plan_fit(entry, vram_budget_mb, psutil.virtual_memory().available)
    if fit.plan is None:
        return "?", fit.why[:60]
    p, ram = fit.plan, ram_bytes(fit.plan)
    needs = f"RAM {ram / 2**30:.1f} GB" + (f" · VRAM {p.gpu_bytes_total / 2**30:.1f} GB" if p.gpu_bytes_total else "")
    return needs, _badge(fit.word)


def size_badge(size_bytes: int, vram_budget_bytes: int, ram_available: int) -> str:
    """The fit badge of a hub file before it is downloaded (its architecture unknown): from its size."""
    return _badge(size_fit(size_bytes, vram_budget_bytes, ram_available))


def ui_locale(settings: Settings) -> str:
    language = settings.get("ui.language")
    return QLocale.system().name() if language == "auto" else language


def hub_combo(settings: Settings) -> QComboBox:
    """The hub choice (objectName hubEndpoint): the saved one, else the UI locale's default; a choice
    the user makes is saved in `models.hub`."""
    combo = QComboBox()
    combo.setObjectName("hubEndpoint")
    names = {"huggingface": tr("Hugging Face"), "hf-mirror": tr("HF-compatible mirror (hf-mirror.com)"),
             "modelscope": tr("ModelScope (reachable from mainland China)")}
    for h in hubs():
        combo.addItem(names.get(h.id, h.name), h.id)
        combo.setItemData(combo.count() - 1, h.endpoint, Qt.ToolTipRole)
    saved = settings.get("models.hub")
    chosen = saved if saved != "auto" and combo.findData(saved) >= 0 else default_hub(ui_locale(settings))
    combo.setCurrentIndex(max(0, combo.findData(chosen)))
    combo.activated.connect(lambda _i: settings.set("models.hub", combo.currentData()))
    return combo


def plain_error(exc: BaseException) -> str:
    """What a failed search or download says to the user: the engine's plain words for the errors
    it knows, a pointer to the log for anything else (never a class name or a trace)."""
    if isinstance(exc, (DownloadError, HubError, OSError)):
        return str(exc)
    return tr("Something went wrong; the details are in the log.")


class Task:
    """One search or download off the GUI thread, on the caller's Runner (app/background.py):
    `op(task)` runs there, then `on_done(task)` on the GUI thread with `result` / `error` /
    `cancelled` set. `op` may call `task.report(done, total)` (`on_progress` on the GUI thread) and
    should stop when `task.cancel` is set."""

    def __init__(self, op: Callable[["Task"], object], on_done: Callable[["Task"], None],
                 on_progress: Callable[[int, int], None] = lambda done, total: None):
        self.op, self.on_done, self.on_progress = op, on_done, on_progress
        self.cancel = threading.Event()
        self.result: object = None
        self.error = ""
        self.cancelled = False
        self.running = False  # (GUI thread) started and its on_done not called yet
        self._runner: Runner | None = None

    def start(self, runner: Runner) -> "Task":
        self._runner, self.running = runner, True
        runner.run(self._run, self._finished)
        return self

    def report(self, done: int, total: int) -> None:
        self._runner.to_gui(self.on_progress, done, total)

    def _run(self) -> None:
        try:
            self.result = self.op(self)
        except DownloadCancelled as exc:
            self.cancelled, self.error = True, str(exc)
        except (DownloadError, HubError, OSError) as exc:
            self.error = plain_error(exc)
        except Exception as exc:  # noqa: BLE001 - said in plain words; the trace goes to the log
            log.exception("background task failed")
            self.error = plain_error(exc)

    def _finished(self, _result: None) -> None:
        self.running = False
        self.on_done(self)


def search_rows(query: str, hub_id: str, vram_budget_mb: float | None) -> list[dict]:
    """Search `hub_id` and badge every file (runs on a Task's Runner): rows for the results table."""
    snap = device_snapshot()
    vram = int((default_vram_budget_mb(snap) if vram_budget_mb is None else vram_budget_mb) * 2**20)
    rows = []
    for repo in search_hub(query, hub_id):
        for f in repo.files:
            badge = tr("split file: not supported") if f.split else size_badge(f.size_bytes, vram,
                                                                               snap.ram_available_bytes)
            rows.append({"repo": repo, "file": f, "badge": badge})
    return rows
