"""The labelled document-retrieval set (tests/data/docs_eval) is sound: every file parses, every
expected answer sits in its file on the stated page, and no question copies its document's wording.

Fast and model-free: it checks the data, not retrieval.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from functools import lru_cache
from pathlib import Path

import pytest

from engine.docs.chunks import chunks
from engine.docs.parse import Parsed, parse

ROOT = Path(__file__).resolve().parent / "data" / "docs_eval"
CORPUS = ROOT / "corpus"
QUESTIONS = [json.loads(line) for line in (ROOT / "questions.jsonl").read_text(encoding="utf-8").splitlines()
             if line.strip()]
FILES = sorted(p.name for p in CORPUS.iterdir() if p.is_file())
BY_ID = {q["id"]: q for q in QUESTIONS}

_HAN = r"\u3400-\u9fff"
_WIDE = _HAN + r"\u3000-\u303f\uff00-\uffef"  # Han plus CJK and full-width punctuation
_SPACE_NEAR_WIDE = re.compile(rf"(?<=[{_WIDE}]) | (?=[{_WIDE}])")
EN_RUN = 5  # words a question may not share, in a row, with its document
ZH_RUN = 6  # Han characters likewise


def norm(text: str) -> str:
    """Whitespace collapsed, and dropped next to CJK (PDF lines break inside Chinese sentences)."""
    return _SPACE_NEAR_WIDE.sub("", " ".join(text.split()))


@lru_cache(maxsize=None)
def parsed(name: str) -> Parsed:
    return parse(CORPUS / name)


def full_text(name: str) -> str:
    return "\n".join(b.text for b in parsed(name).blocks)


def is_chinese(text: str) -> bool:
    han = len(re.findall(f"[{_HAN}]", text))
    return han > len(re.findall(r"[A-Za-z]", text))


def needles(q: dict) -> list[str]:
    return q["items"] if q["kind"] == "list" else [q["answer"]]


# --- the corpus ----------------------------------------------------------------------------------

@pytest.mark.parametrize("name", FILES)
def test_every_file_parses(name):
    doc = parsed(name)  # a Skip fails the test
    assert doc.blocks and sum(len(b.text) for b in doc.blocks) > 500


def test_formats_languages_and_size():
    kinds = Counter(parsed(n).kind for n in FILES)
    assert kinds["pdf"] >= 4 and kinds["docx"] >= 3 and kinds["markdown"] >= 3
    assert kinds["text"] >= 2 and kinds["html"] >= 2
    pdfs = [n for n in FILES if parsed(n).kind == "pdf"]
    assert sum(is_chinese(full_text(n)) for n in pdfs) >= 2
    assert sum(not is_chinese(full_text(n)) for n in pdfs) >= 2
    for n in pdfs:
        pages = [b.page for b in parsed(n).blocks]
        assert pages == list(range(1, len(pages) + 1)) and 3 <= len(pages) <= 8, n
    chinese = sum(is_chinese(full_text(n)) for n in FILES)
    assert 0.4 <= chinese / len(FILES) <= 0.6
    assert sum((CORPUS / n).stat().st_size for n in FILES) < 3 * 1024 * 1024


def test_one_text_file_is_gbk_and_decodes():
    gbk = []
    for n in FILES:
        data = (CORPUS / n).read_bytes()
        if parsed(n).kind != "text":
            continue
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            gbk.append(n)
            assert norm(full_text(n)) == norm(data.decode("gbk")), "encoding detection got it wrong"
    assert gbk, "no GBK text file"


@pytest.mark.parametrize("name", [n for n in FILES if n.endswith(".html")])
def test_html_script_and_style_are_not_indexed(name):
    raw = (CORPUS / name).read_text(encoding="utf-8")
    hidden = re.findall(r"<(script|style|noscript)\b[^>]*>(.*?)</\1>", raw, flags=re.S | re.I)
    assert any(tag == "script" for tag, _ in hidden) and any(tag == "style" for tag, _ in hidden)
    text = full_text(name)
    for _, body in hidden:
        for line in body.splitlines():
            line = re.sub(r"<[^>]+>", "", line).strip()
            if len(line) >= 6:
                assert line not in text
    assert "{" not in text and "function" not in text


# --- the questions -------------------------------------------------------------------------------

def test_question_fields():
    assert len(BY_ID) == len(QUESTIONS), "duplicate id"
    for q in QUESTIONS:
        assert set(q) <= {"id", "lang", "question", "file", "page", "answer", "kind", "items"}, q["id"]
        assert re.fullmatch(rf"{q['lang']}-\d\d", q["id"]) and q["lang"] in ("en", "zh")
        assert q["kind"] in ("fact", "list", "cross") and q["answer"].strip()
        assert is_chinese(q["question"]) == (q["lang"] == "zh"), q["id"]
        assert q["file"] in FILES, q["id"]
        if q["file"].endswith(".pdf"):
            assert isinstance(q["page"], int) and q["page"] >= 1, q["id"]
        else:
            assert q["page"] is None, q["id"]
        if q["kind"] == "list":
            assert len(q["items"]) >= 2, q["id"]
        else:
            assert "items" not in q, q["id"]
        doc_zh = is_chinese(full_text(q["file"]))
        assert (q["kind"] == "cross") == (doc_zh != (q["lang"] == "zh")), f"{q['id']}: cross means the other language"


def test_counts():
    langs = Counter(q["lang"] for q in QUESTIONS)
    kinds = Counter(q["kind"] for q in QUESTIONS)
    assert len(QUESTIONS) >= 48 and langs["en"] >= 24 and langs["zh"] >= 24
    assert kinds["list"] >= 5 and kinds["cross"] >= 4
    asked = Counter(parsed(q["file"]).kind for q in QUESTIONS)
    assert set(asked) == {"pdf", "docx", "markdown", "text", "html"}
    assert sum(q["page"] is not None for q in QUESTIONS) >= 20


@pytest.mark.parametrize("qid", sorted(BY_ID))
def test_answer_is_in_its_file_on_its_page(qid):
    q = BY_ID[qid]
    blocks = parsed(q["file"]).blocks
    if q["page"] is None:
        where = norm(full_text(q["file"]))
    else:
        on_page = [b.text for b in blocks if b.page == q["page"]]
        assert on_page, f"{qid}: no page {q['page']}"
        where = norm("\n".join(on_page))
    for needle in needles(q):
        assert norm(needle) in where, f"{qid}: {needle!r} not found"
    if q["page"] is not None and q["kind"] != "list":
        # The page is only testable when the answer is on no other page.
        others = [b.page for b in blocks if b.page != q["page"] and norm(q["answer"]) in norm(b.text)]
        assert not others, f"{qid}: the answer is also on page(s) {others}"


@pytest.mark.parametrize("qid", sorted(q["id"] for q in QUESTIONS if q["kind"] == "list"))
def test_list_items_are_spread_over_chunks(qid):
    q = BY_ID[qid]
    texts = [norm(c.text) for c in chunks(parsed(q["file"]))]
    holding = [{i for i, t in enumerate(texts) if norm(item) in t} for item in q["items"]]
    assert all(holding), f"{qid}: an item is cut across chunks"
    assert not set.intersection(*holding), f"{qid}: one chunk holds every item"


def shared_runs(question: str, document: str) -> list[str]:
    """Runs of EN_RUN words or ZH_RUN Han characters that the question copies from the document."""
    words = re.findall(r"[a-z0-9]+", document.lower())
    grams = {tuple(words[i:i + EN_RUN]) for i in range(len(words) - EN_RUN + 1)}
    qwords = re.findall(r"[a-z0-9]+", question.lower())
    found = [" ".join(qwords[i:i + EN_RUN]) for i in range(len(qwords) - EN_RUN + 1)
             if tuple(qwords[i:i + EN_RUN]) in grams]
    flat = "".join(document.split())  # PDF line breaks fall inside Chinese phrases
    for run in re.findall(f"[{_HAN}]{{{ZH_RUN},}}", question):
        found += [run[i:i + ZH_RUN] for i in range(len(run) - ZH_RUN + 1) if run[i:i + ZH_RUN] in flat]
    return found


def test_shared_runs_detects_copies():
    assert shared_runs("Is the kettle on the base?", "put the kettle on the base now") == ["the kettle on the base"]
    assert shared_runs("为什么废液桶装到一半就要换", "废液桶装到四分之三时") == []
    assert shared_runs("为什么废液桶装到四分", "废液桶装\n到四分之三") == ["废液桶装到四", "液桶装到四分"]


@pytest.mark.parametrize("qid", sorted(BY_ID))
def test_question_is_paraphrased(qid):
    q = BY_ID[qid]
    assert not shared_runs(q["question"], full_text(q["file"])), f"{qid} copies its document"
