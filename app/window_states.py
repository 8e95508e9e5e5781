"""What the chat's place shows when there is no conversation to show (no chats yet, an empty chat,
an engine that could not start) and the engine's retry; the names, descriptions and tab order a
screen reader follows. GUI thread only."""

from __future__ import annotations

from app.a11y import chain, describe
from app.i18n import tr


class ChatPlace:
    """A part of `MainWindow` (`w`): the conversation, or the empty state in its place."""

    def __init__(self, w):
        self.w = w

    def retry_engine(self) -> None:
        """Try to start the engine again (after a model or a setting was changed)."""
        w = self.w
        w.engine_error = None
        w.hide_banner()
        w.progress.show()
        w.status_label.setText(tr("Loading the model…"))
        self.update()
        w.worker.retry(w._on_ready, w._on_failed)

    def update(self) -> None:
        """The chat's place shows the conversation, or what to do when there is none."""
        w = self.w
        if w.doors.welcome_open():
            w.empty.hide()
            return
        if w.engine_error is not None:
            w.view.hide()
            w.empty.show_state(tr("The engine could not start"), tr("{why}\n\nChoose a model that fits this computer, "
                                                                     "or check the settings, then try again.").format(
                why=w.engine_error),
                [(tr("Models"), tr("Download, import and choose models"), w.doors.open_models),
                 (tr("Settings"), tr("Models per tier, GPU, memory, language and more"), w.doors.open_settings),
                 (tr("Try again"), tr("Start the engine again"), self.retry_engine)])
        elif w.view.messages or not w.engine_ready:
            w.empty.hide()
            w.view.show()
        elif w.chat_list.count() == 0:
            w.view.hide()
            w.empty.show_state(tr("No chats yet"), tr("Type a message below to start. Your chats stay on this "
                                                      "computer."),
                               [(tr("Write a message"), tr("Put the cursor in the message box (Ctrl+L)"),
                                 w.focus_composer),
                                (tr("Add documents…"), tr("Folders the assistant may search and cite"),
                                 w.open_documents)])
        else:
            w.view.hide()
            w.empty.show_state(tr("Ask anything"), tr("Type below to start this chat, or pick one on the left "
                                                      "(Ctrl+K searches them)."),
                               [(tr("Write a message"), tr("Put the cursor in the message box (Ctrl+L)"),
                                 w.focus_composer)])

def name_widgets(w) -> None:
    """Stable objectNames (tests and automation find widgets by these), and the names and
    descriptions a screen reader says; Tab follows reading order (app/a11y.py)."""
    for name, widget in (("conversationList", w.chat_list), ("newConversationButton", w.new_button),
                         ("searchBox", w.search), ("chatView", w.view), ("composer", w.composer),
                         ("sendButton", w.composer.send_button), ("routeOverride", w.composer.route),
                         ("vramGauge", w.gauges.vram), ("ramGauge", w.gauges.ram_app),
                         ("kvGauge", w.gauges.kv_box), ("contextLevel", w.gauges.water_bar),
                         ("confidenceWarning", w.confidence_warning), ("settingsButton", w.settings_button),
                         ("modelManagerButton", w.models_button), ("statusLine", w.status_label),
                         ("errorBanner", w.banner), ("progressBar", w.progress)):
        widget.setObjectName(name)
    rail, bar = w.rail.buttons, w.top_bar
    for widget, name, what in (
        (w.search, tr("Search chats"), tr("Type to find chats by their words (Ctrl+K)")),
        (w.chat_list, tr("Chats"), tr("Your chats, pinned ones first, then by date; right-click to pin, "
                                      "rename, export or delete")),
        (w.new_button, tr("New chat"), tr("Start a new chat (Ctrl+N)")),
        (w.view, tr("Conversation"), tr("The messages of this chat; answers are announced when they end. "
                                        "A message's menu (Menu key) copies, edits, answers again, "
                                        "branches or deletes it; Alt+Up and Alt+Down step through the "
                                        "messages' actions")),
        (w.composer.edit, tr("Message"), tr("Enter sends, Shift+Enter starts a new line (Ctrl+L)")),
        (w.composer.route, tr("Answering model"), tr("Which model answers this chat: Auto lets the router "
                                                     "choose for each message, or pick a tier and its model")),
    ):
        describe(widget, name, what)
    chain(*(rail[k] for k in ("chats", "documents", "tools", "models", "settings")),
          w.new_button, w.search, w.chat_list,
          bar.fold, w.composer.route, bar.preset, bar.presets_button, bar.toggle, w.view,
          w.composer.edit, w.composer.attach_button, w.docs_toggle.check, w.think_toggle,
          w.tools_toggle, w.composer.send_button)
