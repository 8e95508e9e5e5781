"""User-visible strings go through `tr` (Qt's translate, context "app"). Chinese is installed as a
QTranslator built from the table in `app/zh_CN.py`, so it needs no lrelease step to build; Qt's own
strings (standard dialog buttons, context menus of text fields) come from Qt's shipped
`qtbase_zh_CN.qm`, which the installer bundles."""

from __future__ import annotations

from PySide6.QtCore import QLibraryInfo, QLocale, QTranslator

from app.words import CONTEXT, tr  # noqa: F401 - every widget imports tr from here


class TableTranslator(QTranslator):
    def __init__(self, table: dict[str, str]):
        super().__init__()
        self.table = table
        self.qt: QTranslator | None = None  # Qt's own strings in the same language

    def translate(self, context, source, disambiguation=None, n=-1):  # noqa: N802 - Qt's name
        if context == CONTEXT and source in self.table:
            return self.table[source]
        return None

    def isEmpty(self) -> bool:  # noqa: N802 - Qt's name
        return not self.table


def current_language() -> str:
    """The language the window speaks now: "zh_CN" while our table is installed, else "en"."""
    return "zh_CN" if tr("Settings") != "Settings" else "en"


def install(app, language: str) -> QTranslator | None:
    """Install the translator for `language` ("auto", "zh_CN", "en"); returns it (keep a reference)."""
    if language == "auto":
        language = "zh_CN" if QLocale.system().name().startswith("zh") else "en"
    if language != "zh_CN":
        return None
    from app.zh_CN import TABLE

    translator = TableTranslator(TABLE)
    translator.qt = QTranslator(app)  # kept with ours: remove both to switch back
    if translator.qt.load(QLocale(language), "qtbase", "_",
                          QLibraryInfo.path(QLibraryInfo.LibraryPath.TranslationsPath)):
        app.installTranslator(translator.qt)
    app.installTranslator(translator)
    return translator
