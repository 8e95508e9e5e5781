"""Reasoning models on the fake backend: thinking streams apart from the answer, is stored apart,
is cut by its budget, and earlier thinking enters the next prompt by the template's rule, costing
only what that rule requires (engine/inference/reasoning.py, answer.py, chat/session.py).

The templates below are written for these tests, shaped like the two families' rules: QWEN3_LIKE
reads `reasoning_content` and `enable_thinking` and drops the thinking of turns before the last user
message (as Qwen3's does); R1_LIKE opens the block in the generation prompt and strips everything up
to `</think>` from earlier answers (as DeepSeek-R1's does); KEEPS is plain ChatML that mentions the
tags, so earlier thinking stays in the prompt.
"""

from __future__ import annotations

import json
import math
import threading

import pytest

from engine.api import TurnDone
from engine.inference.events import Chunk, GenerateParams, ReasoningChunk
from engine.inference.reasoning import ReasoningFormat, Splitter, detect, opens_block
from tests.fake_backend import Answer, fakes, make_assistant  # noqa: F401
from tests.fake_vocab import _tokenize

QWEN3_LIKE = (
    "{%- set ns = namespace(last_user=-1) -%}"
    "{%- for m in messages -%}{%- if m.role == 'user' -%}{%- set ns.last_user = loop.index0 -%}{%- endif -%}"
    "{%- endfor -%}"
    "{%- for m in messages -%}"
    "{%- if m.role == 'assistant' -%}"
    "{%- set rc = m.reasoning_content if m.reasoning_content is string else '' -%}"
    "{%- if loop.index0 > ns.last_user and rc -%}"
    "{{ '<|im_start|>assistant\n<think>\n' + rc + '\n</think>\n\n' + m.content + '<|im_end|>\n' }}"
    "{%- else -%}{{ '<|im_start|>assistant\n' + m.content + '<|im_end|>\n' }}{%- endif -%}"
    "{%- else -%}{{ '<|im_start|>' + m.role + '\n' + m.content + '<|im_end|>\n' }}{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false -%}{{ '<think>\n\n</think>\n\n' }}{%- endif -%}"
    "{%- endif -%}"
)
R1_LIKE = (
    "{%- for m in messages -%}"
    "{%- if m.role == 'assistant' -%}{%- set c = m.content -%}"
    "{%- if '</think>' in c -%}{%- set c = c.split('</think>')[-1] -%}{%- endif -%}"
    "{{ '<|im_start|>assistant\n' + c + '<|im_end|>\n' }}"
    "{%- else -%}{{ '<|im_start|>' + m.role + '\n' + m.content + '<|im_end|>\n' }}{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\n<think>\n' }}{%- endif -%}"
)
KEEPS = (
    "{#- the model thinks in <think> tags; earlier thinking stays -#}"
    "{%- for m in messages -%}{{ '<|im_start|>' + m.role + '\n' + m.content + '<|im_end|>\n' }}{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\n' }}{%- endif -%}"
)


def split(fmt: ReasoningFormat, inside: bool, pieces: list[str]) -> tuple[str, str]:
    s = Splitter(fmt, inside)
    reasoning, answer = "", ""
    for p in pieces:
        r, a = s.feed(p)
        reasoning, answer = reasoning + r, answer + a
    r, a = s.flush()
    return reasoning + r, answer + a


# ---- the splitter

@pytest.mark.parametrize("pieces", [
    ["<think>\nfirst, think\n</think>\n\nThe answer."],
    ["<", "think", ">\n", "first, ", "think\n<", "/th", "ink>", "\n\n", "The ", "answer."],
    ["  \n<think>", "first, think", "</think>", "The answer."],
])
def test_a_block_splits_however_the_tags_fall_across_tokens(pieces):
    reasoning, answer = split(ReasoningFormat(), False, pieces)
    assert reasoning.strip() == "first, think" and answer == "The answer."


