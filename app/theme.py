"""The app's looks: a small table of design tokens per look, applied as a Fusion palette plus one
stylesheet written only in those tokens, and the chat bubbles' colours. `ui.theme` "system" follows
the OS colour scheme, live. Why tokens on Fusion rather than a QStyle such as Qlementine: docs/style.md."""

from __future__ import annotations

from string import Template

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QGuiApplication, QPalette
from PySide6.QtWidgets import QApplication

from app import render

# One row per look. Colours: window (the app's background), surface (inputs, lists), raised (buttons,
# tabs, the answer bubble), border, text, muted (secondary text, disabled), accent and the text on it,
# danger (destructive actions, a medical caution), warn and warn_bg (a notice: the banner, low
# confidence, a skipped file), info and info_bg (a hint that guides), mark (highlighted text), accent_soft
# (the accent 18 % into surface: a chip or rail button that is on), hover (text 7 % into surface: a flat
# button under the pointer), accent_hover (the round Send button under the pointer).
# radius and spacing in device-independent pixels.
TOKENS: dict[str, dict] = {
    "light": {"window": "#f5f6f8", "surface": "#ffffff", "raised": "#eceef1", "border": "#d0d4da",
              "text": "#1f2328", "muted": "#6b7079", "accent": "#3d6fb6", "accent_text": "#ffffff",
              "danger": "#b3261e", "warn": "#8a4b00", "warn_bg": "#fff1d6", "info": "#1d3d66",
              "info_bg": "#eef5ff", "mark": "#ffe2a8", "accent_soft": "#dce5f2", "hover": "#eff0f0",
              "accent_hover": "#3864a1", "radius": 6, "spacing": 6},
    "dark": {"window": "#202124", "surface": "#2a2b2e", "raised": "#35363a", "border": "#4a4b4e",
             "text": "#e8eaed", "muted": "#9aa0a6", "accent": "#3d6fb6", "accent_text": "#ffffff",
             "danger": "#f28b82", "warn": "#f6c27a", "warn_bg": "#3b2f1c", "info": "#a8c7fa",
             "info_bg": "#1f2b3d", "mark": "#6b4f1d", "accent_soft": "#2d3746", "hover": "#37383b",
             "accent_hover": "#5781be", "radius": 6, "spacing": 6},
}
# Pygments' styles for code in answers: each is made for its own kind of background.
CODE_STYLES = {"light": "friendly", "dark": "github-dark"}
THEMES = ("system", "light", "dark")  # the values of the ui.theme setting
SCHEMES = {"light": Qt.ColorScheme.Light, "dark": Qt.ColorScheme.Dark}

