"""The bar above the conversation. Left: the button that folds the chat list, the chat's title
(elided, so a long title never moves the layout) and which model answered it. Centre: two pills,
the model picker (Auto or a tier and its model) and the chat's preset (and the door to the
presets). Right: a compact resources indicator ("RAM 301 MiB · context 71 %") that opens the gauges
as a popover, or folds them when they are pinned beside the chat (app/resources_popover.py)."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QPainter
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QSizePolicy, QToolButton, QWidget

from app.a11y import describe
from app.i18n import tr
from app.icons import use
from app.theme import set_tone


class ElidedLabel(QLabel):
    """A one-line label that takes the width it is given and elides its text to fit (a tooltip
    holds the whole): its size hint never grows with the text."""

    def __init__(self, text: str = "", parent=None):
        super().__init__(text, parent)
        self.setSizePolicy(QSizePolicy.Ignored, QSizePolicy.Preferred)
        self.setMinimumWidth(40)

    def setText(self, text: str) -> None:  # noqa: N802 - Qt's name
        super().setText(text)
        self.setToolTip(text)

    def paintEvent(self, _event):  # noqa: N802 - Qt's name
        painter = QPainter(self)
        painter.setPen(self.palette().color(self.foregroundRole()))
        painter.setFont(self.font())
        shown = self.fontMetrics().elidedText(self.text(), Qt.ElideRight, self.contentsRect().width())
        painter.drawText(self.contentsRect(), Qt.AlignVCenter | Qt.AlignLeft, shown)


class TopBar(QWidget):
    sig_resources = Signal()  # the resources indicator was clicked
    sig_preset = Signal(str)      # the user chose a preset for this chat (its id)
    sig_edit_presets = Signal()

    def __init__(self, resources_open: bool, parent=None):
        super().__init__(parent)
        self.setObjectName("topBar")
        self.fold = use(QToolButton(), "panel-left", "muted", 18)
        self.fold.setObjectName("foldChatsButton")
        describe(self.fold, tr("Chat list"), tr("Show or fold the chat list (Ctrl+B)"))
        self.title = ElidedLabel(tr("New chat"))
        self.title.setObjectName("chatTitle")
        self.model = QLabel("")
        self.model.setObjectName("answeringModel")
        set_tone(self.model, "muted")
        self.preset = describe(QComboBox(), tr("Preset"), tr("The preset this chat uses: its system prompt, "
                                                              "temperature, tier, documents and tools"))
        self.preset.setObjectName("presetPicker")
        self.preset.setProperty("pill", True)
        self.preset.activated.connect(lambda k: self.sig_preset.emit(self.preset.itemData(k)))
        self.presets_button = describe(QToolButton(), tr("Presets…"), tr("Make, change, import and export presets"))
        self.presets_button.setObjectName("presetsButton")
        use(self.presets_button, "sliders-horizontal", "muted", 16)
        self.presets_button.clicked.connect(self.sig_edit_presets.emit)
        self.toggle = use(QToolButton(), "gauge", "muted", 16, on_tone="accent")
        self.toggle.setObjectName("resourcesToggle")
        self.toggle.setProperty("pill", True)
        self.toggle.setToolButtonStyle(Qt.ToolButtonTextBesideIcon)
        self.toggle.setText(tr("Resources"))
        self.toggle.setCheckable(True)  # checked: the gauges are pinned beside the chat
        self.toggle.setChecked(resources_open)
        describe(self.toggle, tr("Resources"), tr("Open the VRAM, RAM, KV and context gauges, or fold them when "
                                                  "they are kept beside the chat"))
        self.toggle.clicked.connect(self._clicked)
        self.summary = ""
        left, self.centre, right = QHBoxLayout(), QHBoxLayout(), QHBoxLayout()
        left.addWidget(self.fold)
        left.addWidget(self.title, 1)
        left.addWidget(self.model)
        self.centre.addWidget(self.preset)
        self.centre.addWidget(self.presets_button)
        right.addStretch(1)
        right.addWidget(self.toggle)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(4, 4, 8, 4)
        layout.addLayout(left, 1)  # the two sides share what the pills leave: the pills stay centred
        layout.addLayout(self.centre)
        layout.addLayout(right, 1)

    def add_picker(self, picker: QComboBox) -> None:
        """The model picker (the composer's route: Auto, or a tier and its model), the first pill."""
        picker.setProperty("pill", True)
        picker.setSizeAdjustPolicy(QComboBox.AdjustToContents)
        self.centre.insertWidget(0, picker)

    def set_presets(self, presets: list[tuple[str, str]], current: str) -> None:
        """(id, name) of every preset, and the one this chat uses."""
        self.preset.blockSignals(True)
        self.preset.clear()
        for pid, name in presets:
            self.preset.addItem(name, pid)
        self.preset.setCurrentIndex(max(0, self.preset.findData(current)))
        self.preset.blockSignals(False)

    def set_title(self, title: str | None) -> None:
        self.title.setText(title or tr("New chat"))

    def set_model(self, level: str | None = None, model: str | None = None) -> None:
        """Which tier and model answered ("L1 · demo-small"); nothing for a chat with no answer yet."""
        self.model.setText(" · ".join(str(x) for x in (level, model) if x))

    def set_summary(self, text: str) -> None:
        """The gauges in a few words; the indicator shows them while the panel is folded away."""
        self.summary = text
        self._show_summary()

    def _show_summary(self) -> None:
        self.toggle.setText(tr("Resources") if self.toggle.isChecked() or not self.summary else self.summary)

    def set_pinned(self, on: bool) -> None:
        self.toggle.setChecked(on)
        self._show_summary()

    def _clicked(self) -> None:
        self.toggle.setChecked(not self.toggle.isChecked())  # the click's own toggle: the window decides
        self.sig_resources.emit()
