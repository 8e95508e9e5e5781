"""The engine on models shaped like the catalog's (issue 25), against bare llama-cpp-python.

    .venv/bin/python bench/real_size.py [--model qwen2.5-1.5b-instruct-q4_k_m] [--only prompt stop]
                                        [--timed-pieces]

The model is bench/real_size_model.py's synthetic GGUF of that catalog entry (made once, cached
under ~/.cache/offline-assistant-bench): the real shape, quant mix and vocabulary size, random
weights. Sections:

- prompt: a chat through `engine.api.Assistant` (n_ctx 4096, 2 threads, greedy, 4-token answers):
  turn 1 pastes ~1 000 tokens, turn 2 asks a short question, turn 3 pastes ~1 400 more. Each
  turn's new tokens are evaluated by bare llama-cpp-python (`Llama.eval`, n_batch 512) on top of
  the same cached prefix, right after ours, so machine noise hits both. Prompt tok/s and the ratio.
  `--timed-pieces` runs ours with prompt pieces sized by time (the engine before issue 25).
- stop: Stop pressed 1 s into a turn-3-sized paste (x3): time from the press until the turn has
  ended and the model is free, and what the cache kept.
- decode: after a chat of ~N tokens (`--decode-at`, default 1 000; 8 000 takes ~8 min) and a
  pause while its checkpoint is written, a turn decodes 48 tokens greedy through `engine.api`; bare llama-cpp-python evaluates the same prompt
  ids and `Llama.generate`s 48 tokens. Decode tok/s side by side.
- long: a chat filled to ~8 000 tokens (n_ctx 8 448), then 20 short turns: RSS after the load,
  after the paste and after turns (3 s after each, once its background checkpoint is written), against the KV bytes the chat holds and the planner's
  resident compute; then the exit (`Assistant.close()`: the hot state parked and written to its
  cold file), and the same after a restart: a cold restore against re-evaluating.
- rss: in a new process per model (both demo models and the synthetic one), load through
  `engine.api.Assistant`, answer a paste that nearly fills the context (the plan is for a full
  one), and compare the process's peak RSS (VmHWM)
  with the planner's host-memory figure (`planner.ram_bytes`, what the welcome and fit badges use).

Prints markdown tables (docs/benchmarks.md quotes them). Slow on 2 cores: ~3 min at 1.5B.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# A data dir of its own: the KV tiers' cold files of an earlier run would serve its prompts.
os.environ["ASSISTANT_HOME"] = tempfile.mkdtemp(prefix="bench-real-home-")
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from real_size_model import synthesize  # noqa: E402

from engine.api import Assistant, EngineConfig, TurnDone  # noqa: E402
from engine.chat.session import Message  # noqa: E402
from engine.inference.backend import Backend, LoadParams, SamplingParams  # noqa: E402
from engine.inference.events import GenerateParams  # noqa: E402
from engine.models.ggml_registry import registry  # noqa: E402
from engine.storage.db import Database  # noqa: E402

log = logging.getLogger("bench.real_size")
N_CTX = 4096
THREADS = 2
RSS_PASTE_WORDS = 2200  # ~3 400 tokens: the context nearly full, as the plan assumes
PARAMS = GenerateParams(SamplingParams(temperature=0.0, seed=1), max_tokens=4)


def paste(words: int, seed: int) -> str:
    """A long, plain paste of roughly `words` words (about as many tokens)."""
    topics = ["the harbour", "the old mill", "a night train", "the glacier", "the market", "a lighthouse"]
    lines = [f"Note {seed}.{i}: {topics[(i + seed) % len(topics)]} keeps its own rhythm, and the people "
             f"who work there measure the day by it ({i})." for i in range(words // 20)]
    return "Please read this log and wait for my question.\n" + "\n".join(lines)


def paste_of(vocab, tokens: int, seed: int) -> str:
    """A paste of about `tokens` tokens in this model's vocabulary (the words-to-tokens ratio is
    measured on a first draft, not assumed: it differs between tokenizers)."""
    draft = paste(1000, seed)
    words = int(1000 * tokens / len(vocab.tokenize(draft, special=False)))
    return paste(words, seed)


def _bare(path: Path):
    from llama_cpp import Llama  # the anchor: llama-cpp-python's own loop, n_batch 512

    return Llama(model_path=str(path), n_ctx=N_CTX, n_batch=512, n_ubatch=512, n_threads=THREADS,
                 n_threads_batch=THREADS, verbose=False)


def _bare_tps(bare, prefix: list[int], new: list[int]) -> float:
    bare.reset()
    if prefix:
        bare.eval(prefix)
    t0 = time.perf_counter()
    bare.eval(new)
    return len(new) / (time.perf_counter() - t0)


def prompt_table(path: Path, timed_pieces: bool) -> list[str]:
    home = Path(tempfile.mkdtemp(prefix="bench-real-"))
    assistant = Assistant(Database(home / "bench.db"),
                          EngineConfig(model=str(path), load=LoadParams(n_ctx=N_CTX, n_threads=THREADS)))
    bare = _bare(path)
    cid = assistant.new_conversation("You are a careful assistant.")
    rows = ["| turn | new tokens | cached | ours tok/s | bare tok/s | ours / bare |", "|---:|---:|---:|---:|---:|---:|"]
    texts = [paste_of(assistant.vocab, N_CTX // 4, 1), "What is the first note about?",
             paste_of(assistant.vocab, N_CTX * 35 // 100, 2)]  # ~1 000, then ~1 400 at 4k
    for turn, text in enumerate(texts, start=1):
        full = assistant.session(cid).prompt(Message("user", text))
        done = next(x for x in assistant.send(cid, text, PARAMS) if isinstance(x, TurnDone))
        s = done.stats
        ours = s.prompt_tokens_evaluated / (s.prompt_ms / 1000)
        cached = s.prompt_tokens_cached
        theirs = _bare_tps(bare, full[:cached], full[cached:cached + s.prompt_tokens_evaluated])
        rows.append(f"| {turn} | {s.prompt_tokens_evaluated} | {cached} | {ours:.1f} | {theirs:.1f} | "
                    f"{ours / theirs:.2f}× |")
        log.info("turn %d: %s", turn, rows[-1])
    bare.close()
    assistant.close()
    return rows


def stop_table(path: Path, stops: int) -> list[str]:
    home = Path(tempfile.mkdtemp(prefix="bench-real-"))
    assistant = Assistant(Database(home / "bench.db"),
                          EngineConfig(model=str(path), load=LoadParams(n_ctx=N_CTX, n_threads=THREADS)))
    rows = ["| stop | pressed after | turn ended after the press | tokens the cache kept |", "|---:|---:|---:|---:|"]
    waits = []
    for i in range(stops):
        cid = assistant.new_conversation()
        cancel = threading.Event()
        timer = threading.Timer(1.0, cancel.set)
        t0 = time.perf_counter()
        timer.start()
        done = None
        for item in assistant.send(cid, paste_of(assistant.vocab, N_CTX * 35 // 100, 10 + i), PARAMS, cancel=cancel):
            if isinstance(item, TurnDone):
                done = item
        ended = time.perf_counter()
        pressed = t0 + 1.0
        waits.append((ended - pressed) * 1000)
        kept = done.stats.prompt_tokens_evaluated if done else 0
        rows.append(f"| {i + 1} | 1.0 s | {waits[-1]:.0f} ms | {kept} |")
    assistant.close()
    rows.append(f"| median | | {statistics.median(waits):.0f} ms | |")
    return rows


RSS_CHILD = """
import os, sys, tempfile
from pathlib import Path
sys.path[:0] = [{root!r}, {bench!r}]
from real_size import PARAMS, THREADS, paste
from engine.api import Assistant, EngineConfig, TurnDone
from engine.inference.backend import LoadParams
from engine.models.planner import plan, ram_bytes
from engine.storage.db import Database
model, n_ctx = sys.argv[1], int(sys.argv[3])
assistant = Assistant(Database(Path(tempfile.mkdtemp()) / "b.db"),
                      EngineConfig(model=model, load=LoadParams(n_ctx=n_ctx, n_threads=THREADS)))
