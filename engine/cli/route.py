"""`assistant route`: show the router's decision for a text, for stdin lines, or score a labelled TSV."""

from __future__ import annotations

import argparse
import logging
import sys

from engine.api import EvalFileError, RouteDecision, route_message, score_router
from engine.cli.output import EXIT_OK, EXIT_USAGE, error, print_json

log = logging.getLogger("assistant.route")


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


def _decision_dict(d: RouteDecision) -> dict:
    return {"level": d.level, "reason": d.reason, "micros": round(d.micros, 2)}


def cmd_route(args: argparse.Namespace) -> int:
    """Run `assistant route`; returns 0, or 2 for bad input (message on stderr, no traceback)."""
    if args.eval is not None:
        if args.text is not None:
            return error("give TEXT or --eval FILE, not both", EXIT_USAGE)
        return _run_eval(args.eval, args.json)
    if args.text is not None:
        d = route_message(args.text)
        if args.json:
            print_json(_decision_dict(d))
        else:
            sys.stdout.write(f"{d.level}  {d.reason}  ({d.micros:.1f} µs)\n")
        return EXIT_OK
    if sys.stdin is None or sys.stdin.isatty():
        return error("give TEXT, --eval FILE.tsv, or pipe messages on stdin (one per line)", EXIT_USAGE)
    return _run_lines()


def _run_lines() -> int:
    """One JSON decision per stdin line (blank lines included, so output lines match input lines)."""
    for n, raw in enumerate(sys.stdin.buffer, start=1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError:
            line = raw.decode("utf-8", errors="replace")
            log.warning("input line %d is not valid UTF-8; invalid bytes were replaced with U+FFFD", n)
        print_json(_decision_dict(route_message(line.rstrip("\r\n"))))
    return EXIT_OK


def _run_eval(path: str, as_json: bool) -> int:
    try:
        score = score_router(path)
    except EvalFileError as exc:
        return error(str(exc), EXIT_USAGE)
    if as_json:
        print_json(score.as_dict())
    else:
        sys.stdout.write(score.text() + "\n")
    return EXIT_OK
