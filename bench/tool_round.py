"""What tools cost a turn (issue 26), on demo-small through `engine.api`, side by side in one run:

- the prompt tokens the tools' descriptions add to every turn, and the first turn's time to the
  first token with and without them;
- a tool round (call → result → answer): tokens evaluated per round against the result's own
  tokens, and its time to the first token against a plain follow-up question's;
- the call grammar's cost per decoded token: a required call decoded under its grammar against the
  same tokens' decode unconstrained (the model's own greedy answer).

    .venv/bin/python bench/tool_round.py [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

os.environ["ASSISTANT_HOME"] = tempfile.mkdtemp(prefix="bench-tools-")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.api import (Assistant, EngineConfig, GenerateParams, LoadParams, SamplingParams, ToolUse,  # noqa: E402
                        TurnDone, parse_tools)
from engine.storage import Database  # noqa: E402

TOOLS = parse_tools([
    {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city today",
                                      "parameters": {"type": "object", "properties": {
                                          "city": {"type": "string"}, "unit": {"type": "string",
                                                                               "enum": ["celsius", "fahrenheit"]}},
                                          "required": ["city"]}}},
    {"type": "function", "function": {"name": "add", "description": "Add two numbers",
                                      "parameters": {"type": "object", "properties": {
                                          "a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a", "b"]}}},
    {"type": "function", "function": {"name": "search_documents", "description": "Search the user's documents",
                                      "parameters": {"type": "object", "properties": {"query": {"type": "string"}},
                                                     "required": ["query"]}}},
])
RESULT = "Sunny, 21 degrees Celsius, light wind from the west."


def greedy(n: int, tools: ToolUse | None) -> GenerateParams:
    return GenerateParams(SamplingParams(temperature=0.0, seed=1, repeat_penalty=1.0), max_tokens=n,
                          repetition_guard=False, tools=tools)


def last(events) -> TurnDone:
    return [e for e in events if isinstance(e, TurnDone)][-1]


def one_run(a: Assistant) -> dict:
    out = {}
    # the tools' weight in the prompt: the same first turn with and without them
    plain = last(a.send(a.new_conversation("You are helpful."), "What is the weather in Paris?", greedy(1, None),
                        route="L1", cascade=False))
    cid = a.new_conversation("You are helpful.")
    called = last(a.send(cid, "What is the weather in Paris?", greedy(64, ToolUse(TOOLS, "required", False)),
                         route="L1", cascade=False, read_ahead=True))
    out["prompt_plain"], out["prompt_tools"] = plain.stats.prompt_tokens, called.stats.prompt_tokens
    out["ttft_plain"], out["ttft_tools"] = plain.stats.ttft_ms, called.stats.ttft_ms
    out["call_tokens"], out["call_tps"] = called.stats.completion_tokens, called.stats.decode_tps
    # the round: the result back, against a plain follow-up question in a chat without tools
    round_ = last(a.send_tool_results(cid, [(called.tool_calls[0]["id"], RESULT)], greedy(16, ToolUse(TOOLS)),
                                      read_ahead=True))
    out["round_evaluated"], out["round_ttft"] = round_.stats.prompt_tokens_evaluated, round_.stats.ttft_ms
    out["result_tokens"] = len(a.vocab.tokenize(RESULT, special=False))
    pid = a.new_conversation("You are helpful.")
    last(a.send(pid, "What is the weather in Paris?", greedy(24, None), route="L1", cascade=False, read_ahead=True))
    follow = last(a.send(pid, RESULT, greedy(16, None), route="L1", cascade=False))
    out["follow_evaluated"], out["follow_ttft"] = follow.stats.prompt_tokens_evaluated, follow.stats.ttft_ms
    # the grammar's cost per token: the model's own free answer of as many tokens, unconstrained
    free = last(a.send(a.new_conversation("You are helpful."), "What is the weather in Paris?",
                       greedy(out["call_tokens"], None), route="L1", cascade=False))
    out["free_tps"] = free.stats.decode_tps
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    a = Assistant(Database(Path(os.environ["ASSISTANT_HOME"]) / "b.db"),
                  EngineConfig(model="demo-small", load=LoadParams(n_ctx=4096, n_threads=2)))
    try:
        runs = [one_run(a) for _ in range(args.runs)]
    finally:
        a.close()
    med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    print(f"demo-small, 2 threads, {args.runs} runs (medians), 3 tools\n")
    print("| measure | without tools | with tools | ratio |\n|---|---:|---:|---:|")
    print(f"| first turn: prompt tokens | {med['prompt_plain']:.0f} | {med['prompt_tools']:.0f} | "
          f"+{med['prompt_tools'] - med['prompt_plain']:.0f} tokens |")
    first = runs[0]  # later runs find the system prompt and the tools cached from an earlier chat
    print(f"| first turn: time to first token, first chat | {first['ttft_plain']:.0f} ms | {first['ttft_tools']:.0f} ms "
          f"| {first['ttft_tools'] / first['ttft_plain']:.2f}× |")
    print(f"| first turn: time to first token, later chats (prefix cached) | {med['ttft_plain']:.0f} ms | "
          f"{med['ttft_tools']:.0f} ms | {med['ttft_tools'] / med['ttft_plain']:.2f}× |")
    print(f"| next turn: tokens evaluated (a {med['result_tokens']:.0f}-token result or the same text as a question) "
          f"| {med['follow_evaluated']:.0f} | {med['round_evaluated']:.0f} | result + "
          f"{med['round_evaluated'] - med['result_tokens']:.0f} |")
    print(f"| next turn: time to first token | {med['follow_ttft']:.0f} ms | {med['round_ttft']:.0f} ms | "
          f"{med['round_ttft'] / med['follow_ttft']:.2f}× |")
    print(f"| decode tok/s: free answer vs a call under its grammar ({med['call_tokens']:.0f} tokens) | "
          f"{med['free_tps']:.1f} | {med['call_tps']:.1f} | {med['call_tps'] / med['free_tps']:.2f}× |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
