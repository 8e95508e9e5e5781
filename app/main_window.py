"""The main window: conversations on the left; the chat in the middle, under its top bar; the
gauges folded into the top bar or on the right. Its parts are the mixins in app/window_*.py.
Engine calls go to `EngineWorker`, which runs them on its thread; results come back to this
window's methods on the GUI thread, the only thread that touches widgets."""

from __future__ import annotations

import logging

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (QHBoxLayout, QLabel, QMainWindow, QMessageBox, QProgressBar,
                               QSizePolicy, QSplitter, QVBoxLayout, QWidget)

from app.a11y import announce
from app.api_server import ApiServerControl
from app.chat_view import ChatView
from app.chips import build_chips
from app.composer import Composer
from app.documents_worker import DocumentsWorker
from app.empty_state import EmptyState
from app.engine_worker import TURN_ERRORS, EngineWorker, said
from app.gauges import GaugePanel
from app.i18n import tr
from app.overflow import ask_overflow
from app.pages import Pages
from app.rail import NavRail
from app.render import answered_by, model_label
from app.sidebar import ChatSidebar
from app.shortcuts import install as install_shortcuts
from app.theme import set_tone
from app.top_bar import TopBar
from app.tool_approval import ApprovalDialog
from app.window_attachments import WindowAttachments, attaching
from app.window_chats import WindowChats
from app.window_images import WindowImages
from app.window_panels import WindowPanels
from app.window_presets import WindowPresets
from app.window_states import WindowStates
from app.window_messages import WindowMessages
from app.window_tools import WindowTools
from engine.api import MessageTooLong, Presets, Settings

log = logging.getLogger(__name__)


