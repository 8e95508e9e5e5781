"""Local documents in the window, on the real engine (demo-small) with the real documents index and
embedder: the Documents panel (add a folder into a collection, per-file status with skip reasons,
progress, remove), a GUI loop that keeps ticking while a folder is indexed, the per-chat "Use my
documents" switch, and citations under an answer that open the file at its page. Screenshots of
the panel and of an answer with citations in English and Chinese (ASSISTANT_SCREENSHOTS=docs/screenshots
to refresh the docs' copies)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from PySide6.QtCore import Qt, QUrl
from PySide6.QtGui import QDesktopServices, QTextCursor
from PySide6.QtWidgets import QDialog, QFileDialog, QWidget

from app.citations import open_source, source_label, source_urls
from app.i18n import tr
from engine.api import Settings
from tests.test_docs_index import write_corpus

from .helpers import in_language, ready_window, save_screenshot, screenshot_dir, send
from .test_window import DriftProbe

QUESTION = "How long is the Zephyr kettle warranty?"


def open_panel(qtbot, w):
    w.findChild(QWidget, "documentsButton").click()
    panel = w.findChild(QDialog, "documentsPanel")
    assert panel is not None and panel.isVisible()
    return panel


def wait_indexed(qtbot, panel, timeout=120_000):
    """Until every add run has reported back, the panel lists what the engine holds, and every
    chunk has its vector (the embedder may still have been loading while the files were read)."""
    a = panel.worker.engine.assistant
    qtbot.waitUntil(lambda: panel.waiting == 0 and not panel.indexing and bool(panel.files)
                    and len(panel.files) == len(a.documents()), timeout=timeout)
    assert a.docs.flush(timeout / 1000)


def file_rows(panel) -> dict[str, list[str]]:
    m = panel.file_model
    return {Path(row["path"]).name: [m.cell(row, c) for c in range(m.columnCount())] for row in m.rows}


def cite_anchors(view) -> list[tuple[str, int]]:
    """(href, document position) of every citation link in the chat view."""
    found = []
    block = view.document().begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            fragment = it.fragment()
            href = fragment.charFormat().anchorHref()
            if href.startswith("cite:"):
                found.append((href, fragment.position()))
            it += 1
        block = block.next()
    return found


def click_at(qtbot, view, position: int) -> None:
    """A real mouse click on the text at `position` (QTextBrowser emits anchorClicked on release)."""
    cursor = QTextCursor(view.document())
    cursor.setPosition(position + 1)
    view.setTextCursor(cursor)
    view.ensureCursorVisible()
    point = view.cursorRect(cursor).center()
    qtbot.mouseClick(view.viewport(), Qt.LeftButton, pos=point)


@pytest.fixture
def window(qtbot, model_paths):
    w = ready_window(qtbot, "demo-small", n_ctx=2048, max_tokens=24)
    yield w
    w.close()


def test_a_folder_fills_the_panel_with_status_and_reasons_while_the_gui_keeps_ticking(
        qtbot, window, tmp_path, monkeypatch):
    corpus = write_corpus(tmp_path / "corpus")
    many = corpus / "many"
    many.mkdir()
    for i in range(150):  # enough files for the run to take a while on a fast machine
        (many / f"note{i:03}.md").write_text(f"# Note {i}\n\nItem {i} of the archive: shelf {i % 7}.\n",
                                             encoding="utf-8")
    panel = open_panel(qtbot, window)
    qtbot.waitUntil(lambda: panel.enabled and panel.roots_table.rowCount() == 0)
    monkeypatch.setattr(QFileDialog, "getExistingDirectory", staticmethod(lambda *a, **k: str(corpus)))
    probe = DriftProbe()
    seen = {"bar": False, "labels": set()}

    def watch():  # rides on the probe's GUI-thread timer: what the panel showed mid-run
        seen["bar"] |= panel.bar.isVisible()
        seen["labels"].add(panel.progress_label.text())

    probe.timer.timeout.connect(watch)
    probe.start()
    panel.add_folder_button.click()
    assert panel.waiting == 1 and panel.bar.isVisible() and panel.cancel_button.isVisible()
    wait_indexed(qtbot, panel)
    qtbot.waitUntil(lambda: panel.file_model.rowCount() == 156, timeout=60_000)
    qtbot.waitUntil(lambda: len(probe.gaps) >= 20, timeout=60_000)  # a count to judge, not a time (test_window)
    probe.stop()
    # The GUI loop kept ticking while the engine scanned, parsed, embedded and wrote 150+ files.
    gaps = sorted(probe.gaps)
    asked = probe.elapsed_ms / probe.INTERVAL_MS
    print(f"GUI timer while indexing: {len(gaps)} ticks of {asked:.0f} asked, max gap {gaps[-1]:.1f} ms; "
          f"shown: {sorted(seen['labels'])}")
    assert len(gaps) >= 20 and len(gaps) >= asked / 3, (len(gaps), asked)
    assert gaps[-max(1, len(gaps) // 100) - 1] < 100, gaps[-5:]
    assert seen["bar"] and any("Looking for files" in t or "files ·" in t for t in seen["labels"]), seen

    rows = file_rows(panel)
    stored = {Path(f["path"]).name: f for f in window.worker.assistant.documents()}
    assert rows["manual.pdf"][1:4] == ["indexed", "3", str(stored["manual.pdf"]["chunks"])]
    assert stored["manual.pdf"]["chunks"] >= 3
    assert rows["broken.pdf"][1] == "skipped: damaged or not a real PDF"
    assert rows["blob.txt"][1] == "skipped: not a text file (binary or unknown encoding)"
    assert rows["empty.md"][1] == "skipped: empty file"
    assert rows["minutes.txt"][0] == str(Path("notes") / "minutes.txt")  # shown under its folder
    assert "image.png" not in rows
    roots = panel.roots_table
    assert roots.rowCount() == 1
    assert [roots.item(0, c).text() for c in range(4)] == [str(corpus), "default", "156", roots.item(0, 3).text()]
    assert int(roots.item(0, 3).text()) >= 155
    assert "156 files: 153 indexed, 3 skipped" in panel.progress_label.text() and not panel.bar.isVisible()
    assert panel.message.text().startswith("Done: 153 indexed, 0 unchanged, 3 skipped, 0 removed.")

    # Files into another collection (typed in the combo), then removed again.
    extra = tmp_path / "extra"
    extra.mkdir()
    (extra / "a.md").write_text("# A\n\nAlpha.\n", encoding="utf-8")
    (extra / "b.md").write_text("# B\n\nBravo.\n", encoding="utf-8")
    monkeypatch.setattr(QFileDialog, "getOpenFileNames",
                        staticmethod(lambda *a, **k: ([str(extra / "a.md"), str(extra / "b.md")], "")))
    panel.collection.setCurrentText("work")
    panel.add_files_button.click()
    qtbot.waitUntil(lambda: roots.rowCount() == 3 and panel.waiting == 0, timeout=60_000)
    assert sorted(roots.item(r, 1).text() for r in range(3)) == ["default", "work", "work"]
    assert panel.collection.findText("work") >= 0
    row = next(r for r in range(3) if roots.item(r, 0).text() == str(extra / "a.md"))
    roots.selectRow(row)
    assert [Path(r["path"]).name for r in panel.file_model.rows] == ["a.md"]  # the selected root's files
    panel.remove_button.click()
    qtbot.waitUntil(lambda: roots.rowCount() == 2)
    assert str(extra / "a.md") not in [roots.item(r, 0).text() for r in range(2)]
    assert [f["path"] for f in window.worker.assistant.documents("work")] == [str(extra / "b.md")]


def test_cancel_stops_the_running_and_the_queued_runs(qtbot, window, tmp_path):
    big, queued = tmp_path / "big", tmp_path / "queued"
    for folder, n in ((big, 400), (queued, 20)):
        folder.mkdir()
        for i in range(n):
            (folder / f"n{i:03}.md").write_text(f"# Note {i}\n\nShelf {i % 9}, box {i}.\n", encoding="utf-8")
    # The indexer holds at its fifth file until the Cancel reaches the run: however fast the machine,
    # it cannot finish all 400 files between what the test saw and the click.
    docs = window.worker.assistant.docs
    index_file, seen = docs.indexer._index_file, []

    def held(root_id, found, stored, report, cancel):
        seen.append(found.path)
        if len(seen) == 5:
            cancel.wait(120)
        return index_file(root_id, found, stored, report, cancel)

    docs.indexer._index_file = held
    panel = open_panel(qtbot, window)
    panel.add_paths([str(big)])
    panel.add_paths([str(queued)], "later")
    # Some files written, not all, and the second run queued: the cancel has something to keep
    # and two runs to stop.
    qtbot.waitUntil(lambda: bool(re.match(r"[1-9]\d* of 400 files", panel.progress_label.text()))
                    and window.worker.assistant.documents_progress()["queued"] == 2, timeout=60_000)
    assert panel.cancel_button.isVisible()
    panel.cancel_button.click()
    qtbot.waitUntil(lambda: panel.waiting == 0 and not panel.cancel_button.isVisible(), timeout=60_000)
    assert panel.message.text().startswith("Indexing cancelled: ")
    files = window.worker.assistant.documents()
    assert 0 < len(files) < 400 and not window.worker.assistant.documents("later")


def test_use_my_documents_is_kept_per_chat(qtbot, window):
    toggle = window.findChild(QWidget, "useDocuments")
    assert toggle.isEnabled() and not toggle.isChecked()
    a = window.worker.assistant
    toggle.click()  # no chat yet: the chat the first message makes takes it
    send(qtbot, window, "Hello!")
    first = window.conversation_id
    assert a.conversation_docs(first) == "*"
    window.new_chat()
    qtbot.waitUntil(lambda: window.conversation_id != first and not window.busy, timeout=30_000)
    second = window.conversation_id
    qtbot.waitUntil(lambda: a.conversation_docs(second) == "*")  # a new chat starts as the switch stands
    toggle.click()
    qtbot.waitUntil(lambda: a.conversation_docs(second) is None)
    send(qtbot, window, "Hi again!")

    def select(cid):
        item = next(item for item in window.sidebar.chat_items() if item.data(Qt.UserRole) == cid)
        window.chat_list.setCurrentItem(item)

    select(first)
    qtbot.waitUntil(toggle.isChecked)
    select(second)
    qtbot.waitUntil(lambda: not toggle.isChecked())
    select(first)
    qtbot.waitUntil(toggle.isChecked)

    # L3 set up without docs.allow_remote: the switch says the documents stay here.
    note = window.findChild(QWidget, "documentsLocalNote")
    assert note.isHidden()
    Settings().set("l3.base_url", "http://127.0.0.1:9/v1")
    window.docs_toggle.read_settings()
    assert note.isVisible() and "stay on this computer" in note.text()
    Settings().set("docs.allow_remote", True)
    window.docs_toggle.read_settings()
    assert note.isHidden()


def test_the_settings_checkbox_allows_documents_on_l3(qtbot, assistant_home):
    from app.settings_dialog import SettingsDialog

    settings = Settings(assistant_home / "settings.json")
    dialog = SettingsDialog(settings)
    qtbot.addWidget(dialog)
    box = dialog.findChild(QWidget, "docsAllowRemote")
    assert not box.isChecked() and "remote model (L3)" in box.text()
    box.setChecked(True)
    dialog.save()
    assert Settings(assistant_home / "settings.json").get("docs.allow_remote") is True


def test_citations_under_an_answer_open_the_file_at_its_page(qtbot, window, tmp_path, monkeypatch):
    corpus = write_corpus(tmp_path / "corpus")
    panel = open_panel(qtbot, window)
    panel.add_paths([str(corpus)])
    wait_indexed(qtbot, panel)
    window.findChild(QWidget, "useDocuments").click()
    done = send(qtbot, window, QUESTION)
    sources = done.stats["sources"]
    pdf = next(s for s in sources if Path(s["path"]).name == "manual.pdf" and s["page"] == 3)
    assert done.stats["documents"] == "ok"
    html = window.view.toHtml()
    assert f"[{pdf['n']}]" in html and "manual.pdf, p. 3" in html
    anchors = cite_anchors(window.view)
    assert len(anchors) == len(sources)

    opened: list[QUrl] = []
    monkeypatch.setattr(QDesktopServices, "openUrl", staticmethod(lambda url: opened.append(QUrl(url)) or True))
    href, position = anchors[sources.index(pdf)]
    click_at(qtbot, window.view, position)
    qtbot.waitUntil(lambda: len(opened) == 1)
    assert opened[0].isLocalFile() and opened[0].toLocalFile() == str(corpus / "manual.pdf")
    assert opened[0].fragment() == "page=3"

    # A viewer that refuses the page anchor gets the plain file.
    opened.clear()
    monkeypatch.setattr(QDesktopServices, "openUrl",
                        staticmethod(lambda url: opened.append(QUrl(url)) or not QUrl(url).hasFragment()))
    assert open_source(pdf) is None
    assert [u.hasFragment() for u in opened] == [True, False]

    # A file that has gone: a plain message in the status line, no crash.
    (corpus / "manual.pdf").unlink()
    opened.clear()
    click_at(qtbot, window.view, position)
    qtbot.waitUntil(lambda: "no longer there" in window.status_label.text())
    assert opened == [] and window.isVisible()


def test_source_labels_and_urls():
    assert source_label({"path": "/d/manual.pdf", "page": 3}) == "manual.pdf, p. 3"
    assert source_label({"path": "/d/policy.md", "page": None, "heading": "Meals"}) == "policy.md, Meals"
    assert source_label({"path": "/d/log.txt", "page": None, "heading": None, "line": 40}) == "log.txt, line 40"
    with in_language("zh_CN"):
        assert source_label({"path": "/d/manual.pdf", "page": 3}) == "manual.pdf，第 3 页"
        assert tr("skipped: {reason}").format(reason=tr("empty file")) == "已跳过：空文件"
    assert [u.toString() for u in source_urls({"path": "/d/manual.pdf", "page": 3})] == \
        ["file:///d/manual.pdf#page=3", "file:///d/manual.pdf"]
    assert [u.toString() for u in source_urls({"path": "/d/notes.md", "page": None})] == ["file:///d/notes.md"]


def test_every_skip_reason_has_a_chinese_translation():
    from app.zh_CN import TABLE
    from engine.docs import parse

    reasons = {v for k, v in vars(parse).items() if k.isupper() and isinstance(v, str) and k != "CODE_SUFFIXES"
               and not k.startswith("_") and " " in v}
    assert reasons and not sorted(r for r in reasons if r not in TABLE)


def test_screenshots_of_the_panel_and_citations_in_both_languages(qtbot, model_paths, tmp_path):
    corpus = write_corpus(tmp_path / "corpus")
    out = screenshot_dir(tmp_path)
    questions = {"en": QUESTION, "zh_CN": "Zephyr kettle 的保修期（warranty）是多久？"}
    for language in ("en", "zh_CN"):
        with in_language(language):
            w = ready_window(qtbot, "demo-small", n_ctx=2048, max_tokens=40)
            panel = open_panel(qtbot, w)
            if language == "en":
                panel.add_paths([str(corpus)])
            wait_indexed(qtbot, panel)
            qtbot.waitUntil(lambda: (panel.worker.status() or {}).get("embedder") == "ready", timeout=60_000)
            panel.roots_table.clearSelection()
            panel.update_progress()
            summary = tr("{files} files: {indexed} indexed, {skipped} skipped · {chunks} chunks")
            chunks = sum(f["chunks"] for f in panel.files)
            assert panel.progress_label.text() == summary.format(files=6, indexed=3, skipped=3, chunks=chunks)
            save_screenshot(qtbot, panel, out / f"documents-panel-{language}.png", 860, 560)
            panel.hide()
            w.findChild(QWidget, "useDocuments").click()
            done = send(qtbot, w, questions[language])
            assert done.stats["sources"], done.stats["documents"]
            page = "第 3 页" if language == "zh_CN" else "p. 3"
            assert page in w.view.toHtml()
            save_screenshot(qtbot, w, out / f"citations-{language}.png", 1200, 760)
            w.close()
