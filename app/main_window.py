"""The main window: conversations on the left; the chat in the middle, under its top bar; the
gauges folded into the top bar or on the right. Its parts are the mixins in app/window_*.py.
The chat's turns are `ChatController`'s (app/chat_controller.py, Qt-free): the window is a view
over it, and is its `ChatScreen`. Engine calls go to `EngineWorker`, which runs them on its
thread; results come back on the GUI thread, the only thread that touches widgets."""

from __future__ import annotations

import logging

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (QHBoxLayout, QLabel, QMainWindow, QMessageBox, QProgressBar,
                               QSizePolicy, QSplitter, QVBoxLayout, QWidget)

from app.a11y import announce
from app.api_server import ApiServerControl
from app.chat_controller import ChatController, TurnOptions
from app.chat_view import ChatView
from app.chips import build_chips
from app.composer import Composer
from app.documents_worker import DocumentsWorker
from app.empty_state import EmptyState
from app.engine_worker import EngineWorker
from app.gauges import GaugePanel
from app.i18n import tr
from app.intake import Intake
from app.overflow import ask_overflow
from app.pages import Pages
from app.rail import NavRail
from app.resources_popover import Resources
from app.render import answered_by, model_label
from app.sidebar import ChatSidebar
from app.shortcuts import ShortcutSheet, install as install_shortcuts
from app.theme import set_tone
from app.top_bar import TopBar
from app.transcript import Answer
from app.updates import UpdateBar, Updates
from app.window_chats import ChatListActions
from app.window_panels import Doors
from app.window_presets import ChatPresets
from app.window_states import ChatPlace, name_widgets
from app.window_tools import Approvals
from engine.api import MessageTooLong, Settings, ToolCallEvent, ToolResultEvent

log = logging.getLogger(__name__)


