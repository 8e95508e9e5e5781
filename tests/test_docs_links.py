"""The README and docs/ stay true to the repository: every relative link and image resolves to a
file here (and a `#anchor` to a heading of the page it names), nothing points outside the
repository except http(s) URLs, and the README stays a front page (≤ 160 lines)."""
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
README_MAX_LINES = 160

FENCE = re.compile(r"^\s*(```|~~~)")
CODE_SPAN = re.compile(r"`[^`\n]*`")
# [text](target) and ![alt](target), with an optional "title"; text may hold one level of [..].
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
# Paths of the machine the docs were written on, or of folders beside the repository.
OUTSIDE_TEXT = re.compile(r"\.\./shared|/work/")


def _prose_lines(path: Path):
    """(line number, text) outside fenced code blocks."""
    in_fence = False
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if FENCE.match(line):
            in_fence = not in_fence
            continue
        if not in_fence:
            yield n, line


def _links(path: Path):
    for n, line in _prose_lines(path):
        # A link's text may be code ([`x.py`](x.py)); a code span elsewhere is not a link.
        for m in LINK.finditer(CODE_SPAN.sub(lambda c: "c" * len(c.group()), line)):
            yield n, line[m.start(1):m.end(1)]


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: links and code marks dropped, lower case, punctuation
    removed, spaces to hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    anchors = set()
    for _, line in _prose_lines(path):
        m = HEADING.match(line)
        if not m:
            continue
        slug = _slug(m.group(2))
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def _check_page(page: Path, root: Path = ROOT) -> list[str]:
    problems = []
    rel = page.relative_to(root)
    for n, target in _links(page):
        where = f"{rel}:{n}: {target}"
        if re.match(r"https?://", target):
            continue
        if re.match(r"[a-z][a-z0-9+.-]*:", target, re.I) or target.startswith("/"):
            problems.append(f"{where}: links outside the repository")
            continue
        file_part, _, anchor = target.partition("#")
        dest = (page.parent / file_part).resolve() if file_part else page
        if root not in dest.parents and dest != root:
            problems.append(f"{where}: leaves the repository")
            continue
        if not dest.exists():
            problems.append(f"{where}: no such file")
            continue
        if anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            problems.append(f"{where}: no heading #{anchor} in {dest.relative_to(root)}")
    # Code blocks too: a command that reads ../shared/… works on one machine only.
    for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        if OUTSIDE_TEXT.search(line):
            problems.append(f"{rel}:{n}: names a path outside the repository: {line.strip()[:80]}")
    return problems


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_links_resolve_inside_the_repository(page):
    assert _check_page(page) == []


def test_readme_is_a_front_page():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; move detail to docs/"


def test_every_docs_page_is_reachable_from_the_readme():
    """A page nobody links to is a page nobody reads: each docs/*.md is linked from the README or
    from a page the README links to."""
    linked = set()
    todo = [ROOT / "README.md"]
    while todo:
        page = todo.pop()
        if page in linked:
            continue
        linked.add(page)
        for _, target in _links(page):
            file_part = target.partition("#")[0]
            if not file_part or re.match(r"https?://", file_part):
                continue
            dest = (page.parent / file_part).resolve()
            if dest.suffix == ".md" and dest.parent == ROOT / "docs" and dest.exists():
                todo.append(dest)
    orphans = [p.name for p in PAGES[1:] if p not in linked]
    assert orphans == []


def test_the_checker_catches_what_it_should(tmp_path):
    """The checks themselves: a missing file, a missing anchor, a link out of the repository and a
    machine path (in a code block too) are each reported; http(s) links and links in code are not."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "b.md").write_text("# Title\n## A `code` part: here\n", encoding="utf-8")
    page = tmp_path / "docs" / "a.md"
    page.write_text(
        "[ok](b.md#a-code-part-here) [web](https://example.com/x) [[1]](b.md)\n"
        "[gone](missing.md) [bad anchor](b.md#nope) [out](../../x.md) [abs](/etc/passwd)\n"
        "see ../shared/STYLE.md\n"
        "```\n[in code](missing.md) /work/x\n```\n",
        encoding="utf-8",
    )
    problems = _check_page(page, root=tmp_path)
    assert [p.split(": ")[1] for p in problems] == [
        "missing.md", "b.md#nope", "../../x.md", "/etc/passwd",
        "names a path outside the repository", "names a path outside the repository"]
