"""Each catalog family's own chat template, rendered the engine's way (placeholders for the
contents, an earlier answer's thinking passed as the template expects it: engine/inference/templates.py)
against transformers' `render_jinja_template` on the real contents, the reference. Equal text on
a byte vocabulary is equal tokens: contents and control text are tokenized apart by the engine,
so what is compared here is what the model reads, character for character.

The templates are copied under tests/data/templates/ with their source (README.md there)."""

from __future__ import annotations

from pathlib import Path

import pytest
from transformers.utils.chat_template_utils import render_jinja_template

from engine.inference.reasoning import detect
from engine.inference.templates import ChatTemplate, Thought

HERE = Path(__file__).resolve().parent / "data" / "templates"
FAMILIES = {  # family: (file, bos, eos)
    "smollm2": ("HuggingFaceTB-SmolLM2-135M-Instruct.jinja", "<|im_start|>", "<|im_end|>"),
    "qwen2.5": ("Qwen-Qwen2.5-7B-Instruct.jinja", "", "<|im_end|>"),
    "qwen3": ("Qwen-Qwen3-0.6B.jinja", "", "<|im_end|>"),
    "deepseek-r1-distill-qwen": ("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", "<｜begin▁of▁sentence｜>",
                                 "<｜end▁of▁sentence｜>"),
    "llama3.2": ("meta-llama-Llama-3.2-3B-Instruct.jinja", "<|begin_of_text|>", "<|eot_id|>"),
}
REASONING = {"qwen3", "deepseek-r1-distill-qwen"}

CHATS = {
    "plain": [("system", "Be brief."), ("user", "Hello there"), ("assistant", "Hi! How can I help?"),
              ("user", "Name a colour.")],
    "no system": [("user", "你好"), ("assistant", "你好！有什么可以帮你？"), ("user", "今天星期几？")],
    "two turns": [("system", "You answer in English."), ("user", "2+2?"), ("assistant", "4."), ("user", "And 3+3?"),
                  ("assistant", "6."), ("user", "Thanks")],
}
THINKING = "The user asks for a sum.\nTwo plus two is four."


def template(family: str) -> ChatTemplate:
    file, bos, eos = FAMILIES[family]
    t = ChatTemplate((HERE / file).read_text(encoding="utf-8"), "gguf", bos, eos)
    t.reasoning = detect(t.source, lambda text: False)
    return t


def engine_text(t: ChatTemplate, messages: list[dict], add_generation_prompt: bool, **options) -> str:
    """What the engine's pieces spell, contents put back in their slots."""
    thoughts = [bool(m.get("thinking")) for m in messages]
    pieces = t.render([m["role"] for m in messages], add_generation_prompt, thoughts=thoughts, **options).pieces
    out = []
    for piece in pieces:
        if isinstance(piece, Thought):
            out.append(messages[piece.index]["thinking"])
        elif isinstance(piece, int):
            out.append(messages[piece]["content"])
        else:
            out.append(piece)
    return "".join(out)


def reference_messages(t: ChatTemplate, messages: list[dict]) -> list[dict]:
    """The messages as a client passes them: the thinking as `reasoning_content` where the template
    reads it, else inside the content between the tags (as the model wrote it)."""
    out = []
    for m in messages:
        if not m.get("thinking"):
            out.append({"role": m["role"], "content": m["content"]})
        elif t.reasoning.reasoning_content:
            out.append({"role": m["role"], "content": m["content"], "reasoning_content": m["thinking"]})
        else:
            out.append({"role": m["role"], "content": f"<think>\n{m['thinking']}\n</think>\n\n{m['content']}"})
    return out


def reference_text(t: ChatTemplate, messages: list[dict], add_generation_prompt: bool, **options) -> str:
    rendered, _ = render_jinja_template(conversations=[reference_messages(t, messages)], chat_template=t.source,
                                        add_generation_prompt=add_generation_prompt, bos_token=t.bos_token,
                                        eos_token=t.eos_token, **options)
    return rendered[0]


