"""Tool calls, the pure parts (engine/inference/tool_calls.py): checking a request's tools, splitting
calls out of a stream whatever the piece boundaries, and a grammar for every schema a client sends."""

import json

import pytest

from engine.inference.tool_calls import (CLOSE, OPEN, CallSplitter, ToolError, ToolUse, call_grammar, call_markup,
                                         parse_call, parse_tool_choice, parse_tools)

TOOLS = parse_tools([
    {"type": "function", "function": {"name": "add", "parameters": {
        "type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}}}},
    {"type": "function", "function": {"name": "find", "description": "d", "parameters": {
        "type": "object", "properties": {"city": {"$ref": "#/$defs/City"}}, "$defs": {"City": {"type": "string"}}}}},
    {"type": "function", "function": {"name": "code", "parameters": {
        "type": "object", "properties": {"zip": {"type": "string", "pattern": "^(?=\\\\d)\\\\d{5}$"}}}}},
])


def test_a_stream_split_anywhere_gives_the_same_text_and_calls():
    body = 'Sure. <tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call> and ' \
           '<tool_call>{"name": "find", "arguments": "{\\"city\\": \\"Rome\\"}"}</tool_call>'
    for size in (1, 2, 3, 5, 7, 11, len(body)):
        s = CallSplitter(TOOLS)
        shown = "".join(s.feed(body[i:i + size]) for i in range(0, len(body), size)) + s.flush()
        assert shown == "Sure.  and "
        assert [(c.name, json.loads(c.arguments)) for c in s.calls] == [("add", {"a": 1, "b": 2}),
                                                                         ("find", {"city": "Rome"})]
        assert len({c.id for c in s.calls}) == 2 and not s.errors


def test_a_text_that_only_looks_like_a_marker_is_shown_and_an_unclosed_call_is_parsed_at_the_end():
    s = CallSplitter(TOOLS)
    assert s.feed("a <tool") + s.feed("box> b") + s.flush() == "a <toolbox> b" and not s.calls
    s = CallSplitter(TOOLS)
    assert s.feed('<tool_call>{"name": "add", "arguments": {}}') + s.flush() == "" and s.calls[0].name == "add"


@pytest.mark.parametrize("body, why", [("{no", "not JSON"), ('{"arguments": {}}', "no name"),
                                       ('{"name": "rm", "arguments": {}}', "not among"),
                                       ('{"name": "add", "arguments": [1]}', "not an object")])
def test_a_malformed_call_is_an_error_and_its_text_is_shown(body, why):
    with pytest.raises(ToolError, match=why):
        parse_call(body, TOOLS)
    s = CallSplitter(TOOLS)
    assert s.feed(f"{OPEN}{body}{CLOSE}") == f"{OPEN}{body}{CLOSE}" and why in s.errors[0]


def test_parameters_is_read_as_arguments_and_markup_round_trips():
    assert json.loads(parse_call('{"name": "add", "parameters": {"a": 1}}', TOOLS).arguments) == {"a": 1}
    markup = call_markup({"id": "x", "function": {"name": "add", "arguments": '{"a": 1}'}})
    s = CallSplitter(TOOLS)
    s.feed(markup)
    assert s.calls[0].name == "add"


def test_every_tool_schema_gets_a_grammar_even_where_the_converter_refuses_it():
    """A $ref into the tool's own $defs is followed; a regex feature the converter cannot write
    falls back to any JSON object for the arguments rather than failing the turn."""
    for choice in ("auto", "required", "add", "find", "code"):
        g = call_grammar(ToolUse(TOOLS, choice), with_open=choice != "auto")
        assert g.startswith("root ::= ") and '"</tool_call>"' in g
    assert call_grammar(ToolUse(TOOLS, "none")) is None
    # the $ref follows the tool's $defs to the call's root: its arguments keep their schema
    assert r'\"city\"' in call_grammar(ToolUse(TOOLS, "find"), with_open=True)
    assert r'\"zip\"' not in call_grammar(ToolUse(TOOLS, "code"), with_open=True)  # any object instead


@pytest.mark.parametrize("tools, param", [
    ([], "tools"), ([{"type": "retrieval"}], "tools[0]"), ([{"type": "function", "function": {"name": ""}}],
                                                              "tools[0].function.name"),
    ([{"type": "function", "function": {"name": "a", "parameters": {"type": "array"}}}], "tools[0].function.parameters"),
    ([{"type": "function", "function": {"name": "a", "description": 3}}], "tools[0].function.description"),
])
def test_bad_tools_name_the_field(tools, param):
    with pytest.raises(ToolError) as e:
        parse_tools(tools)
    assert e.value.param == param


def test_tool_choice():
    assert parse_tool_choice(None, TOOLS) == "auto" and parse_tool_choice("required", TOOLS) == "required"
    assert parse_tool_choice({"type": "function", "function": {"name": "find"}}, TOOLS) == "find"
    for bad in ("sometimes", {"type": "function", "function": {"name": "nope"}}, 3):
        with pytest.raises(ToolError):
            parse_tool_choice(bad, TOOLS)
    assert [t.name for t in ToolUse(TOOLS, "find").offered()] == ["find"] and ToolUse(TOOLS, "none").offered() == ()
