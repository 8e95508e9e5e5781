"""`assistant docs add|search|list|remove`, and `assistant chat --docs [NAME]`'s part: the flag,
the conversation's "Use my documents" toggle and the sources under an answer (engine/docs).

Registered by engine/cli/main.py with `add_docs_parser(sub)`; the chat uses `add_chat_flag`,
`use_documents` and `sources_text`. Each command returns an exit code.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
import time
from pathlib import Path

from engine.api import DEFAULT_COLLECTION, Documents, DocumentsError, Settings, StorageError
from engine.cli.output import EXIT_FAILED, EXIT_NOT_FOUND, EXIT_OK, EXIT_USAGE, error, print_json

log = logging.getLogger("assistant.docs")

MAX_QUERY_CHARS = 10_000
EMBEDDER_TIMEOUT_S = 300.0
PROGRESS_EVERY_S = 0.2
CANCEL_WAIT_S = 60.0   # Ctrl-C: the file being written is finished, then the command ends


def add_docs_parser(subparsers) -> None:
    """Register `docs add|search|list|remove` on an argparse subparsers object."""
    d = subparsers.add_parser("docs", help="your documents: index folders and files, search them",
                              description="Index folders and files (PDF, Word, Markdown, text, HTML) so that "
                                          "`assistant chat --docs` answers from them and cites them. Running "
                                          "`docs add` again re-reads only what changed.")
    sub = d.add_subparsers(dest="docs_command", required=True)

    a = sub.add_parser("add", help="index files and folders (recursively); again: only what changed")
    a.add_argument("paths", nargs="+", metavar="PATH", help="a file or folder")
    a.add_argument("--collection", default=DEFAULT_COLLECTION, metavar="NAME",
                   help=f"put them in this collection (default {DEFAULT_COLLECTION!r})")
    a.add_argument("--json", action="store_true", help="print the report as JSON")
    a.set_defaults(func=cmd_add)

    s = sub.add_parser("search", help="the excerpts most relevant to a query, with file and page")
    s.add_argument("query", metavar="QUERY")
    s.add_argument("--collection", metavar="NAME", help="only this collection (default: all)")
    s.add_argument("--k", type=int, default=None, metavar="N", help="at most N hits (default: setting docs.k)")
    s.add_argument("--json", action="store_true", help="print JSON")
    s.set_defaults(func=cmd_search)

    ls = sub.add_parser("list", help="collections, added folders and every file's status (skipped: why)")
    ls.add_argument("--collection", metavar="NAME", help="only this collection")
    ls.add_argument("--json", action="store_true", help="print JSON")
    ls.set_defaults(func=cmd_list)

    r = sub.add_parser("remove", help="take an added folder or file, or a whole collection, out of the index "
                                      "(the files themselves are left alone)")
    r.add_argument("path", nargs="?", metavar="PATH", help="an added folder, or a file in the index")
    r.add_argument("--collection", metavar="NAME", help="remove this whole collection")
    r.add_argument("--json", action="store_true", help="print JSON")
    r.set_defaults(func=cmd_remove)


# ---- output
def label(src: dict) -> str:
    """"manual.pdf, page 3" / "policy.md, Meals" / "log.txt, line 40": where an excerpt is."""
    name = Path(src["path"]).name
    if src.get("page") is not None:
        return f"{name}, page {src['page']}"
    if src.get("heading"):
        return f"{name}, {src['heading']}"
    if src.get("line") is not None:
        return f"{name}, line {src['line']}"
    return name


def _open(start: bool = False) -> Documents:
    """The documents index in the data dir; raises DocumentsError with a message for the user."""
    try:
        return Documents.open(Settings.shared(), start=start)
    except StorageError as exc:
        raise DocumentsError(str(exc)) from exc
    except ValueError as exc:  # an unknown embedder in the settings
        raise DocumentsError(str(exc)) from exc


def _known_collection(docs: Documents, name: str | None) -> str | None:
    """An error message when `name` is given and no collection has it."""
    if name is None or any(c["name"] == name for c in docs.document_collections()):
        return None
    names = ", ".join(sorted(c["name"] for c in docs.document_collections())) or "none yet"
    return f"no collection named {name!r} (collections: {names}; see `assistant docs list`)"


# ---- add
def cmd_add(args: argparse.Namespace) -> int:
    """Index PATHs on the service's thread, progress on stderr; Ctrl-C stops after the file it is writing."""
    paths = [os.path.abspath(os.path.expanduser(p)) for p in args.paths]
    if not args.collection.strip():
        return error("the collection name is empty", EXIT_USAGE, args.json)
    try:
        docs = _open(start=True)
    except DocumentsError as exc:
        return error(str(exc), EXIT_FAILED, args.json)
    cancel = threading.Event()
    try:
        try:
            future = docs.add_documents(paths, args.collection, wait=False, cancel=cancel)
        except DocumentsError as exc:
            return error(str(exc), EXIT_USAGE, args.json)
        show = sys.stderr.isatty()
        try:
            while not future.done():
                if show:
                    _progress_line(docs.documents_progress())
                time.sleep(PROGRESS_EVERY_S)
        except KeyboardInterrupt:
            cancel.set()
            try:
                future.result(CANCEL_WAIT_S)
            except Exception:  # noqa: BLE001 - leaving anyway; the next run resumes
                log.exception("indexing did not stop cleanly after Ctrl-C")
            if show:
                sys.stderr.write("\r\x1b[K")
            return error("cancelled; what was indexed is kept, run the same command to go on",
                         EXIT_FAILED, args.json)
        if show:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()
        report = future.result()
    finally:
        docs.close()
    result = report.to_dict()
    missing = [p for p in paths if not os.path.lexists(p)]
    if args.json:
        print_json(result)
    else:
        for s in result["skipped"]:
            sys.stdout.write(f"skipped {s['path']}: {s['reason']}\n")
        sys.stdout.write(f"indexed {_n(result['indexed'], 'file')} ({_n(result['chunks'], 'chunk')}), "
                         f"{result['unchanged']} unchanged, {result['removed']} removed, "
                         f"{len(result['skipped'])} skipped in {result['seconds']:.1f} s "
                         f"(collection {args.collection!r})\n")
    for p in missing:  # after the report (one JSON object on stdout): the other paths were indexed
        sys.stderr.write(f"error: {p}: no such file or folder\n")
    return EXIT_FAILED if missing or report.cancelled else EXIT_OK


