import pytest

from engine.storage import clean_text
from engine.inference.answer import _stop_hold
from engine.inference.templates import CHATML_TEMPLATE, GEMMA_TEMPLATE, ChatTemplate, ChatTemplateError


def test_gemma_fallback_folds_system_into_first_user_turn():
    t = ChatTemplate(GEMMA_TEMPLATE, "gemma", bos_token="<bos>")
    r = t.render(["system", "user", "assistant", "user"], add_generation_prompt=True)
    assert r.pieces == [
        "<bos><start_of_turn>user\n", 0, "\n\n", 1, "<end_of_turn>\n<start_of_turn>model\n", 2,
        "<end_of_turn>\n<start_of_turn>user\n", 3, "<end_of_turn>\n<start_of_turn>model\n",
    ]


def test_generation_prompt_is_prefix_of_next_turn():
    # Incremental rendering only appends when the history with the answer extends the prompt.
    for src in (GEMMA_TEMPLATE, CHATML_TEMPLATE):
        t = ChatTemplate(src, "x", bos_token="<bos>")
        with_prompt = t.render(["user"], True).pieces
        full = t.render(["user", "assistant", "user"], True).pieces
        assert full[: len(with_prompt)] == with_prompt


def test_template_errors_are_reported():
    t = ChatTemplate("{{ raise_exception('roles must alternate') }}", "bad")
    with pytest.raises(ChatTemplateError, match="roles must alternate"):
        t.render(["user"], True)


def test_stop_hold_keeps_possible_stop_prefixes():
    assert _stop_hold("hello Us", ("User:",)) == 2
    assert _stop_hold("hello", ("User:",)) == 0
    assert _stop_hold("a\n\n", ("\n\n\n", "x")) == 2


def test_clean_text_drops_nul_and_lone_surrogates():
    assert clean_text("a\x00b\ud800c") == "ab?c"
