"""Recalled memories earn their tokens (issue 15, item 7): no recall for small talk, a floor for
chunks of past messages, nothing the prompt already holds, at most `retrieval.max_tokens` trimmed
by rank, and `done.stats.retrieval.memory_tokens` = what recall added to the turn.

Fast: the scripted fake backend (tokens are bytes, so counts are exact) and a stand-in embedder
whose vectors a test sets. The effect on TTFT with the real model: bench/retrieval_budget.py."""

from __future__ import annotations

import math

import pytest

from engine.memory import Embedder, MemoryService
from engine.memory.prompt import fit_recalled, recalled_line, recalled_turn
from engine.memory.relevance import (MESSAGE_MARGIN, asks_only, content_terms, covered, is_small_talk,
                                     worth_recalling)
from engine.memory.service import Hit
from tests.fake_backend import dones, fakes, make_assistant, send  # noqa: F401
from tests.memory_fakes import FakeModel, axis, fake_model  # noqa: F401

NEXT = "<|im_end|>\n<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"


@pytest.mark.parametrize("text", ["Hi there!", "thanks!", "ok, cool", "haha nice", "good morning",
                                  "how are you today?", "great, thank you", "lol ok", "thanks, bye!", "yes please",
                                  "hahaha", "👍", "谢谢！", "好的", "你好", "好的，谢谢", "晚安", "ok 谢谢"])
def test_small_talk_is_recognised_in_english_and_chinese(text):
    assert is_small_talk(text)


@pytest.mark.parametrize("text", ["How old is my kid now?", "What kind of car do I have?", "Why is the sky blue?",
                                  "thanks, what is my cat called?", "I have a cat", "今天天气怎么样",
                                  "谢谢，我的猫叫什么？", "我能吃花生酱吗", "hello world program in python", "Привет"])
def test_a_question_or_a_fact_is_not_small_talk(text):
    assert not is_small_talk(text)


def test_asks_only_keeps_questions_that_say_something_about_the_user():
    assert asks_only("How do I descale an electric kettle?") and asks_only("我能吃花生酱吗")
    assert not asks_only("What's a good name for my new puppy?")  # "my new puppy": a fact about the user
    assert not asks_only("Can you help? I'm allergic to nuts.") and not asks_only("I drive a blue Volvo.")
    assert content_terms("I'm allergic to penicillin, so keep that in mind.") == {"allergic", "penicillin", "keep",
                                                                                  "mind"}
    assert content_terms("我对花生过敏") == {"我对", "对花", "花生", "生过", "过敏"}
    assert covered({"cat", "miso"}, {"cat", "miso", "tea"}) and not covered({"cat", "miso"}, {"cat"})
    assert not covered({"miso"}, {"miso"})  # one word: too little to judge (the exact-text check applies)


def hit(i, text, score, kind="message", keyword_rank=None):
    return Hit(i, text, score, {"conversation_id": 1, "message_id": i, "date": "2026-01-02T00:00:00"}
               if kind == "message" else "memory", kind, 0.01, 1, keyword_rank)


def test_floor_questions_coverage_and_k():
    floor = 0.35 + MESSAGE_MARGIN
    hits = [hit(1, "The sky is blue because of Rayleigh scattering.", floor - 0.01, keyword_rank=1),  # weak
            hit(2, "How do I descale an electric kettle?", 0.60),                                   # asks only
            hit(3, "My note: the wifi password is on the fridge.", 0.36, kind="note"),              # a note: 0.35
            hit(4, "I drive an old blue Volvo station wagon.", floor),
            hit(5, "You drive an old blue Volvo station wagon!", 0.50),                            # covered by 4
            hit(6, "My sister Aiko lives in Osaka.", 0.45),
            hit(7, "I moved to Lisbon last spring.", 0.45)]
    kept, dropped = worth_recalling(hits, 3, 0.35, 0.15, cjk=False)
    assert [h.id for h in kept] == [3, 4, 6]
    assert dropped == {"below_floor": 1, "asks_only": 1, "covered": 1, "over_k": 1}
    # What the window or the summary already says is not recalled again.
    kept, dropped = worth_recalling(hits[3:], 3, 0.35, 0.15, cjk=False,
                                    shown=["Summary: the user's sister Aiko lives in Osaka."])
    assert [h.id for h in kept] == [4, 7] and dropped["covered"] == 2
    # A Chinese query keeps the model's own floors, where a keyword match counts.
    zh = [hit(8, "我住在上海", 0.57, keyword_rank=1), hit(9, "我的猫叫米索", 0.62)]
    assert [h.id for h in worth_recalling(zh, 3, 0.70, 0.45, cjk=True)[0]] == [8]


