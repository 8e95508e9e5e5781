"""What the chat's place shows when there is no conversation to show (no chats yet, an empty chat,
an engine that could not start), the engine's retry, the gauges folded or shown, the names and
tab order a screen reader follows, and where the keyboard's shortcuts lead (app/shortcuts.py).
A part of `MainWindow` (app/main_window.py), kept in its own file; GUI thread only."""

from __future__ import annotations

from app.a11y import chain, describe
from app.i18n import tr
from app.shortcuts import ShortcutSheet


class WindowStates:
    """Mixed into MainWindow: it uses the window's view, empty state, welcome, gauges and worker."""

    def retry_engine(self) -> None:
        """Try to start the engine again (after a model or a setting was changed)."""
        self.engine_error = None
        self.hide_banner()
        self.progress.show()
        self.status_label.setText(tr("Loading the model…"))
        self._update_empty()
        self.worker.retry(self._on_ready, self._on_failed)

    def _update_empty(self) -> None:
        """The chat's place shows the conversation, or what to do when there is none."""
        if self.welcome is not None and not self.welcome.isHidden():
            self.empty.hide()
            return
        if self.engine_error is not None:
            self.view.hide()
            self.empty.show_state(tr("The engine could not start"), tr("{why}\n\nChoose a model that fits this "
                                                                        "computer, or check the settings, then try "
                                                                        "again.").format(why=self.engine_error),
                                  [(tr("Models"), tr("Download, import and choose models"), self.open_models),
                                   (tr("Settings"), tr("Models per tier, GPU, memory, language and more"),
                                    self.open_settings),
                                   (tr("Try again"), tr("Start the engine again"), self.retry_engine)])
        elif self.view.messages or not self.engine_ready:
            self.empty.hide()
            self.view.show()
        elif self.chat_list.count() == 0:
            self.view.hide()
            self.empty.show_state(tr("No chats yet"), tr("Type a message below to start. Your chats stay on this "
                                                         "computer."),
                                  [(tr("Write a message"), tr("Put the cursor in the message box (Ctrl+L)"),
                                    self.focus_composer),
                                   (tr("Add documents…"), tr("Folders the assistant may search and cite"),
                                    self.open_documents)])
        else:
            self.view.hide()
            self.empty.show_state(tr("Ask anything"), tr("Type below to start this chat, or pick one on the left "
                                                         "(Ctrl+K searches them)."),
                                  [(tr("Write a message"), tr("Put the cursor in the message box (Ctrl+L)"),
                                    self.focus_composer)])

    def _describe_widgets(self) -> None:
        """Names and descriptions a screen reader says; Tab follows reading order (app/a11y.py)."""
        rail, bar = self.rail.buttons, self.top_bar
        for widget, name, what in (
            (self.search, tr("Search chats"), tr("Type to find chats by their words (Ctrl+K)")),
            (self.chat_list, tr("Chats"), tr("Your chats, pinned ones first, then by date; right-click to pin, "
                                             "rename, export or delete")),
            (self.new_button, tr("New chat"), tr("Start a new chat (Ctrl+N)")),
            (self.view, tr("Conversation"), tr("The messages of this chat; answers are announced when they end. "
                                               "A message's menu (Menu key) copies, edits, answers again, "
                                               "branches or deletes it; Alt+Up and Alt+Down step through the "
                                               "messages' actions")),
            (self.composer.edit, tr("Message"), tr("Enter sends, Shift+Enter starts a new line (Ctrl+L)")),
            (self.composer.route, tr("Answering model"), tr("Which model answers this chat: Auto lets the router "
                                                            "choose for each message, or pick a tier and its model")),
        ):
            describe(widget, name, what)
        chain(*(rail[k] for k in ("chats", "documents", "tools", "models", "settings")),
              self.new_button, self.search, self.chat_list,
              bar.fold, self.composer.route, bar.preset, bar.presets_button, bar.toggle, self.view,
              self.composer.edit, self.composer.attach_button, self.docs_toggle.check, self.think_toggle,
              self.tools_toggle, self.composer.send_button)

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
