"""The Documents panel: the folders and files added for "Use my documents", each with its
collection and counts; Add folder… / Add files… into a collection, Remove; every file with its
status (indexed, or skipped and why), pages and chunks; the indexing progress (files, chunks,
chunks/s) and Cancel.

Requests go to `DocumentsWorker`, which runs them on the engine thread; lists and reports come back
to this panel's methods on the GUI thread. The progress is read from the engine's published status on a timer (never blocks), and
the lists are read again while indexing runs and when it ends."""

from __future__ import annotations

import time
from pathlib import Path

from PySide6.QtCore import QAbstractTableModel, QModelIndex, Qt, QTimer
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (QAbstractItemView, QComboBox, QDialog, QFileDialog, QHBoxLayout, QHeaderView,
                               QLabel, QProgressBar, QPushButton, QTableView, QTableWidget, QTableWidgetItem,
                               QVBoxLayout)

from app.documents_worker import DocumentsWorker
from app.i18n import tr
from app.theme import colour, set_tone
from engine.api import DEFAULT_COLLECTION

PROGRESS_MS = 250            # the status is published at 2 Hz; this shows each snapshot soon after
LIST_WHILE_INDEXING_S = 1.5  # files appear in the table as they are indexed, at this pace
FILE_TYPES = "*.pdf *.docx *.md *.markdown *.txt *.rst *.csv *.log *.html *.htm"


def reason_text(reason: str | None) -> str:
    """A skip reason from the engine in the UI's language (engine/docs/parse.py names them)."""
    if not reason:
        return ""
    head, sep, rest = reason.partition(" (")
    if reason not in _REASONS and sep and head in _REASONS:  # "could not be read (Input/output error)"
        return f"{tr(head)} ({rest}"
    return tr(reason)


# Skip reasons (engine/docs/parse.py, scan.py); app/zh_CN.py translates each, a test checks it.
_REASONS = frozenset((
    "unsupported file type", "old Word format (.doc): save it as .docx", "empty file", "too large",
    "not a text file (binary or unknown encoding)", "damaged or not a real PDF",
    "damaged or not a real Word (.docx) file", "damaged HTML", "encrypted (password-protected)",
    "no text layer (scanned?)", "no text", "no permission to read it", "file no longer exists", "is a folder",
    "not a regular file", "link loop (the link points back to itself)", "could not be read", "not found"))


def _size(n: int | None) -> str:
    if n is None:
        return ""
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return ""


class FileTable(QAbstractTableModel):
    """Every file met under the added folders (a model, not item widgets: 10 000 files stay cheap)."""

    def __init__(self):
        super().__init__()
        self.rows: list[dict] = []
        self.headers = [tr("File"), tr("Status"), tr("Pages"), tr("Chunks"), tr("Size")]
        self.roots: dict[int, str] = {}  # root id → its path (file names are shown under it)

    def set_rows(self, rows: list[dict], roots: dict[int, str]) -> None:
        self.beginResetModel()
        self.rows, self.roots = rows, roots
        self.endResetModel()

    def rowCount(self, parent=QModelIndex()) -> int:  # noqa: N802 - Qt's name
        return 0 if parent.isValid() else len(self.rows)

    def columnCount(self, parent=QModelIndex()) -> int:  # noqa: N802 - Qt's name
        return 0 if parent.isValid() else len(self.headers)

    def headerData(self, section, orientation, role=Qt.DisplayRole):  # noqa: N802 - Qt's name
        if role == Qt.DisplayRole and orientation == Qt.Horizontal:
            return self.headers[section]
        return None

    def data(self, index, role=Qt.DisplayRole):
        row = self.rows[index.row()]
        skipped = row.get("status") == "skipped"
        if role == Qt.DisplayRole:
            return self.cell(row, index.column())
        if role == Qt.ToolTipRole:
            return row["path"] + (f"\n{row['detail']}" if row.get("detail") else "")
        if role == Qt.ForegroundRole and skipped and index.column() == 1:
            return QColor(colour("warn"))
        return None

    def cell(self, row: dict, column: int) -> str:
        if column == 0:
            root, path = self.roots.get(row.get("root_id")), Path(row["path"])
            if not root or root == row["path"]:
                return path.name
            try:
                return str(path.relative_to(root))
            except ValueError:
                return row["path"]
        if column == 1:
            if row.get("status") == "skipped":
                return tr("skipped: {reason}").format(reason=reason_text(row.get("reason")))
            return tr("indexed")
        if column == 2:
            return "" if row.get("pages") is None else str(row["pages"])
        if column == 3:
            return str(row.get("chunks") or 0)
        return _size(row.get("size"))