class MainWindow(QMainWindow):
    """The window and its parts: `chat` (the turns and the transcript; the window is its screen),
    `doors` (pages and dialogs), `place` (the chat or its empty state), `presets`, `intake` (files
    and images), `approvals` (tool calls), `chat_actions` (the chat list's), `resources` (the
    gauges). Each part owns its own state; the window owns its widgets."""

    def __init__(self, worker: EngineWorker | None = None, temperature: float = 0.7, max_tokens: int = 512):
        super().__init__()
        self.setWindowTitle(tr("Offline Assistant"))
        self.resize(1100, 720)
        self.temperature, self.max_tokens = temperature, max_tokens
        self._titles: dict[int, str] = {}  # the chat list's titles, for the top bar
        self.too_long_dialog: QMessageBox | None = None
        self.engine_error: str | None = None  # why the engine could not start
        self.place = ChatPlace(self)
        self.worker = worker or EngineWorker()
        self.chat = ChatController(self.worker, self)  # the chat's turns and transcript
        self.chat.make_chat = self._new_conversation
        self.docs_worker = DocumentsWorker(self.worker)

        side = self._build_sidebar()
        center = self._build_center()
        self.rail = NavRail()
        self.settings_button, self.models_button = self.rail.buttons["settings"], self.rail.buttons["models"]
        self.rail.settings.connect(self.open_settings)
        self.rail.models.connect(self.open_models)
        self.pages = Pages(center, self.rail)
        self.doors = Doors(self)
        self.updates = Updates(self, self.update_bar)
        self.doors.show_welcome(center.layout())  # first start: in the empty chat's place
        self.api_server = ApiServerControl(self.worker, self.doors.on_api_state, self)  # serves while server.enabled
        self.gauges = GaugePanel(self.worker.status)
        self.gauges.on_summary = self.top_bar.set_summary
        self.top_bar.fold.clicked.connect(self.toggle_sidebar)
        self.presets = ChatPresets(self, self.worker, self.top_bar, self.composer.route,
                                   lambda: (self.tools_toggle, self.docs_toggle), lambda: self.chat.conversation_id,
                                   self.status_label.setText)
        splitter = QSplitter(Qt.Horizontal)
        splitter.addWidget(side)
        splitter.addWidget(self.pages)
        self.resources = Resources(self.gauges, splitter, self.top_bar, self.top_bar.toggle.isChecked(),
                                   lambda on: Settings.shared().set("ui.resources_panel", on))
        self.top_bar.sig_resources.connect(self.resources.clicked)
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
        name_widgets(self)
        # confirm is looked up when asked: the window's one yes/no question, which a test may replace
        self.intake = Intake(self, self.worker, self.composer, self.view, self.status_label.setText,
                             lambda title, text: self.confirm(title, text), self.open_models,
                             self.docs_toggle.isEnabled)  # files and images for the message
        self.worker.on_notice = self.status_label.setText
        self.worker.on_conversations = self._on_conversations
        self.approvals = Approvals(self, self.status_label.setText)  # a tool call waiting for the user's answer
        self.worker.on_approval = self.approvals.ask
        self.worker.on_approval_ended = self.approvals.end
        self.worker.tokens.connect(self.chat.on_tokens)
        self.worker.thinking.connect(self.chat.on_thinking)
        self.shortcuts = install_shortcuts(self)
        self.worker.start(self._on_ready, self._on_failed)  # the engine thread loads; the window shows now

    def _build_sidebar(self) -> ChatSidebar:
        """The chat list (app/sidebar.py): its widgets keep their names here, tests and the window use them."""
        side = self.sidebar = ChatSidebar(lambda: self.busy)
        self.search, self.chat_list = side.search, side.chat_list
        self.new_button = side.new_button
        self.new_button.clicked.connect(self.new_chat)
        side.selected.connect(self._select)
        self.chat_actions = ChatListActions(self, self.worker, self.chat,
                                            lambda title, text: self.confirm(title, text))
        side.rename.connect(self.chat_actions.rename)
        side.pin.connect(self.chat_actions.pin)
        side.export.connect(self.chat_actions.export)
        side.delete.connect(self.chat_actions.delete)
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
        self.view.transcript = self.chat.transcript
        self.view.sig_notice.connect(self.status_label.setText)  # a cited file that could not be opened
        self.view.sig_action.connect(self.on_message_action)
        self.view.sig_branch.connect(self.chat.switch_branch)
        self.composer = Composer(self.worker.count_tokens)
        self.composer.send.connect(self.send_message)
        self.composer.stop.connect(self.stop)
        self.composer.edit_last.connect(self.chat.edit_last)  # Up in an empty message box
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
        center = QWidget()
        center.setObjectName("chatPage")
        center.setAttribute(Qt.WA_StyledBackground)  # a plain QWidget paints a stylesheet background only so
        layout = QVBoxLayout(center)
        layout.addWidget(self.top_bar)
        composer_row = QHBoxLayout()  # the composer under the reading column, as wide as it
        composer_row.addWidget(self.composer)
        self.view.sig_column.connect(lambda column: composer_row.setContentsMargins(*self.view.column_sides(), 0))
        self.update_bar = UpdateBar()  # a new version, or asking once whether to look for them (app/updates.py)
        for part in (self.banner, self.update_bar, self.view, self.confidence_warning, composer_row, self.progress,
                     self.status_label):
            if part is composer_row:
                layout.addLayout(part)
            else:
                layout.addWidget(part, 1 if part is self.view else 0)
        self.empty = EmptyState("emptyState")  # no chats yet, an empty chat, or no engine: what to do next
        self.empty.hide()
        layout.insertWidget(layout.indexOf(self.view) + 1, self.empty, 1)
        self.view.sig_empty.connect(lambda _empty: self.place.update())
        return center

    # ---- the controller's state, read by the window's parts and tests
    @property
    def conversation_id(self) -> int | None:
        return self.chat.conversation_id

    @property
    def busy(self) -> bool:
        return self.chat.busy

    @property
    def engine_ready(self) -> bool:
        return self.chat.ready

    @property
    def last_done(self) -> Answer | None:
        return self.chat.last_answer

    # ---- engine events
    def _on_ready(self, info: dict) -> None:
        self.progress.hide()
        demo = tr(" (demo models: they prove the mechanisms, not answer quality)") if info.get("demo") else ""
        self.status_label.setText(tr("Ready: {tiers}").format(
            tiers=", ".join(f"{k} {model_label(v)}" for k, v in info["tiers"].items())) + demo)
        if info.get("degraded"):  # one tier stands in for a broken one: usable, but the user must know
            self.show_banner(info["degraded"])
        self.chat.engine_ready()
        self.intake.on_vision(info)  # the picker's tiers; which read images: a message with images goes to one
        self.place.update()
        self.docs_toggle.setEnabled(bool(info.get("documents")))
        self.api_server.apply()  # off by default: nothing listens unless server.enabled is on
        self.updates.start()  # asks once, or checks when due; never before the first-start welcome is done

    def _on_failed(self, message: str) -> None:
        self.engine_error = message
        self.progress.hide()
        self.show_banner(tr("The model could not be loaded: {why}").format(why=message))
        self.status_label.setText(tr("Not ready"))
        self.place.update()

    def _on_conversations(self, rows: list[dict]) -> None:
        self.sidebar.set_conversations(rows, self.conversation_id)
        self._titles = {r["id"]: r["title"] for r in rows}
        self.top_bar.set_title(self._titles.get(self.conversation_id))
        self.place.update()

    # ---- ChatScreen: what the controller asks of the window
    def draw(self, now: bool = True) -> None:
        if not now:
            self.progress.hide()  # streamed output: the wait for the first token is over
        self.view.draw(now)

    def redraw(self) -> None:
        self.view.reset()
        self._update_actions()

    def busy_changed(self, busy: bool) -> None:
        self.progress.setVisible(busy)
        self.composer.set_busy(busy)
        self.chat_list.setEnabled(not busy)
        self.new_button.setEnabled(not busy)
        self._update_actions()

    def say(self, text: str) -> None:
        self.status_label.setText(text)

    def alert(self, text: str) -> None:
        self.show_banner(text)

    def sending(self) -> None:
        self.hide_banner()
        self.confidence_warning.hide()
        self.doors.close_welcome()  # chatting with the demo models: out of the way for this session

    def put_back(self, text: str, images: list[str], replace: bool = True) -> None:
        if replace or not self.composer.edit.toPlainText().strip():
            self.composer.edit.setPlainText(text)
            self.intake.reattach_images(images)

    def turn_options(self) -> TurnOptions:
        """The chat's preset's temperature (None: the window's), Think and Tools as switched."""
        t = self.presets.current.temperature
        return TurnOptions(self.temperature if t is None else t, self.max_tokens, self.think_toggle.isChecked(),
                           self.tools_toggle.isChecked())

    def route(self) -> str:
        return self.composer.route.currentData()

    def answered(self, cid: int, answer: Answer, shown: bool) -> None:
        gpu_note = (answer.stats.get("offload") or {}).get("note")
        if gpu_note:  # the model is not on the GPU it was planned for: say why, once per answer
            self.show_banner(tr("GPU: {why}").format(why=gpu_note))
        if shown:
            self.top_bar.set_model(answer.level, answer.model)
            announce(self.view, answer.text or self.view.transcript.last_answer())  # polite: after what is read
            self._show_confidence(answer.stats)
            context = answer.stats.get("context")
            self.gauges.set_water_level(context)
            if context:
                self.composer.set_context(context["used"], context["n_ctx"])
        self.status_label.setText(answered_by(answer))
        self._update_actions()

    def history_shown(self, last: dict) -> None:
        self.top_bar.set_model(last.get("level"), last.get("model"))
        self.gauges.set_water_level(last.get("context"))
        self._update_actions()

    def ask_overflow(self, exc: MessageTooLong, chosen) -> None:
        def close(overflow: str | None) -> None:
            self.too_long_dialog = None
            if overflow is not None:
                self.hide_banner()
            chosen(overflow)

        self.too_long_dialog = ask_overflow(self, exc, close)

    def chat_opened(self, cid: int | None, new: bool) -> None:
        """The chat shown changed: its title, model, preset, route, switches and gauges."""
        self.top_bar.set_title(self._titles.get(cid) if cid is not None and not new else None)
        self.top_bar.set_model()
        self.gauges.conversation_id = cid
        if cid is None:
            self.docs_toggle.set_conversation(None)
            self.gauges.set_water_level(None)
            return
        if new:
            self.presets.set_switches(self.presets.current)
            self.presets.show_route(cid, self.presets.new_chat_route())
            self.docs_toggle.set_conversation(cid, new=True)  # queued before the first message: it applies to it
            self.think_toggle.take(cid)
            self.gauges.set_water_level(None)
            return
        self.worker.call(lambda a: a.conversation_preset(cid), lambda pid: self.presets.show_chat_preset(cid, pid))
        self.worker.call(lambda a: a.conversation_route(cid), lambda route: self.presets.show_route(cid, route))
        self.worker.call(lambda a: a.conversation_think(cid), lambda on: self.think_toggle.show_state(cid, on))
        self.docs_toggle.set_conversation(cid)

    def tool_event(self, event: ToolCallEvent | ToolResultEvent) -> None:
        if isinstance(event, ToolCallEvent):
            self.status_label.setText(tr("Calling {tool}…").format(tool=event.tool))
        elif self.doors.tools_panel is not None:
            self.doors.tools_panel.refresh()  # a server may have started or crashed

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
        if not self.chat.idle:
            return
        files, self.composer.sent_files = self.composer.sent_files, []  # large attachments: indexed for the chat
        images, self.composer.sent_images = [i.digest for i in self.composer.sent_images], []
        self.chat.send(text, route, files, images)

    def on_message_action(self, action: str, index: int) -> None:
        self.chat.act(action, index)

    def regenerate(self) -> None:
        self.chat.regenerate()

    def edit_message(self, index: int) -> None:
        self.chat.edit(index)

    def edit_last(self) -> None:
        self.chat.edit_last()

    def copy_answer(self) -> None:
        from PySide6.QtGui import QGuiApplication

        QGuiApplication.clipboard().setText(self.chat.transcript.last_answer())

    def new_chat(self) -> None:
        """Start a new conversation from the default preset; sending waits until it exists (on the
        engine thread)."""
        if not self.chat.idle:
            return
        self.presets.start_new()
        self.chat.new_chat()

    def _new_conversation(self, created) -> None:
        """A chat is made on the engine thread, with its preset; `created(cid)` (the controller's)
        takes it from there. Its route is the preset's tier, or the settings' routing mode when the
        preset leaves it to Auto."""
        preset, route = self.presets.current, self.presets.new_chat_route()

        def make(a) -> int:
            cid = a.new_conversation("")
            a.apply_preset(cid, preset)
            if route != preset.tier:
                a.set_conversation_route(cid, route)
            return cid

        self.worker.call(make, created, refresh=True)

    def stop(self) -> None:
        if self.pages.current_key() != "chats":  # Esc on a page: back to the chat
            self.open_chats()
            return
        self.chat.stop()
        self.approvals.end()  # a call waiting for approval is denied

    def _update_actions(self) -> None:
        """A message's actions that start a turn or change the chat: only while no turn runs."""
        self.view.set_idle(self.chat.idle)

    def _select(self, cid: int) -> None:
        self.chat.open(cid)

    def show_banner(self, message: str) -> None:
        self.banner.setText(message)
        self.banner.show()

    def hide_banner(self) -> None:
        self.banner.hide()

    # ---- shutdown
    def closeEvent(self, event):  # noqa: N802 - Qt's name
        self.worker.stop()
        self.gauges.timer.stop()
        self.doors.close()  # a download, indexing, MCP servers: stopped, their threads joined
        self.approvals.end()
        self.intake.close()
        self.updates.close()
        self.api_server.close()  # before the engine: API turns cancelled, the port closed
        self.worker.close()  # waits until the engine saved its state and closed
        super().closeEvent(event)

    def confirm(self, title: str, text: str) -> bool:
        return QMessageBox.question(self, title, text) == QMessageBox.Yes

    # ---- where the rail, the shortcuts (app/shortcuts.py) and the empty states lead
    def open_chats(self) -> None:
        self.pages.open_key("chats")

    def open_documents(self):
        """The Documents page (indexing goes on while the user chats); made once."""
        return self.pages.open_key("documents")

    def open_tools(self):
        """The Tools page: sources, their state and log, each tool's switch; made once."""
        return self.pages.open_key("tools")  # its state is refreshed as it shows

    def open_models(self) -> None:
        self.doors.open_models()

    def open_settings(self) -> None:
        self.doors.open_settings()

    def toggle_sidebar(self) -> None:
        self.doors.toggle_sidebar()

    def focus_search(self) -> None:
        self.search.setFocus()
        self.search.selectAll()

    def focus_composer(self) -> None:
        self.composer.edit.setFocus()

    def previous_message(self) -> None:
        self.view.step_message(-1)

    def next_message(self) -> None:
        self.view.step_message(1)

    def show_shortcuts(self) -> ShortcutSheet:
        sheet = ShortcutSheet(self)
        sheet.open()
        return sheet

