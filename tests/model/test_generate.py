"""The streaming loop's own promises: logprobs, stop strings, chunk text."""

import numpy as np

from engine.inference.backend import SamplingParams
from engine.inference.generate import GenerateParams, TurnResult, generate, prefill
from engine.chat.session import Message, Session

from .helpers import GREEDY


def test_logprob_is_the_log_softmax_of_the_raw_logits(assistant):
    b = assistant.backend
    prompt = Session(b, assistant.template, [Message("user", "Name a colour.")]).prompt()
    prefill(b, prompt)
    logits = b.first_logits().astype(np.float64)
    token, logprob = b.sample(b.make_sampler(SamplingParams(temperature=0.8, seed=5)))
    ref = logits[token] - (logits.max() + np.log(np.exp(logits - logits.max()).sum()))
    assert abs(logprob - ref) < 1e-4
    assert logprob <= 0.0


def test_stream_text_equals_detokenized_ids_and_logprobs_align(assistant):
    b = assistant.backend
    prompt = Session(b, assistant.template, [Message("user", "Write two sentences about rain.")]).prompt()
    chunks = list(generate(b, prompt, GenerateParams(GREEDY, max_tokens=40)))
    result = chunks[-1]
    assert isinstance(result, TurnResult)
    assert "".join(c.text for c in chunks[:-1]) == result.text == b.detokenize(result.token_ids)
    assert len(result.logprobs) == len(result.token_ids) == result.stats.completion_tokens


def test_stop_string_cuts_text_and_ids(assistant):
    b = assistant.backend
    prompt = Session(b, assistant.template, [Message("user", "Count from 1 to 20 separated by commas.")]).prompt()
    free = [x for x in generate(b, prompt, GenerateParams(GREEDY, max_tokens=40))][-1]
    assert len(free.text) > 8
    stop = free.text[5:8]  # a stop string that occurs in the greedy answer
    chunks = list(generate(b, prompt, GenerateParams(GREEDY, max_tokens=40, stop=(stop,))))
    cut = chunks[-1]
    assert cut.stats.finish_reason == "stop_string"
    assert cut.text == free.text[: free.text.index(stop)]
    assert "".join(c.text for c in chunks[:-1]) == cut.text
    assert cut.token_ids == free.token_ids[: len(cut.token_ids)]
    assert b.detokenize(cut.token_ids) == cut.text[: len(b.detokenize(cut.token_ids))]
