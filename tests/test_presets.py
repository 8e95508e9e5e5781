"""Presets ("assistants", issue 27): presets.json kept under its lock, a bad entry or file said
and nothing lost, the built-in Default that cannot be deleted, export and import as JSON, and a
preset given to a chat (system prompt, tier, documents) through engine.api on the fake backend."""

from __future__ import annotations

import json

import pytest

from engine.api import Preset, PresetError, Presets
from tests.fake_backend import Answer, fakes, make_assistant  # noqa: F401


def test_save_default_delete_and_the_built_in(tmp_path):
    store = Presets(tmp_path / "presets.json")
    assert [p.id for p in store.all()] == ["default"] and store.default().name == "Default"
    coder = store.save(Preset("coder", "Coder", "You write Python.", 0.2, "L2", False, True))
    store.set_default("coder")
    assert store.default() == coder and Presets(tmp_path / "presets.json").default() == coder  # kept
    with pytest.raises(PresetError, match="not deleted"):
        store.delete("default")
    store.delete("coder")
    assert store.default().id == "default" and store.get("coder").id == "default"  # a chat's gone preset


@pytest.mark.parametrize("field, value, words", [("temperature", 3.0, "temperature"), ("tier", "L9", "tier"),
                                                  ("name", " ", "name"), ("tools", "yes", "tools"), ("temperature", True, "temperature"),
                                                  ("id", "Bad Id", "lowercase")])
def test_a_wrong_field_is_named(tmp_path, field, value, words):
    values = {"id": "x", "name": "X", field: value}
    with pytest.raises(PresetError, match=words):
        Presets(tmp_path / "p.json").save(Preset(**values))


def test_a_damaged_file_is_said_and_one_bad_entry_costs_only_itself(tmp_path):
    path = tmp_path / "presets.json"
    path.write_text("{not json")
    store = Presets(path)
    assert [p.id for p in store.all()] == ["default"] and "could not be read" in store.problem
    path.write_text(json.dumps({"default": "ok", "presets": [{"id": "ok", "name": "Fine"},
                                                              {"id": "bad", "name": "Hot", "temperature": 9}]}))
    assert [p.id for p in store.all()] == ["default", "ok"] and store.default().name == "Fine"


def test_export_then_import_adds_copies_and_says_what_it_skipped(tmp_path):
    a = Presets(tmp_path / "a.json")
    a.save(Preset("tutor", "Tutor 老师", "Explain step by step.", 0.5, "auto", True, False))
    text = a.export_json()
    b = Presets(tmp_path / "b.json")
    added, problems = b.import_json(text)
    assert added == ["Tutor 老师"] and problems == ["preset 1 (Default): already here"]
    tutor = next(p for p in b.all() if p.name == "Tutor 老师")
    assert tutor.id != "tutor" and tutor.system_prompt == "Explain step by step." and tutor.documents
    added, problems = b.import_json(json.dumps({"presets": [{"name": "x" * 200}, {"name": "Ok"}]}))
    assert added == ["Ok"] and len(problems) == 1 and "preset 1" in problems[0]
    with pytest.raises(PresetError, match="not valid JSON"):
        b.import_json("{")


def test_a_chat_takes_its_presets_prompt_tier_and_documents(fakes, make_assistant):
    a = make_assistant(str(fakes.model_file("m")))
    fake = fakes.backend("m")
    cid = a.new_conversation("")
    a.apply_preset(cid, Preset("pirate", "Pirate", "Answer like a pirate.", 0.9, "L1", True, False))
    assert a.conversation_preset(cid) == "pirate" and a.conversation_docs(cid) == "*"
    fakes.script("m").enqueue(Answer("Arr."))
    done = [e for e in a.send(cid, "Hello") if type(e).__name__ == "TurnDone"][-1]
    assert done.level == "L1" and done.route_reason == "conversation override"
    assert b"Answer like a pirate." in bytes(t for t in fake.prompts[-1] if t < 256)
    a.apply_preset(cid, Preset("plain", "Plain", "", 0.7, "auto", None, False))
    assert a.conversation_docs(cid) == "*"  # None: the chat's switch as it stands
    a.apply_preset(cid, Preset("plain", "Plain", "", 0.7, "auto", False, False))
    assert a.conversation_docs(cid) is None
    fakes.script("m").enqueue(Answer("Hi."))
    list(a.send(cid, "Again"))
    assert b"pirate" not in bytes(t for t in fake.prompts[-1] if t < 256)
