"""The chat's switches as chips inside the composer (app/composer.py `chip`): "Use my documents",
Think and Tools. Each is the chat's own and is stored through the engine (documents and Think) or the
settings (Tools); the window keeps them as docs_toggle, think_toggle and tools_toggle."""

from __future__ import annotations

from app.a11y import describe
from app.composer import chip
from app.documents_toggle import DocumentsToggle
from app.i18n import tr
from app.think_toggle import ThinkToggle
from engine.api import Settings


def build_chips(window) -> None:
    """The chat's switches, as chips in the composer: "Use my documents", Think, Tools. A
    message's own actions (copy, answer again, edit, branch, delete) are on the message."""
    window.docs_toggle = DocumentsToggle()  # "Use my documents" for the chat shown
    window.docs_toggle.setEnabled(False)  # until the engine says documents are on
    window.docs_toggle.read_settings()
    window.docs_toggle.sig_set.connect(
        lambda cid, on: window.docs_worker.set_conversation(cid, on, window.docs_toggle.show_state))
    window.docs_toggle.sig_query.connect(
        lambda cid: window.docs_worker.get_conversation(cid, window.docs_toggle.show_state))
    window.think_toggle = ThinkToggle(bool(Settings.shared().get("reasoning.think")))
    window.think_toggle.sig_set.connect(
        lambda cid, on: window.worker.call(lambda a: a.set_conversation_think(cid, on), lambda _: None))
    window.tools_toggle = chip("toolsToggle", tr("Tools"), "wrench")  # offer the tools (built-in and MCP)
    describe(window.tools_toggle, tr("Tools"), tr("The model may call tools: the built-in ones and your MCP "
                                                 "servers. Every call asks you first."))
    window.tools_toggle.setChecked(bool(Settings.shared().get("tools.enabled")))
    window.tools_toggle.toggled.connect(lambda on: Settings.shared().set("tools.enabled", on))
    for part in (window.docs_toggle, window.think_toggle, window.tools_toggle):
        window.composer.add_chip(part)