class MainWindow(WindowPanels, WindowChats, WindowMessages, WindowTools, WindowPresets, WindowStates,
                 WindowAttachments, WindowImages, QMainWindow):
    def __init__(self, worker: EngineWorker | None = None, temperature: float = 0.7, max_tokens: int = 512):
        super().__init__()
        self.setWindowTitle(tr("Offline Assistant"))
        self.resize(1100, 720)
        self.temperature, self.max_tokens = temperature, max_tokens
        self.conversation_id: int | None = None
        self._titles: dict[int, str] = {}  # the chat list's titles, for the top bar
        self.busy = False
        self.sidebar_folded = False  # the chat list folded away (Ctrl+B)
        self.engine_ready = False
        self._pending: tuple[str, str, list] | None = None  # a first message waiting for its new chat
        self.editing: int | bool = False  # the composer holds an edit of this user message (True: the last)
        self.branch_after: int | None = None  # the answer the next message follows (Branch from here)
        # (text, route, fork) in flight, fork being send's after= / replacing=: MessageTooLong gives it back
        self._sent: tuple[str, str, dict] | None = None
        self.too_long_dialog: QMessageBox | None = None
        self.last_done: dict | None = None  # the latest finished turn (its text and stats)
        self.engine_error: str | None = None  # why the engine could not start
        self.documents_panel = None  # app/documents_panel.py, made when first opened
        self.tools_panel = None  # app/tools_panel.py, made when first opened
        self.approval: ApprovalDialog | None = None  # the tool call waiting for the user's answer
        self.presets = Presets()  # presets.json; a chat's preset shapes its prompt, tier, documents and tools
        self.chat_preset = self.presets.default()  # the shown chat's (or the next new chat's)
        self.presets_dialog = None
        self.worker = worker or EngineWorker()
        self.docs_worker = DocumentsWorker(self.worker)

        side = self._build_sidebar()
        center = self._build_center()
        self.rail = NavRail()
        self.settings_button, self.models_button = self.rail.buttons["settings"], self.rail.buttons["models"]
        self.rail.settings.connect(self.open_settings)
        self.rail.models.connect(self.open_models)
        self.pages = Pages(center, self.rail)
        self.pages.makers.update(documents=self._make_documents, tools=self._make_tools)
        self.pages.shown.connect(self._page_shown)
        self.api_server = ApiServerControl(self.worker, self._on_api_state, self)  # serves while server.enabled is on
        self.gauges = GaugePanel(self.worker.status)
        self.gauges.on_summary = self.top_bar.set_summary
        self.gauges.setVisible(self.top_bar.toggle.isChecked())
        self.top_bar.sig_resources.connect(self._show_resources)
        self.top_bar.fold.clicked.connect(self.toggle_sidebar)
        self.top_bar.sig_preset.connect(self.choose_preset)
        self.top_bar.sig_edit_presets.connect(self.open_presets)
        self._show_presets()
        splitter = QSplitter(Qt.Horizontal)
        splitter.addWidget(side)
        splitter.addWidget(self.pages)
        splitter.addWidget(self.gauges)
        splitter.setStretchFactor(1, 1)  # the main area takes what the window gains; the chat list keeps its width
        splitter.setCollapsible(1, False)
        splitter.setSizes([side.width(), 640, 260])
        root = QWidget()
        row = QHBoxLayout(root)
        row.setContentsMargins(0, 0, 0, 0)
        row.setSpacing(0)
        row.addWidget(self.rail)
        row.addWidget(splitter, 1)
        self.setCentralWidget(root)
        self._name_widgets()
        self.setup_images()
        self.worker.on_notice = self.status_label.setText
        self.worker.on_conversations = self._on_conversations
        self.worker.on_approval = self._on_approval
        self.worker.on_approval_ended = self._end_approval
        self.worker.on_tool = self._on_tool
        self.worker.tokens.connect(self._on_tokens)
        self.worker.thinking.connect(self._on_thinking)
        self.shortcuts = install_shortcuts(self)
        self.worker.start(self._on_ready, self._on_failed)  # the engine thread loads; the window shows now

    def _build_sidebar(self) -> ChatSidebar:
        """The chat list (app/sidebar.py): its widgets keep their names here, tests and the window use them."""
        side = self.sidebar = ChatSidebar(lambda: self.busy)
        self.search, self.chat_list = side.search, side.chat_list
        self.new_button = side.new_button
        self.new_button.clicked.connect(self.new_chat)
        side.selected.connect(self._select)
        side.rename.connect(self.rename_chat)
        side.pin.connect(self.pin_chat)
        side.export.connect(self.export_chat)
        side.delete.connect(self.delete_chat)
        side.searched.connect(lambda query: self.worker.search(query, side.show_matches))
        return side

    def _build_center(self) -> QWidget:
        """The chat: banner, messages, the confidence warning, actions, composer, progress, status."""
        self.banner = QLabel("")
        self.banner.setWordWrap(True)
        set_tone(self.banner, "notice")
        self.banner.hide()
        self.status_label = QLabel(tr("Loading the model…"))
        # A long line (a model's path) is cut at the window's edge instead of widening the window.
        self.status_label.setSizePolicy(QSizePolicy.Ignored, QSizePolicy.Preferred)
        self.progress = QProgressBar()  # indeterminate while the model loads or a prompt is read
        self.progress.setRange(0, 0)
        self.progress.setMaximumHeight(6)
        self.progress.setTextVisible(False)
        self.view = ChatView()
        self.view.sig_notice.connect(self.status_label.setText)  # a cited file that could not be opened
        self.view.sig_action.connect(self.on_message_action)
        self.view.sig_branch.connect(self.switch_branch)
        self.composer = Composer(self.worker.count_tokens)
        self.composer.send.connect(self.send_message)
        self.composer.stop.connect(self.stop)
        self.composer.files.connect(self.attach_files)  # dropped or pasted files
        self.composer.edit_last.connect(self.edit_last)  # Up in an empty message box
        build_chips(self)
        self._update_actions()
        self.composer.set_busy(True, stoppable=False)  # until the engine is ready
        mode = Settings.shared().get("router.mode")  # the settings' routing mode: a new chat's default
        self.composer.route.setCurrentIndex(max(0, self.composer.route.findData(mode)))
        self.confidence_warning = QLabel("")
        self.confidence_warning.setWordWrap(True)
        set_tone(self.confidence_warning, "notice")
        self.confidence_warning.hide()
        self.top_bar = TopBar(bool(Settings.shared().get("ui.resources_panel")))
        self.top_bar.add_picker(self.composer.route)
        self.composer.route.activated.connect(self.choose_route)
        center = QWidget()
        center.setObjectName("chatPage")
        center.setAttribute(Qt.WA_StyledBackground)  # a plain QWidget paints a stylesheet background only so
        layout = QVBoxLayout(center)
        layout.addWidget(self.top_bar)
        composer_row = QHBoxLayout()  # the composer under the reading column, as wide as it
        composer_row.addWidget(self.composer)
        self.view.sig_column.connect(lambda column: composer_row.setContentsMargins(*self.view.column_sides(), 0))
        for part in (self.banner, self.view, self.confidence_warning, composer_row, self.progress, self.status_label):
            if part is composer_row:
                layout.addLayout(part)
            else:
                layout.addWidget(part, 1 if part is self.view else 0)
        self.empty = EmptyState("emptyState")  # no chats yet, an empty chat, or no engine: what to do next
        self.empty.hide()
        layout.insertWidget(layout.indexOf(self.view) + 1, self.empty, 1)
        self.view.sig_empty.connect(lambda _empty: self._update_empty())
        self.welcome = self._welcome(layout)  # first start: in the empty chat's place
        return center

    def _name_widgets(self) -> None:
        """Stable objectNames: tests and automation find widgets by these."""
        for name, widget in (("conversationList", self.chat_list), ("newConversationButton", self.new_button),
                             ("searchBox", self.search), ("chatView", self.view), ("composer", self.composer),
                             ("sendButton", self.composer.send_button),
                             ("routeOverride", self.composer.route),
                             ("vramGauge", self.gauges.vram), ("ramGauge", self.gauges.ram_app),
                             ("kvGauge", self.gauges.kv_box), ("contextLevel", self.gauges.water_bar),
                             ("confidenceWarning", self.confidence_warning), ("settingsButton", self.settings_button),
                             ("modelManagerButton", self.models_button), ("statusLine", self.status_label),
                             ("errorBanner", self.banner), ("progressBar", self.progress)):
            widget.setObjectName(name)
        self._describe_widgets()

    # ---- engine events
    def _on_ready(self, info: dict) -> None:
        self.engine_ready = True
        self.progress.hide()
        demo = tr(" (demo models: they prove the mechanisms, not answer quality)") if info.get("demo") else ""
        self.status_label.setText(tr("Ready: {tiers}").format(
            tiers=", ".join(f"{k} {model_label(v)}" for k, v in info["tiers"].items())) + demo)
        if info.get("degraded"):  # one tier stands in for a broken one: usable, but the user must know
            self.show_banner(info["degraded"])
        self.composer.set_busy(False)
        self.composer.set_tiers(info["tiers"])
        self.on_vision(info)  # which tiers read images: a message with images is sent to one
        self._update_empty()
        self.docs_toggle.setEnabled(bool(info.get("documents")))
        self.api_server.apply()  # off by default: nothing listens unless server.enabled is on

    def _on_failed(self, message: str) -> None:
        self.engine_error = message
        self.progress.hide()
        self.show_banner(tr("The model could not be loaded: {why}").format(why=message))
        self.status_label.setText(tr("Not ready"))
        self._update_empty()

    def _on_conversations(self, rows: list[dict]) -> None:
        self.sidebar.set_conversations(rows, self.conversation_id)
        self._titles = {r["id"]: r["title"] for r in rows}
        self.top_bar.set_title(self._titles.get(self.conversation_id))
        self._update_empty()

    def _on_created(self, cid: int) -> None:
        self.conversation_id = cid
        self.editing, self.branch_after = False, None  # they were the other chat's
        self.top_bar.set_title(None)
        self.top_bar.set_model()
        self._preset_switches(self.chat_preset)
        self.show_route(cid, self.new_chat_route())
        self.docs_toggle.set_conversation(cid, new=True)  # queued before the first message: it applies to it
        self.think_toggle.take(cid)
        self.view.set_messages([])
        self.gauges.conversation_id = cid
        self.gauges.set_water_level(None)
        pending, self._pending = self._pending, None
        if pending is not None:
            self._send_to(cid, *pending)
        else:
            self._set_busy(False)

    def _load(self, cid: int) -> None:
        self.worker.call(lambda a: a.transcript(cid), lambda messages: self._on_history(cid, messages))
        self.worker.call(lambda a: a.conversation_think(cid), lambda on: self.think_toggle.show_state(cid, on))

    def _on_history(self, cid: int, messages: list[dict]) -> None:
        if cid == self.conversation_id:
            self.view.set_messages([dict(m, reasoning=m.get("reasoning") or "", stats=dict(m["stats"] or {}))
                                    for m in messages])
            last = next((m["stats"] for m in reversed(messages) if m["role"] == "assistant" and m["stats"]), {})
            self.top_bar.set_model(last.get("level"), last.get("model"))
            self.gauges.set_water_level(last.get("context"))
            self._update_actions()

    def _on_tokens(self, cid: int, text: str) -> None:
        self.progress.hide()  # the first token ends the wait
        if cid == self.conversation_id:
            self.view.append_tokens(text)

    def _on_thinking(self, cid: int, text: str) -> None:
        self.progress.hide()
        if cid == self.conversation_id:
            self.view.append_thinking(text)

    def _on_answer(self, cid: int, done: dict) -> None:
        if done.get("tool_calls") and not done["superseded"]:  # a round of calls: the answer goes on
            if cid == self.conversation_id:
                self.view.round_done(done)
            self.status_label.setText(tr("Calling tools…"))
            return
        if done["superseded"]:  # a low-confidence answer: asked again on L2
            if cid == self.conversation_id:
                self.view.restart_answer()
                self.status_label.setText(tr("Low confidence: asking L2 instead…"))
            return
        self.last_done = done
        self._set_busy(False)
        gpu_note = (done["stats"].get("offload") or {}).get("note")
        if gpu_note:  # the model is not on the GPU it was planned for: say why, once per answer
            self.show_banner(tr("GPU: {why}").format(why=gpu_note))
        if cid == self.conversation_id:
            self.view.finish(done)
            self.top_bar.set_model(done.get("level"), done.get("model"))
            announce(self.view, done["text"] or self.view.last_answer())  # polite: after what is being read
            self._show_confidence(done["stats"])
            context = done["stats"].get("context")
            self.gauges.set_water_level(context)
            if context:
                self.composer.set_context(context["used"], context["n_ctx"])
        self.status_label.setText(answered_by(done))
        self._update_actions()
        self.adopt_ids(cid)

    def _on_turn_error(self, cid: int, exc: BaseException) -> None:
        if isinstance(exc, MessageTooLong):
            self._on_too_long(cid, exc)
            return
        message = said(exc, TURN_ERRORS)
        self._set_busy(False)
        self.view.fail(message)
        self.show_banner(message)
        self._update_actions()
        self.after_failed_turn()

    # ---- a message too long for the context: the user chooses how it is shortened, or keeps it
    def _on_too_long(self, cid: int, exc: MessageTooLong) -> None:
        self._set_busy(False)
        self.view.drop_last_turn()  # nothing was stored; the bubble comes back if the user sends it
        text, route, fork = self._sent or ("", "auto", {})
        self.too_long_dialog = ask_overflow(self, exc, lambda overflow: self._overflow_chosen(
            cid, text, route, fork, overflow))

    def _overflow_chosen(self, cid: int, text: str, route: str, fork: dict, overflow: str | None) -> None:
        self.too_long_dialog = None
        if overflow is None:  # Cancel: the text is the user's again, in the composer
            self.composer.edit.setPlainText(text)
            self.reattach_images(self.sent_images)
            if "replacing" in fork:
                self.editing = fork["replacing"] or True
            if fork:
                self._load(cid)  # the turns it was to replace, or follow, are all still there
            self.status_label.setText(tr("Not sent: the message is too long for the context"))
            return
        self.hide_banner()
        self.view.add_user(text, self.sent_images)
        self._set_busy(True)
        self.status_label.setText(tr("Summarising the message…") if overflow == "summarise" else tr("Thinking…"))
        self._sent = (text, route, fork)
        self._turn(cid, self._start(cid, text, route, fork, overflow=overflow))

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
        files, self.composer.sent_files = self.composer.sent_files, []  # large attachments: indexed for the chat
        self.sent_images, self.composer.sent_images = [i.digest for i in self.composer.sent_images], []
        if self.conversation_id is None:
            # A chat is made on the engine thread first; `_on_created` sends the message into it.
            self._pending = (text, route, files)
            self._new_conversation()
            self._set_busy(True)
            return
        self._send_to(self.conversation_id, text, route, files, self._fork())

    def regenerate(self) -> None:
        if not self.engine_ready or self.busy or self.conversation_id is None or not self.view.ends_with_answer():
            return
        self.cancel_branch()
        self._sent = None  # no message of the user's in flight
        self.view.restart_answer()
        self._set_busy(True)
        cid, route = self.conversation_id, self.composer.route.currentData()
        self._turn(cid, lambda a, p, cancel, tools: a.regenerate(cid, p, cancel=cancel, route=route, tools=tools))

    def edit_last(self) -> None:
        """Put the last user message in the composer; sending it replaces that turn."""
        at = self.view.last_user_index()
        if self.busy or at is None:
            return
        self.edit_message(at)

    def copy_answer(self) -> None:
        from PySide6.QtGui import QGuiApplication

        QGuiApplication.clipboard().setText(self.view.last_answer())

    def new_chat(self) -> None:
        """Start a new conversation from the default preset; sending waits until it exists (on the
        engine thread)."""
        if not self.engine_ready or self.busy:
            return
        self.chat_preset = self.presets.default()
        self._show_presets()
        self._set_busy(True)
        self._new_conversation()

    def _new_conversation(self) -> None:
        """A chat is made on the engine thread, with its preset; `_on_created` takes it from there.
        Its route is the preset's tier, or the settings' routing mode when the preset leaves it to Auto."""
        preset, route = self.chat_preset, self.new_chat_route()

        def make(a) -> int:
            cid = a.new_conversation("")
            a.apply_preset(cid, preset)
            if route != preset.tier:
                a.set_conversation_route(cid, route)
            return cid

        self.worker.call(make, self._on_created, refresh=True)

    def _turn(self, cid: int, start, files: list[str] = ()) -> None:
        """One turn on the engine thread (`start(assistant, params, cancel, tools)` yields its
        events), at the chat's preset's temperature (None: the window's), with the tools when the
        Tools switch is on, whichever action started it. `files`: large attachments, indexed into
        the chat's own collection first (the answer cites them)."""
        if files:
            self.status_label.setText(tr("Indexing the attached files…"))
            start = attaching(cid, list(files), start)
        t = self.chat_preset.temperature
        self.worker.turn(cid, start, self.temperature if t is None else t, self.max_tokens, self._on_answer,
                         self._on_turn_error, think=self.think_toggle.isChecked(), tools=self.tools_toggle.isChecked())

    def _send_to(self, cid: int, text: str, route: str, files: list[str] = (), fork: dict | None = None) -> None:
        self.conversation_id = cid
        self.hide_banner()
        self.confidence_warning.hide()
        self.close_welcome()  # chatting with the demo models: out of the way for this session
        self.view.add_user(text, self.sent_images)
        self._set_busy(True)
        self.status_label.setText(tr("Thinking…"))
        self._sent = (text, route, fork or {})
        self._turn(cid, self._start(cid, text, route, fork or {}), files)

    def stop(self) -> None:
        if self.pages.current_key() != "chats":  # Esc on a page: back to the chat
            self.open_chats()
            return
        if not self.busy and self.cancel_branch():  # Esc before a branch's first message: back
            return
        self.worker.stop()  # a threading.Event: safe from this thread
        self._end_approval()  # a call waiting for approval is denied

    def _set_busy(self, busy: bool) -> None:
        self.busy = busy
        self.progress.setVisible(busy)
        self.composer.set_busy(busy)
        self.chat_list.setEnabled(not busy)
        self.new_button.setEnabled(not busy)
        self._update_actions()

    def _update_actions(self) -> None:
        """A message's actions that start a turn or change the chat: only while no turn runs."""
        self.view.set_idle(self.engine_ready and not self.busy)

    def _select(self, cid: int) -> None:
        if self.busy or cid == self.conversation_id:
            return
        self.conversation_id = cid
        self.editing, self.branch_after = False, None  # they were the other chat's
        self.top_bar.set_title(self._titles.get(cid))
        self.top_bar.set_model()
        self.worker.call(lambda a: a.conversation_preset(cid), lambda pid: self._show_chat_preset(cid, pid))
        self.worker.call(lambda a: a.conversation_route(cid), lambda route: self.show_route(cid, route))
        self.gauges.conversation_id = cid
        self.docs_toggle.set_conversation(cid)
        self._load(cid)

    def show_banner(self, message: str) -> None:
        self.banner.setText(message)
        self.banner.show()

    def hide_banner(self) -> None:
        self.banner.hide()

    # ---- shutdown
    def closeEvent(self, event):  # noqa: N802 - Qt's name
        self.worker.stop()
        if self.welcome is not None:
            self.welcome.close_work()  # a download in progress stops; its thread is joined
        self.gauges.timer.stop()
        if self.documents_panel is not None:
            self.documents_panel.close_work()
        self._end_approval()
        self.close_attachments()
        if self.tools_panel is not None:
            self.tools_panel.close_work()
        self.api_server.close()  # before the engine: API turns cancelled, the port closed
        self.worker.close()  # waits until the engine saved its state and closed
        super().closeEvent(event)

    def confirm(self, title: str, text: str) -> bool:
        return QMessageBox.question(self, title, text) == QMessageBox.Yes

