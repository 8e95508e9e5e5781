"""`assistant docs add|search|list|remove` on real files, the real SQLite and the bundled embedder
(in-process through `main([...])`, one run through the real entry point), and `chat --docs`'s
sources on the scripted fake backend. The same with a real model: tests/model/test_cli_docs.py."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from engine.cli.docs import label, sources_text, use_documents
from engine.cli.main import ChatLoop, Output, build_parser
from engine.cli.main import main as assistant_main
from engine.docs.service import DocumentService
from engine.storage import Database
from tests import fake_backend, test_docs_index
from tests.test_docs_index import write_corpus
from tests.util import cli, cli_env

# Fixtures shared with the documents' other tests (module attributes: pytest finds them here).
fakes, make_assistant, embedder = fake_backend.fakes, fake_backend.make_assistant, test_docs_index.embedder

REASONS = {"blob.txt": "not a text file (binary or unknown encoding)", "empty.md": "empty file",
           "broken.pdf": "damaged or not a real PDF"}
HIT_KEYS = {"path", "page", "text", "score", "heading", "line", "collection"}


def docs_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = assistant_main(["docs", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def docs_json(capsys, *argv: str):
    code, out, err = docs_cli(capsys, *argv, "--json")
    assert code == 0, err
    return json.loads(out)


def test_add_reports_the_issue_shape_then_only_what_changed(capsys, tmp_path):
    folder = write_corpus(tmp_path / "corpus")
    report = docs_json(capsys, "add", str(folder))
    assert list(report) == ["indexed", "unchanged", "removed", "chunks", "seconds", "skipped"]
    assert all(type(report[k]) is int for k in ("indexed", "unchanged", "removed", "chunks"))
    assert type(report["seconds"]) is float and report["seconds"] > 0
    assert (report["indexed"], report["unchanged"], report["removed"]) == (3, 0, 0)
    assert all(set(s) == {"path", "reason"} for s in report["skipped"])
    assert {Path(s["path"]).name: s["reason"] for s in report["skipped"]} == REASONS
    listed = docs_json(capsys, "list")["files"]
    assert report["chunks"] == sum(f["chunks"] for f in listed) > 3  # PDF pages and headings each start one

    again = docs_json(capsys, "add", str(folder))  # nothing changed: nothing read, skips still said
    assert (again["indexed"], again["unchanged"], again["removed"], again["chunks"]) == (0, 6, 0, 0)
    assert {Path(s["path"]).name for s in again["skipped"]} == set(REASONS)

    policy = folder / "policy.md"
    policy.write_text("# Travel policy\n\nThe daily per diem abroad is 61 dollars.\n", encoding="utf-8")
    os.utime(policy, ns=(time.time_ns(), time.time_ns() + 10**9))
    (folder / "manual.pdf").unlink()
    third = docs_json(capsys, "add", str(folder))
    assert (third["indexed"], third["unchanged"], third["removed"], third["chunks"]) == (1, 4, 1, 1)
    hits = docs_json(capsys, "search", "Zephyr kettle warranty", "--k", "5")["hits"]
    assert all(Path(h["path"]).name != "manual.pdf" for h in hits)


def test_add_in_words_and_a_missing_path(capsys, tmp_path):
    folder = write_corpus(tmp_path / "corpus")
    code, out, err = docs_cli(capsys, "add", str(folder), str(tmp_path / "nope"), "--collection", "work")
    assert code == 1 and f"{tmp_path / 'nope'}: no such file or folder" in err  # the rest is indexed anyway
    assert f"skipped {folder / 'broken.pdf'}: damaged or not a real PDF\n" in out
    assert f"skipped {tmp_path / 'nope'}: not found\n" in out
    assert out.splitlines()[-1].startswith("indexed 3 files (") and "0 unchanged, 0 removed, 4 skipped" in out
    assert "collection 'work'" in out and "Traceback" not in err


def test_search_gives_the_pdf_page_and_text_anchors(capsys, tmp_path):
    docs_cli(capsys, "add", str(write_corpus(tmp_path / "corpus")))
    hits = docs_json(capsys, "search", "how long is the kettle guaranteed", "--k", "3")["hits"]
    assert 1 <= len(hits) <= 3 and all(set(h) == HIT_KEYS for h in hits)
    top = hits[0]
    assert Path(top["path"]).name == "manual.pdf" and top["page"] == 3 and "three years" in top["text"]
    assert type(top["score"]) is float and top["heading"] is None
    assert [h["score"] for h in hits] == sorted((h["score"] for h in hits), reverse=True)
    md = next(h for h in docs_json(capsys, "search", "meal allowance when travelling abroad")["hits"]
              if h["path"].endswith("policy.md"))
    assert md["page"] is None and md["heading"] == "Meals" and md["line"] == 5
    assert len(docs_json(capsys, "search", "Zephyr kettle", "--k", "1")["hits"]) == 1
    code, out, _ = docs_cli(capsys, "search", "how long is the kettle guaranteed", "--k", "1")
    assert code == 0 and out.startswith("[1] manual.pdf, page 3  (") and "three years" in out


def test_collections_filter_search_and_list(capsys, tmp_path):
    docs_cli(capsys, "add", str(write_corpus(tmp_path / "a")), "--collection", "work")
    home = tmp_path / "b"
    home.mkdir()
    (home / "kettle.md").write_text("# Kettles\n\nThe Zephyr kettle warranty lasts five years in Norway.\n")
    docs_cli(capsys, "add", str(home), "--collection", "home")
    hits = docs_json(capsys, "search", "Zephyr kettle warranty", "--collection", "home")["hits"]
    assert hits and {h["collection"] for h in hits} == {"home"}
    listing = docs_json(capsys, "list")
    assert sorted((c["name"], c["roots"], c["files"]) for c in listing["collections"]) == [("home", 1, 1), ("work", 1, 6)]
    assert [(r["path"], r["collection"]) for r in listing["roots"]] == [(str(tmp_path / "a"), "work"), (str(home), "home")]
    assert all(r["scanned"] for r in listing["roots"])
    files = {Path(f["path"]).name: f for f in listing["files"]}
    assert files["broken.pdf"]["status"] == "skipped" and files["broken.pdf"]["reason"] == REASONS["broken.pdf"]
    assert files["manual.pdf"]["status"] == "indexed" and files["manual.pdf"]["pages"] == 3
    assert "id" not in files["manual.pdf"] and "root_id" not in files["manual.pdf"]
    only = docs_json(capsys, "list", "--collection", "home")
    assert [c["name"] for c in only["collections"]] == ["home"] and len(only["files"]) == 1
    code, out, _ = docs_cli(capsys, "list")
    assert code == 0 and "collection work: 1 folder or file added, 6 files," in out
    assert "    skipped  broken.pdf: damaged or not a real PDF\n" in out
    assert "    indexed  manual.pdf  (3 pages, 3 chunks)\n" in out
    assert "    indexed  notes/minutes.txt  (1 chunk)\n" in out


def test_remove_a_file_a_folder_and_a_collection(capsys, tmp_path):
    folder = write_corpus(tmp_path / "a")
    docs_cli(capsys, "add", str(folder))
    other = tmp_path / "b"
    other.mkdir()
    (other / "x.md").write_text("# X\n\nSomething about xylophones.\n")
    docs_cli(capsys, "add", str(other), "--collection", "music")
    assert docs_json(capsys, "remove", str(folder / "policy.md")) == {"roots": 0, "files": 1}
    code, _, err = docs_cli(capsys, "remove", str(folder / "policy.md"))
    assert code == 4 and "is not in the documents index" in err and "assistant docs list" in err
    code, out, _ = docs_cli(capsys, "remove", str(folder))
    assert code == 0 and out == f"removed {folder} from the index (5 files; the files on disk are left alone)\n"
    assert folder.is_dir() and (folder / "manual.pdf").is_file()
    assert docs_json(capsys, "remove", "--collection", "music") == {"roots": 1, "files": 1}
    assert docs_json(capsys, "list") == {"collections": [], "roots": [], "files": []}
    code, out, _ = docs_cli(capsys, "search", "xylophones")
    assert code == 0 and "no documents indexed yet" in out


@pytest.mark.parametrize("argv,code,message", [
    (["search", ""], 2, "the query is empty"),
    (["search", "a\x00b"], 2, "NUL"),
    (["search", "x" * 10_001], 2, "too long"),
    (["search", "kettle", "--k", "0"], 2, "--k"),
    (["search", "kettle", "--collection", "nope"], 4, "no collection named 'nope'"),
    (["list", "--collection", "nope"], 4, "no collection named 'nope'"),
    (["add", ".", "--collection", " "], 2, "collection name is empty"),
    (["remove"], 2, "give a PATH or --collection"),
    (["remove", "x", "--collection", "y"], 2, "give a PATH or --collection"),
    (["remove", "/no/such/folder"], 4, "not in the documents index"),
    (["remove", "--collection", "nope"], 4, "no collection named 'nope'"),
])
def test_bad_input_exit_codes(capsys, argv, code, message):
    got, out, err = docs_cli(capsys, *argv)
    assert got == code and message in err and "Traceback" not in err and out == ""
    got, out, err = docs_cli(capsys, *argv, "--json")  # the error as a JSON event on stdout
    assert got == code and json.loads(out) == {"event": "error", "message": json.loads(out)["message"]}
    assert message in json.loads(out)["message"]


def test_the_real_command_keeps_stdout_to_one_json_object(tmp_path):
    folder = write_corpus(tmp_path / "corpus")
    proc = subprocess.run(cli("docs", "add", str(folder), "--json"), capture_output=True,
                          env=cli_env(tmp_path / "home"), timeout=300)
    assert proc.returncode == 0, proc.stderr.decode()
    assert json.loads(proc.stdout)["indexed"] == 3  # pypdf's complaints about broken.pdf stay on stderr
    assert b"Traceback" not in proc.stderr


# ---- chat --docs, on the fake backend
@pytest.fixture
def docs(tmp_path, embedder):
    db = Database(tmp_path / "docs.db")
    service = DocumentService(db, embedder)
    service.add([write_corpus(tmp_path / "corpus")], "work").result()
    yield service
    service.close()
    db.close()


@pytest.mark.parametrize("json_mode", [True, False])
def test_chat_docs_prints_the_sources(capsys, tmp_path, fakes, make_assistant, docs, json_mode):
    a = make_assistant(str(fakes.model_file("m")), docs=docs, retrieval_max_tokens=400)
    cid = a.new_conversation()
    args = build_parser().parse_args(["chat", "--docs", "--max-tokens", "16"] + (["--json"] * json_mode))
    assert args.docs is True and use_documents(a, cid, args.docs) is None
    assert a.conversation_docs(cid) == "*"
    assert ChatLoop(a, args, Output(json_mode), cid).run(iter(["How long is the Zephyr kettle warranty?"]),
                                                         interactive=False) == 0
    out = capsys.readouterr().out
    if json_mode:
        (done,) = [e for e in map(json.loads, out.splitlines()) if e["event"] == "done"]
        first = done["sources"][0]
        assert {"path", "page", "text", "score"} <= set(first)
        assert Path(first["path"]).name == "manual.pdf" and first["page"] == 3 and first["n"] == 1
        assert done["stats"]["documents"] == "ok"
    else:
        assert f"Sources:\n  [1] manual.pdf, page 3  {tmp_path / 'corpus' / 'manual.pdf'}\n" in out


def test_chat_docs_with_a_collection_name(fakes, make_assistant, docs):
    a = make_assistant(str(fakes.model_file("m")), docs=docs)
    cid = a.new_conversation()
    assert build_parser().parse_args(["chat", "--docs", "work"]).docs == "work"
    assert build_parser().parse_args(["chat"]).docs is None
    assert "no collection named 'home' (collections: work;" in use_documents(a, cid, "home")
    assert a.conversation_docs(cid) is None
    assert use_documents(a, cid, "work") is None and a.conversation_docs(cid) == "work"
    off = make_assistant(str(fakes.model_file("m")))
    assert "turned off" in use_documents(off, off.new_conversation(), True)


def test_labels_and_the_sources_block():
    assert label({"path": "/d/manual.pdf", "page": 3, "heading": "X", "line": 1}) == "manual.pdf, page 3"
    assert label({"path": "/d/policy.md", "page": None, "heading": "Meals", "line": 5}) == "policy.md, Meals"
    assert label({"path": "/d/log.txt", "page": None, "heading": None, "line": 40}) == "log.txt, line 40"
    assert sources_text([]) == ""
    assert sources_text([{"n": 1, "path": "/d/a.pdf", "page": 2}, {"n": 2, "path": "/d/b.md", "page": None}]) == \
        "Sources:\n  [1] a.pdf, page 2  /d/a.pdf\n  [2] b.md  /d/b.md"