def test_no_block_is_all_answer_and_an_unclosed_block_is_all_thinking():
    fmt = ReasoningFormat()
    assert split(fmt, False, ["Hello ", "<think> is a tag"]) == ("", "Hello <think> is a tag")
    assert split(fmt, False, ["<thi"]) == ("", "<thi")  # a partial tag at the end is text after all
    assert split(fmt, False, ["<think>\nstill going", " and going"]) == ("still going and going", "")
    # R1: the prompt opened the block, the model writes thinking first
    assert split(fmt, True, ["\nhmm", "</think>\n\n", "Yes."]) == ("hmm", "Yes.")
    assert split(fmt, True, ["hmm </th"]) == ("hmm </th", "")


def test_detection_reads_the_template_and_the_vocabulary_and_the_catalog_overrides():
    never = lambda text: False  # noqa: E731
    always = lambda text: True  # noqa: E731
    assert detect(QWEN3_LIKE, never) == ReasoningFormat(toggle=True, reasoning_content=True)
    assert detect(R1_LIKE, never) == ReasoningFormat(toggle=False, reasoning_content=False)
    assert detect("{{ messages }}", never) is None
    assert detect("{{ messages }}", always) is not None  # <think> and </think> are single tokens
    assert detect(QWEN3_LIKE, never, override=False) is None
    assert detect("{{ messages }}", never, override=True) is not None
    assert opens_block("<|im_start|>assistant\n<think>\n", ReasoningFormat())
    assert not opens_block("<|im_start|>assistant\n<think>\n\n</think>\n\n", ReasoningFormat())


# ---- turns

def thinking_model(fakes, make_assistant, template: str, *answers):
    path = fakes.model_file("thinker", chat_template=template)
    fakes.script("thinker").enqueue(*answers)
    return make_assistant(str(path)), fakes


def run(a, cid, text, route: str = "L2", **params) -> tuple[list, TurnDone]:
    """One turn; on L2 unless asked (short messages would be quick requests on L1: no thinking)."""
    events = list(a.send(cid, text, GenerateParams(**({"max_tokens": 256} | params)), route=route))
    (done,) = [e for e in events if isinstance(e, TurnDone)]
    return events, done


def test_thinking_streams_apart_and_only_the_answer_is_judged_and_stored(fakes, make_assistant):
    low, high = math.log(0.05), math.log(0.9)
    thought = "<think>\nThe user greets me.\n</think>\n\n"
    a, _ = thinking_model(fakes, make_assistant, QWEN3_LIKE,
                          Answer(thought + "Hello!", logprob=[low] * len(thought) + [high]))
    cid = a.new_conversation("")
    events, done = run(a, cid, "hi")
    thinking = "".join(e.text for e in events if isinstance(e, ReasoningChunk))
    answer = "".join(e.text for e in events if isinstance(e, Chunk))
    assert thinking.strip() == "The user greets me." and answer == "Hello!"
    assert done.text == "Hello!" and done.reasoning == "The user greets me."
    s = done.stats
    assert s.reasoning_tokens == len(_tokenize(thought, False)) and s.completion_tokens == s.reasoning_tokens + 6
    assert s.reasoning_closed is None and s.finish_reason == "stop"
    assert done.confidence == pytest.approx(0.9)  # the unsure thinking does not count
    row = a.transcript(cid)[-1]
    assert (row["content"], row["reasoning"]) == ("Hello!", "The user greets me.")
    assert "greets" not in a.export(cid) and "<summary>Thinking</summary>" in a.export(cid, reasoning=True)
    assert json.loads(a.export(cid, "json"))["messages"][-1]["reasoning"] == "The user greets me."
    assert a.search_conversations("greets") == [] and a.search_conversations("Hello") == [cid]  # thinking: not indexed


def test_a_template_that_drops_earlier_thinking_re_reads_only_from_where_it_began(fakes, make_assistant):
    thought = "<think>\nLong thoughts here.\n</think>\n\n"
    a, fakes = thinking_model(fakes, make_assistant, QWEN3_LIKE, thought + "Paris.", thought + "Lyon.")
    fake = fakes.backend("thinker")
    cid = a.new_conversation("")
    _, first = run(a, cid, "capital of France?")
    kv, prompt1 = fake.kv, fake.prompts[-1]
    assert kv == prompt1 + fake.vocab.tokenize(thought, special=False) + first.token_ids
    _, second = run(a, cid, "and a second city?")
    prompt = fake.prompts[-1]
    common = next(i for i, (x, y) in enumerate(zip(kv, prompt)) if x != y)
    assert common == len(prompt1)  # the thinking is where it diverges
    assert prompt[common:common + len(first.token_ids)] == first.token_ids  # then the answer, as sampled
    assert "Long thoughts" not in fake.text(prompt)
    assert second.stats.prompt_tokens_evaluated == len(prompt) - common


