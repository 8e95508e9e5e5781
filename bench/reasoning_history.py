"""Earlier thinking in the prompt: what "drop" (the template's rule for Qwen3 and R1) and "keep"
cost per turn, on a 10-turn chat with a reasoning model.

The model is demo-small rewritten with an R1-style template (tests/reasoning_models.py): the
prompt opens the block, so the model thinks first; a budget closes the block after --budget tokens
where the model does not. Greedy, one run per rule, through engine.api. Per turn: tokens evaluated
(the prompt minus what the KV cache held), the prompt's length, and the thinking's tokens.

    .venv/bin/python bench/reasoning_history.py [--turns 10] [--budget 32] [--style r1|qwen3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

QUESTIONS = [
    "What is the capital of France?", "Name a river that flows through it.", "How long is that river?",
    "What is a famous museum there?", "Which painting is it known for?", "Who painted it?",
    "When was that painter born?", "Name another of his works.", "Where is it kept?", "Thank you, summarise our chat.",
    "What else should I see?", "Is it far from the museum?",
]


def run(model: Path, rule: str, turns: int, budget: int, max_tokens: int) -> list[dict]:
    os.environ["ASSISTANT_HOME"] = tempfile.mkdtemp(prefix=f"bench-think-{rule}-")
    from engine.api import Assistant, GenerateParams, SamplingParams, TurnDone

    a = Assistant.from_settings(model=str(model), memory=False)
    rows = []
    try:
        cid = a.new_conversation("")
        params = GenerateParams(SamplingParams(temperature=0.0, seed=1), max_tokens=max_tokens,
                                reasoning_budget=budget, reasoning_history=rule)
        for i in range(turns):
            done = [e for e in a.send(cid, QUESTIONS[i % len(QUESTIONS)], params, route="L2")
                    if isinstance(e, TurnDone)][-1]
            s = done.stats
            rows.append({"evaluated": s.prompt_tokens_evaluated, "prompt": s.prompt_tokens,
                         "reasoning": s.reasoning_tokens, "answer": s.completion_tokens - s.reasoning_tokens,
                         "ttft_ms": s.ttft_ms})
    finally:
        a.close()
    return rows


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--turns", type=int, default=10)
    p.add_argument("--budget", type=int, default=32, help="thinking tokens before the engine closes the block")
    p.add_argument("--max-tokens", type=int, default=96)
    p.add_argument("--style", choices=("r1", "qwen3"), default="r1")
    args = p.parse_args()
    from tests.reasoning_models import reasoning_gguf

    model = reasoning_gguf(args.style, Path(tempfile.mkdtemp(prefix="bench-think-model-")))
    drop = run(model, "template", args.turns, args.budget, args.max_tokens)
    keep = run(model, "keep", args.turns, args.budget, args.max_tokens)
    print(f"demo-small with an {args.style}-style template, greedy, thinking budget {args.budget}, "
          f"max_tokens {args.max_tokens}, {args.turns} turns\n")
    print("| turn | drop (template): evaluated | prompt | thinking | answer | keep: evaluated | prompt | thinking | answer |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for i, (d, k) in enumerate(zip(drop, keep), 1):
        print(f"| {i} | {d['evaluated']} | {d['prompt']} | {d['reasoning']} | {d['answer']} "
              f"| {k['evaluated']} | {k['prompt']} | {k['reasoning']} | {k['answer']} |")
    later = slice(1, None)
    for name, rows in (("drop (template)", drop), ("keep", keep)):
        ev = [r["evaluated"] for r in rows[later]]
        print(f"\n{name}: turns 2-{len(rows)} evaluate {statistics.mean(ev):.1f} tokens on average "
              f"(median {statistics.median(ev):.0f}); the last prompt holds {rows[-1]['prompt']} tokens; "
              f"TTFT median {statistics.median(r['ttft_ms'] for r in rows[later]):.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
