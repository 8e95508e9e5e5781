"""Citations under an answer: the documents its [n] refer to (`done.sources`) as links
"[1] manual.pdf, p. 3", and opening one (a PDF at its page) with the desktop's own viewer."""

from __future__ import annotations

import hashlib
import html
import logging
from pathlib import Path

from app.i18n import tr

log = logging.getLogger(__name__)

SOURCES: dict[str, dict] = {}  # "cite:<key>" links in the chat view → {"path", "page"} they open
# Why a turn used no excerpt (engine/chat/turn_docs.py, turns.py), said in the UI's language.
SKIPPED = ("no excerpt fits the retrieval budget", "no room in the context", "empty query")


def source_label(src: dict) -> str:
    """"manual.pdf, p. 3" / "policy.md, Meals" / "log.txt, line 40": where an excerpt is."""
    name = Path(src.get("path") or "?").name
    if src.get("page") is not None:
        return tr("{name}, p. {page}").format(name=name, page=src["page"])
    if src.get("heading"):
        return tr("{name}, {heading}").format(name=name, heading=src["heading"])
    if src.get("line") is not None:
        return tr("{name}, line {line}").format(name=name, line=src["line"])
    return name


def _key(src: dict) -> str:
    key = hashlib.sha1(f"{src.get('path')}\0{src.get('page')}".encode("utf-8", "replace")).hexdigest()[:16]
    SOURCES[key] = {"path": src.get("path") or "", "page": src.get("page")}
    return key


def citations_html(stats: dict, colour: str) -> str:
    """The sources line under an answer, or why the documents were not used, in `colour` (the
    look's muted text); "" when off."""
    sources = stats.get("sources") or []
    if sources:
        links = [f"<a href='cite:{_key(s)}'>[{s.get('n', i + 1)}]&nbsp;{html.escape(source_label(s))}</a>"
                 for i, s in enumerate(sources)]
        return (f"<div style='color:{colour};font-size:small'>{html.escape(tr('Sources:'))} "
                + " &nbsp;·&nbsp; ".join(links) + "</div>")
    status = stats.get("documents") or "off"
    if status == "ok" or status.startswith("keywords only"):
        note = tr("No passage in your documents matched this question.")
    elif status.startswith("skipped: "):
        why = status[len("skipped: "):]
        note = tr("Documents not used: {why}").format(why=tr(why) if why in SKIPPED else why)
    else:
        return ""
    return f"<div style='color:{colour};font-size:small'>{html.escape(note)}</div>"


def source_urls(src: dict) -> list:
    """URLs to try, best first: a PDF at its page (`#page=N`, which browsers and most PDF viewers
    honour), then the plain file."""
    from PySide6.QtCore import QUrl

    plain = QUrl.fromLocalFile(src["path"])
    if src.get("page") and src["path"].lower().endswith(".pdf"):
        at_page = QUrl(plain)
        at_page.setFragment(f"page={int(src['page'])}")
        return [at_page, plain]
    return [plain]


def open_source(src: dict) -> str | None:
    """Open a cited document; None when done, else what went wrong, for the user."""
    from PySide6.QtGui import QDesktopServices

    path = Path(src.get("path") or "")
    if not path.is_file():
        return tr("{path} is no longer there (moved or deleted).").format(path=path)
    for url in source_urls(src):
        if QDesktopServices.openUrl(url):
            return None
        log.info("no program opened %s", url.toString())
    return tr("No program on this computer could open {path}.").format(path=path)
