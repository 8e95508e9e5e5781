"""The window's side of presets: the shown chat's preset (or the next new chat's), the top bar's
picker, the switches under the chat as a preset has them, the model picker's route kept with the
chat, and the Presets dialog. GUI thread only."""

from __future__ import annotations

from typing import Callable

from PySide6.QtWidgets import QComboBox, QWidget

from app.i18n import tr
from engine.api import Presets, Settings


class ChatPresets:
    """`store`: presets.json (a chat's preset shapes its prompt, tier, documents and tools);
    `current`: the shown chat's preset, or the next new chat's. `picker` is the model picker,
    `switches()` the Tools switch and the documents toggle, `shown()` the shown chat's id."""

    def __init__(self, parent: QWidget, worker, top_bar, picker: QComboBox, switches: Callable[[], tuple],
                 shown: Callable[[], int | None], say: Callable[[str], None]):
        self.parent, self.worker, self.top_bar, self.picker = parent, worker, top_bar, picker
        self.switches, self.shown, self.say = switches, shown, say
        self.store = Presets()
        self.current = self.store.default()
        self.dialog = None
        top_bar.sig_preset.connect(self.choose)
        top_bar.sig_edit_presets.connect(self.open_dialog)
        picker.activated.connect(self.choose_route)
        self.show()

    def show(self) -> None:
        from app.presets_dialog import shown_name

        self.top_bar.set_presets([(p.id, shown_name(p)) for p in self.store.all()], self.current.id)

    def start_new(self) -> None:
        """A new chat starts from the default preset."""
        self.current = self.store.default()
        self.show()

    def choose(self, preset_id: str) -> None:
        """The picker: this chat (or the next new one) uses the preset from now on."""
        self.current = preset = self.store.get(preset_id)
        self.set_switches(preset)
        cid = self.shown()
        if cid is not None:
            docs = self.switches()[1]
            self.worker.call(lambda a: a.apply_preset(cid, preset),
                             lambda _r: docs.set_conversation(cid))  # its documents switch, as stored
            self.show_route(cid, preset.tier)
        self.say(tr("Preset: {name}").format(name=self.top_bar.preset.currentText()))

    def choose_route(self, index: int) -> None:
        """The model picker: which tier answers this chat from now on (Auto: the router chooses
        per message). Kept with the chat, as a preset's tier is."""
        route, cid = self.picker.itemData(index), self.shown()
        if cid is not None:
            self.worker.call(lambda a: a.set_conversation_route(cid, route), lambda _r: None)

    def new_chat_route(self) -> str:
        """A new chat's route: its preset's tier, or the settings' routing mode (router.mode) when
        the preset leaves it to Auto."""
        tier = self.current.tier
        return tier if tier != "auto" else Settings.shared().get("router.mode")

    def show_route(self, cid: int, route: str | None) -> None:
        if cid == self.shown():
            self.picker.setCurrentIndex(max(0, self.picker.findData(route or "auto")))

    def set_switches(self, preset, documents: bool = True) -> None:
        """The switches under the chat as the preset has them (None: left as they stand)."""
        tools, docs = self.switches()
        pairs = [(tools, preset.tools)] + [(docs.check, preset.documents)] * documents
        for box, value in pairs:
            if value is not None:
                box.blockSignals(True)  # the chat's, not the app's default (tools.enabled)
                box.setChecked(value)
                box.blockSignals(False)

    def open_dialog(self):
        from app.presets_dialog import PresetsDialog

        if self.dialog is None:
            self.dialog = PresetsDialog(self.store, self.parent)
            self.dialog.sig_changed.connect(self._changed)
        self.dialog.show()
        self.dialog.raise_()
        return self.dialog

    def _changed(self) -> None:
        # no chat yet: the next one starts from the default; else the chat's, edited (gone: the default)
        self.current = self.store.default() if self.shown() is None else self.store.get(self.current.id)
        self.show()

    def show_chat_preset(self, cid: int, preset_id: str | None) -> None:
        if cid == self.shown():
            self.current = self.store.get(preset_id)
            self.show()
            self.set_switches(self.current, documents=False)  # its documents: as the engine stored them
