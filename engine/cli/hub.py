"""`assistant models search` and `assistant models download`: find GGUFs on a hub and fetch one.

Registered by engine/cli/main.py as `hub.register(sub)`, `sub` being the subparsers of `assistant models`.
Search results are not downloaded yet, so their fit word comes from the file size against this machine's
free VRAM budget and RAM; the planner reads the exact facts from the GGUF header after the download.
"""

from __future__ import annotations

import argparse
import json
import locale
import os
import sys
import time

from engine.api import (DownloadError, HubError, HubFile, Settings, default_hub, default_vram_budget_mb,
                        device_snapshot, download, entry_for, hubs, repo_files, search_hub, size_fit, size_text)
from engine.cli.output import EXIT_FAILED, EXIT_OK, EXIT_USAGE

MIB = 1 << 20


def register(models_subparsers) -> None:
    """Add `search` and `download` to `assistant models`' subparsers; each sets `func`."""
    ids = [h.id for h in hubs()]
    s = models_subparsers.add_parser("search", help="search a hub for GGUF models (files per quant, size, fit)")
    s.add_argument("query", metavar="QUERY", help="words of the model name, e.g. 'qwen2.5 7b instruct'")
    s.add_argument("--hub", choices=ids, default=None,
                   help="where to search (default: modelscope for a Chinese locale, else huggingface)")
    s.add_argument("--limit", type=int, default=10, metavar="N", help="at most N repositories (default 10)")
    s.add_argument("--json", action="store_true", help="print a JSON list")
    s.set_defaults(func=cmd_search)

    d = models_subparsers.add_parser("download", help="download one GGUF file of a hub repository")
    d.add_argument("repo", metavar="REPO", help="owner/name, as `assistant models search` shows it")
    d.add_argument("file", metavar="FILE", help="the .gguf file in that repository")
    d.add_argument("--hub", choices=ids, default=None, help="where from (default as for search)")
    d.set_defaults(func=cmd_download)


def _hub(args) -> str:
    """--hub, else the setting models.hub, else by the UI language (the system locale for "auto")."""
    settings = Settings.shared()
    chosen = args.hub or settings.get("models.hub")
    if chosen and chosen != "auto":
        return chosen
    language = settings.get("ui.language")
    if not language or language == "auto":
        language = locale.getlocale()[0] or os.environ.get("LANG", "")
    return default_hub(language)


def _budgets() -> tuple[float, int]:
    """(VRAM budget in bytes, available RAM in bytes) the way `assistant models` plans."""
    snap = device_snapshot()
    budget = Settings.shared().get("runtime.vram_budget_mb")
    budget_mb = default_vram_budget_mb(snap) if budget is None or budget < 0 else budget
    return max(0.0, budget_mb) * MIB, snap.ram_available_bytes


def cmd_search(args: argparse.Namespace) -> int:
    if args.limit < 1:
        sys.stderr.write("error: --limit must be 1 or more\n")
        return EXIT_USAGE
    hub_id = _hub(args)
    try:
        found = search_hub(args.query, hub_id, limit=args.limit)
    except HubError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return EXIT_FAILED
    vram, ram = _budgets()

    def row(f: HubFile) -> dict:
        fit = "split" if f.split else size_fit(f.size_bytes, vram, ram)
        return {"file": f.name, "quant": f.quant, "size_bytes": f.size_bytes, "sha256": f.sha256, "parts": f.parts,
                "fits": fit}

    rows = [{"hub": r.hub, "repo": r.repo, "downloads": r.downloads, "likes": r.likes, "updated": r.updated,
             "files": [row(f) for f in r.files]} for r in found]
    if args.json:
        print(json.dumps(rows, ensure_ascii=False, indent=2))
        return EXIT_OK
    if not rows:
        print(f"no GGUF repositories for '{args.query}' on {hub_id}")
    for r in rows:
        print(f"{r['repo']}  ({r['downloads']:,} downloads, {r['likes']} likes, {hub_id})")
        for f in r["files"]:
            note = f"  split in {f['parts']} files: cannot be loaded" if f["parts"] > 1 else ""
            print(f"    {f['quant'] or '?':<8} {size_text(f['size_bytes']):>9}  {f['fits']:<8} {f['file']}{note}")
    if rows:
        print(f"\nfits: for the file size against free VRAM/RAM here; download with "
              f"`assistant models download REPO FILE --hub {hub_id}`")
    return EXIT_OK


def cmd_download(args: argparse.Namespace) -> int:
    hub_id = _hub(args)
    try:  # the listing gives size and sha256, so the download is checked even outside the catalog
        listed = next((f for f in repo_files(hub_id, args.repo) if f.name == args.file), None)
        entry = entry_for(args.repo, listed or args.file, hub_id)
    except HubError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return EXIT_FAILED
    started = time.monotonic()

    def progress(done: int, total: int) -> None:
        rate = done / max(time.monotonic() - started, 1e-3)
        sys.stderr.write(f"\r{args.file}: {size_text(done)} of {size_text(total)} "
                         f"({100 * done / max(total, 1):.0f}%, {size_text(rate)}/s)   ")
        sys.stderr.flush()

    try:
        path = download(entry, progress=progress if sys.stderr.isatty() else None, hub=hub_id)
    except KeyboardInterrupt:  # Ctrl-C: the .part file is closed as the exception unwinds, and kept
        sys.stderr.write("\ncancelled; the partial file is kept, run the same command to resume\n")
        return EXIT_FAILED
    except DownloadError as exc:
        sys.stderr.write(f"\nerror: {exc}\n")
        return EXIT_FAILED
    sys.stderr.write("\n")
    print(path)
    return EXIT_OK
