"""The window's keyboard shortcuts, in one table the window installs and the shortcut sheet
(Ctrl+/) shows. Qt writes "Ctrl" as ⌘ on macOS and maps it to Cmd there, so one table serves both.
Up (edit the last message) belongs to the message box (app/composer.py): it acts only when the
box is empty, so it never takes the arrow key from text being written."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QKeySequence, QShortcut
from PySide6.QtWidgets import QDialog, QDialogButtonBox, QGridLayout, QLabel, QVBoxLayout

from app.i18n import tr

# (keys, what they do, the window's method; None: handled where the focus is)
SHORTCUTS = (
    ("Ctrl+N", "New chat", "new_chat"),
    ("Ctrl+K", "Search chats", "focus_search"),
    ("Ctrl+L", "Write a message", "focus_composer"),
    ("Esc", "Stop the answer, leave a new branch before its first message, or leave a page", "stop"),
    ("Ctrl+R", "Answer the last message again", "regenerate"),
    ("Up", "Edit your last message (in an empty message box)", None),
    ("Ctrl+Shift+C", "Copy the last answer", "copy_answer"),
    ("Alt+Up", "The previous message's actions (Left and Right move along them, Esc goes back)", "previous_message"),
    ("Alt+Down", "The next message's actions", "next_message"),
    ("Ctrl+/", "Show the keyboard shortcuts", "show_shortcuts"),
    ("Ctrl+B", "Show or fold the chat list", "toggle_sidebar"),
    ("Ctrl+1", "Chats", "open_chats"),
    ("Ctrl+2", "Documents", "open_documents"),
    ("Ctrl+3", "Tools", "open_tools"),
    ("Ctrl+4", "Models", "open_models"),
    ("Ctrl+,", "Settings", "open_settings"),
)


def install(window) -> list[QShortcut]:
    """The shortcuts on `window` (while it is the active window); returned so they live with it."""
    made = []
    for keys, _what, method in SHORTCUTS:
        if method is None:
            continue
        shortcut = QShortcut(QKeySequence(keys), window)
        shortcut.setContext(Qt.WindowShortcut)
        shortcut.activated.connect(getattr(window, method))
        made.append(shortcut)
    return made


def shown(keys: str) -> str:
    """The keys as this platform writes them (⌘ on macOS)."""
    return QKeySequence(keys).toString(QKeySequence.NativeText)


class ShortcutSheet(QDialog):
    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("shortcutSheet")
        self.setWindowTitle(tr("Keyboard shortcuts"))
        grid = QGridLayout()
        for row, (keys, what, _method) in enumerate(SHORTCUTS):
            key = QLabel(f"<b>{shown(keys)}</b>")
            key.setAccessibleName(shown(keys))
            grid.addWidget(key, row, 0)
            grid.addWidget(QLabel(tr(what)), row, 1)
        buttons = QDialogButtonBox(QDialogButtonBox.Close)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addLayout(grid)
        layout.addWidget(buttons)
