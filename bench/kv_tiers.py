"""KV state tiers: going back to a ~2000-token chat from RAM (warm) or disk after a restart (cold),
against re-evaluating it, and interleaving two chats against plain llama-cpp-python.

    .venv/bin/python bench/kv_tiers.py [--tokens 2000] [--models demo-small demo-int4]

For each model one run prints a markdown table (docs/benchmarks.md quotes it):
  (a) scratch: a fresh process-equivalent (no tiers) evaluates the whole history, then answers;
  (b) warm: the chat comes back from the RAM tier after another chat used the context;
  (c) cold: a new *process* (subprocess) restores the chat's snapshot file written at exit;
  (d) A,B,A,B: two chats interleaved in one process, ours vs `Llama.create_chat_completion`;
  plus snapshot bytes per token against the planner's bytes/token, and llama-cpp-python's own
  `save_state`/`load_state` for the same context (the baseline the issue measured).
TTFT includes the restore. Histories are written straight to SQLite (varied text, no sampling),
so every path sees the same tokens.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from llama_cpp import Llama  # noqa: E402 - the bare baseline, deliberately outside the engine

from engine.inference.backend import LoadParams, SamplingParams  # noqa: E402
from engine.api import Assistant, EngineConfig, TurnDone  # noqa: E402
from engine.inference.events import GenerateParams  # noqa: E402
from engine.config.paths import db_path  # noqa: E402
from engine.storage import Database  # noqa: E402

log = logging.getLogger("bench.kv_tiers")
N_CTX = 4096
PARAMS = GenerateParams(SamplingParams(temperature=0.0, seed=1), max_tokens=8)
TOPICS = ["the history of the bicycle", "how bread rises", "why the sky is blue", "the rules of chess",
          "how vaccines work", "the water cycle", "what a compiler does", "how tides happen",
          "the life of bees", "how a refrigerator cools", "the Silk Road", "plate tectonics"]


def build_history(db: Database, backend_tokens, target: int, seed: int) -> int:
    """A conversation of about `target` tokens written to SQLite; its id."""
    cid = db.create_conversation(system_prompt="You are a patient teacher.")
    n, i = 0, 0
    while n < target:
        topic = TOPICS[(i + seed) % len(TOPICS)]
        q = f"Question {i + 1} (chat {seed}): please explain {topic} in a few sentences."
        a = (f"Here is a short explanation of {topic}. " + " ".join(
            f"Point {k}: {topic} involves steps that build on each other, observed and measured over time."
            for k in range(1, 6)))
        db.add_message(cid, "user", q)
        db.add_message(cid, "assistant", a)
        n += backend_tokens(q) + backend_tokens(a) + 10
        i += 1
    return cid


def ask(a: Assistant, cid: int, text: str) -> dict:
    done = [x for x in a.send(cid, text, PARAMS) if isinstance(x, TurnDone)][-1]
    return done.stats.as_json()  # the JSON shape: the child process prints it


def child_cold(model: str, cid: int) -> None:
    """In a new process: resume `cid` (its snapshot was written when the parent exited)."""
    a = Assistant(Database(db_path()), EngineConfig(model=model, load=LoadParams(n_ctx=N_CTX)))
    try:
        s = ask(a, cid, "One more question about it, briefly?")
        print(json.dumps({k: s[k] for k in ("ttft_ms", "restore_ms", "park_ms", "restored_from", "prompt_tokens",
                                            "prompt_tokens_evaluated", "prompt_tokens_cached")}))
    finally:
        a.close()


def bare_interleave(path: Path, histories: dict[int, list[dict]], rounds: int) -> list[float]:
    """TTFT of plain llama-cpp-python answering A, B, A, B (its own prefix cache, one context)."""
    llm = Llama(model_path=str(path), n_ctx=N_CTX, n_batch=512, verbose=False)
    ttfts = []
    try:
        for r in range(rounds):
            for cid, msgs in histories.items():
                msgs.append({"role": "user", "content": f"Follow-up {r} on chat {cid}?"})
                t0 = time.perf_counter()
                stream = llm.create_chat_completion(msgs, max_tokens=8, temperature=0.0, stream=True)
                first = None
                text = []
                for chunk in stream:
                    if first is None:
                        first = time.perf_counter()
                    text.append(chunk["choices"][0]["delta"].get("content") or "")
                ttfts.append((first - t0) * 1000)
                msgs.append({"role": "assistant", "content": "".join(text)})
    finally:
        llm.close()
    return ttfts


def bare_state_roundtrip(path: Path, tokens: list[int]) -> tuple[float, float, int]:
    """llama-cpp-python's whole-context save_state/load_state at this length: (save ms, load ms, bytes)."""
    llm = Llama(model_path=str(path), n_ctx=N_CTX, n_batch=512, verbose=False)
    try:
        llm.eval(tokens)
        t0 = time.perf_counter()
        state = llm.save_state()
        t1 = time.perf_counter()
        llm.reset()
        llm.load_state(state)
        t2 = time.perf_counter()
        return (t1 - t0) * 1000, (t2 - t1) * 1000, state.llama_state_size + state.scores.nbytes
    finally:
        llm.close()


