"""The streaming loop's own promises: logprobs, stop strings, chunk text."""

import numpy as np
import pytest

from engine.inference.backend import SamplingParams
from engine.inference.events import GenerateParams, TurnResult
from engine.inference.generate import generate, prefill
from engine.chat.session import Message, Session

from .helpers import GREEDY, on_model

pytestmark = pytest.mark.numerics  # logits and ids across evaluation orders


def test_logprob_is_the_log_softmax_of_the_raw_logits(assistant):
    prompt = Session(assistant.vocab, assistant.template, [Message("user", "Name a colour.")]).prompt()

    def sample(b):  # on the model's thread, which owns its context
        prefill(b, prompt)
        return b.first_logits().astype(np.float64), b.sample(b.make_sampler(SamplingParams(temperature=0.8, seed=5)))

    logits, (token, logprob) = on_model(assistant, sample)
    ref = logits[token] - (logits.max() + np.log(np.exp(logits - logits.max()).sum()))
    assert abs(logprob - ref) < 1e-4
    assert logprob <= 0.0


def test_stream_text_equals_detokenized_ids_and_logprobs_align(assistant):
    b = assistant.vocab
    prompt = Session(b, assistant.template, [Message("user", "Write two sentences about rain.")]).prompt()
    chunks = on_model(assistant, lambda backend: list(generate(backend, prompt, GenerateParams(GREEDY, max_tokens=40))))
    result = chunks[-1]
    assert isinstance(result, TurnResult)
    assert "".join(c.text for c in chunks[:-1]) == result.text == b.detokenize(result.token_ids)
    assert len(result.logprobs) == len(result.token_ids) == result.stats.completion_tokens


def test_stop_string_cuts_text_and_ids(assistant):
    b = assistant.vocab
    prompt = Session(b, assistant.template, [Message("user", "Count from 1 to 20 separated by commas.")]).prompt()
    free = on_model(assistant, lambda backend: list(generate(backend, prompt, GenerateParams(GREEDY, max_tokens=40))))
    free = free[-1]
    assert len(free.text) > 8
    stop = free.text[5:8]  # a stop string that occurs in the greedy answer
    # The same state for the second run (a cleared cache, the prompt evaluated the same way): reusing
    # the cache would evaluate the prompt's last token alone, round differently, and may part at a tie.
    def again(backend):  # on the model's thread
        backend.reset()
        return list(generate(backend, prompt, GenerateParams(GREEDY, max_tokens=40, stop=(stop,))))

    chunks = on_model(assistant, again)
    cut = chunks[-1]
    assert cut.stats.finish_reason == "stop_string"
    assert cut.text == free.text[: free.text.index(stop)]
    assert "".join(c.text for c in chunks[:-1]) == cut.text
    assert cut.token_ids == free.token_ids[: len(cut.token_ids)]
    assert b.detokenize(cut.token_ids) == cut.text[: len(b.detokenize(cut.token_ids))]