done = next(x for x in assistant.send(assistant.new_conversation(), paste(int(sys.argv[2]), 3), PARAMS)
            if isinstance(x, TurnDone))
status = dict(l.split(":", 1) for l in open("/proc/self/status").read().splitlines())
kib = lambda k: int(status[k].split()[0])
p = plan(model, vram_budget_mb=0, n_ctx=n_ctx)
planned = ram_bytes(p) / 2**20
baseline = float(os.environ["BASELINE_MIB"])
parts = " + ".join(f"{{b / 2**20:.0f}}" for b in (p.weights_bytes_total, p.kv_bytes_total,
                                                 p.host_compute_bytes_estimate, p.vocab_bytes_estimate))
print(parts, f"{{planned:.0f}} {{kib('VmHWM') / 1024 - baseline:.0f}} {{kib('VmRSS') / 1024 - baseline:.0f}} {{done.stats.prompt_tokens}}")
"""

BASELINE_CHILD = """
import sys
sys.path[:0] = [{root!r}, {bench!r}]
from engine.api import Assistant
from engine.inference import llama_seam
llama_seam.init()
status = dict(l.split(":", 1) for l in open("/proc/self/status").read().splitlines())
print(int(status["VmHWM"].split()[0]) / 1024)
"""


def rss_table(models: list[str], n_ctx: int) -> list[str]:
    """Peak RSS of a process that loads each model and answers a paste, less the same process's
    RSS before any model (Python, Qt-free engine imports, ggml's backends), against the plan."""
    import subprocess

    fmt = {"root": str(ROOT), "bench": str(ROOT / "bench")}
    base = float(subprocess.run([sys.executable, "-c", BASELINE_CHILD.format(**fmt)], capture_output=True,
                                text=True, check=True).stdout.split()[-1])
    rows = [f"Process baseline before any model: {base:.0f} MiB (subtracted below)", "",
            "| model | prompt tokens | planner: weights + KV + compute + vocabulary = MiB | peak RSS MiB | RSS after the turn MiB "
            "| peak / plan |", "|---|---:|---|---:|---:|---:|"]
    for model in models:
        words = int(RSS_PASTE_WORDS * n_ctx / 4096)  # most of the context, whatever its size
        out = subprocess.run([sys.executable, "-c", RSS_CHILD.format(**fmt), model, str(words), str(n_ctx)],
                             capture_output=True, text=True, env=dict(os.environ, BASELINE_MIB=str(base)))
        if out.returncode != 0:
            raise SystemExit(f"{model}: {out.stderr[-2000:]}")
        line = out.stdout.strip().splitlines()[-1].split()
        parts, (planned, peak, now, tokens) = " ".join(line[:7]), (float(x) for x in line[7:])
        rows.append(f"| {Path(model).stem} | {tokens:.0f} | {parts} = {planned:.0f} | {peak:.0f} | {now:.0f} "
                    f"| {peak / planned:.2f} |")
        log.info("%s", rows[-1])
    return rows


LONG_CTX = 8448
SETTLE_S = 3.0  # after a turn, before RSS is read: its background checkpoint has come and gone
DECODE_TOKENS = 48
DECODE_SETTLE_S = float(os.environ.get("DECODE_SETTLE_S", SETTLE_S))  # 8k: its 230 MB checkpoint takes longer


def decode_table(path: Path, sizes: list[int]) -> list[str]:
    from llama_cpp import Llama

    rows = ["| context tokens | ours tok/s | bare tok/s | ours / bare |", "|---:|---:|---:|---:|"]
    params = GenerateParams(SamplingParams(temperature=0.0, seed=1, repeat_penalty=1.0), max_tokens=DECODE_TOKENS)
    for size in sizes:
        home = Path(tempfile.mkdtemp(prefix="bench-real-"))
        assistant = Assistant(Database(home / "bench.db"),
                              EngineConfig(model=str(path), load=LoadParams(n_ctx=LONG_CTX, n_threads=THREADS)))
        cid = assistant.new_conversation("You are a careful assistant.")
        text = paste_of(assistant.vocab, size, 11)
        next(x for x in assistant.send(cid, text, PARAMS) if isinstance(x, TurnDone))
        time.sleep(DECODE_SETTLE_S)  # the paste's checkpoint written (a user reads before asking), not beside the decode
        question = "Continue the log with three more notes."
        prompt = assistant.session(cid).prompt(Message("user", question))
        done = next(x for x in assistant.send(cid, question, params) if isinstance(x, TurnDone))
        ours = done.stats.decode_tps
        assistant.close()
        bare = Llama(model_path=str(path), n_ctx=LONG_CTX, n_batch=512, n_ubatch=512, n_threads=THREADS,
                     n_threads_batch=THREADS, verbose=False)
        count, first, now = 0, None, 0.0
        for _ in bare.generate(prompt, temp=0.0, repeat_penalty=1.0, top_k=40, top_p=0.95, min_p=0.05):
            now = time.perf_counter()
            first = first or now
            count += 1
            if count >= DECODE_TOKENS:
                break
        theirs = (count - 1) / (now - first)
        bare.close()
        rows.append(f"| {len(prompt)} | {ours:.2f} | {theirs:.2f} | {ours / theirs:.2f}× |")
        log.info("decode %s", rows[-1])
    return rows


def _rss_mib() -> float:
    status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())
    return int(status["VmRSS"].split()[0]) / 1024


