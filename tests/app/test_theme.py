"""Looks (app/theme.py): each look's tokens reach the palette, the stylesheet and the chat bubbles;
"system" follows the OS colour scheme and re-applies when it changes; the stylesheet leaves the
bundled CJK font in place."""

import re

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QFont, QPalette, QRawFont
from PySide6.QtWidgets import QApplication, QLabel

from app import render, theme
from app.main import CJK_FAMILY, setup_application


@pytest.fixture
def app(qtbot):
    app = QApplication.instance()
    yield app
    theme.apply_theme("light")


def window_colour(app) -> str:
    return app.palette().color(QPalette.Window).name()


@pytest.mark.parametrize("look", ["light", "dark"])
def test_each_look_puts_its_tokens_in_palette_stylesheet_and_bubbles(app, look):
    theme.apply_theme(look)
    t = theme.TOKENS[look]
    p = app.palette()
    assert window_colour(app) == t["window"]
    assert p.color(QPalette.Base).name() == t["surface"] and p.color(QPalette.Text).name() == t["text"]
    assert p.color(QPalette.Highlight).name() == t["accent"]
    assert p.color(QPalette.Disabled, QPalette.ButtonText).name() == t["muted"]
    sheet = app.styleSheet()
    assert f"background: {t['accent']}; color: {t['accent_text']}" in sheet  # a checked button
    assert f"QToolButton#sendButton {{ background: {t['accent']};" in sheet  # the round Send button
    assert f"border-radius: {t['radius']}px" in sheet
    # Written only in tokens: every colour in the sheet is one of the look's.
    colours = {v for v in t.values() if isinstance(v, str)}
    assert set(re.findall(r"#[0-9a-f]{6}", sheet)) <= colours
    assert "$" not in sheet and "font-family" not in sheet
    assert render.COLOURS["assistant"] == t["raised"] and render.COLOURS["meta"] == t["muted"]
    assert app.property("assistantLook") == look


def test_system_follows_the_os_scheme_and_its_changes(app, monkeypatch):
    monkeypatch.setattr(theme, "system_scheme", lambda: Qt.ColorScheme.Dark)
    theme.apply_theme("system")
    assert window_colour(app) == theme.TOKENS["dark"]["window"]
    # The OS switches while the app runs: the look follows at once.
    app.styleHints().colorSchemeChanged.emit(Qt.ColorScheme.Light)
    assert window_colour(app) == theme.TOKENS["light"]["window"]
    assert theme.TOKENS["light"]["accent"] in app.styleSheet()
    app.styleHints().colorSchemeChanged.emit(Qt.ColorScheme.Dark)
    assert window_colour(app) == theme.TOKENS["dark"]["window"]
    # Unknown (a platform that does not say) means light.
    app.styleHints().colorSchemeChanged.emit(Qt.ColorScheme.Unknown)
    assert app.property("assistantLook") == "light"


def test_a_chosen_look_stays_when_the_os_switches(app, monkeypatch):
    monkeypatch.setattr(theme, "system_scheme", lambda: Qt.ColorScheme.Light)
    theme.apply_theme("dark")
    app.styleHints().colorSchemeChanged.emit(Qt.ColorScheme.Light)
    assert window_colour(app) == theme.TOKENS["dark"]["window"]
    theme.apply_theme("light")  # switching at runtime, as the Settings dialog does
    assert window_colour(app) == theme.TOKENS["light"]["window"]
    theme.apply_theme("pink")  # not a value: follows the system
    assert app.property("assistantLook") == "light"


@pytest.mark.parametrize("look", ["light", "dark"])
def test_styled_widgets_keep_the_bundled_cjk_font(app, qtbot, look):
    setup_application(app)
    theme.apply_theme(look)
    title = QLabel("文档")
    title.setObjectName("pageTitle")  # a rule with font-weight and font-size: the family list must survive it
    qtbot.addWidget(title)
    title.ensurePolished()
    assert CJK_FAMILY in title.font().families() and title.font().weight() >= QFont.DemiBold
    raw = QRawFont.fromFont(QFont(CJK_FAMILY))
    assert all(raw.glyphIndexesForString("发送跟随系统"))


def test_the_chat_bubbles_follow_an_os_switch(app, qtbot, monkeypatch):
    from app.engine_worker import EngineWorker
    from app.main import create_main_window

    w = create_main_window(worker=EngineWorker("/nonexistent.gguf", memory=False))
    qtbot.addWidget(w)
    monkeypatch.setattr(theme, "system_scheme", lambda: Qt.ColorScheme.Light)
    theme.apply_theme("system")
    w.view.resize(600, 300)
    from app.transcript import Shown

    w.view.set_messages([Shown("user", "你好"), Shown("assistant", "Hi", stats={"level": "L1", "model": "m"})])
    assert theme.TOKENS["light"]["raised"] in w.view.toHtml()  # the tier badge
    assert render.COLOURS["user"] in bubble_colours(w.view)
    app.styleHints().colorSchemeChanged.emit(Qt.ColorScheme.Dark)
    html = w.view.toHtml()
    assert theme.TOKENS["dark"]["raised"] in html and theme.TOKENS["light"]["raised"] not in html
    assert render.COLOURS["user"] == theme._mix(theme.TOKENS["dark"]["accent"], theme.TOKENS["dark"]["surface"], 0.22)
    assert render.COLOURS["user"] in bubble_colours(w.view)  # the bubble is painted in the new look's colour
    w.close()


def bubble_colours(view) -> set[str]:
    """The colours drawn in the chat's top right corner, where the user's bubble is painted."""
    image = view.viewport().grab().toImage()
    return {image.pixelColor(x, y).name() for x in range(image.width() - 60, image.width() - 20, 4)
            for y in range(4, 30, 2)}


@pytest.mark.parametrize("look", ["light", "dark"])
def test_tones_and_the_chats_notices_take_the_looks_colours(app, qtbot, look):
    from PySide6.QtWidgets import QLabel

    theme.apply_theme(look)
    t = theme.TOKENS[look]
    for tone, key in (("muted", "muted"), ("hint", "muted"), ("warn", "warn"), ("notice", "warn"), ("info", "info")):
        label = QLabel("x")
        qtbot.addWidget(label)
        theme.set_tone(label, tone)
        label.ensurePolished()
        assert label.palette().color(QPalette.WindowText).name() == t[key], tone
    assert theme.colour("danger") == t["danger"]
    notices = render.notices_html({"confidence": {"low": True, "geo_mean_prob": 0.3,
                                                  "weak_spans": [{"text": "perhaps"}]},
                                   "risk": {"caution": "See a doctor."}})
    assert all(t[k] in notices for k in ("warn", "mark", "danger"))
    assert render.COLOURS["code_style"] == theme.CODE_STYLES[look]
    code = render.markdown_html("```python\ndef f(x):\n    return 'x'\n```")
    other = theme.CODE_STYLES["dark" if look == "light" else "light"]
    # The code block is painted rounded by the view (app/chat_surface.py) in the look's colours
    assert render.COLOURS["code"] == t["raised"] and render.COLOURS["border"] == t["border"]
    assert t["muted"] in code  # its header
    render.set_colours(code_style=other)  # the other style colours the same code otherwise
    assert render.markdown_html("```python\ndef f(x):\n    return 'x'\n```") != code