@pytest.mark.parametrize("chat", sorted(CHATS))
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_the_engine_renders_each_family_as_the_reference_does(family, chat):
    t = template(family)
    messages = [{"role": r, "content": c} for r, c in CHATS[chat]]
    for generation in (True, False):
        prefix = messages if generation else messages[:-1]
        assert engine_text(t, prefix, generation) == reference_text(t, prefix, generation)


@pytest.mark.parametrize("family", sorted(REASONING))
@pytest.mark.parametrize("think", [None, True, False])
def test_earlier_thinking_follows_each_reasoning_familys_rule(family, think):
    t = template(family)
    assert t.reasoning is not None
    messages = [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4.", "thinking": THINKING},
                {"role": "user", "content": "And 3+3?"}]
    options = {} if think is None else {"enable_thinking": think}
    ours = engine_text(t, messages, True, **options)
    assert ours == reference_text(t, messages, True, **options)
    assert "Two plus two" not in ours  # both families drop an earlier turn's thinking
    # in a tool loop (no user message after the answer) Qwen3 keeps it; R1 drops it still
    loop = messages[:2]
    ours = engine_text(t, loop, False)
    assert ours == reference_text(t, loop, False)
    assert ("Two plus two" in ours) == (family == "qwen3")


def test_the_generation_prompt_opens_the_block_for_r1_and_closes_it_for_qwen3_off():
    from engine.inference.reasoning import opens_block

    r1, qwen3 = template("deepseek-r1-distill-qwen"), template("qwen3")
    user = [{"role": "user", "content": "hi"}]
    # llama.cpp's copy of R1's template reads enable_thinking too (the engine passes it: toggle)
    assert r1.reasoning.toggle and qwen3.reasoning.toggle
    assert opens_block(engine_text(r1, user, True, enable_thinking=True), r1.reasoning)
    assert not opens_block(engine_text(r1, user, True, enable_thinking=False), r1.reasoning)
    assert not opens_block(engine_text(qwen3, user, True), qwen3.reasoning)
    off = engine_text(qwen3, user, True, enable_thinking=False)
    assert off.endswith("<think>\n\n</think>\n\n") and not opens_block(off, qwen3.reasoning)


TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather <today> in a city",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                           "required": ["city"]}}}]
CALL = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
NATIVE_TOOLS = {"qwen2.5", "qwen3"}  # Hermes-style <tool_call> templates (engine/inference/tool_calls.py)


@pytest.mark.parametrize("family", sorted(NATIVE_TOOLS))
def test_tools_calls_and_results_render_as_the_reference_does(family):
    """The tools in the template's `tools` variable, an answer's call in `tool_calls`, two results
    in the tool role: the same text as transformers gives."""
    from engine.inference.tool_calls import native

    t = template(family)
    assert native(t.source)
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather in Paris and Rome?"},
                {"role": "assistant", "content": "", "tool_calls": [CALL, CALL]},
                {"role": "tool", "content": "Sunny, 21 °C", "tool_call_id": "call_1"},
                {"role": "tool", "content": "Rain, 14 °C", "tool_call_id": "call_2"}]
    # an answer that is only calls: no content slot (the engine passes "" so `if message.content` reads false)
    extras = [{k: v for k, v in m.items() if k in ("tool_calls", "tool_call_id") or (k == "content" and not v)}
              or None for m in messages]
    roles = [m["role"] for m in messages]
    pieces = t.render(roles, True, extras=extras, tools=TOOLS).pieces
    ours = "".join(messages[p]["content"] if isinstance(p, int) else p for p in pieces)
    rendered, _ = render_jinja_template(conversations=[messages], chat_template=t.source, tools=TOOLS,
                                        add_generation_prompt=True, bos_token=t.bos_token, eos_token=t.eos_token)
    assert ours == rendered[0]
    assert '"Weather <today> in a city"' in ours  # keys in order, no HTML escaping: as trained