def _exit_row(label: str, t0: float, assistant: Assistant, restored: str = " | ") -> str:
    from engine.config.paths import user_dir

    exit_ms = (time.perf_counter() - t0) * 1000
    size = sum(f.stat().st_size for f in (user_dir() / "kv").glob("*.kvs"))
    cold = assistant.kv.cold.stats
    return f"| {label} | {exit_ms:.0f} | {size / 2**20:.0f} | {cold.written}, {cold.appended} | {restored} |"


def long_table(path: Path, turns: int) -> list[str]:
    from engine.models.planner import plan

    home = Path(tempfile.mkdtemp(prefix="bench-real-"))
    config = EngineConfig(model=str(path), load=LoadParams(n_ctx=LONG_CTX, n_threads=THREADS))
    p = plan(str(path), vram_budget_mb=0, n_ctx=LONG_CTX)
    per_token = p.kv_bytes_per_token
    rss0 = _rss_mib()
    assistant = Assistant(Database(home / "bench.db"), config)
    cid = assistant.new_conversation("You are a careful assistant.")
    first = next(x for x in assistant.send(cid, "Hello.", PARAMS) if isinstance(x, TurnDone))
    loaded = _rss_mib()
    t0 = time.perf_counter()
    done = next(x for x in assistant.send(cid, paste(4700, 7), PARAMS) if isinstance(x, TurnDone))
    fill_s = time.perf_counter() - t0
    time.sleep(SETTLE_S)
    filled = _rss_mib()
    n_tokens = done.stats.prompt_tokens + done.stats.completion_tokens
    rows = [f"Process before the model: {rss0:.0f} MiB; loaded (after a first short turn): {loaded:.0f} MiB; "
            f"the paste: {done.stats.prompt_tokens_evaluated} tokens in {fill_s:.0f} s; planner: KV "
            f"{per_token} B/token, resident compute {p.host_compute_bytes_estimate / 2**20:.0f} MiB", "",
            "| after | tokens in the chat | RSS MiB | RSS − loaded MiB | one KV copy MiB | (RSS − loaded) / (KV + compute) |",
            "|---|---:|---:|---:|---:|---:|"]

    def row(label: str, tokens: int, rss: float) -> str:
        kv = tokens * per_token / 2**20
        return (f"| {label} | {tokens} | {rss:.0f} | {rss - loaded:.0f} | {kv:.0f} | "
                f"{(rss - loaded) / (kv + p.host_compute_bytes_estimate / 2**20):.2f} |")

    rows.append(row("the paste", n_tokens, filled))
    del first
    for i in range(turns):
        done = next(x for x in assistant.send(cid, f"Question {i}: which note mentions the glacier?", PARAMS)
                    if isinstance(x, TurnDone))
        n_tokens = done.stats.prompt_tokens + done.stats.completion_tokens
        if i in (0, 4, 9, turns - 1):
            time.sleep(SETTLE_S)  # the turn's checkpoint copied, written and freed
            rows.append(row(f"turn {i + 1} of {turns}", n_tokens, _rss_mib()))
    time.sleep(SETTLE_S)
    t0 = time.perf_counter()
    assistant.close()
    rows += ["", "| step | exit ms | cold file MiB | whole writes, appends in the process | restored from | "
             "tokens evaluated |", "|---|---:|---:|---|---|---:|", _exit_row("exit 1, after the turns", t0, assistant)]
    for step in (2, 3):  # a restart, one short turn (restored from the cold file), the exit
        again = Assistant(Database(home / "bench.db"), config)
        done = next(x for x in again.send(cid, f"After restart {step}: which note was first?", PARAMS)
                    if isinstance(x, TurnDone))
        time.sleep(SETTLE_S)
        t0 = time.perf_counter()
        again.close()
        rows.append(_exit_row(f"restart {step - 1}: a short turn (TTFT {done.stats.ttft_ms:.0f} ms, restore "
                              f"{done.stats.restore_ms:.0f} ms), then exit {step}", t0, again,
                              f"{done.stats.restored_from} | {done.stats.prompt_tokens_evaluated}"))
    rows += ["", f"Re-evaluating the chat instead: the paste took {fill_s:.0f} s."]
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="qwen2.5-1.5b-instruct-q4_k_m")
    ap.add_argument("--only", nargs="+", choices=["prompt", "stop", "decode", "long", "rss"],
                    default=["prompt", "stop", "decode", "long", "rss"])
    ap.add_argument("--decode-at", type=int, nargs="+", default=[1000], help="chat sizes for decode, tokens")
    ap.add_argument("--turns", type=int, default=20, help="short turns after the 8k paste (long)")
    ap.add_argument("--n-ctx", type=int, default=N_CTX, help="n_ctx of the prompt and stop sections (their "
                    "pastes scale with it; 2048 for the 7-8B shapes)")
    ap.add_argument("--rss-ctx", type=int, default=N_CTX, help="n_ctx of the rss section")
    ap.add_argument("--rss-models", nargs="+", help="catalog ids to synthesise for the rss section "
                    "(default: both demo models and --model's synthetic)")
    ap.add_argument("--timed-pieces", action="store_true", help="prompt pieces sized by time (before issue 25)")
    ap.add_argument("--stops", type=int, default=3)
    args = ap.parse_args()
    globals()["N_CTX"] = args.n_ctx  # the sections read the module's figure
    logging.basicConfig(level=logging.INFO, format="# %(message)s")
    path = synthesize(args.model)
    registry().load()
    print(f"Synthetic {args.model} ({path.stat().st_size / 2**30:.2f} GiB), n_ctx {N_CTX}, {THREADS} threads\n")
    if args.timed_pieces:  # as before issue 25: no abort inside a piece, so pieces sized by time
        Backend.abortable = property(lambda self: False)
    if "prompt" in args.only:
        label = "pieces sized by time (before issue 25)" if args.timed_pieces else "whole n_batch pieces, Stop aborts inside one"
        print(f"### Prompt evaluation per turn, ours ({label}) vs bare llama-cpp-python\n")
        print("\n".join(prompt_table(path, args.timed_pieces)) + "\n")
    if "stop" in args.only:
        print("### Stop during a long paste\n")
        print("\n".join(stop_table(path, args.stops)) + "\n")
    if "decode" in args.only:
        print("### Decode speed, ours vs bare llama-cpp-python\n")
        print("\n".join(decode_table(path, args.decode_at)) + "\n")
    if "long" in args.only:
        print(f"### An 8k chat: RSS over {args.turns} turns, and the exit\n")
        print("\n".join(long_table(path, args.turns)) + "\n")
    if "rss" in args.only:
        models = [str(synthesize(m)) for m in args.rss_models] if args.rss_models else \
            ["demo-small", "demo-int4", str(path)]
        print(f"### Peak RSS against the planner (n_ctx {args.rss_ctx}, one turn filling most of it)\n")
        print("\n".join(rss_table(models, args.rss_ctx)) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