def _progress_line(p: dict | None) -> None:
    if not p or p["state"] == "idle":
        return
    if p["state"] == "scanning":
        text = "scanning…"
    else:
        current = Path(p["current"]).name if p.get("current") else ""
        text = (f"{p['state']} {p['files_done']}/{p['files_total']} files · {p['chunks']} chunks · "
                f"{p['rate_chunks_s']:.0f} chunks/s  {current}")
    sys.stderr.write("\r\x1b[K" + text[:120])
    sys.stderr.flush()


# ---- search
def cmd_search(args: argparse.Namespace) -> int:
    query = args.query
    if "\x00" in query:
        return error("the query contains NUL characters", EXIT_USAGE, args.json)
    if not query.strip():
        return error("the query is empty", EXIT_USAGE, args.json)
    if len(query) > MAX_QUERY_CHARS:
        return error(f"the query is too long ({len(query)} characters; at most {MAX_QUERY_CHARS})",
                     EXIT_USAGE, args.json)
    if args.k is not None and args.k < 1:
        return error("--k must be at least 1", EXIT_USAGE, args.json)
    try:
        docs = _open()
    except DocumentsError as exc:
        return error(str(exc), EXIT_FAILED, args.json)
    try:
        problem = _known_collection(docs, args.collection)
        if problem:
            return error(problem, EXIT_NOT_FOUND, args.json)
        state = docs.documents_ready(EMBEDDER_TIMEOUT_S)
        if state != "ready":  # without it only keywords rank: say so, still answer
            log.warning("searching by keywords only: the embedding model is %s", state)
        hits = docs.search_documents(query, args.collection, args.k)
        empty = not docs.document_roots()
    finally:
        docs.close()
    hits = [{k: h[k] for k in ("path", "page", "text", "score", "heading", "line", "collection")} for h in hits]
    if args.json:
        print_json({"hits": hits})
    elif empty:
        sys.stdout.write("no documents indexed yet: add some with `assistant docs add PATH`\n")
    elif not hits:
        sys.stdout.write("no excerpt matches\n")
    else:
        for n, h in enumerate(hits, start=1):
            sys.stdout.write(f"[{n}] {label(h)}  ({h['score']:.2f})  {h['path']}\n"
                             f"    {' '.join(h['text'].split())}\n")
    return EXIT_OK


