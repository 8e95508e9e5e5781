"""The Tools panel: the built-in tools and each MCP server of mcp.json, with its state and stderr
log; every tool with its description, an on/off switch and what its description costs in every
prompt (tokens of the L1 model); "always allowed" shown and revocable; import from Claude Desktop,
LM Studio or Cursor.

Non-modal. What may wait (a server's start, a snapshot that reads logs) runs on the panel's own
Runner, "tools": the GUI thread never waits on a server or the engine. Secrets in a server's env
or headers are masked in the snapshot before they reach this panel.
"""

from __future__ import annotations

import logging
from pathlib import Path

from PySide6.QtCore import Qt, QTimer, QUrl
from PySide6.QtGui import QDesktopServices
from PySide6.QtWidgets import (QDialog, QFileDialog, QHBoxLayout, QLabel, QMenu, QPlainTextEdit, QPushButton,
                               QSplitter, QTreeWidget, QTreeWidgetItem, QVBoxLayout, QWidget)

from app.background import Runner
from app.i18n import tr
from app.theme import colour, set_tone
from engine.api import McpConfigError, known_mcp_configs, mcp_config_path

log = logging.getLogger(__name__)
REFRESH_MS = 1500  # while shown: states change as servers start, crash and stop
STATE_WORDS = {"running": "running", "stopped": "not started", "starting": "starting…", "crashed": "crashed",
               "failed": "failed to start", "disabled": "off"}