def test_a_template_that_keeps_thinking_reuses_the_whole_cache(fakes, make_assistant):
    thought = "<think>\nStep one.\n</think>\n\n"
    a, fakes = thinking_model(fakes, make_assistant, KEEPS, thought + "Four.", "Five.")
    fake = fakes.backend("thinker")
    cid = a.new_conversation("")
    _, first = run(a, cid, "2+2?")
    kv = fake.kv
    _, second = run(a, cid, "and 2+3?")
    prompt = fake.prompts[-1]
    assert prompt[:len(kv)] == kv and "Step one." in fake.text(prompt)
    assert second.stats.prompt_tokens_cached >= len(kv) - 1


def test_the_history_rule_can_be_chosen_per_request(fakes, make_assistant):
    thought = "<think>\nStep one.\n</think>\n\n"
    a, fakes = thinking_model(fakes, make_assistant, QWEN3_LIKE, thought + "Four.", "Five.")
    fake = fakes.backend("thinker")
    cid = a.new_conversation("")
    run(a, cid, "2+2?")
    kv = fake.kv
    run(a, cid, "and 2+3?", reasoning_history="keep")
    assert fake.prompts[-1][:len(kv)] == kv


def test_r1_starts_inside_the_block_and_its_thinking_leaves_the_next_prompt(fakes, make_assistant):
    a, fakes = thinking_model(fakes, make_assistant, R1_LIKE, "Hmm, simple.\n</think>\n\nYes.", "No.")
    fake = fakes.backend("thinker")
    cid = a.new_conversation("")
    events, done = run(a, cid, "ok?")
    assert (done.reasoning, done.text) == ("Hmm, simple.", "Yes.")
    assert fake.text(fake.prompts[-1]).endswith("<|im_start|>assistant\n<think>\n")
    run(a, cid, "sure?")
    assert "Hmm, simple." not in fake.text(fake.prompts[-1])


def test_keeping_r1s_thinking_reuses_the_cache_though_the_prompt_opened_the_block(fakes, make_assistant):
    a, fakes = thinking_model(fakes, make_assistant, R1_LIKE, "Hmm.\n</think>\n\nYes.", "No.")
    fake = fakes.backend("thinker")
    cid = a.new_conversation("")
    _, first = run(a, cid, "ok?", reasoning_history="keep")
    kv = fake.kv
    assert first.reasoning == "Hmm." and fake.text(kv).endswith("<think>\nHmm.\n</think>\n\nYes.")
    _, second = run(a, cid, "sure?", reasoning_history="keep")
    assert fake.prompts[-1][:len(kv)] == kv
    assert second.stats.prompt_tokens_evaluated == len(fake.prompts[-1]) - len(kv)


def test_a_budget_closes_the_block_and_the_answer_follows(fakes, make_assistant):
    a, fakes = thinking_model(fakes, make_assistant, QWEN3_LIKE,
                              Answer("<think>\n" + "".join(f"w{i} " for i in range(300)), stop=False))
    cid = a.new_conversation("")
    events, done = run(a, cid, "think hard", max_tokens=120, reasoning_budget=30)
    s = done.stats
    assert s.reasoning_closed == "budget"
    closing = len(_tokenize("\n</think>\n\n", True))
    assert s.reasoning_tokens == 30 + closing
    assert done.text  # the answer got the rest of max_tokens
    assert s.completion_tokens == 120


