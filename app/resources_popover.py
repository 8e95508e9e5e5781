"""The gauges behind the top bar's resources indicator: a popover under it (a click outside or Esc
closes it), or, once the user pins them, a panel beside the chat (setting ui.resources_panel,
kept). One `GaugePanel` (app/gauges.py) moves between the two places."""

from __future__ import annotations

from PySide6.QtCore import QPoint, Qt, Signal
from PySide6.QtWidgets import QFrame, QPushButton, QSplitter, QVBoxLayout, QWidget

from app.a11y import describe
from app.i18n import tr


class ResourcesPopover(QFrame):
    sig_pin = Signal()  # "Keep beside the chat"

    def __init__(self, parent: QWidget):
        super().__init__(parent, Qt.Popup)
        self.setObjectName("resourcesPopover")
        self.setFrameShape(QFrame.StyledPanel)
        self._layout = QVBoxLayout(self)
        self.pin_button = describe(QPushButton(tr("Keep beside the chat")), tr("Keep beside the chat"),
                                   tr("Show the gauges in a panel beside the chat until you fold them again"))
        self.pin_button.setObjectName("pinResources")
        self.pin_button.clicked.connect(self.sig_pin.emit)
        self._layout.addWidget(self.pin_button, 0, Qt.AlignRight)

    def hold(self, gauges: QWidget) -> None:
        self._layout.insertWidget(0, gauges)

    def open_under(self, gauges: QWidget, anchor: QWidget) -> None:
        """Show `gauges` in the popover, its top right under `anchor`'s bottom right."""
        self.hold(gauges)
        gauges.show()
        self.adjustSize()
        corner = anchor.mapToGlobal(QPoint(anchor.width(), anchor.height() + 4))
        self.move(corner.x() - self.width(), corner.y())
        self.show()
        self.pin_button.setFocus(Qt.PopupFocusReason)


class Resources:
    """Where the gauges are: folded behind the indicator (opened as a popover), or pinned beside the
    chat in the window's splitter."""

    def __init__(self, gauges: QWidget, splitter: QSplitter, top_bar, pinned: bool, on_pinned):
        """`top_bar`: app/top_bar.py's, whose indicator (`toggle`) opens the popover; `on_pinned(on)`
        keeps the choice."""
        self.gauges, self.splitter, self.top_bar, self.on_pinned = gauges, splitter, top_bar, on_pinned
        self.popover = ResourcesPopover(top_bar)
        self.popover.sig_pin.connect(lambda: self.pin(True))
        self.popover.hold(gauges)  # folded: the gauges wait in the popover
        self.pinned = False
        self.pin(pinned, save=False)

    def clicked(self) -> None:
        """The indicator: pinned gauges fold away; folded ones open as a popover."""
        if self.pinned:
            self.pin(False)
        else:
            self.popover.open_under(self.gauges, self.top_bar.toggle)

    def pin(self, on: bool, save: bool = True) -> None:
        self.pinned = on
        if on:
            self.popover.hide()
            self.splitter.addWidget(self.gauges)  # taken out of the popover
        else:
            self.popover.hold(self.gauges)
        self.gauges.setVisible(on)
        self.top_bar.set_pinned(on)
        if save:
            self.on_pinned(on)
