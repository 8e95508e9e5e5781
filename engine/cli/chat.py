"""`assistant chat`: the terminal chat, and its stable machine interface (JSON lines) when stdin
is not a terminal. Registered into engine/cli/main.py's subcommands by `add_chat_parser`."""

from __future__ import annotations

import argparse
import io
import logging
import os
import signal
import sys
import threading
from contextlib import closing
from typing import Callable, Iterator

from engine.api import (Assistant, Chunk, ConversationNotFound, GenerateParams, InputError, MessageTooLong,
                        ModelLoadError, ModelNotFound, ReasoningChunk, RemoteError, Retracted, SamplingParams,
                        StorageError, ToolCallEvent, ToolResultEvent, TurnDone, reasoning_options, unknown_event)
from engine.cli.docs import add_chat_flag, sources_text, use_documents
from engine.cli import output
from engine.cli.output import EXIT_FAILED, EXIT_MODEL, EXIT_NOT_FOUND, EXIT_OK, EXIT_USAGE

log = logging.getLogger("assistant")


def add_chat_parser(sub) -> None:
    """Register `chat` on an argparse subparsers object; its func returns an exit code."""
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
    c.add_argument("--no-think", action="store_true",
                   help="a reasoning model answers without thinking (default: the reasoning.think setting)")
    c.add_argument("--reasoning-budget", type=int, metavar="N",
                   help="thinking tokens before a reasoning model's block is closed")
    c.add_argument("--no-memory", action="store_true",
                   help="neither retrieve memories into turns nor index this chat's messages")
    c.add_argument("--vram-budget-mb", type=float, help="VRAM for the GPU tier (default: free VRAM minus a margin)")
    c.add_argument("--n-gpu-layers", type=int, metavar="N",
                   help="layers on the GPU for every local model this run, instead of the plan (-1 = all, 0 = CPU)")
    c.add_argument("--gpu-device", metavar="NAME",
                   help="GPU to use: auto, none, or a device name from `assistant devices` (e.g. Vulkan0)")
    add_chat_flag(c)
    c.set_defaults(func=cmd_chat)