def test_thinking_off_asks_the_template_or_closes_the_block_at_once(fakes, make_assistant):
    a, fakes = thinking_model(fakes, make_assistant, QWEN3_LIKE, "Quick answer.")
    fake = fakes.backend("thinker")
    cid = a.new_conversation("")
    _, done = run(a, cid, "hi", think=False)
    assert fake.text(fake.prompts[-1]).endswith("<think>\n\n</think>\n\n")  # Qwen3's own switch
    assert (done.text, done.stats.reasoning_tokens) == ("Quick answer.", 0)

    b, fakes = thinking_model(fakes, make_assistant, R1_LIKE, "Direct.")  # R1 has no switch
    cid = b.new_conversation("")
    _, done = run(b, cid, "hi", think=False)
    assert done.stats.reasoning_closed == "budget" and done.reasoning == ""
    assert done.text == "Direct."


def test_a_block_never_closed_is_all_thinking(fakes, make_assistant):
    a, fakes = thinking_model(fakes, make_assistant, QWEN3_LIKE,
                              Answer("<think>\n" + "".join(f"w{i} " for i in range(300)), stop=False))
    stop = threading.Event()
    fakes.backend("thinker").on_sample.append(lambda backend, n: n == 40 and stop.set())
    cid = a.new_conversation("")
    events = list(a.send(cid, "go", GenerateParams(max_tokens=512), cancel=stop, route="L2"))
    (done,) = [e for e in events if isinstance(e, TurnDone)]
    assert done.stats.finish_reason == "cancelled" and done.text == ""
    assert done.reasoning.startswith("w0 w1") and done.stats.reasoning_tokens == 41
    assert not [e for e in events if isinstance(e, Chunk)]


def test_with_no_budget_thinking_leaves_the_answer_a_quarter_of_max_tokens(fakes, make_assistant):
    a, _ = thinking_model(fakes, make_assistant, QWEN3_LIKE,
                          Answer("<think>\n" + "".join(f"w{i} " for i in range(300)), stop=False))
    cid = a.new_conversation("")
    _, done = run(a, cid, "go", max_tokens=200)
    assert done.stats.reasoning_closed == "budget"
    assert done.stats.reasoning_tokens == 150 + len(_tokenize("\n</think>\n\n", True)) and done.text


def test_a_looping_block_is_closed_like_a_spent_budget(fakes, make_assistant):
    a, _ = thinking_model(fakes, make_assistant, QWEN3_LIKE,
                          Answer("<think>\n" + "I wonder whether it works. " * 30, stop=False))
    cid = a.new_conversation("")
    _, done = run(a, cid, "go", max_tokens=2000)
    assert done.stats.reasoning_closed == "loop"
    assert done.stats.reasoning_tokens < 400


def test_a_quick_request_on_l1_is_answered_without_thinking(fakes, make_assistant):
    thought = "<think>\nHm.\n</think>\n\n"
    a, fakes = thinking_model(fakes, make_assistant, QWEN3_LIKE, "Hello!", thought + "A plan.", thought + "Hi.")
    fake = fakes.backend("thinker")
    cid = a.new_conversation("")
    _, done = run(a, cid, "hi", route="auto")  # a greeting: the router's quick rules send it to L1
    assert done.level == "L1" and "answered without thinking" in done.route_reason
    assert fake.text(fake.prompts[-1]).endswith("<think>\n\n</think>\n\n")
    _, done = run(a, cid, "Design a sharded chat system for ten million users and compare two options",
                  route="auto")
    assert "without thinking" not in done.route_reason and done.reasoning == "Hm."
    _, done = run(a, cid, "hi", route="L1")  # the user's own choice of tier: thinking as the switch says
    assert "without thinking" not in done.route_reason and done.reasoning == "Hm."


def test_the_catalog_marks_its_reasoning_families():
    from engine.models.catalog import load_catalog

    entries = load_catalog().entries
    thinking = {e.family for e in entries if e.reasoning}
    assert thinking == {"qwen3", "deepseek-r1-distill-qwen"}
    assert all(e.reasoning is None for e in entries if e.family not in thinking)


def test_bad_reasoning_options_are_refused_before_the_turn(fakes, make_assistant):
    from engine.api import InputError

    a, _ = thinking_model(fakes, make_assistant, QWEN3_LIKE, "x")
    cid = a.new_conversation("")
    for bad in ({"reasoning_history": "sometimes"}, {"reasoning_budget": -1}):
        with pytest.raises(InputError):
            list(a.send(cid, "hi", GenerateParams(**bad)))
    assert a.transcript(cid) == []  # nothing stored
