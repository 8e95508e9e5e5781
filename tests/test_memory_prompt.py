"""How memories are laid out in a prompt (engine/memory/prompt.py)."""

from engine.memory.prompt import pinned_facts, pinned_text, recalled_turn
from engine.memory.service import Hit


def hit(text, source="memory"):
    return Hit(1, text, 0.5, source, "note", 0.01)


def test_pinned_facts_keep_the_newest_that_fit_in_order():
    facts = ["a" * 500, "b" * 500, "c" * 500]
    assert pinned_facts(facts, max_chars=1_100) == ["b" * 500, "c" * 500]
    assert pinned_facts([], 100) == [] and pinned_text([]) == ""
    assert pinned_text(["likes tea"]).endswith("- likes tea")


def test_recalled_turn_puts_memories_before_the_message_in_its_language():
    src = {"conversation_id": 7, "message_id": 3, "date": "2026-11-28T10:00:00+00:00"}
    en = recalled_turn("Where does Aiko live?", [hit("Aiko lives\nin Osaka", src), hit("Likes tea")])
    assert en.splitlines()[0].startswith("(Possibly relevant memories")
    assert "- Aiko lives in Osaka (2026-11-28)" in en and "- Likes tea (saved memory)" in en
    assert en.endswith("\nWhere does Aiko live?")
    zh = recalled_turn("爱子住在哪里？", [hit("爱子住在大阪")])
    assert zh.startswith("（可能相关的记忆") and zh.endswith("爱子住在哪里？")
    assert recalled_turn("hi", []) is None
    assert recalled_turn("hi", [hit("x" * 2_000)], max_chars=1_000) is None  # too long to carry
