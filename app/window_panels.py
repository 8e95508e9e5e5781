"""The main window's doors to the rest of the app: the first-start welcome, Models, Documents and
Settings, and what their changes do to the running engine and the local API server. A part of
`MainWindow` (app/main_window.py), kept in its own file; GUI thread only."""

from __future__ import annotations

import json
import logging

from app.i18n import tr
from engine.api import Settings

log = logging.getLogger(__name__)


class WindowPanels:
    """Mixed into MainWindow: it uses the window's worker, view, composer, status line and banner."""

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
        panel.sig_tiers_changed.connect(lambda keys: self._apply_settings(json.loads(keys)))  # tiers switch live
        panel.sig_dismissed.connect(self.close_welcome)
        return panel

    def close_welcome(self) -> None:
        if self.welcome is not None and not self.welcome.isHidden():
            self.welcome.hide()
            self.view.show()
            self._update_empty()

    def open_models(self) -> None:
        from app.model_manager import ModelManagerDialog

        settings = Settings.shared()
        with settings.changes() as changed:
            ModelManagerDialog(settings, self).exec()
        if changed:  # "Use for L1/L2": the running engine switches (tiers are live settings)
            self._apply_settings(sorted(set(changed)))

    def open_documents(self):
        """The Documents page (indexing goes on while the user chats); made once."""
        return self.pages.open_key("documents")

    def _make_documents(self):
        from app.documents_panel import DocumentsPanel

        self.documents_panel = DocumentsPanel(self.docs_worker, self)
        return self.documents_panel

    def open_tools(self):
        """The Tools page: sources, their state and log, each tool's switch; made once."""
        return self.pages.open_key("tools")  # its state is refreshed as it shows (_page_shown)

    def _make_tools(self):
        from app.tools_panel import ToolsPanel

        self.tools_panel = ToolsPanel(self.worker, self)
        return self.tools_panel

    def open_chats(self) -> None:
        self.pages.open_key("chats")

    def _page_shown(self, key: str) -> None:
        """The chat list belongs to the chats: another page has the width to itself."""
        self.sidebar.setVisible(key == "chats" and not self.sidebar_folded)
        if key == "chats":
            self.composer.edit.setFocus()
        elif key == "tools" and self.tools_panel is not None:
            self.tools_panel.refresh()

    def toggle_sidebar(self) -> None:
        """Fold the chat list away, or bring it back (Ctrl+B)."""
        self.sidebar_folded = not self.sidebar_folded
        self._page_shown(self.pages.current_key())

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
            cid = self.conversation_id  # the picker is the chat's; router.mode is where new chats start
            if cid is not None:
                self.worker.call(lambda a: a.conversation_route(cid), lambda route: self.presets.show_route(cid, route))
            else:
                self.composer.route.setCurrentIndex(max(0, self.composer.route.findData(settings.get("router.mode"))))
            self.view.redraw()
            self._update_docs_note()
        engine = [k for k in changed if not k.startswith("server.")]
        if engine:
            self._apply_settings(engine)
        if self.engine_ready and (len(engine) < len(changed) or dialog.api_server.key_changed):
            self.api_server.apply(restart=True)  # the window's server follows server.* and the key now
        if dialog.forget_requested:
            self.worker.call(lambda a: log.info("forgot %d memories", a.forget_all_memories()))

    def _on_api_state(self, state: dict) -> None:
        if state["error"]:
            self.show_banner(tr("The local API server could not start: {why}").format(why=state["error"]))
        elif state["running"]:
            self.status_label.setText(tr("Local API server at {url}").format(url=state["url"]))
        else:
            self.status_label.setText(tr("Local API server stopped"))

    def _apply_settings(self, keys: list[str]) -> None:
        """Changed setting keys: the engine applies what it can live, the status line says what waits."""
        self.worker.apply_settings(keys, self._on_settings_applied)

    def _on_settings_applied(self, later: list[str]) -> None:
        self.refresh_vision()  # a tier's model may have changed: which tiers read images
        self.status_label.setText(tr("Settings applied") if not later else
                                  tr("Settings saved; these apply at the next start: {keys}").format(keys=", ".join(later)))
