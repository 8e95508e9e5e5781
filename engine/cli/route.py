"""`assistant route`: show the router's decision for a text, for stdin lines, or score a labelled TSV."""

from __future__ import annotations

import argparse
import json
import logging
import sys

from engine.api import EvalFileError, RouteDecision, route_message, score_router

log = logging.getLogger("assistant.route")

EXIT_OK, EXIT_USAGE = 0, 2


def add_route_parser(subparsers) -> None:
    """Register `route` on an argparse subparsers object; its func returns an exit code."""
    r = subparsers.add_parser(
        "route", help="which level (L1/L2/L3) the router picks for a message",
        description="Classify TEXT (or each stdin line when TEXT is omitted and stdin is not a "
                    "terminal), or score the router on a labelled TSV with --eval.")
    r.add_argument("text", nargs="?", metavar="TEXT", help="the message to classify")
    r.add_argument("--eval", metavar="FILE.tsv",
                   help="labelled prompts (header 'level<TAB>prompt'): print accuracy and confusion")
    r.add_argument("--json", action="store_true", help="print JSON")
    r.set_defaults(func=cmd_route)


def _usage_error(message: str) -> int:
    sys.stderr.write(f"error: {message}\n")
    sys.stderr.flush()
    return EXIT_USAGE


def _decision_dict(d: RouteDecision) -> dict:
    return {"level": d.level, "reason": d.reason, "micros": round(d.micros, 2)}


def _print_json(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def cmd_route(args: argparse.Namespace) -> int:
    """Run `assistant route`; returns 0, or 2 for bad input (message on stderr, no traceback)."""
    if args.eval is not None:
        if args.text is not None:
            return _usage_error("give TEXT or --eval FILE, not both")
        return _run_eval(args.eval, args.json)
    if args.text is not None:
        d = route_message(args.text)
        if args.json:
            _print_json(_decision_dict(d))
        else:
            sys.stdout.write(f"{d.level}  {d.reason}  ({d.micros:.1f} µs)\n")
        return EXIT_OK
    if sys.stdin is None or sys.stdin.isatty():
        return _usage_error("give TEXT, --eval FILE.tsv, or pipe messages on stdin (one per line)")
    return _run_lines()


def _run_lines() -> int:
    """One JSON decision per stdin line (blank lines included, so output lines match input lines)."""
    for n, raw in enumerate(sys.stdin.buffer, start=1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError:
            line = raw.decode("utf-8", errors="replace")
            log.warning("input line %d is not valid UTF-8; invalid bytes were replaced with U+FFFD", n)
        _print_json(_decision_dict(route_message(line.rstrip("\r\n"))))
    return EXIT_OK


def _run_eval(path: str, as_json: bool) -> int:
    try:
        score = score_router(path)
    except EvalFileError as exc:
        return _usage_error(str(exc))
    if as_json:
        _print_json(score.as_dict())
    else:
        sys.stdout.write(score.text() + "\n")
    return EXIT_OK