class ToolsPanel(QDialog):
    def __init__(self, engine, parent=None):
        super().__init__(parent)
        self.setObjectName("toolsPanel")
        self.setWindowTitle(tr("Tools"))
        self.engine = engine
        self.runner = Runner("tools", self)
        self.sources: list[dict] = []
        self._busy = False
        self._selected: tuple[str, str] | None = None  # (source, tool or "")
        self._shape: list | None = None  # what the tree was last drawn from
        top = self._build_top()
        split = self._build_split()
        self.status = QLabel("")
        self.status.setObjectName("toolsStatus")
        self.status.setWordWrap(True)
        layout = QVBoxLayout(self)
        layout.addWidget(self.intro)
        layout.addLayout(top)
        layout.addWidget(self.empty)
        layout.addWidget(split, 1)
        layout.addWidget(self.status)
        self.resize(860, 520)
        self._timer = QTimer(self)
        self._timer.setInterval(REFRESH_MS)
        self._timer.timeout.connect(self.refresh)
        self._timer.start()
        self._show_details()

    def _build_top(self) -> QHBoxLayout:
        """What the panel is, the empty state, Import / Open mcp.json / Reload."""
        intro = self.intro = QLabel(tr("Tools the model may call when “Tools” is on under the chat. "
                                       "Every call asks you first. MCP servers come from {path}.").format(
            path=mcp_config_path()))
        intro.setWordWrap(True)
        self.empty = QLabel(tr("No MCP servers yet. Import them from Claude Desktop, LM Studio or Cursor, or add "
                               "one to mcp.json (the same format) and press Reload."))
        self.empty.setObjectName("toolsEmpty")
        self.empty.setWordWrap(True)
        set_tone(self.empty, "muted")
        self.import_button = QPushButton(tr("Import…"))
        self.import_button.setObjectName("importMcpButton")
        self.import_button.clicked.connect(self._import_menu)
        self.open_button = QPushButton(tr("Open mcp.json"))
        self.open_button.clicked.connect(self._open_config)
        self.reload_button = QPushButton(tr("Reload"))
        self.reload_button.setToolTip(tr("Read mcp.json again"))
        self.reload_button.clicked.connect(self.reload)
        top = QHBoxLayout()
        for b in (self.import_button, self.open_button, self.reload_button):
            b.setAccessibleName(b.text())
            top.addWidget(b)
        top.addStretch(1)
        return top

    def _build_split(self) -> QSplitter:
        """The sources and their tools on the left; the selection's details, log and actions on the right."""
        self.tree = QTreeWidget()
        self.tree.setObjectName("toolsTree")
        self.tree.setAccessibleName(tr("Tool sources and their tools"))
        self.tree.setHeaderLabels([tr("Tool"), tr("State"), tr("Tokens"), tr("Allowed")])
        self.tree.setColumnWidth(0, 230)
        self.tree.setColumnWidth(1, 110)
        self.tree.setColumnWidth(2, 60)
        self.tree.itemChanged.connect(self._item_changed)
        self.tree.currentItemChanged.connect(lambda *_: self._show_details())

        self.details = QLabel("")
        self.details.setObjectName("toolDetails")
        self.details.setWordWrap(True)
        self.details.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self.log_view = QPlainTextEdit()
        self.log_view.setObjectName("serverLog")
        self.log_view.setReadOnly(True)
        self.log_view.setAccessibleName(tr("Server log (stderr)"))
        self.log_view.setPlaceholderText(tr("The server's stderr appears here."))
        self.restart_button = QPushButton(tr("Restart"))
        self.restart_button.setObjectName("restartServerButton")
        self.restart_button.clicked.connect(self._restart)
        self.server_switch = QPushButton(tr("Turn off"))
        self.server_switch.setObjectName("serverSwitch")
        self.server_switch.clicked.connect(self._switch_server)
        self.revoke_button = QPushButton(tr("Ask every time"))
        self.revoke_button.setObjectName("revokeButton")
        self.revoke_button.setToolTip(tr("Forget “Always allow” for this tool"))
        self.revoke_button.clicked.connect(self._revoke)
        buttons = QHBoxLayout()
        for b in (self.restart_button, self.server_switch, self.revoke_button):
            b.setAccessibleName(b.text())
            buttons.addWidget(b)
        buttons.addStretch(1)
        side = QWidget()
        right = QVBoxLayout(side)
        right.setContentsMargins(0, 0, 0, 0)
        right.addWidget(self.details)
        right.addWidget(QLabel(tr("Log")))
        right.addWidget(self.log_view, 1)
        right.addLayout(buttons)
        split = QSplitter(Qt.Horizontal)
        split.addWidget(self.tree)
        split.addWidget(side)
        split.setSizes([470, 330])
        return split

    # ---- reading
    def refresh(self) -> None:
        """A new snapshot from the toolbox, read on the "tools" thread."""
        box = self.engine.toolbox
        if box is None or self._busy or self.runner.closed or not self.isVisible():
            return
        self._busy = True
        self.runner.run(box.snapshot, self._show, self._failed)

    def _failed(self, exc: BaseException) -> None:
        self._busy = False
        self.status.setText(str(exc))

    def _show(self, sources: list[dict]) -> None:
        self._busy = False
        shape = _shape(sources)
        self.sources = sources
        if shape == self._shape:  # nothing the tree shows changed: only the log may have
            self._show_details()
            return
        self._shape = shape
        self.empty.setVisible(len(sources) <= 1)
        self.tree.blockSignals(True)
        self.tree.clear()
        current = None
        for source in sources:
            top = QTreeWidgetItem([tr("Built-in tools") if source["name"] == "builtin" else source["name"],
                                   tr(STATE_WORDS.get(source["state"], source["state"])), "", ""])
            top.setData(0, Qt.UserRole, (source["name"], ""))
            if source["state"] in ("crashed", "failed"):
                top.setForeground(1, Qt.red)
            self.tree.addTopLevelItem(top)
            for tool in source["tools"]:
                item = QTreeWidgetItem([tool["name"], "", "" if tool["tokens"] is None else str(tool["tokens"]),
                                        tr("always") if tool["always"] else tr("asks")])
                item.setData(0, Qt.UserRole, (source["name"], tool["name"]))
                item.setFlags(item.flags() | Qt.ItemIsUserCheckable)
                item.setCheckState(0, Qt.Checked if tool["enabled"] else Qt.Unchecked)
                item.setToolTip(0, tool["description"])
                top.addChild(item)
                if self._selected == (source["name"], tool["name"]):
                    current = item
            top.setExpanded(True)
            if self._selected == (source["name"], ""):
                current = top
        if current is not None:
            self.tree.setCurrentItem(current)
        self.tree.blockSignals(False)
        self._show_details()

    def _find(self, source: str, tool: str = "") -> tuple[dict | None, dict | None]:
        s = next((x for x in self.sources if x["name"] == source), None)
        t = next((x for x in s["tools"] if x["name"] == tool), None) if s and tool else None
        return s, t

    def _show_details(self) -> None:
        item = self.tree.currentItem()
        key = item.data(0, Qt.UserRole) if item is not None else None
        self._selected = tuple(key) if key else None
        source, tool = self._find(*key) if key else (None, None)
        server = source is not None and source["name"] != "builtin"
        self.restart_button.setEnabled(server and source["state"] != "disabled")
        self.server_switch.setEnabled(server)
        self.server_switch.setText(tr("Turn on") if server and source["state"] == "disabled" else tr("Turn off"))
        self.revoke_button.setEnabled(bool(tool and tool["always"]))
        if source is None:
            self.details.setText(tr("Select a server or a tool."))
            self.log_view.setPlainText("")
            return
        if tool is not None:
            muted = colour("muted")
            cost = "" if tool["tokens"] is None else tr("{n} tokens in every prompt").format(n=tool["tokens"])
            self.details.setText(f"<b>{_esc(tool['name'])}</b> ({_esc(source['name'])})<br>{_esc(tool['description'])}"
                                 f"<br><span style='color:{muted}'>{cost}</span>")
        elif server:
            lines = [f"<b>{_esc(source['name'])}</b> — {_esc(tr(STATE_WORDS.get(source['state'], source['state'])))}",
                     f"{_esc(source['transport'])}: {_esc(source['target'])}",
                     tr("timeout {s:g} s per call").format(s=source["timeout_s"])]
            for part in ("env", "headers"):
                if source["config"].get(part):
                    lines.append(f"{part}: " + ", ".join(f"{_esc(k)}={v}" for k, v in source["config"][part].items()))
            if source["error"]:
                danger = colour("danger")
                lines.append(f"<span style='color:{danger}'>{_esc(source['error'])}</span>")
            self.details.setText("<br>".join(lines))
        else:
            self.details.setText(tr("Built-in tools need no server: the date and time, a calculator, and searches of "
                                    "your documents and memory (when they are on)."))
        text = source.get("stderr") or ""
        if self.log_view.toPlainText() != text:
            self.log_view.setPlainText(text)
            self.log_view.moveCursor(self.log_view.textCursor().MoveOperation.End)

    # ---- acting (on the "tools" thread; the snapshot follows)
    def _do(self, op, done_text: str = "") -> None:
        box = self.engine.toolbox
        if box is None or self.runner.closed:
            return
        self.runner.run(lambda: op(box), lambda _r: (self.status.setText(done_text), self.refresh()),
                        lambda exc: (self.status.setText(str(exc)), self.refresh()))

    def _item_changed(self, item: QTreeWidgetItem, column: int) -> None:
        key = item.data(0, Qt.UserRole)
        if column != 0 or not key or not key[1]:
            return
        on = item.checkState(0) == Qt.Checked
        self._do(lambda box: box.set_tool_enabled(f"{key[0]}/{key[1]}", on))

    def set_tool_enabled(self, source: str, tool: str, on: bool) -> None:
        """As the checkbox does (tests and automation)."""
        self._do(lambda box: box.set_tool_enabled(f"{source}/{tool}", on))

    def _restart(self) -> None:
        if self._selected:
            name = self._selected[0]
            self.status.setText(tr("Starting {name}…").format(name=name))
            self._do(lambda box: box.restart(name), tr("{name} started").format(name=name))

    def _switch_server(self) -> None:
        if self._selected:
            name = self._selected[0]
            source, _ = self._find(name)
            on = source is not None and source["state"] == "disabled"
            self._do(lambda box: box.set_server_enabled(name, on))

    def _revoke(self) -> None:
        if self._selected and self._selected[1]:
            key = "/".join(self._selected)
            self._do(lambda box: box.revoke(key), tr("{key} asks again before each call").format(key=key))

    def reload(self) -> None:
        def read(box):
            problems = box.reload()
            return problems

        box = self.engine.toolbox
        if box is None:
            return
        self.runner.run(lambda: read(box), lambda problems: (self.status.setText(
            "\n".join(problems) if problems else tr("mcp.json read")), self.refresh()),
            lambda exc: self.status.setText(str(exc)))

    def _import_menu(self) -> None:
        menu = QMenu(self)
        for app, path in known_mcp_configs():
            menu.addAction(tr("From {app}").format(app=app), lambda p=path: self.import_from(p))
        menu.addAction(tr("From a file…"), self._import_file)
        menu.exec(self.import_button.mapToGlobal(self.import_button.rect().bottomLeft()))

    def _import_file(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, tr("Import MCP servers"), str(Path.home()), "JSON (*.json)")
        if path:
            self.import_from(Path(path))

    def import_from(self, path: Path) -> None:
        box = self.engine.toolbox
        if box is None:
            return

        def said(report) -> str:
            parts = []
            if report.added:
                parts.append(tr("Added: {names}").format(names=", ".join(report.added)))
            if report.skipped:
                parts.append(tr("Skipped: {names}").format(names="; ".join(report.skipped)))
            parts += report.problems
            return "\n".join(parts) or tr("Nothing to import")

        def failed(exc: BaseException) -> None:
            self.status.setText(str(exc) if isinstance(exc, (McpConfigError, OSError)) else repr(exc))

        self.runner.run(lambda: box.import_config(path), lambda report: (self.status.setText(said(report)),
                                                                         self.refresh()), failed)

    def _open_config(self) -> None:
        path = mcp_config_path()
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text('{\n  "mcpServers": {}\n}\n', encoding="utf-8")
        QDesktopServices.openUrl(QUrl.fromLocalFile(str(path)))

    def close_work(self) -> None:
        """The window closes: the timer stops and the "tools" thread ends."""
        self._timer.stop()
        self.runner.close()


def _shape(sources: list[dict]) -> list:
    return [(s["name"], s["state"], s["error"], [(t["name"], t["enabled"], t["always"], t["tokens"]) for t in s["tools"]])
            for s in sources]


def _esc(text: str) -> str:
    import html

    return html.escape(str(text))