def test_fit_recalled_trims_by_rank_and_counts_what_the_turn_gains():
    count = len  # one token a character: the sums are exact
    hits = [hit(1, "x" * 300, 0.6), hit(2, "Lena turned seven.", 0.5), hit(3, "Drives a Volvo.", 0.45)]
    kept, tokens = fit_recalled(hits, 150, count, "How old is my kid?")
    assert [h.id for h in kept] == [2, 3]  # the long one is passed over, later shorter ones still fit
    turn = recalled_turn("How old is my kid?", kept)
    assert tokens == len(turn) - len("How old is my kid?") <= 150
    assert recalled_line(kept[0]) == "- Lena turned seven. (2026-01-02)"
    assert fit_recalled(hits, 0, count) == ([], 0) and fit_recalled([], 500, count) == ([], 0)
    assert fit_recalled(hits, 1_000, count)[0] == hits


# ---- in a turn

PET = "What is my pet's name?"
MEMORIES = {  # text -> vector; the question is axis(1): each memory's cosine with it is its first weight
    "My cat is called Miso.": axis(0.50, math.sqrt(1 - 0.50 ** 2)),
    "Why is the sky blue? Rayleigh scattering, mostly.": axis(0.38, 0, math.sqrt(1 - 0.38 ** 2)),
    "How do I descale an electric kettle?": axis(0.60, 0, 0, 0.8),
    "Miso sleeps on the red sofa all afternoon.": axis(0.45, 0, 0, 0, math.sqrt(1 - 0.45 ** 2)),
}


@pytest.fixture
def recall_chat(fakes, make_assistant, fake_model):  # noqa: F811
    fake_model.table.update(MEMORIES)
    fake_model.table[PET] = axis(1)
    a = make_assistant(str(fakes.model_file("m")))
    a.count_tokens = lambda text: len(text.encode("utf-8"))  # the fake's tokens are bytes
    a.memory = MemoryService(a.db, Embedder(runtime="torch"), vector_backend="numpy").start()
    assert a.memory.embedder.wait(20)
    earlier = a.new_conversation()
    for text in MEMORIES:
        message_id = a.db.add_message(earlier, "user", text)
        a.memory.index_message(earlier, message_id, "user", text)
    assert a.memory.flush(20)
    yield a, fakes.backend("m")
    a.memory.close()


def test_small_talk_recalls_nothing_and_a_question_gets_what_earns_its_tokens(recall_chat):
    a, fake = recall_chat
    cid = a.new_conversation()
    (hello,) = dones(send(a, cid, "thanks!"))
    assert hello.stats.memory["retrieval"] == "skipped: small talk" and hello.stats.memories_used == []
    assert hello.stats.as_json()["retrieval"] == {"memory_tokens": 0, "document_tokens": 0, "max_tokens": 256}

    (done,) = dones(send(a, cid, PET))
    used = [h["text"] for h in done.stats.memories_used]
    # The sky (0.38) is under the message floor (0.40), the kettle only asks: neither is worth a token.
    assert used == ["My cat is called Miso.", "Miso sleeps on the red sofa all afternoon."]
    assert done.stats.memory["recall_dropped"] == {"below_floor": 1, "asks_only": 1}
    user = a.conversation(cid).messages[-2]
    added = len(user.model_text.encode()) - len(PET.encode())
    assert done.stats.retrieval.memory_tokens == added > 0
    # Evaluated: exactly the new turn with its memories (the cache held everything before it).
    assert done.stats.prompt_tokens_evaluated == len(fake.vocab.tokenize(NEXT.format(user.model_text), special=True))
    assert done.stats.cache_mode == "append"


def test_the_budget_keeps_the_best_memories_that_fit(recall_chat):
    a, _ = recall_chat
    header = len("(Possibly relevant memories from earlier conversations)\n(The user's message)\n")
    first = len(recalled_line(Hit(0, "My cat is called Miso.", 0.5, {"date": "2026-01-02"}, "message", 0)) + "\n")
    a.configure(retrieval_max_tokens=header + first + 10)  # room for the best one, not for the second
    (done,) = dones(send(a, a.new_conversation(), PET))
    assert [h["text"] for h in done.stats.memories_used] == ["My cat is called Miso."]
    assert done.stats.memory["recall_dropped"]["over_budget"] == 1
    assert done.stats.retrieval.memory_tokens == header + first <= a.config.retrieval_max_tokens
    a.configure(retrieval_max_tokens=0)  # no budget: nothing is recalled, the turn reads only the words typed
    (done,) = dones(send(a, a.new_conversation(), PET))
    assert done.stats.memories_used == [] and done.stats.retrieval.memory_tokens == 0
    assert a.conversation(done.conversation_id).messages[-2].model_text is None
