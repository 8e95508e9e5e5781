"""`assistant memory`: add, search, forget and list memories (engine/memory, docs/memory.md)."""

from __future__ import annotations

import argparse
import logging
import sys
import time

from engine.api import Memories, MemoryInputError, MemoryNotFound
from engine.cli.output import EXIT_MODEL, EXIT_NOT_FOUND, EXIT_OK, EXIT_USAGE, error, print_json

log = logging.getLogger("assistant.memory")

MAX_QUERY_CHARS = 10_000
EMBEDDER_TIMEOUT_S = 300.0


def add_memory_parser(subparsers) -> None:
    """Register `memory add|search|forget|list` on an argparse subparsers object; each func
    returns an exit code."""
    m = subparsers.add_parser("memory", help="what the assistant remembers across conversations",
                              description="Explicit memories (facts, preferences; --pin: in every prompt) and "
                                          "finished messages, searched by meaning and keyword.")
    sub = m.add_subparsers(dest="memory_command", required=True)

    a = sub.add_parser("add", help="remember a fact")
    a.add_argument("text", metavar="TEXT", help="the fact (- reads it from stdin)")
    a.add_argument("--pin", action="store_true", help="a critical memory: put it in every prompt")
    a.add_argument("--json", action="store_true", help="print JSON")
    a.set_defaults(func=cmd_add)

    s = sub.add_parser("search", help="memories relevant to a query, with scores and sources")
    s.add_argument("query", metavar="QUERY", help="what to look for (- reads it from stdin)")
    s.add_argument("--k", type=int, default=3, metavar="N", help="at most N hits (default 3)")
    s.add_argument("--min-score", type=float, help="cosine similarity a hit needs (default: the model's)")
    s.add_argument("--json", action="store_true", help="print JSON")
    s.set_defaults(func=cmd_search)

    f = sub.add_parser("forget", help="delete a memory (or an indexed message chunk) by id")
    f.add_argument("id", metavar="ID", help="the memory id (see `memory list`)")
    f.add_argument("--json", action="store_true", help="print JSON")
    f.set_defaults(func=cmd_forget)

    ls = sub.add_parser("list", help="explicit memories, oldest first")
    ls.add_argument("--all", action="store_true", help="indexed message chunks too")
    ls.add_argument("--limit", type=int, metavar="N", help="only the newest N")
    ls.add_argument("--json", action="store_true", help="print JSON")
    ls.set_defaults(func=cmd_list)


def _read_arg(value: str) -> str:
    """The argument, or stdin for "-" (invalid UTF-8 replaced with U+FFFD, with a warning)."""
    if value != "-":
        return value
    raw = sys.stdin.buffer.read()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        log.warning("stdin is not valid UTF-8; invalid bytes were replaced with U+FFFD")
        return raw.decode("utf-8", errors="replace")


def _open(start: bool) -> Memories:
    return Memories.open(start=start)


def _wait_for_embedder(service: Memories) -> bool:
    """Wait for the model, saying so on stderr when it takes a moment; True when it is ready."""
    if service.embedder_ready(0.5):
        return True
    sys.stderr.write(f"loading the embedding model {service.embedder_id} (a moment; ~10-20 s without its ONNX export)…\n")
    sys.stderr.flush()
    t0 = time.monotonic()
    ready = service.embedder_ready(EMBEDDER_TIMEOUT_S)
    if ready:
        sys.stderr.write(f"embedding model ready in {time.monotonic() - t0 + 0.5:.1f} s\n")
        sys.stderr.flush()
    return ready


def _close(service: Memories) -> None:
    service.close()


def cmd_add(args: argparse.Namespace) -> int:
    """Store TEXT; waits for its embedding so a search right after finds it by meaning."""
    text = _read_arg(args.text)
    service = _open(start=False)
    try:
        try:
            memory_id = service.add(text, pin=args.pin)
        except MemoryInputError as exc:
            return error(str(exc), EXIT_USAGE, args.json)
        service.start()
        embedded = _wait_for_embedder(service) and service.flush(EMBEDDER_TIMEOUT_S)
        if not embedded:
            log.warning("memory %d is saved but has no embedding yet (%s): keyword search finds it now, "
                        "search by meaning once the model loads", memory_id, service.retrieval_status())
        if args.json:
            print_json({"id": memory_id, "kind": "pinned" if args.pin else "note", "embedded": embedded})
        else:
            sys.stdout.write(f"remembered #{memory_id}{' (pinned)' if args.pin else ''}\n")
        return EXIT_OK
    finally:
        _close(service)


def cmd_search(args: argparse.Namespace) -> int:
    query = _read_arg(args.query)
    if "\x00" in query:
        return error("the query contains NUL characters", EXIT_USAGE, args.json)
    if not query.strip():
        return error("the query is empty", EXIT_USAGE, args.json)
    if len(query) > MAX_QUERY_CHARS:
        return error(f"the query is too long ({len(query)} characters; at most {MAX_QUERY_CHARS})",
                     EXIT_USAGE, args.json)
    if args.k < 1:
        return error("--k must be at least 1", EXIT_USAGE, args.json)
    service = _open(start=True)
    try:
        if not _wait_for_embedder(service):
            return error(f"cannot search by meaning: {service.retrieval_status()}", EXIT_MODEL, args.json)
        hits = service.search(query, k=args.k, min_score=args.min_score)
        if args.json:
            print_json({"status": hits.status, "vector_backend": service.vector_backend,
                        "hits": [{"id": h.id, "text": h.text, "score": h.score, "source": h.source,
                                  "kind": h.kind} for h in hits]})
        elif not hits:
            sys.stdout.write("no memory matches\n")
        else:
            for h in hits:
                src = h.source if isinstance(h.source, str) else (
                    f"conversation {h.source['conversation_id']}, message {h.source['message_id']},"
                    f" {h.source['date'][:10]}")
                sys.stdout.write(f"#{h.id}  {h.score:.2f}  [{src}]  {h.text}\n")
        return EXIT_OK
    finally:
        _close(service)


def cmd_forget(args: argparse.Namespace) -> int:
    try:
        memory_id = int(args.id)
    except ValueError:
        return error(f"ID must be a whole number, not {args.id!r}", EXIT_USAGE, args.json)
    service = _open(start=False)
    try:
        service.forget(memory_id)
    except MemoryNotFound as exc:
        return error(f"{exc} (see `memory list`)", EXIT_NOT_FOUND, args.json)
    finally:
        _close(service)
    if args.json:
        print_json({"forgotten": memory_id})
    else:
        sys.stdout.write(f"forgot #{memory_id}\n")
    return EXIT_OK


def cmd_list(args: argparse.Namespace) -> int:
    if args.limit is not None and args.limit < 1:
        return error("--limit must be at least 1", EXIT_USAGE, args.json)
    service = _open(start=False)
    try:
        rows = service.list(("pinned", "note", "message") if args.all else ("pinned", "note"), args.limit)
    finally:
        _close(service)
    if args.json:
        print_json([r.to_dict() for r in rows])
    else:
        for r in rows:
            where = f" (conversation {r.conversation_id}, message {r.message_id})" if r.kind == "message" else ""
            sys.stdout.write(f"#{r.id:<6} {r.kind:<7} {r.created[:10]}  {r.text}{where}\n")
    return EXIT_OK
