"""The window's doors to the rest of the app: the first-start welcome, the pages (Documents,
Tools) and dialogs (Models, Settings), the chat list's fold, and what a change of settings does
to the running engine and the local API server. GUI thread only."""

from __future__ import annotations

import json
import logging

from app.i18n import tr
from engine.api import Settings

log = logging.getLogger(__name__)


class Doors:
    """A part of `MainWindow` (`w`): it opens what the rail, the shortcuts and the empty states
    name, and owns what it opens: `welcome` (None once the usual start), `documents_panel` and
    `tools_panel` (made when first opened), and whether the chat list is folded."""

    def __init__(self, w):
        self.w = w
        self.welcome = None
        self.documents_panel = None
        self.tools_panel = None
        self.sidebar_folded = False
        w.pages.makers.update(documents=self._make_documents, tools=self._make_tools)
        w.pages.shown.connect(self._page_shown)

    # ---- the first-start welcome (app/welcome.py)
    def show_welcome(self, layout) -> None:
        """In the empty chat's place, on a first start that needs a model."""
        settings = Settings.shared()
        if settings.get("ui.welcome_done"):
            return  # the usual start: the hub and download code is not even imported
        from app.welcome import WelcomePanel, welcome_needed

        if not welcome_needed(settings, getattr(self.w.worker, "model", None)):
            return
        panel = self.welcome = WelcomePanel(settings, self.w)
        layout.insertWidget(layout.indexOf(self.w.view), panel, 1)
        self.w.view.hide()
        panel.sig_tiers_changed.connect(lambda keys: self.apply_settings(json.loads(keys)))  # tiers switch live
        panel.sig_dismissed.connect(self.close_welcome)

    def welcome_open(self) -> bool:
        return self.welcome is not None and not self.welcome.isHidden()

    def close_welcome(self) -> None:
        if self.welcome_open():
            self.welcome.hide()
            self.w.view.show()
            self.w.place.update()

    # ---- pages and dialogs
    def open_models(self) -> None:
        from app.model_manager import ModelManagerDialog

        settings = Settings.shared()
        with settings.changes() as changed:
            ModelManagerDialog(settings, self.w).exec()
        if changed:  # "Use for L1/L2": the running engine switches (tiers are live settings)
            self.apply_settings(sorted(set(changed)))

    def _make_documents(self):
        from app.documents_panel import DocumentsPanel

        self.documents_panel = DocumentsPanel(self.w.docs_worker, self.w)
        return self.documents_panel

    def _make_tools(self):
        from app.tools_panel import ToolsPanel

        self.tools_panel = ToolsPanel(self.w.worker, self.w)
        return self.tools_panel

    def _page_shown(self, key: str) -> None:
        """The chat list belongs to the chats: another page has the width to itself."""
        self.w.sidebar.setVisible(key == "chats" and not self.sidebar_folded)
        if key == "chats":
            self.w.composer.edit.setFocus()
        elif key == "tools" and self.tools_panel is not None:
            self.tools_panel.refresh()

    def toggle_sidebar(self) -> None:
        """Fold the chat list away, or bring it back (Ctrl+B)."""
        self.sidebar_folded = not self.sidebar_folded
        self._page_shown(self.w.pages.current_key())

    def open_settings(self) -> None:
        from app.settings_dialog import SettingsDialog
        from app.theme import apply_theme

        w, settings = self.w, Settings.shared()
        dialog = SettingsDialog(settings, w, server_status=w.api_server.describe())
        with settings.changes() as changed:
            accepted = dialog.exec()
        if accepted:
            apply_theme(settings.get("ui.theme"))
            cid = w.conversation_id  # the picker is the chat's; router.mode is where new chats start
            if cid is not None:
                w.worker.call(lambda a: a.conversation_route(cid), lambda route: w.presets.show_route(cid, route))
            else:
                w.composer.route.setCurrentIndex(max(0, w.composer.route.findData(settings.get("router.mode"))))
            w.view.redraw()
            w.docs_toggle.read_settings()
        engine = [k for k in changed if not k.startswith("server.")]
        if engine:
            self.apply_settings(engine)
        if w.engine_ready and (len(engine) < len(changed) or dialog.api_server.key_changed):
            w.api_server.apply(restart=True)  # the window's server follows server.* and the key now
        if dialog.forget_requested:
            w.worker.call(lambda a: log.info("forgot %d memories", a.forget_all_memories()))

    def on_api_state(self, state: dict) -> None:
        if state["error"]:
            self.w.show_banner(tr("The local API server could not start: {why}").format(why=state["error"]))
        elif state["running"]:
            self.w.status_label.setText(tr("Local API server at {url}").format(url=state["url"]))
        else:
            self.w.status_label.setText(tr("Local API server stopped"))

    def apply_settings(self, keys: list[str]) -> None:
        """Changed setting keys: the engine applies what it can live, the status line says what waits."""
        self.w.worker.apply_settings(keys, self._on_settings_applied)

    def _on_settings_applied(self, later: list[str]) -> None:
        self.w.intake.refresh_vision()  # a tier's model may have changed: which tiers read images
        self.w.status_label.setText(tr("Settings applied") if not later else
                                    tr("Settings saved; these apply at the next start: {keys}").format(
                                        keys=", ".join(later)))

    def close(self) -> None:
        for part in (self.welcome, self.documents_panel, self.tools_panel):
            if part is not None:
                part.close_work()  # a download, an indexing run, an MCP server: stopped, threads joined
