"""The window's side of presets: the top bar's picker (the shown chat's preset, or the next new
chat's), the switches under the chat as a preset has them, and the Presets dialog. A part of
`MainWindow` (app/main_window.py), kept in its own file; GUI thread only."""

from __future__ import annotations

from app.i18n import tr
from engine.api import Settings


class WindowPresets:
    """Mixed into MainWindow: it uses the window's `presets`, `chat_preset`, top bar, switches and
    worker."""

    def _show_presets(self) -> None:
        from app.presets_dialog import shown_name

        self.top_bar.set_presets([(p.id, shown_name(p)) for p in self.presets.all()], self.chat_preset.id)

    def choose_preset(self, preset_id: str) -> None:
        """The picker: this chat (or the next new one) uses the preset from now on."""
        self.chat_preset = preset = self.presets.get(preset_id)
        self._preset_switches(preset)
        cid = self.conversation_id
        if cid is not None:
            self.worker.call(lambda a: a.apply_preset(cid, preset),
                             lambda _r: self.docs_toggle.set_conversation(cid))  # its documents switch, as stored
            self.show_route(cid, preset.tier)
        self.status_label.setText(tr("Preset: {name}").format(name=self.top_bar.preset.currentText()))

    def choose_route(self, index: int) -> None:
        """The top bar's model picker: which tier answers this chat from now on (Auto: the router
        chooses per message). Kept with the chat, as a preset's tier is."""
        route, cid = self.composer.route.itemData(index), self.conversation_id
        if cid is not None:
            self.worker.call(lambda a: a.set_conversation_route(cid, route), lambda _r: None)

    def new_chat_route(self) -> str:
        """A new chat's route: its preset's tier, or the settings' routing mode (router.mode) when
        the preset leaves it to Auto."""
        tier = self.chat_preset.tier
        return tier if tier != "auto" else Settings.shared().get("router.mode")

    def show_route(self, cid: int, route: str | None) -> None:
        if cid == self.conversation_id:
            picker = self.composer.route
            picker.setCurrentIndex(max(0, picker.findData(route or "auto")))

    def _preset_switches(self, preset, documents: bool = True) -> None:
        """The switches under the chat as the preset has them (None: left as they stand)."""
        pairs = [(self.tools_toggle, preset.tools)] + [(self.docs_toggle.check, preset.documents)] * documents
        for box, value in pairs:
            if value is not None:
                box.blockSignals(True)  # the chat's, not the app's default (tools.enabled)
                box.setChecked(value)
                box.blockSignals(False)

    def open_presets(self):
        from app.presets_dialog import PresetsDialog

        if self.presets_dialog is None:
            self.presets_dialog = PresetsDialog(self.presets, self)
            self.presets_dialog.sig_changed.connect(self._presets_changed)
        self.presets_dialog.show()
        self.presets_dialog.raise_()
        return self.presets_dialog

    def _presets_changed(self) -> None:
        # no chat yet: the next one starts from the default; else the chat's, edited (gone: the default)
        self.chat_preset = (self.presets.default() if self.conversation_id is None
                            else self.presets.get(self.chat_preset.id))
        self._show_presets()

    def _show_chat_preset(self, cid: int, preset_id: str | None) -> None:
        if cid == self.conversation_id:
            self.chat_preset = self.presets.get(preset_id)
            self._show_presets()
            self._preset_switches(self.chat_preset, documents=False)  # its documents: as the engine stored them