def run_model(model: str, target: int, rounds: int) -> list[str]:
    home = Path(tempfile.mkdtemp(prefix="bench-kv-"))
    os.environ["ASSISTANT_HOME"] = str(home)
    db = Database(db_path())
    a = Assistant(db, EngineConfig(model=model, load=LoadParams(n_ctx=N_CTX)))
    count = lambda text: len(a.vocab.tokenize(text, special=False))  # noqa: E731
    cid_a, cid_b = build_history(db, count, target, 0), build_history(db, count, target, 1)

    # (a) scratch, with tiers off: the whole history is evaluated (averaged over both chats)
    scratch = Assistant(db, EngineConfig(model=model, load=LoadParams(n_ctx=N_CTX), kv_tiers=False), manager=a.manager)
    s_a = ask(scratch, cid_a, "First question: what was the first topic?")
    list(a.manager.loaded()[0].submit(lambda w, job: w.backend.reset()))  # on the model's thread, its owner
    # (b) warm: A in the context, then B takes it (A is parked in RAM), then A comes back
    ask(a, cid_a, "And the second topic?")
    ask(a, cid_b, "First question: what was the first topic?")
    warm = ask(a, cid_a, "And the third topic?")
    snap_bytes = a.kv.warm.entries()[0].nbytes if a.kv.warm.entries() else 0
    snap_tokens = len(a.kv.warm.entries()[0].tokens) if a.kv.warm.entries() else 0
    planned = a.manager.loaded()[0].plan.kv_bytes_per_token
    # (d) interleaving in one process: ours
    ours = []
    for r in range(rounds):
        for cid in (cid_a, cid_b):
            s = ask(a, cid, f"Follow-up {r} on chat {cid}?")
            ours.append(s)
    path = a.backend.path
    history_a = [{"role": m["role"], "content": m["content"]} for m in db.messages(cid_a)]
    kv_tokens = list(a.manager.loaded()[0].view.kv_tokens)  # as the model's thread published it
    a.close()  # (c) the exit writes the snapshots
    db.close()
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, __file__, "--child-cold", model, str(cid_a)], capture_output=True,
                          text=True, env=env, timeout=600)
    if proc.returncode != 0:
        raise SystemExit(f"cold child failed: {proc.stderr[-2000:]}")
    cold = json.loads(proc.stdout.strip().splitlines()[-1])
    bare_histories = {cid_a: history_a,
                      cid_b: [{"role": m["role"], "content": m["content"]}
                              for m in Database(db_path()).messages(cid_b)]}
    bare = bare_interleave(path, bare_histories, rounds)
    save_ms, load_ms, bare_bytes = bare_state_roundtrip(path, kv_tokens)

    rows = [f"### {model}: a {s_a['prompt_tokens']}-token chat, n_ctx {N_CTX}", "",
            "| path | TTFT ms | park ms | restore ms | tokens evaluated | tokens cached | vs scratch |",
            "|---|---:|---:|---:|---:|---:|---:|"]
    for name, s in (("(a) re-evaluate from scratch", s_a), ("(b) warm (RAM) restore", warm),
                    ("(c) cold restore, new process", cold)):
        rows.append(f"| {name} | {s['ttft_ms']:.0f} | {s.get('park_ms', 0):.1f} | {s.get('restore_ms', 0):.1f} | "
                    f"{s['prompt_tokens_evaluated']} | "
                    f"{s['prompt_tokens_cached']} | {s_a['ttft_ms'] / s['ttft_ms']:.1f}× |")
    later = ours  # every chat was visited before (b)
    bare_later = bare[2:]  # the bare baseline's first visit of each evaluates everything
    rows += ["", f"(d) A,B,A,B × {rounds} in one process, after the first visit of each:", "",
             "| | TTFT median ms | tokens evaluated median | restored from |", "|---|---:|---:|---|",
             f"| ours | {statistics.median(s['ttft_ms'] for s in later):.0f} | "
             f"{statistics.median(s['prompt_tokens_evaluated'] for s in later):.0f} | "
             f"{', '.join(sorted({str(s['restored_from']) for s in later}))} |",
             f"| llama-cpp-python `create_chat_completion` | {statistics.median(bare_later):.0f} | "
             "(its prefix cache holds the other chat) | — |",
             f"| ratio bare/ours | {statistics.median(bare_later) / statistics.median(s['ttft_ms'] for s in later):.1f}× | | |",
             "", "| state | bytes | bytes per token |", "|---|---:|---:|",
             f"| our snapshot (per-sequence state, {snap_tokens} tokens) | {snap_bytes:,} | {snap_bytes / max(snap_tokens, 1):,.0f} |",
             f"| planner's KV bytes/token (all layers, f16) | | {planned:,} |",
             f"| llama-cpp-python `save_state` (whole context + its logits matrix) | {bare_bytes:,} | "
             f"{bare_bytes / max(len(kv_tokens), 1):,.0f} |",
             "", f"llama-cpp-python `save_state` {save_ms:.0f} ms, `load_state` {load_ms:.0f} ms at {len(kv_tokens)} tokens "
             f"(ours: cold restore {cold['restore_ms']:.0f} ms including file read and checks).", ""]
    return rows


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tokens", type=int, default=2000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--models", nargs="+", default=["demo-small", "demo-int4"])
    p.add_argument("--child-cold", nargs=2, metavar=("MODEL", "CID"), help=argparse.SUPPRESS)
    args = p.parse_args()
    logging.basicConfig(level=logging.WARNING)
    if args.child_cold:
        child_cold(args.child_cold[0], int(args.child_cold[1]))
        return 0
    out = [f"KV tiers, {os.cpu_count()} CPUs, llama-cpp-python CPU build", ""]
    for model in args.models:
        out += run_model(model, args.tokens, args.rounds)
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
