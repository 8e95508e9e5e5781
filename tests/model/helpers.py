"""Shared steps for model tests: run a turn to completion, greedy parameters."""

from engine.inference.backend import SamplingParams
from engine.api import Assistant, TurnDone
from engine.inference.generate import GenerateParams, TurnResult, generate

GREEDY = SamplingParams(temperature=0.0, repeat_penalty=1.0, seed=1)
# llama.cpp threads per model in tests: the default (all cores) oversubscribes a shared 2-core
# machine (test runners, other models and background threads all want them).
THREADS = 2


def greedy(max_tokens=24) -> GenerateParams:
    return GenerateParams(sampling=GREEDY, max_tokens=max_tokens)


def turn(assistant: Assistant, cid: int, text: str, max_tokens=24, cancel=None, params=None) -> TurnDone:
    done = None
    for item in assistant.send(cid, text, params or greedy(max_tokens), cancel):
        if isinstance(item, TurnDone):
            done = item
    assert done is not None
    return done


def run_prompt(backend, prompt, max_tokens=24) -> TurnResult:
    return [r for r in generate(backend, prompt, greedy(max_tokens)) if isinstance(r, TurnResult)][0]


USER_TURNS = [
    "Hi! What is the capital of France?",
    "And what river flows through it?",
    "Name one famous museum there.",
    "How many people live in that city, roughly?",
    "Give me one tip for visiting in winter.",
    "Thanks. Summarise our chat in one sentence.",
]
