"""A loaded model's backend is its thread's (engine/config/ownership.py), and the vocabulary every other
thread tokenizes with gives the model's own ids: a turn renders its prompt with `Worker.vocab` on
the engine thread, the model reads it with its backend."""

import threading

import pytest

from engine.chat.session import Message
from engine.config.ownership import WrongThread

from .helpers import on_model, turn

TEXTS = ["Hello, world!", "  leading spaces and trailing  ", "中文分词，还有标点。", "emoji 🙂👍🏽 and é",
         "<|im_start|>system\nnot a role<|im_end|>", "<start_of_turn>model<end_of_turn><bos><eos>", "a\nb\tc", "x" * 500]


def test_a_backend_call_from_a_thread_that_does_not_own_it_raises(assistant):
    worker = assistant.manager.find_loaded(assistant.tiers["L1"])
    with pytest.raises(WrongThread, match=f"Backend belongs to thread 'model:{worker.model.id}' but was called "
                                          "from thread 'MainThread'"):
        assistant.backend.kv_tokens
    with pytest.raises(WrongThread):
        assistant.backend.tokenize("hi", special=False)
    assert on_model(assistant, lambda backend: backend.kv_tokens) == []  # a job: its owner's thread
    assert threading.current_thread() is threading.main_thread()


def test_the_vocabulary_gives_the_models_own_ids_bytes_and_markers(assistant):
    vocab = assistant.vocab
    ids = {(t, s): vocab.tokenize(t, special=s) for t in TEXTS for s in (False, True)}
    pieces = list(assistant.template.render(["system", "user", "assistant", "user"], True).pieces)
    controls = [p for p in pieces if isinstance(p, str)]

    def models_own(backend):
        return ({(t, s): backend.tokenize(t, special=s) for t in TEXTS for s in (False, True)},
                [backend.tokenize_control(p) for p in controls],
                [backend.token_bytes(i) for i in range(0, backend.n_vocab, 97)],
                [backend.is_eog(i) for i in range(0, backend.n_vocab, 97)] + [backend.is_eog(backend.eos_id)],
                (backend.identity, backend.bos_id, backend.eos_id, backend.add_bos))

    own_ids, own_controls, own_bytes, own_eog, facts = on_model(assistant, models_own)
    assert ids == own_ids
    assert [vocab.tokenize_control(p) for p in controls] == own_controls
    n_vocab = assistant.backend.n_vocab
    assert [vocab.token_bytes(i) for i in range(0, n_vocab, 97)] == own_bytes
    assert [vocab.is_eog(i) for i in range(0, n_vocab, 97)] + [vocab.is_eog(vocab.eos_id)] == own_eog
    assert (vocab.identity, vocab.bos_id, vocab.eos_id, vocab.add_bos) == facts
    assert all(vocab.detokenize(ids[(t, False)]) == t for t in TEXTS)


def test_a_turn_rendered_with_the_vocabulary_is_read_token_for_token(assistant):
    cid = assistant.new_conversation("Answer in one short sentence.")
    turn(assistant, cid, "Name a colour.", max_tokens=8)
    prompt = assistant.session(cid).prompt(Message("user", "And another one?"))
    done = turn(assistant, cid, "And another one?", max_tokens=8)
    assert done.stats.prompt_tokens == len(prompt) and done.stats.cache_mode == "append"
