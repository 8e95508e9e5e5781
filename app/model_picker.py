"""The model picker, the top bar's first pill: Auto (the router picks per message), or a tier and
the model it runs. Its list says beside each model how it fits this machine, in the planner's
words (engine/models/fit.py, through `Assistant.tier_fits`): fits, may be slow, won't fit."""

from __future__ import annotations

from PySide6.QtCore import QSize, Qt
from PySide6.QtWidgets import QComboBox, QStyle, QStyledItemDelegate, QStyleOptionViewItem

from app.i18n import tr
from app.render import model_label

FIT_ROLE = Qt.UserRole + 1  # an item's fit label, drawn at the right of its row in the list


def fit_label(level: str, word: str) -> tuple[str, str]:
    """(label, sentence) for a tier's fit word: the label beside the model, the sentence its tooltip.
    An L1 model on the CPU fits: the CPU is its place; an L2 model there may be slow."""
    if word == "gpu":
        return tr("fits · GPU"), tr("The whole model runs on the GPU.")
    if word == "partial":
        return tr("may be slow · partly GPU"), tr("Only some of its layers fit on the GPU; the rest run on the CPU.")
    if word == "cpu":
        return ((tr("fits · CPU"), tr("It runs on the CPU, as the fast tier does.")) if level == "L1" else
                (tr("may be slow · CPU"), tr("It does not fit on the GPU, so it runs on the CPU.")))
    if word == "too_big":
        return tr("won't fit"), tr("It needs more memory than is free now: it will not load until some is.")
    if word == "remote":
        return tr("remote"), tr("The model behind the endpoint you set up: what you send leaves this computer.")
    return "", ""


class _FitDelegate(QStyledItemDelegate):
    """A list row: the model as the pill says it, its fit label at the right in a muted colour."""

    GAP = 24

    def paint(self, painter, option, index) -> None:
        super().paint(painter, option, index)
        label = index.data(FIT_ROLE)
        if not label:
            return
        from app.theme import colour

        painter.save()
        selected = option.state & QStyle.State_Selected
        painter.setPen(option.palette.highlightedText().color() if selected else colour("muted"))
        painter.drawText(option.rect.adjusted(0, 0, -10, 0), Qt.AlignVCenter | Qt.AlignRight, label)
        painter.restore()

    def sizeHint(self, option, index) -> QSize:  # noqa: N802 - Qt's name
        hint = super().sizeHint(option, index)
        label = index.data(FIT_ROLE)
        if label:
            hint.setWidth(hint.width() + self.GAP + option.fontMetrics.horizontalAdvance(label) + 10)
        return hint


class ModelPicker(QComboBox):
    def __init__(self, parent=None):
        super().__init__(parent)
        self.setItemDelegate(_FitDelegate(self))
        self.set_tiers({})

    def set_tiers(self, tiers: dict[str, str], fits: dict[str, str] | None = None) -> None:
        """The choices: Auto, then each tier with the model it runs ("L2 · qwen3-4b") and how it
        fits; before the engine says which, the bare tiers."""
        current = self.currentData() or "auto"
        self.blockSignals(True)
        self.clear()
        self.addItem(tr("Auto"), "auto")
        self.setItemData(0, tr("The router picks a tier for each message"), Qt.ToolTipRole)
        for level in ("L1", "L2", "L3"):
            if tiers and level not in tiers:
                continue
            self.addItem(f"{level} · {model_label(tiers[level])}" if tiers else level, level)
            label, sentence = fit_label(level, (fits or {}).get(level, ""))
            if label:
                self.setItemData(self.count() - 1, label, FIT_ROLE)
                self.setItemData(self.count() - 1, sentence, Qt.ToolTipRole)
        self.setCurrentIndex(max(0, self.findData(current)))
        self.blockSignals(False)

    def showPopup(self) -> None:  # noqa: N802 - Qt's name
        """The list as wide as its widest row (model and fit label), not the pill's width."""
        option = QStyleOptionViewItem()
        option.initFrom(self.view())
        delegate = self.itemDelegate()
        widest = max((delegate.sizeHint(option, self.model().index(row, 0)).width() for row in range(self.count())),
                     default=0)
        self.view().setMinimumWidth(widest + 16)
        super().showPopup()

    def fit_of(self, level: str) -> str:
        """The fit label shown beside `level`'s model ("" when none): tests and screen readers."""
        row = self.findData(level)
        return (self.itemData(row, FIT_ROLE) or "") if row >= 0 else ""