class DocumentsPanel(QDialog):
    def __init__(self, worker: DocumentsWorker, parent=None):
        super().__init__(parent)
        self.setObjectName("documentsPanel")
        self.setWindowTitle(tr("Documents"))
        self.resize(860, 620)
        self.worker = worker
        self.roots: list[dict] = []
        self.files: list[dict] = []
        self.enabled = True
        self.waiting = 0            # add runs asked for whose report has not come back
        self.indexing = False       # the last status said indexing runs
        self._listed_at = 0.0

        layout = QVBoxLayout(self)
        layout.addWidget(QLabel(tr("Folders and files used by “Use my documents”")))
        self.empty_note = QLabel(tr("No folders yet. Add a folder or files below: they are indexed on this computer, "
                                    "and a chat with “Use my documents” on answers from them, citing file and page."))
        self.empty_note.setObjectName("documentsEmpty")
        self.empty_note.setWordWrap(True)
        set_tone(self.empty_note, "info")
        layout.addWidget(self.empty_note)
        layout.addWidget(self._roots_table(), 1)
        layout.addLayout(self._root_buttons())
        files = self._files_view()
        layout.addWidget(self.files_title)
        layout.addWidget(files, 2)
        layout.addLayout(self._progress_row())
        layout.addWidget(self.progress_label)
        layout.addWidget(self.message)
        self.timer = QTimer(self)
        self.timer.setInterval(PROGRESS_MS)
        self.timer.timeout.connect(self.update_progress)

    def _roots_table(self) -> QTableWidget:
        table = self.roots_table = QTableWidget(0, 5)
        table.setObjectName("documentRoots")
        table.setHorizontalHeaderLabels([tr("Folder or file"), tr("Collection"), tr("Files"), tr("Chunks"),
                                         tr("Last scan")])
        table.setSelectionBehavior(QAbstractItemView.SelectRows)
        table.setSelectionMode(QAbstractItemView.SingleSelection)
        table.setEditTriggers(QAbstractItemView.NoEditTriggers)
        table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeToContents)
        table.horizontalHeader().setSectionResizeMode(0, QHeaderView.Stretch)
        table.verticalHeader().hide()
        table.itemSelectionChanged.connect(self._show_files)
        table.setAccessibleName(tr("Added folders and files"))
        return table

    def _root_buttons(self) -> QHBoxLayout:
        self.add_folder_button = QPushButton(tr("Add folder…"))
        self.add_folder_button.setObjectName("addFolderButton")
        self.add_files_button = QPushButton(tr("Add files…"))
        self.add_files_button.setObjectName("addFilesButton")
        self.collection = QComboBox()
        self.collection.setObjectName("documentCollection")
        self.collection.setEditable(True)  # a new name makes a new collection
        self.collection.addItem(DEFAULT_COLLECTION)
        self.collection.setToolTip(tr("Added folders and files go into this collection; a new name starts one."))
        self.collection.setAccessibleName(tr("Collection"))
        self.collection.lineEdit().setAccessibleName(tr("Collection"))
        self.remove_button = QPushButton(tr("Remove"))
        self.remove_button.setObjectName("removeDocumentsButton")
        self.remove_button.setToolTip(tr("Take the selected folder or file out of the index (the files stay)."))
        self.add_folder_button.clicked.connect(self.add_folder)
        self.add_files_button.clicked.connect(self.add_files)
        self.remove_button.clicked.connect(self.remove_selected)
        buttons = QHBoxLayout()
        buttons.addWidget(self.add_folder_button)
        buttons.addWidget(self.add_files_button)
        buttons.addWidget(QLabel(tr("into collection")))
        buttons.addWidget(self.collection, 1)
        buttons.addStretch(1)
        buttons.addWidget(self.remove_button)
        return buttons

    def _files_view(self) -> QTableView:
        self.file_model = FileTable()
        view = self.files_view = QTableView()
        view.setObjectName("documentFiles")
        view.setModel(self.file_model)
        view.setSelectionBehavior(QAbstractItemView.SelectRows)
        view.setEditTriggers(QAbstractItemView.NoEditTriggers)
        view.verticalHeader().hide()
        header = view.horizontalHeader()
        header.setSectionResizeMode(0, QHeaderView.Stretch)
        header.setSectionResizeMode(1, QHeaderView.ResizeToContents)
        view.setAccessibleName(tr("Files"))
        self.files_title = QLabel(tr("Files"))
        return view

    def _progress_row(self) -> QHBoxLayout:
        self.bar = QProgressBar()
        self.bar.setObjectName("documentsProgress")
        self.bar.hide()
        self.progress_label = QLabel()
        self.progress_label.setObjectName("documentsProgressLabel")
        self.cancel_button = QPushButton(tr("Cancel"))
        self.cancel_button.setObjectName("cancelIndexingButton")
        self.cancel_button.hide()
        self.cancel_button.clicked.connect(self.cancel)
        self.message = QLabel()
        self.message.setObjectName("documentsMessage")
        self.message.setWordWrap(True)
        progress = QHBoxLayout()
        progress.addWidget(self.bar, 1)
        progress.addWidget(self.cancel_button)
        return progress

    # ---- showing
    def showEvent(self, event):  # noqa: N802 - Qt's name
        super().showEvent(event)
        self.timer.start()
        self.refresh()
        self.update_progress()

    def hideEvent(self, event):  # noqa: N802 - Qt's name
        self.timer.stop()
        super().hideEvent(event)

    def refresh(self) -> None:
        self._listed_at = time.monotonic()
        self.worker.refresh(self.show_lists, self.message.setText)

    def show_lists(self, data: dict) -> None:
        """The engine's lists {"enabled", "roots", "files", "collections"}."""
        self.enabled = data["enabled"]
        for w in (self.add_folder_button, self.add_files_button, self.remove_button):
            w.setEnabled(self.enabled)
        selected = self._selected_root()
        self.roots, self.files = data["roots"], data["files"]
        self.empty_note.setVisible(not self.roots and self.enabled)
        table = self.roots_table
        table.blockSignals(True)
        table.setRowCount(len(self.roots))
        for row, r in enumerate(self.roots):
            scanned = (r.get("scanned") or "")[:16].replace("T", " ") or tr("not finished")
            for col, text in enumerate((r["path"], r["collection"], str(r["files"]), str(r["chunks"]), scanned)):
                item = QTableWidgetItem(text)
                item.setData(Qt.UserRole, r["path"])
                if col == 0:
                    item.setToolTip(r["path"])
                table.setItem(row, col, item)
            if selected is not None and r["path"] == selected["path"]:
                table.selectRow(row)
        table.blockSignals(False)
        names = [c["name"] for c in data["collections"]]
        current = self.collection.currentText()
        for name in names:
            if self.collection.findText(name) < 0:
                self.collection.addItem(name)
        self.collection.setCurrentText(current)
        self._show_files()
        self.update_progress()

    def _selected_root(self) -> dict | None:
        rows = self.roots_table.selectionModel().selectedRows()
        return self.roots[rows[0].row()] if rows and rows[0].row() < len(self.roots) else None

    def _show_files(self) -> None:
        """The selected folder's files, or every file when none is selected."""
        root = self._selected_root()
        files = [f for f in self.files if root is None or f.get("root_id") == root["id"]]
        self.file_model.set_rows(files, {r["id"]: r["path"] for r in self.roots})
        skipped = sum(f.get("status") == "skipped" for f in files)
        self.files_title.setText(tr("Files ({n}, {skipped} skipped)").format(n=len(files), skipped=skipped))

    def update_progress(self) -> None:
        """Draw the published indexing progress; read the lists again while it runs and when it ends."""
        docs = self.worker.status()
        if docs is None:
            self.bar.hide()
            self.cancel_button.hide()
            self.progress_label.setText("" if self.enabled else tr("Documents are turned off (setting docs.enabled)."))
            return
        p = docs["progress"]
        active = p["state"] != "idle" or p["queued"] > 0 or self.waiting > 0
        if p["state"] in ("indexing", "paused") and p["files_total"]:
            self.bar.setRange(0, p["files_total"])
            self.bar.setValue(p["files_done"])
            text = tr("{done} of {total} files · {chunks} chunks · {rate:.1f} chunks/s").format(
                done=p["files_done"], total=p["files_total"], chunks=p["chunks"], rate=p["rate_chunks_s"])
            if p["state"] == "paused":
                text = tr("Paused while an answer is written") + " · " + text
            elif p.get("current"):
                text += " · " + Path(p["current"]).name
        elif active:
            self.bar.setRange(0, 0)  # looking for files, or about to start
            text = tr("Looking for files…")
        else:  # counted from the lists read last (the published counts lag by up to half a second)
            skipped = sum(f.get("status") == "skipped" for f in self.files)
            text = tr("{files} files: {indexed} indexed, {skipped} skipped · {chunks} chunks").format(
                files=len(self.files), indexed=len(self.files) - skipped, skipped=skipped,
                chunks=sum(f.get("chunks") or 0 for f in self.files))
        embedder = docs.get("embedder") or ""
        if embedder.startswith("failed"):
            text += " · " + tr("search by keywords only: the embedding model could not be loaded")
        elif embedder != "ready":
            text += " · " + tr("loading the embedding model…")
        self.progress_label.setText(text)
        self.bar.setVisible(active)
        self.cancel_button.setVisible(active)
        now = time.monotonic()
        if (self.indexing and not active) or (active and now - self._listed_at >= LIST_WHILE_INDEXING_S):
            self.refresh()
        self.indexing = active

    # ---- actions
    def add_folder(self) -> None:
        path = QFileDialog.getExistingDirectory(self, tr("Add a folder to your documents"))
        if path:
            self.add_paths([path])

    def add_files(self) -> None:
        paths, _ = QFileDialog.getOpenFileNames(self, tr("Add files to your documents"), "",
                                                f"{tr('Documents')} ({FILE_TYPES});;{tr('All files')} (*)")
        if paths:
            self.add_paths(paths)

    def add_paths(self, paths: list[str], collection: str | None = None) -> None:
        """Index `paths` into `collection` (default: the one chosen in the panel)."""
        collection = (collection or self.collection.currentText()).strip() or DEFAULT_COLLECTION
        self.waiting += 1
        self.message.setText(tr("Adding to “{collection}”: {paths}").format(
            collection=collection, paths=", ".join(Path(p).name or p for p in paths)))
        self.worker.add([str(p) for p in paths], collection, self._on_added)
        self.update_progress()

    def remove_selected(self) -> None:
        root = self._selected_root()
        if root is None:
            self.message.setText(tr("Select a folder or file in the list first."))
            return
        self.worker.remove(root["path"], "", self.message.setText)
        self.refresh()
        self.message.setText(tr("Removed {path} from the index (the files themselves are untouched).").format(
            path=root["path"]))

    def cancel(self) -> None:
        self.worker.cancel_indexing()  # a flag: the GUI never waits
        self.message.setText(tr("Stopping after the file being read…"))

    def _on_added(self, report: dict) -> None:
        self.waiting = max(0, self.waiting - 1)
        if "error" in report:
            self.message.setText(tr("Could not add: {why}").format(why=report["error"]))
        elif report.get("cancelled"):
            self.message.setText(tr("Indexing cancelled: {indexed} files were indexed before it stopped.").format(
                indexed=report["indexed"]))
        else:
            done = tr("Done: {indexed} indexed, {unchanged} unchanged, {skipped} skipped, {removed} removed.")
            self.message.setText(done.format(
                indexed=report["indexed"], unchanged=report["unchanged"], skipped=len(report["skipped"]),
                removed=report["removed"]) + " " + tr("{chunks} chunks in {seconds:.1f} s").format(
                chunks=report["chunks"], seconds=report["seconds"]))
        self.refresh()
        self.update_progress()

    def close_work(self) -> None:
        """The window closes: no more status reads."""
        self.timer.stop()
