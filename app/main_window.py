"""The main window: conversations on the left, the chat in the middle, gauges on the right.

Engine calls go to `EngineWorker` on its QThread through queued signals; results come back as
signals; only this (GUI) thread touches widgets."""

from __future__ import annotations

import json
import logging

from PySide6.QtCore import Qt, QThread, Signal
from PySide6.QtWidgets import (QHBoxLayout, QLabel, QMainWindow, QMessageBox, QProgressBar, QPushButton, QSplitter,
                               QVBoxLayout, QWidget)

from app.api_server import ApiServerControl
from app.chat_view import ChatView
from app.composer import Composer
from app.documents_toggle import DocumentsToggle
from app.documents_worker import DocumentsWorker
from app.engine_worker import EngineWorker
from app.gauges import GaugePanel
from app.i18n import tr
from app.render import answered_by
from app.sidebar import ChatSidebar
from engine.api import Settings

log = logging.getLogger(__name__)


class MainWindow(QMainWindow):
    # Requests to the engine thread (queued: their slots run there).
    _start = Signal()
    _refresh = Signal()
    _new = Signal(str)
    _load = Signal(int)
    _send = Signal(int, str, str, float, int)
    _regenerate = Signal(int, str, float, int)
    _resend = Signal(int, str, str, float, int)
    _send_overflow = Signal(int, str, str, float, int, str, bool)  # a too-long message, with the user's choice
    _shutdown = Signal()
    _forget_all = Signal()
    _apply_settings = Signal(str)  # JSON list of changed setting keys
    _rename = Signal(int, str)
    _delete = Signal(int)
    _export = Signal(int, str, str)

    def __init__(self, worker: EngineWorker | None = None, temperature: float = 0.7, max_tokens: int = 512):
        super().__init__()
        self.setWindowTitle(tr("Offline Assistant"))
        self.resize(1100, 720)
        self.temperature, self.max_tokens = temperature, max_tokens
        self.conversation_id: int | None = None
        self.busy = False
        self.engine_ready = False
        self._pending: tuple[str, str] | None = None  # a first message waiting for its new chat
        self.editing = False  # the composer holds an edit of the last user message
        self._sent: tuple[str, str, bool] | None = None  # (text, route, edit) in flight: MessageTooLong gives it back
        self.too_long_dialog: QMessageBox | None = None
        self.last_done: dict | None = None  # the latest finished turn (its text and stats)
        self.engine_error: str | None = None  # why the engine could not start
        self.documents_panel = None  # app/documents_panel.py, made when first opened

        self.banner = QLabel("")
        self.banner.setWordWrap(True)
        self.banner.setStyleSheet("padding:6px;background:#fff4ce;color:#5c4400")
        self.banner.hide()
        self.status_label = QLabel(tr("Loading the model…"))
        self.progress = QProgressBar()  # indeterminate while the model loads or a prompt is read
        self.progress.setRange(0, 0)
        self.progress.setMaximumHeight(6)
        self.progress.setTextVisible(False)

        # sidebar (app/sidebar.py): its widgets keep their names here, tests and the window use them
        side = self.sidebar = ChatSidebar(lambda: self.busy)
        self.search, self.chat_list = side.search, side.chat_list
        self.new_button, self.settings_button, self.models_button = \
            side.new_button, side.settings_button, side.models_button
        side.documents_button.clicked.connect(self.open_documents)
        self.new_button.clicked.connect(self.new_chat)
        self.settings_button.clicked.connect(self.open_settings)
        self.models_button.clicked.connect(self.open_models)
        side.selected.connect(self._select)
        side.rename.connect(self.rename_chat)
        side.export.connect(self.export_chat)
        side.delete.connect(self.delete_chat)

        # chat
        self.view = ChatView()
        self.view.sig_notice.connect(self.status_label.setText)  # a cited file that could not be opened
        self.worker = worker or EngineWorker()
        self.docs_worker = DocumentsWorker(self.worker)  # its child: on the engine thread with it
        self.composer = Composer(self.worker.count_tokens)
        self.composer.send.connect(self.send_message)
        self.composer.stop.connect(self.stop)
        self.regen_button = QPushButton(tr("Regenerate"))
        self.regen_button.clicked.connect(self.regenerate)
        self.edit_button = QPushButton(tr("Edit last message"))
        self.edit_button.clicked.connect(self.edit_last)
        self.copy_button = QPushButton(tr("Copy answer"))
        self.copy_button.clicked.connect(self.copy_answer)
        actions = QHBoxLayout()
        for b in (self.regen_button, self.edit_button, self.copy_button):
            actions.addWidget(b)
        actions.addStretch(1)
        self.docs_toggle = DocumentsToggle()  # "Use my documents" for the chat shown
        self.docs_toggle.setEnabled(False)  # until the engine says documents are on
        self._update_docs_note()
        actions.addWidget(self.docs_toggle)
        self._update_actions()
        self.composer.set_busy(True)  # until the engine is ready
        mode = Settings.shared().get("router.mode")  # the settings' routing mode is the composer's default
        self.composer.route.setCurrentIndex(max(0, self.composer.route.findData(mode)))
        center = QWidget()
        center_layout = QVBoxLayout(center)
        center_layout.addWidget(self.banner)
        center_layout.addWidget(self.view, 1)
        self.confidence_warning = QLabel("")
        self.confidence_warning.setWordWrap(True)
        self.confidence_warning.setStyleSheet("padding:4px;background:#fff1d6;color:#8a4b00;border-radius:4px")
        self.confidence_warning.hide()
        center_layout.addWidget(self.confidence_warning)
        center_layout.addLayout(actions)
        center_layout.addWidget(self.composer)
        center_layout.addWidget(self.progress)
        center_layout.addWidget(self.status_label)
        self.welcome = self._welcome(center_layout)  # first start: in the empty chat's place

        # engine thread
        self.thread = QThread(self)
        self.thread.setObjectName("engine")
        self.worker.moveToThread(self.thread)
        self.api_server = ApiServerControl(self.worker, self)  # serves this engine while server.enabled is on
        self.api_server.sig_state.connect(self._on_api_state)
        self.gauges = GaugePanel(self.worker.status)

        splitter = QSplitter(Qt.Horizontal)
        splitter.addWidget(side)
        splitter.addWidget(center)
        splitter.addWidget(self.gauges)
        splitter.setSizes([220, 640, 260])
        root = QWidget()
        QHBoxLayout(root).addWidget(splitter)
        self.setCentralWidget(root)
        self._name_widgets()

        w = self.worker
        self._start.connect(w.start)
        self._refresh.connect(w.refresh)
        self._new.connect(w.new_conversation)
        self._load.connect(w.load)
        self._send.connect(w.send)
        self._regenerate.connect(w.regenerate)
        self._resend.connect(w.resend_edited)
        self._send_overflow.connect(w.send_overflow)
        w.too_long.connect(self._on_too_long)
        self._shutdown.connect(w.shutdown, Qt.BlockingQueuedConnection)
        self._forget_all.connect(w.forget_all_memories)
        self._apply_settings.connect(w.apply_settings)
        self._rename.connect(w.rename)
        self._delete.connect(w.delete)
        self._export.connect(w.export)
        side.searched.connect(w.search)
        self.docs_toggle.sig_set.connect(self.docs_worker.set_conversation)
        self.docs_toggle.sig_query.connect(self.docs_worker.get_conversation)
        self.docs_worker.conversation_docs.connect(self.docs_toggle.show_state)
        self.docs_worker.notice.connect(self.status_label.setText)
        w.found.connect(side.show_matches)  # bound slots of GUI-thread objects: queued, never a lambda
        w.notice.connect(self.status_label.setText)
        w.settings_applied.connect(self._on_settings_applied)
        w.ready.connect(self._on_ready)
        w.failed.connect(self._on_failed)
        w.conversations.connect(self._on_conversations)
        w.history.connect(self._on_history)
        w.tokens.connect(self._on_tokens)
        w.superseded.connect(self._on_superseded)
        w.done.connect(self._on_done)
        w.turn_failed.connect(self._on_turn_failed)
        w.created.connect(self._on_created)
        self.thread.start()
        self._start.emit()

    def _name_widgets(self) -> None:
        """Stable objectNames: tests and automation find widgets by these."""
        for name, widget in (("conversationList", self.chat_list), ("newConversationButton", self.new_button),
                             ("searchBox", self.search), ("chatView", self.view), ("composer", self.composer),
                             ("sendButton", self.composer.send_button), ("stopButton", self.composer.stop_button),
                             ("regenerateButton", self.regen_button), ("routeOverride", self.composer.route),
                             ("vramGauge", self.gauges.vram), ("ramGauge", self.gauges.ram_app),
                             ("kvGauge", self.gauges.kv_box), ("contextLevel", self.gauges.water_bar),
                             ("confidenceWarning", self.confidence_warning), ("settingsButton", self.settings_button),
                             ("modelManagerButton", self.models_button), ("editButton", self.edit_button),
                             ("copyButton", self.copy_button), ("statusLine", self.status_label),
                             ("errorBanner", self.banner), ("progressBar", self.progress)):
            widget.setObjectName(name)

    # ---- engine events
    def _on_ready(self, payload: str) -> None:
        info = json.loads(payload)
        self.engine_ready = True
        self.progress.hide()
        demo = tr(" (demo models: they prove the mechanisms, not answer quality)") if info.get("demo") else ""
        self.status_label.setText(tr("Ready: {tiers}").format(
            tiers=", ".join(f"{k} {v}" for k, v in info["tiers"].items())) + demo)
        if info.get("degraded"):  # one tier stands in for a broken one: usable, but the user must know
            self.show_banner(info["degraded"])
        self.composer.set_busy(False)
        self.docs_toggle.setEnabled(bool(info.get("documents")))
        self.api_server.apply()  # off by default: nothing listens unless server.enabled is on

    def _on_failed(self, message: str) -> None:
        self.engine_error = message
        self.progress.hide()
        self.show_banner(tr("The model could not be loaded: {why}").format(why=message))
        self.status_label.setText(tr("Not ready"))

    def _on_conversations(self, payload: str) -> None:
        self.sidebar.set_conversations(json.loads(payload), self.conversation_id)

    def _on_created(self, cid: int) -> None:
        self.conversation_id = cid
        self.docs_toggle.set_conversation(cid, new=True)  # queued before the first message: it applies to it
        self.view.set_messages([])
        self.gauges.conversation_id = cid
        self.gauges.set_water_level(None)
        pending, self._pending = self._pending, None
        if pending is not None:
            self._send_to(cid, *pending)
        else:
            self._set_busy(False)

    def _on_history(self, cid: int, payload: str) -> None:
        messages = json.loads(payload)
        if cid == self.conversation_id:
            self.view.set_messages([{"role": m["role"], "content": m["content"],
                                     "stats": dict(m["stats"], model=(m["stats"] or {}).get("model")),
                                     "superseded": m["superseded"]} for m in messages])
            last = next((m["stats"] for m in reversed(messages) if m["role"] == "assistant" and m["stats"]), {})
            self.gauges.set_water_level(last.get("context"))
            self._update_actions()

    def _on_tokens(self, cid: int, text: str) -> None:
        self.progress.hide()  # the first token ends the wait
        if cid == self.conversation_id:
            self.view.append_tokens(text)

    def _on_superseded(self, cid: int, payload: str) -> None:
        if cid == self.conversation_id:
            self.view.restart_answer()
            self.status_label.setText(tr("Low confidence: asking L2 instead…"))

    def _on_done(self, cid: int, payload: str) -> None:
        done = self.last_done = json.loads(payload)
        self._set_busy(False)
        gpu_note = (done["stats"].get("offload") or {}).get("note")
        if gpu_note:  # the model is not on the GPU it was planned for: say why, once per answer
            self.show_banner(tr("GPU: {why}").format(why=gpu_note))
        if cid == self.conversation_id:
            self.view.finish(done)
            self._show_confidence(done["stats"])
            context = done["stats"].get("context")
            self.gauges.set_water_level(context)
            if context:
                self.composer.set_context(context["used"], context["n_ctx"])
        self.status_label.setText(answered_by(done))
        self._update_actions()

    def _on_turn_failed(self, cid: int, message: str) -> None:
        self._set_busy(False)
        self.view.fail(message)
        self.show_banner(message)
        self._update_actions()

    # ---- a message too long for the context: the user chooses how it is shortened, or keeps it
    def _on_too_long(self, cid: int, payload: str) -> None:
        info = json.loads(payload)
        self._set_busy(False)
        self.view.drop_last_turn()  # nothing was stored; the bubble comes back if the user sends it
        text, route, edit = self._sent or ("", "auto", False)
        approx = "~" if info.get("estimated") else ""
        box = QMessageBox(QMessageBox.Warning, tr("Message too long"), tr(
            "This message has {tokens} tokens; at most {fits} fit in the model's context of {n_ctx} tokens.").format(
            tokens=approx + str(info["tokens"]), fits=approx + str(info["fits"]), n_ctx=info["n_ctx"]), parent=self)
        box.setInformativeText(tr("Keep its beginning and end (the middle is cut), or have the model summarise it? "
                                  "The chat keeps your whole message either way."))
        box.setObjectName("messageTooLongDialog")
        head = box.addButton(tr("Keep head and tail"), QMessageBox.AcceptRole)
        summary = box.addButton(tr("Summarise it"), QMessageBox.AcceptRole)
        cancel = box.addButton(QMessageBox.Cancel)
        head.setObjectName("keepHeadTailButton")
        summary.setObjectName("summariseButton")
        cancel.setObjectName("cancelButton")
        choices = {head: "head_tail", summary: "summarise"}
        box.finished.connect(lambda _r: self._overflow_chosen(cid, text, route, edit, choices.get(box.clickedButton())))
        self.too_long_dialog = box
        box.open()

    def _overflow_chosen(self, cid: int, text: str, route: str, edit: bool, overflow: str | None) -> None:
        self.too_long_dialog = None
        if overflow is None:  # Cancel: the text is the user's again, in the composer
            self.composer.edit.setPlainText(text)
            self.editing = edit
            if edit:
                self._load.emit(cid)  # the turn it was to replace is still there
            self.status_label.setText(tr("Not sent: the message is too long for the context"))
            return
        self.hide_banner()
        self.view.add_user(text)
        self._set_busy(True)
        self.status_label.setText(tr("Summarising the message…") if overflow == "summarise" else tr("Thinking…"))
        self._sent = (text, route, edit)
        self._send_overflow.emit(cid, text, route, self.temperature, self.max_tokens, overflow, edit)

    def _show_confidence(self, stats: dict) -> None:
        """The flagged answer's warning with its weakest sentences (also inline in the bubble)."""
        conf = stats.get("confidence") or {}
        if not conf.get("low"):
            self.confidence_warning.hide()
            return
        weak = "; ".join(f"“{s['text'][:80]}”" for s in conf.get("weak_spans", [])[:2])
        self.confidence_warning.setText("⚠ " + tr("可能不准确 / may be inaccurate") +
                                        f" ({conf.get('geo_mean_prob', 0):.2f})" + (f": {weak}" if weak else ""))
        self.confidence_warning.show()

    # ---- user actions
    def send_message(self, text: str, route: str = "auto") -> None:
        if not self.engine_ready or self.busy:
            return
        if self.conversation_id is None:
            # A chat is made on the engine thread first; `_on_created` sends the message into it.
            self._pending = (text, route)
            self._new.emit("")
            self._set_busy(True)
            return
        if self.editing:
            self.editing = False
            self.view.drop_last_turn()
            self.hide_banner()
            self.view.add_user(text)
            self._set_busy(True)
            self._sent = (text, route, True)
            self._resend.emit(self.conversation_id, text, route, self.temperature, self.max_tokens)
            return
        self._send_to(self.conversation_id, text, route)

    def regenerate(self) -> None:
        if not self.engine_ready or self.busy or self.conversation_id is None or not self.view.ends_with_answer():
            return
        self.view.restart_answer()
        self._set_busy(True)
        self._regenerate.emit(self.conversation_id, self.composer.route.currentData(), self.temperature,
                              self.max_tokens)

    def edit_last(self) -> None:
        """Put the last user message in the composer; sending it replaces that turn."""
        text = self.view.last_user()
        if self.busy or text is None:
            return
        self.editing = True
        self.composer.edit.setPlainText(text)
        self.composer.edit.setFocus()
        self.status_label.setText(tr("Editing your last message: send to replace it"))

    def copy_answer(self) -> None:
        from PySide6.QtGui import QGuiApplication

        QGuiApplication.clipboard().setText(self.view.last_answer())

    def new_chat(self) -> None:
        """Start a new conversation; sending waits until it exists (on the engine thread)."""
        if not self.engine_ready or self.busy:
            return
        self._set_busy(True)
        self._new.emit("")

    def _send_to(self, cid: int, text: str, route: str) -> None:
        self.conversation_id = cid
        self.hide_banner()
        self.confidence_warning.hide()
        self.close_welcome()  # chatting with the demo models: out of the way for this session
        self.view.add_user(text)
        self._set_busy(True)
        self.status_label.setText(tr("Thinking…"))
        self._sent = (text, route, False)
        self._send.emit(cid, text, route, self.temperature, self.max_tokens)

    def stop(self) -> None:
        self.worker.stop()  # a threading.Event: safe from this thread

    def _set_busy(self, busy: bool) -> None:
        self.busy = busy
        self.progress.setVisible(busy)
        self.composer.set_busy(busy)
        self.chat_list.setEnabled(not busy)
        self.new_button.setEnabled(not busy)
        self._update_actions()

    def _update_actions(self) -> None:
        """Regenerate, Edit and Copy only when there is something to act on, and not mid-turn."""
        idle = self.engine_ready and not self.busy
        self.regen_button.setEnabled(idle and self.conversation_id is not None and self.view.ends_with_answer())
        self.edit_button.setEnabled(idle and self.view.last_user() is not None)
        self.copy_button.setEnabled(bool(self.view.last_answer()))

    def _select(self, cid: int) -> None:
        if self.busy or cid == self.conversation_id:
            return
        self.conversation_id = cid
        self.gauges.conversation_id = cid
        self.docs_toggle.set_conversation(cid)
        self._load.emit(cid)

    def show_banner(self, message: str) -> None:
        self.banner.setText(message)
        self.banner.show()

    def hide_banner(self) -> None:
        self.banner.hide()

    def rename_chat(self, cid: int, current: str, title: str | None = None) -> None:
        if title is None:
            from PySide6.QtWidgets import QInputDialog

            title, ok = QInputDialog.getText(self, tr("Rename chat"), tr("Title"), text=current)
            if not ok:
                return
        self._rename.emit(cid, title)

    def delete_chat(self, cid: int, title: str, confirmed: bool = False) -> None:
        if not confirmed and not self.confirm(tr("Delete chat"), tr("Delete “{title}” and everything remembered "
                                                                      "from it?").format(title=title)):
            return
        if cid == self.conversation_id:
            self.conversation_id = None
            self.docs_toggle.set_conversation(None)
            self.view.set_messages([])
            self.gauges.set_water_level(None)
            self._update_actions()
        self._delete.emit(cid)

    def export_chat(self, cid: int, fmt: str, path: str | None = None) -> None:
        if path is None:
            from PySide6.QtWidgets import QFileDialog

            filt = "Markdown (*.md)" if fmt == "md" else "JSON (*.json)"
            path, _ = QFileDialog.getSaveFileName(self, tr("Export chat"), f"chat-{cid}.{fmt}", filt)
            if not path:
                return
        self._export.emit(cid, path, fmt)

    # ---- the first-start welcome (app/welcome.py)
    def _welcome(self, layout):
        settings = Settings.shared()
        if settings.get("ui.welcome_done"):
            return None  # the usual start: the hub and download code is not even imported
        from app.welcome import WelcomePanel, welcome_needed

        if not welcome_needed(settings, getattr(self.worker, "model", None)):
            return None
        panel = WelcomePanel(settings, self)
        layout.insertWidget(layout.indexOf(self.view), panel, 1)
        self.view.hide()
        panel.sig_tiers_changed.connect(self._apply_settings)  # the engine switches tiers live
        panel.sig_dismissed.connect(self.close_welcome)
        return panel

    def close_welcome(self) -> None:
        if self.welcome is not None and not self.welcome.isHidden():
            self.welcome.hide()
            self.view.show()

    def open_models(self) -> None:
        from app.model_manager import ModelManagerDialog

        settings = Settings.shared()
        with settings.changes() as changed:
            ModelManagerDialog(settings, self).exec()
        if changed:  # "Use for L1/L2": the running engine switches (tiers are live settings)
            self._apply_settings.emit(json.dumps(sorted(set(changed))))

    def open_documents(self):
        """The Documents panel (non-modal: indexing goes on while the user chats); made once."""
        from app.documents_panel import DocumentsPanel

        if self.documents_panel is None:
            self.documents_panel = DocumentsPanel(self.docs_worker, self)
        self.documents_panel.show()
        self.documents_panel.raise_()
        return self.documents_panel

    def _update_docs_note(self) -> None:
        """Documents stay local when L3 is set up without docs.allow_remote: the toggle says so."""
        settings = Settings.shared()
        self.docs_toggle.set_remote_kept_off(bool(settings.get("l3.base_url")) and
                                             not settings.get("docs.allow_remote"))

    def open_settings(self) -> None:
        from app.settings_dialog import SettingsDialog
        from app.theme import apply_theme

        settings = Settings.shared()
        dialog = SettingsDialog(settings, self, server_status=self.api_server.describe())
        with settings.changes() as changed:
            accepted = dialog.exec()
        if accepted:
            apply_theme(settings.get("ui.theme"))
            self.composer.route.setCurrentIndex(max(0, self.composer.route.findData(settings.get("router.mode"))))
            self.view._cache.clear()
            self.view._render()
            self._update_docs_note()
        engine = [k for k in changed if not k.startswith("server.")]
        if engine:
            self._apply_settings.emit(json.dumps(engine))
        if self.engine_ready and (len(engine) < len(changed) or dialog.api_server.key_changed):
            self.api_server.apply(restart=True)  # the window's server follows server.* and the key now
        if dialog.forget_requested:
            self._forget_all.emit()

    def _on_api_state(self, payload: str) -> None:
        state = json.loads(payload)
        if state["error"]:
            self.show_banner(tr("The local API server could not start: {why}").format(why=state["error"]))
        elif state["running"]:
            self.status_label.setText(tr("Local API server at {url}").format(url=state["url"]))
        else:
            self.status_label.setText(tr("Local API server stopped"))

    def _on_settings_applied(self, later_json: str) -> None:
        later = json.loads(later_json)
        self.status_label.setText(tr("Settings applied") if not later else
                                  tr("Settings saved; these apply at the next start: {keys}").format(keys=", ".join(later)))

    # ---- shutdown
    def closeEvent(self, event):  # noqa: N802 - Qt's name
        self.worker.stop()
        if self.welcome is not None:
            self.welcome.close_work()  # a download in progress stops; its thread is joined
        self.gauges.timer.stop()
        if self.documents_panel is not None:
            self.documents_panel.close_work()
        self.api_server.close()  # before the engine: API turns cancelled, the port closed
        if self.thread.isRunning():
            self._shutdown.emit()  # blocks until the engine saved its state and closed
            self.thread.quit()
            self.thread.wait()
        super().closeEvent(event)

    def confirm(self, title: str, text: str) -> bool:
        return QMessageBox.question(self, title, text) == QMessageBox.Yes