class Output:
    """Human text or JSON lines on stdout; diagnostics on stderr."""

    def __init__(self, json_mode: bool):
        self.json = json_mode

    def event(self, **fields) -> None:
        output.print_json(fields)

    def error(self, message: str) -> None:
        output.error(message, EXIT_FAILED, self.json)  # the command returns its own exit code

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
    """Runs `assistant chat`: messages and in-session commands (/new, /switch ID, /list, /pin [ID],
    /unpin [ID], /route, /help)."""

    def __init__(self, assistant: Assistant, args: argparse.Namespace, out: Output, conversation_id: int):
        self.assistant, self.args, self.out = assistant, args, out
        self.conversation_id = conversation_id
        self.cancel = threading.Event()
        self.params = GenerateParams(
            sampling=SamplingParams(temperature=args.temperature, seed=args.seed),
            max_tokens=args.max_tokens,
            repetition_guard=not args.no_repetition_guard,
            **reasoning_options(assistant.settings, think=False if args.no_think else None,
                                budget=args.reasoning_budget),
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
            target = self._on_conversation(arg, "/switch ID", self.assistant.conversation)
            if target is None:
                return None
            self.conversation_id = target
            self.out.notice("conversation", f"[conversation {target}]", conversation_id=target)
        elif cmd == "/list":
            rows = self.assistant.conversations()
            if self.out.json:
                self.out.event(event="conversations", conversations=[
                    {k: r[k] for k in ("id", "title", "updated", "model", "pinned")} for r in rows])
            else:  # pinned ones first (the window's order), each marked
                for r in rows:
                    mark = "*" if r["id"] == self.conversation_id else " "
                    pin = "pinned  " if r["pinned"] else ""
                    self.out.info(f"{mark}{r['id']:>5}  {r['updated'][:19]}  {pin}{r['title']}")
        elif cmd in ("/pin", "/unpin"):
            pinned = cmd == "/pin"
            target = self._on_conversation(arg, f"{cmd} [ID]",
                                           lambda cid: self.assistant.pin_conversation(cid, pinned),
                                           default=self.conversation_id)
            if target is None:
                return None
            self.out.notice("pinned", f"[conversation {target} {'pinned' if pinned else 'unpinned'}]",
                            conversation_id=target, pinned=pinned)
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
            self.out.info("/new  start a conversation · /switch ID · /list · /pin [ID] · /unpin [ID]"
                          " · /route auto|L1|L2|L3 · /quit · //text sends '/text'")
        else:
            self.out.error(f"unknown command {cmd} (try /help; start a message with // to send a slash)")
            self.failures += 1
        return None

    def _on_conversation(self, arg: str, usage: str, act: Callable[[int], object],
                         default: int | None = None) -> int | None:
        """The conversation ID `arg` names (`default` when it is empty), once `act(id)` took it; None
        when it is not a number or no such conversation, said and counted as a failure."""
        try:
            target = int(arg) if arg.strip() or default is None else default
            act(target)
        except ValueError:
            self.out.error(f"usage: {usage}")
        except ConversationNotFound as exc:
            self.out.error(str(exc))
        else:
            return target
        self.failures += 1
        return None

    def _turn(self, text: str) -> None:
        self.cancel.clear()
        if not self.out.json:
            sys.stdout.write("\nassistant> ")
            sys.stdout.flush()
        self.generating = True
        thinking = False  # a reasoning model's thinking is being shown (dim on a terminal)
        dim, plain = ("\x1b[2m", "\x1b[0m") if sys.stdout.isatty() else ("", "")
        try:
            events = self.assistant.send(self.conversation_id, text, self.params, cancel=self.cancel,
                                         route=self.args.route, overflow=self.args.overflow, docs=self.args.docs)
            with closing(events):  # an error here stops the model now, not at garbage collection
                for item in events:
                    match item:
                        case TurnDone() | Retracted():
                            if thinking and not self.out.json:
                                sys.stdout.write(plain + "\n")
                            thinking = False
                            if isinstance(item, Retracted):
                                self._done(item.answer, item)
                            else:
                                self._done(item)
                        case ReasoningChunk():
                            if not item.text:
                                continue
                            if self.out.json:
                                self.out.event(event="thinking", text=item.text)
                                continue
                            if not thinking:
                                sys.stdout.write(dim + "(thinking) ")
                                thinking = True
                            sys.stdout.write(item.text)
                            sys.stdout.flush()
                        case Chunk():
                            if not item.text:
                                continue
                            if thinking and not self.out.json:
                                sys.stdout.write(plain + "\n\n")
                                thinking = False
                            if self.out.json:
                                self.out.event(event="token", text=item.text)
                            else:
                                sys.stdout.write(item.text)
                                sys.stdout.flush()
                        case ToolCallEvent() | ToolResultEvent():
                            pass  # the terminal's turns run no tools
                        case _:
                            unknown_event(item)
        except MessageTooLong as exc:  # the way out is a flag: say which
            self.failures += 1
            self.out.error(f"{exc} (run `assistant chat --overflow head_tail` or `--overflow summarise`)")
        except (InputError, StorageError) as exc:  # disk full / read-only: said, and the chat goes on
            self.failures += 1
            self.out.error(str(exc))
        finally:
            self.generating = False

    def _done(self, item: TurnDone, retracted: Retracted | None = None) -> None:
        """An answer ended; `retracted`: the cascade took it back (the next tier's answer follows)."""
        taken_back = retracted is not None
        if self.out.json:
            self.out.event(event="retracted" if taken_back else "done",
                           conversation_id=item.conversation_id, message_id=item.message_id, model=item.model,
                           level=item.level, route_reason=item.route_reason, fallback=item.fallback,
                           confidence=item.stats.confidence, risk=item.stats.risk, context=item.stats.context,
                           summary_used=item.stats.summary_used, memories_used=item.stats.memories_used,
                           memory=item.stats.memory, sources=item.sources, text=item.text,
                           reasoning=item.reasoning, stats=item.stats.as_json(),
                           **({"reason": retracted.reason, "next_level": retracted.next_level} if taken_back else {}))
            return
        s = item.stats
        # The terminal has already shown what a repetition cut dropped: say where the answer ends.
        tail = {"cancelled": " [stopped]",
                "repetition": f" [stopped: it began repeating itself; the answer ends at {item.text[-40:]!r}]",
                }.get(s.finish_reason, "")
        est = "~" if s.tokens_estimated else ""
        meta = (f"[{item.level} {item.model} · {item.route_reason}"
                + (f" · fallback: {item.fallback}" if item.fallback else "")
                + f" · {s.ttft_ms:.0f} ms to first token · {est}{s.prompt_tokens_evaluated} tokens evaluated, "
                f"{s.prompt_tokens_cached} cached"
                + (f" (restored from {s.restored_from} in {s.restore_ms:.0f} ms)"
                   if s.restored_from in ("warm", "cold") else "")
                + f" · {s.decode_tps:.1f} tok/s"
                + (f" · drafted {s.draft_accepted}/{s.draft_tokens} accepted" if s.draft_tokens else "") + "]")
        report = s.confidence or {}
        if report.get("low") and not taken_back:
            meta += "\n[可能不准确 / may be inaccurate: confidence %.2f]" % report["geo_mean_prob"]
        for hit in s.memories_used:
            src = hit["source"]
            where = f"conversation {src['conversation_id']}, {src['date'][:10]}" if isinstance(src, dict) else src
            meta += f"\n[memory #{hit['id']} ({where}): {hit['text'][:80]}]"
        remembered = s.memory.get("remembered")
        if remembered:
            meta += (f"\n[remembered #{remembered['id']}: {remembered['text'][:80]}]" if "id" in remembered
                     else f"\n[not remembered: {remembered['error']}]")
        if s.risk.get("caution"):
            meta += f"\n[{s.risk['caution']}]"
        if item.sources and not taken_back:
            meta += "\n" + sources_text(item.sources)
        if taken_back:
            meta += f"\n[low confidence ({item.confidence:.2f}): asking {retracted.next_level} instead…]"
        dim = sys.stdout.isatty()
        sys.stdout.write(f"{tail}\n" + (f"\x1b[2m{meta}\x1b[0m\n" if dim else f"{meta}\n"))
        if taken_back:
            sys.stdout.write(f"\n{self.assistant.tiers[retracted.next_level]}> ")


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