# No font-family anywhere: it would replace the app font's families and with them the bundled CJK
# fallback (app/main.py). Sizes in px are device-independent, so high-DPI screens stay sharp.
STYLE = Template("""
QPushButton { padding: ${half}px ${space2}px; border: 1px solid $border; border-radius: ${radius}px;
              background: $raised; color: $text; }
QPushButton:hover, QPushButton:focus { border-color: $accent; }
QPushButton:checked { background: $accent; color: $accent_text; border-color: $accent; }
QPushButton:disabled { color: $muted; }
QPushButton#removeDocumentsButton, QPushButton#revokeButton { color: $danger; }
QLineEdit, QPlainTextEdit, QTextEdit, QTextBrowser {
    border: 1px solid $border; border-radius: ${radius}px; padding: ${half}px; background: $surface; color: $text; }
QLineEdit:focus, QPlainTextEdit:focus, QTextEdit:focus {
    border-color: $accent; }
/* Combo and spin boxes keep Fusion's frame and arrows (a stylesheet frame needs arrow images); the popup: */
QComboBox QAbstractItemView { border: 1px solid $border; background: $surface; selection-background-color: $accent;
                              selection-color: $accent_text; }
QListWidget, QTreeView, QTableView { border: 1px solid $border; border-radius: ${radius}px; background: $surface; }
QListWidget::item { padding: ${half}px; }
QListWidget::item:selected, QTreeView::item:selected, QTableView::item:selected {
    background: $accent; color: $accent_text; }
QListWidget#conversationList { border: none; background: transparent; }
QListWidget#conversationList::item { padding: ${space}px; border-radius: ${radius}px; }
QScrollBar:vertical { width: ${space2}px; background: transparent; margin: 0; }
QScrollBar:horizontal { height: ${space2}px; background: transparent; margin: 0; }
QScrollBar::handle { background: $border; border-radius: ${half}px; margin: 2px; }
QScrollBar::handle:vertical { min-height: ${space4}px; }
QScrollBar::handle:horizontal { min-width: ${space4}px; }
QScrollBar::handle:hover { background: $muted; }
QScrollBar::add-line, QScrollBar::sub-line { width: 0; height: 0; border: none; }
QScrollBar::add-page, QScrollBar::sub-page { background: none; }
QToolTip { background: $raised; color: $text; border: 1px solid $border; padding: ${half}px; }
QMenu { background: $surface; color: $text; border: 1px solid $border; padding: ${half}px; }
QMenu::item { padding: ${half}px ${space3}px; border-radius: ${half}px; }
QMenu::item:selected { background: $accent; color: $accent_text; }
QMenu::item:disabled { color: $muted; }
QMenu::separator { height: 1px; background: $border; margin: ${half}px ${space}px; }
QTabWidget::pane { border: 1px solid $border; border-radius: ${radius}px; top: -1px; background: $surface; }
QTabBar::tab { padding: ${half}px ${space2}px; margin-right: 2px; border: 1px solid transparent; border-bottom: none;
               border-top-left-radius: ${radius}px; border-top-right-radius: ${radius}px; color: $muted; }
QTabBar::tab:selected { background: $surface; border-color: $border; color: $text; }
QGroupBox { border: 1px solid $border; border-radius: ${radius}px; margin-top: ${space3}px; padding: ${space}px; }
QGroupBox::title { subcontrol-origin: margin; left: ${space2}px; color: $text; }
QProgressBar { border: 1px solid $border; border-radius: ${radius}px; background: $surface; text-align: center;
               min-height: ${space3}px; }
QProgressBar::chunk { background: $accent; border-radius: ${half}px; }
QCheckBox { spacing: ${space}px; }
QCheckBox:disabled { color: $muted; }
/* The rail, pills, page and column titles (issue 42) */
QWidget#navRail { background: $raised; }
QToolButton { border: 1px solid transparent; border-radius: ${radius}px; padding: ${half}px; background: transparent; }
QToolButton:hover { background: $hover; }
QToolButton:checked { background: $accent_soft; }
QToolButton:focus { border-color: $accent; }
QToolButton[rail="true"] { border-radius: ${space2}px; }
QToolButton[rail="true"]:checked { background: $surface; }
QComboBox[pill="true"], QToolButton[pill="true"] { border: 1px solid $border; border-radius: ${pill}px;
    padding: ${half}px ${space2}px; background: $surface; color: $text; }
QComboBox[pill="true"]:hover, QComboBox[pill="true"]:focus, QToolButton[pill="true"]:hover { border-color: $accent; }
QComboBox[pill="true"]::drop-down { border: none; width: ${space3}px; }
QComboBox[pill="true"]::down-arrow { image: url($chevron); width: ${space2}px; height: ${space2}px; }
QFrame#composerBox { border: 1px solid $border; border-radius: ${space3}px; background: $surface; }
QFrame#composerBox QPlainTextEdit { border: none; background: transparent; padding: ${half}px 0; }
QToolButton[chip="true"] { border: 1px solid $border; border-radius: ${pill}px; padding: 2px ${space}px;
                           color: $muted; }
QToolButton[chip="true"]:checked { background: $accent_soft; border-color: $accent; color: $text; }
QToolButton#sendButton { background: $accent; border: none; border-radius: 17px; }
QToolButton#sendButton:hover { background: $accent_hover; }
QToolButton#sendButton:disabled { background: $border; }
QToolButton#sendButton:focus { border: 2px solid $text; }
QTextBrowser#chatView { border: none; background: $surface; }
QWidget#pages, QWidget#chatPage { background: $surface; }
QLabel#columnTitle, QLabel#pageTitle { font-weight: 600; font-size: 13pt; padding: ${half}px 0; }
QLabel#chatTitle { font-weight: 600; }
QWidget#chatColumn { background: $window; }
/* Tones, set as a widget's "tone" property, so that no widget writes a colour of its own: */
QLabel[tone="muted"] { color: $muted; }
QLabel[tone="hint"] { color: $muted; font-size: small; }
QLabel[tone="warn"] { color: $warn; }
QLabel[tone="notice"] { padding: ${half}px; background: $warn_bg; color: $warn; border-radius: ${radius}px; }
QLabel[tone="info"] { padding: ${space}px; background: $info_bg; color: $info; border-radius: ${radius}px; }
QFrame[tone="chip"] { border: 1px solid $border; border-radius: ${space}px; }
QProgressBar[tone="warn"]::chunk { background: $warn; }
""")

_chosen = "system"  # the ui.theme value last applied


def system_scheme() -> Qt.ColorScheme:
    """The OS colour scheme as Qt reports it (Unknown where the platform does not say)."""
    return QGuiApplication.styleHints().colorScheme()


def look_for(name: str, scheme: Qt.ColorScheme | None = None) -> str:
    """The look ("light" or "dark") that the ui.theme value `name` means now."""
    if name in TOKENS:
        return name
    scheme = system_scheme() if scheme is None else scheme
    return "dark" if scheme == Qt.ColorScheme.Dark else "light"


