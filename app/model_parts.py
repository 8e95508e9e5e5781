"""What the model manager and the first-start welcome share: model labels, fit badges, the hub
choice, plain-word errors, and `Task`, the QThread their searches and downloads run on (only the
GUI thread touches widgets)."""

from __future__ import annotations

import logging
import threading
from typing import Callable

import psutil
from PySide6.QtCore import QLocale, Qt, QThread, Signal
from PySide6.QtWidgets import QComboBox

from app.i18n import tr
from engine.api import (DownloadCancelled, DownloadError, HubError, ModelEntry, Settings, default_hub,
                        default_vram_budget_mb, device_snapshot, hubs, plan_fit, ram_bytes, search_hub, size_fit)

log = logging.getLogger(__name__)


def entry_label(e: ModelEntry) -> str:
    """A catalog model's name as lists show it: the flags, not the name, say demo and base model."""
    return e.name + (tr(" (demo)") if e.demo else "") + ("" if e.instruct else tr(" (base model)"))


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


class Task(QThread):
    """One job off the GUI thread: `op(task)` runs on this QThread; connect `done` (emitted there,
    delivered queued to a GUI-thread receiver) and read `result` / `error` / `cancelled`.
    `op` may call `task.report(done, total)` and should stop when `task.cancel` is set."""

    progress = Signal(int, int)  # bytes so far, total

    def __init__(self, op: Callable[["Task"], object], parent=None):
        super().__init__(parent)
        self.op = op
        self.cancel = threading.Event()
        self.result: object = None
        self.error = ""
        self.cancelled = False

    def report(self, done: int, total: int) -> None:
        self.progress.emit(done, total)

    def run(self) -> None:
        try:
            self.result = self.op(self)
        except DownloadCancelled as exc:
            self.cancelled, self.error = True, str(exc)
        except (DownloadError, HubError, OSError) as exc:
            self.error = plain_error(exc)
        except Exception as exc:  # noqa: BLE001 - said in plain words; the trace goes to the log
            log.exception("background task failed")
            self.error = plain_error(exc)

    def stop(self) -> None:
        self.cancel.set()
        self.wait()


def search_rows(query: str, hub_id: str, vram_budget_mb: float | None) -> list[dict]:
    """Search `hub_id` and badge every file (runs on a Task's thread): rows for the results table."""
    snap = device_snapshot()
    vram = int((default_vram_budget_mb(snap) if vram_budget_mb is None else vram_budget_mb) * 2**20)
    rows = []
    for repo in search_hub(query, hub_id):
        for f in repo.files:
            badge = tr("split file: not supported") if f.split else size_badge(f.size_bytes, vram,
                                                                               snap.ram_available_bytes)
            rows.append({"repo": repo, "file": f, "badge": badge})
    return rows