# ---- list
def cmd_list(args: argparse.Namespace) -> int:
    try:
        docs = _open()
    except DocumentsError as exc:
        return error(str(exc), EXIT_FAILED, args.json)
    try:
        problem = _known_collection(docs, args.collection)
        if problem:
            return error(problem, EXIT_NOT_FOUND, args.json)
        collections = [c for c in docs.document_collections()
                       if args.collection is None or c["name"] == args.collection]
        roots = docs.document_roots(args.collection)
        files = docs.documents(args.collection)
    finally:
        docs.close()
    if args.json:  # the database's row ids mean nothing outside it
        print_json({"collections": collections, "roots": [{k: v for k, v in r.items() if k != "id"} for r in roots],
                    "files": [{k: v for k, v in f.items() if k not in ("id", "root_id")} for f in files]})
        return EXIT_OK
    if not roots:
        sys.stdout.write("no documents yet: add a folder with `assistant docs add PATH`\n")
        return EXIT_OK
    for c in collections:
        sys.stdout.write(f"collection {c['name']}: {_n(c['roots'], 'folder or file', 'folders or files')} added, "
                         f"{_n(c['files'], 'file')}, {_n(c['chunks'], 'chunk')}\n")
        for r in (r for r in roots if r["collection"] == c["name"]):
            state = "" if r["scanned"] else "  (indexing not finished: it resumes with the next `docs add` or app start)"
            sys.stdout.write(f"  {r['path']}{state}\n")
            for f in (f for f in files if f["root_id"] == r["id"]):
                name = os.path.relpath(f["path"], r["path"]) if f["path"] != r["path"] else Path(f["path"]).name
                if f["status"] == "indexed":
                    pages = f"{_n(f['pages'], 'page')}, " if f.get("pages") else ""
                    sys.stdout.write(f"    indexed  {name}  ({pages}{_n(f['chunks'], 'chunk')})\n")
                else:
                    detail = f" ({f['detail']})" if f.get("detail") else ""
                    sys.stdout.write(f"    {f['status']:<8} {name}: {f['reason']}{detail}\n")
    return EXIT_OK


def _n(count: int, one: str, many: str | None = None) -> str:
    return f"{count} {one if count == 1 else many or one + 's'}"


# ---- remove
def cmd_remove(args: argparse.Namespace) -> int:
    if (args.path is None) == (args.collection is None):
        return error("give a PATH or --collection NAME (one of them)", EXIT_USAGE, args.json)
    path = os.path.abspath(os.path.expanduser(args.path)) if args.path is not None else None
    try:
        docs = _open()
    except DocumentsError as exc:
        return error(str(exc), EXIT_FAILED, args.json)
    try:
        removed = docs.remove_documents(path=path, collection=args.collection)
    except DocumentsError as exc:
        return error(f"{exc} (see `assistant docs list`)", EXIT_NOT_FOUND, args.json)
    finally:
        docs.close()
    if args.json:
        print_json(removed)
    else:
        what = f"collection {args.collection!r}" if args.collection is not None else path
        sys.stdout.write(f"removed {what} from the index ({_n(removed['files'], 'file')}; "
                         f"the files on disk are left alone)\n")
    return EXIT_OK


# ---- assistant chat --docs
def add_chat_flag(chat_parser) -> None:
    chat_parser.add_argument("--docs", nargs="?", const=True, default=None, metavar="NAME",
                             help="answer from your documents (`assistant docs add`), citing them as [n]: "
                                  "every collection, or only NAME; the conversation keeps this setting")


def use_documents(assistant, conversation_id: int, docs: bool | str | None) -> str | None:
    """Turn the conversation's "Use my documents" on for `chat --docs [NAME]`; an error message
    for the user when that cannot be done (documents off, unknown collection)."""
    if docs is None:
        return None
    if assistant.docs is None:
        return "documents are turned off (setting docs.enabled)"
    try:
        if docs is not True and not any(c["name"] == docs for c in assistant.document_collections()):
            names = ", ".join(sorted(c["name"] for c in assistant.document_collections())) or "none yet"
            return f"no collection named {docs!r} (collections: {names}; see `assistant docs list`)"
        assistant.set_conversation_docs(conversation_id, docs)
    except DocumentsError as exc:
        return str(exc)
    state = assistant.documents_ready(EMBEDDER_TIMEOUT_S)
    if state != "ready":  # keywords still find excerpts: go on, say why
        log.warning("documents are searched by keywords only: the embedding model is %s", state)
    return None


def sources_text(sources: list[dict]) -> str:
    """The "Sources:" block under an answer in the terminal ("" when it used none)."""
    if not sources:
        return ""
    lines = [f"  [{s.get('n', n)}] {label(s)}  {s['path']}" for n, s in enumerate(sources, start=1)]
    return "Sources:\n" + "\n".join(lines)
