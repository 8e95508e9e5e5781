"""Does recall earn its tokens? One long everyday chat, run with memory off and then on (a fresh
data dir each), and what recall added to each turn's prompt and first-token time.

    .venv/bin/python bench/retrieval_budget.py [--turns 60] [--model demo-small] [--n-ctx 2048]

The chat: varied everyday questions, some small talk, four personal facts told in turns 3-9 and
asked again in other words in turns 44-58 (after their turns have left a 2048-token window). After
each turn the bench waits for the memory's indexing and the background summary, as a user reading
the answer would give them time to finish, so TTFT is the turn's own work. Prints per-turn series
and a table: median TTFT over turns 2-10 and 40-60 and their ratio, median prompt tokens evaluated
per turn (the same ranges), median and max recall tokens per turn (40-60), facts recalled (the
fact's memory in `done.stats.memories_used` on its question turn).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.api import Assistant, GenerateParams, SamplingParams, TurnDone  # noqa: E402
from engine.config.settings import Settings  # noqa: E402

# (told at turn, fact, asked at turn, question, a word only the fact's memory contains)
FACTS = [
    (3, "By the way, my daughter Lena just turned seven.", 44, "How old is my kid now?", "Lena"),
    (5, "I drive an old blue Volvo station wagon.", 49, "What kind of car do I have?", "Volvo"),
    (7, "I'm allergic to penicillin, so keep that in mind.", 54, "Which antibiotics should I stay away from?",
     "penicillin"),
    (9, "I moved to Lisbon last spring for work.", 58, "Which city do I live in these days?", "Lisbon"),
]
SMALL_TALK = {1: "Hi there!", 6: "thanks!", 12: "ok, cool", 17: "haha nice", 23: "谢谢！", 29: "good morning",
              35: "how are you today?", 41: "great, thank you", 47: "好的", 52: "nice one", 56: "lol ok",
              60: "thanks, bye!"}
EVERYDAY = [
    "What's a good way to keep fresh basil from wilting?",
    "How do I get rid of a squeaky door hinge?",
    "Can you suggest a quick breakfast I can make in five minutes?",
    "Why does bread go stale faster in the fridge?",
    "What is a simple stretch for a stiff neck?",
    "How often should I water a snake plant?",
    "Give me a tip for remembering people's names.",
    "How can I get a red wine stain out of a cotton shirt?",
    "What's the difference between baking soda and baking powder?",
    "How do I descale an electric kettle?",
    "Suggest a board game for four adults.",
    "What is a polite way to decline a meeting invitation?",
    "How long should I boil an egg for a runny yolk?",
    "Why do onions make people cry?",
    "What's an easy houseplant for a dark room?",
    "How do I sharpen a kitchen knife without a whetstone?",
    "Give me three ideas for a rainy Sunday afternoon.",
    "How can I make my phone battery last longer?",
    "What is a good warm-up before running?",
    "How do I keep cut apples from turning brown?",
    "What should I pack for a weekend hiking trip?",
    "How do I unclog a bathroom sink without chemicals?",
    "What's a quick vegetarian dinner idea?",
    "How can I stop procrastinating on small chores?",
    "Why is the sky blue?",
    "How do I fold a fitted sheet?",
    "What's a good way to learn to touch type?",
    "How can I make instant coffee taste better?",
    "What's the best way to store batteries?",
    "Give me a short riddle.",
    "How do I clean a cast iron pan?",
    "What are some tips for a first job interview?",
    "How do I keep my glasses from fogging up?",
    "Suggest a name for a small blue fish.",
    "What is a good gift for a neighbour who helped me move?",
    "How do I freeze fresh berries?",
    "What is compound interest, in one paragraph?",
    "How do I get better sleep on hot nights?",
    "Why do cats purr?",
    "How can I reduce food waste at home?",
    "What's a good way to start journaling?",
    "How do I remove a sticker residue from glass?",
    "Suggest a short stretching routine for the morning.",
    "What's an easy way to brighten a small room?",
]


def chat_plan(turns: int) -> list[tuple[str, str | None]]:
    """(user text, fact keyword when the turn asks for a fact) for turns 1..turns."""
    plan: dict[int, tuple[str, str | None]] = {}
    for told, fact, asked, question, word in FACTS:
        plan[told] = (fact, None)
        plan[asked] = (question, word)
    plan.update({t: (text, None) for t, text in SMALL_TALK.items()})
    everyday = iter(EVERYDAY * 2)
    return [plan.get(t) or (next(everyday), None) for t in range(1, turns + 1)]


def run(args, memory: bool) -> list[dict]:
    os.environ["ASSISTANT_HOME"] = tempfile.mkdtemp(prefix=f"bench-retrieval-{'on' if memory else 'off'}-")
    settings = Settings()
    if args.max_recall is not None:
        settings.set("retrieval.max_tokens", args.max_recall)
    a = Assistant.from_settings(settings, model=args.model, n_ctx=args.n_ctx, memory=memory, cascade=False)
    params = GenerateParams(SamplingParams(temperature=0.0), max_tokens=args.max_tokens)
    rows = []
    try:
        if memory and not a.memory.embedder.wait(180):
            raise SystemExit(f"embedder not ready: {a.memory.embedder.state}")
        cid = a.new_conversation()
        for t, (text, word) in enumerate(chat_plan(args.turns), start=1):
            done = None
            for item in a.send(cid, text, params):
                if isinstance(item, TurnDone):
                    done = item
            s = done.stats
            used = s.memories_used
            recall = s.retrieval.memory_tokens
            if recall is None:  # before the stats carried it: the turn as the model read it, less the words typed
                user = next(m for m in reversed(a.conversation(cid).messages) if m.role == "user")
                recall = a.count_tokens(user.model_text) - a.count_tokens(user.content) if user.model_text else 0
            rows.append({"turn": t, "ttft_ms": s.ttft_ms, "evaluated": s.prompt_tokens_evaluated,
                         "recall_tokens": recall, "hits": len(used), "word": word,
                         "shift": (s.context or {}).get("context_shift"),
                         "found": word is not None and any(word.lower() in h["text"].lower() for h in used),
                         "scores": [round(h["score"], 2) for h in used]})
            if args.verbose and (used or word):
                found = f" fact {word}: {rows[-1]['found']}" if word else ""
                print(f"[{'on' if memory else 'off'}] turn {t} {text!r}{found}"
                      + "".join(f"\n    {h['score']:.2f} {h['text'][:90]!r}" for h in used), file=sys.stderr)
            a.wait_for_summaries(120)  # the user reads the answer meanwhile
            if a.memory is not None:
                a.memory.flush(60)
    finally:
        a.close()
    return rows


def med(rows: list[dict], key: str, lo: int, hi: int) -> float:
    return statistics.median(r[key] for r in rows if lo <= r["turn"] <= hi)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--turns", type=int, default=60)
    p.add_argument("--model", default="demo-small")
    p.add_argument("--n-ctx", type=int, default=2048)
    p.add_argument("--max-tokens", type=int, default=64, help="answer length cap")
    p.add_argument("--max-recall", type=int, default=None, help="retrieval.max_tokens (default: the setting's)")
    p.add_argument("--only", choices=("off", "on"), help="run one of the two")
    p.add_argument("--verbose", action="store_true", help="each turn's recalled memories, on stderr")
    args = p.parse_args()
    if args.turns < 60:
        print(f"note: {args.turns} turns: the fact questions come at turns 44-58", file=sys.stderr)
    t0, load0 = time.perf_counter(), os.getloadavg()[0]
    results = {m: run(args, m == "on") for m in ("off", "on") if args.only in (None, m)}
    # TTFT is wall time: other work on the machine shows in it (the load average says how much).
    print(f"model {args.model}, n_ctx {args.n_ctx}, {args.turns} turns, answers ≤ {args.max_tokens} tokens, "
          f"retrieval.max_tokens {args.max_recall if args.max_recall is not None else 'default'}, "
          f"{time.perf_counter() - t0:.0f} s, load average {load0:.1f} → {os.getloadavg()[0]:.1f}\n")
    for mode, rows in results.items():
        print(f"memory {mode}, turn:ttft_ms/evaluated/recall_tokens(scores)"
              + "".join(f" {r['turn']}:{r['ttft_ms']:.0f}/{r['evaluated']}/{r['recall_tokens']}"
                        + (f"{r['scores']}" if r["scores"] else "") + ("*" if r["shift"] else "")
                        + ("" if not r["word"] else "+" if r["found"] else "-") for r in rows))
    print("\n(* the window moved that turn; +/- a fact question whose fact was / was not recalled)\n")
    print("| memory | TTFT median 2-10 | TTFT median 40-60 | ratio | tokens evaluated 2-10 | tokens evaluated 40-60 "
          "| recall tokens 40-60 median / max | turns with recall 40-60 | facts recalled |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for mode, rows in results.items():
        early, late = med(rows, "ttft_ms", 2, 10), med(rows, "ttft_ms", 40, 60)
        late_rows = [r for r in rows if 40 <= r["turn"] <= 60]
        facts = [r for r in rows if r["word"]]
        recalled = f"{sum(r['found'] for r in facts)}/{len(facts)}" if mode == "on" else "—"
        print(f"| {mode} | {early:.0f} ms | {late:.0f} ms | {late / early:.2f}× | {med(rows, 'evaluated', 2, 10):.0f} "
              f"| {med(rows, 'evaluated', 40, 60):.0f} | {med(rows, 'recall_tokens', 40, 60):.0f} / "
              f"{max((r['recall_tokens'] for r in late_rows), default=0)} "
              f"| {sum(r['hits'] > 0 for r in late_rows)} / {len(late_rows)} | {recalled} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