def _mix(a: str, b: str, share_a: float) -> str:
    ca, cb = QColor(a), QColor(b)
    mixed = [round(x * share_a + y * (1 - share_a)) for x, y in zip(ca.getRgb()[:3], cb.getRgb()[:3])]
    return QColor(*mixed).name()


def stylesheet(look: str) -> str:
    t = TOKENS[look]
    space = t["spacing"]
    from app.icons import tinted_file  # the icons take their colours from this module

    return STYLE.substitute(t, half=space // 2, space=space, space2=space * 2, space3=space * 3, space4=space * 4,
                            pill=space * 2 + 2, chevron=tinted_file("chevron-down", t["muted"]))


def palette(look: str) -> QPalette:
    t = {k: QColor(v) for k, v in TOKENS[look].items() if isinstance(v, str)}
    p = QPalette(t["raised"], t["window"])  # Fusion's bevels are derived from these two
    roles = {QPalette.Window: "window", QPalette.WindowText: "text", QPalette.Base: "surface",
             QPalette.AlternateBase: "raised", QPalette.Button: "raised", QPalette.ButtonText: "text",
             QPalette.Text: "text", QPalette.BrightText: "danger", QPalette.Highlight: "accent",
             QPalette.HighlightedText: "accent_text", QPalette.ToolTipBase: "raised", QPalette.ToolTipText: "text",
             QPalette.PlaceholderText: "muted", QPalette.Accent: "accent", QPalette.Mid: "border"}
    for role, key in roles.items():
        p.setColor(role, t[key])
    link = t["accent"] if look == "light" else QColor(_mix(TOKENS[look]["accent"], TOKENS[look]["text"], 0.6))
    p.setColor(QPalette.Link, link)  # a dark surface needs a lighter link than the accent
    p.setColor(QPalette.LinkVisited, link)
    for role in (QPalette.WindowText, QPalette.Text, QPalette.ButtonText):
        p.setColor(QPalette.Disabled, role, t["muted"])
    return p


def _apply_look(app: QApplication, look: str) -> None:
    t = TOKENS[look]
    # Each of these re-polishes every widget: done only when something changes (the window and the
    # tests apply the theme again and again with the same look).
    if app.style().name().lower() != "fusion":
        app.setStyle("Fusion")
    app.setPalette(palette(look))
    render.set_colours(user=_mix(t["accent"], t["surface"], 0.22), assistant=t["raised"], code=t["raised"],
                       badge=t["raised"],
                       meta=t["muted"], border=t["border"], warn=t["warn"], danger=t["danger"], mark=t["mark"],
                       code_style=CODE_STYLES[look])
    sheet = stylesheet(look)
    changed = app.property("assistantLook") != look
    if app.styleSheet() != sheet:
        app.setStyleSheet(sheet)
    app.setProperty("assistantLook", look)
    if changed:
        from app.icons import retint

        retint(app.allWidgets())


def colour(key: str) -> str:
    """A token of the look applied now (for colours Qt takes outside the stylesheet: a model's
    ForegroundRole, a painted icon)."""
    app = QApplication.instance()
    look = app.property("assistantLook") if app is not None else None
    return TOKENS[look if look in TOKENS else "light"][key]


def set_tone(widget, tone: str) -> None:
    """Give `widget` one of the stylesheet's tones ("muted", "hint", "warn", "notice", "info",
    "chip"; "" for none), re-polished when it changes after the widget was shown."""
    if widget.property("tone") == tone:
        return
    widget.setProperty("tone", tone)
    widget.style().unpolish(widget)
    widget.style().polish(widget)


def _redraw_chat_views(app: QApplication) -> None:
    # The chat's HTML carries the bubble colours, so a look change made outside the Settings dialog
    # (the OS switching) redraws it, as open_settings does after the dialog.
    for widget in app.allWidgets():
        if widget.objectName() == "chatView" and hasattr(widget, "redraw"):
            widget.redraw()


def _on_scheme_changed(scheme: Qt.ColorScheme) -> None:
    app = QApplication.instance()
    if app is not None and _chosen == "system":
        _apply_look(app, look_for("system", scheme))
        _redraw_chat_views(app)


def apply_theme(name: str) -> None:
    """Apply the ui.theme value `name` ("system", "light" or "dark"; anything else means "system").

    "system" follows the OS colour scheme, and keeps following it while the app runs.
    """
    global _chosen
    app = QApplication.instance()
    if app is None:
        return
    _chosen = name if name in THEMES else "system"
    hints = app.styleHints()
    # Where the platform allows, the window frames (title bars) take the chosen scheme too.
    scheme = SCHEMES.get(_chosen, Qt.ColorScheme.Unknown)
    if hints.colorScheme() != scheme or _chosen == "system":
        hints.setColorScheme(scheme)
    if not getattr(app, "_assistant_scheme_hooked", False):
        hints.colorSchemeChanged.connect(_on_scheme_changed)
        app._assistant_scheme_hooked = True
    _apply_look(app, look_for(_chosen))

