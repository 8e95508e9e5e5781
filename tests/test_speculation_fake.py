"""Speculation through a whole turn, on the scripted backend: the same answers, stored the same way,
and the same cache after each turn, drafted or not; the counts reach the turn's stats and the API's
usage; the setting applies live (tests/model/test_speculative.py: the guarantees on a real model)."""

from engine.api import GenerateParams
from tests.fake_backend import Answer, dones, fakes, make_assistant, send  # noqa: F401

QUOTE = "The library had record attendance, and several branches needed new roofs before winter."
ANSWERS = [f"I read: {QUOTE}", f"Again, word for word: {QUOTE}", "Something else entirely."]


def conversation(a, fakes, mode: str | None):
    fake = fakes.backend("m")
    fakes.script("m").enqueue(*ANSWERS)
    cid = a.new_conversation("Quote your sources.")
    out = []
    for text in (f"Here is my document: {QUOTE} What does it say?", "Quote it again.", "And now?"):
        params = GenerateParams(max_tokens=128, speculative=mode)
        (done,) = dones(list(a.send(cid, text, params)))
        out.append((done, list(fake.kv)))
    return out


def test_drafted_turns_answer_store_and_leave_the_cache_as_plain_ones(fakes, make_assistant):
    plain = conversation(make_assistant(str(fakes.model_file("m"))), fakes, "off")
    drafted = conversation(make_assistant(str(fakes.model_file("m"))), fakes, "ngram")
    for (p, p_kv), (d, d_kv) in zip(plain, drafted):
        assert (d.text, d.token_ids) == (p.text, p.token_ids)
        assert d_kv == p_kv  # the cache holds what plain decoding leaves: prompt and answer but its last
        assert p.stats.draft_tokens == 0 and p.stats.speculation is None
    second = drafted[1][0].stats  # quotes the document and the first answer: drafts from both
    assert second.speculation == "ngram" and second.draft_tokens >= second.draft_accepted > 20, second


def test_the_engines_setting_decides_when_the_request_does_not(fakes, make_assistant):
    a = make_assistant(str(fakes.model_file("m")), speculative="off")
    fakes.script("m").enqueue(*ANSWERS[:2])
    cid = a.new_conversation()
    (first,) = dones(send(a, cid, f"Read this: {QUOTE}"))
    assert first.stats.draft_tokens == 0 and "off" in first.stats.speculation_note
    a.configure(speculative="ngram")
    (second,) = dones(send(a, cid, "Quote it."))
    assert second.stats.speculation == "ngram" and second.stats.draft_accepted > 0, second.stats
