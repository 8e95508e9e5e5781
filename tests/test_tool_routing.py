"""A turn that offers tools goes to a local tier whose model the catalog says can call them
(`tools = true`), off one whose model cannot; a user's own route, and unknown models, are kept."""

from types import SimpleNamespace

from engine.chat.tier_set import TierSet
from engine.models.catalog import Catalog, ModelEntry, load_catalog
from engine.routing.router import RouteDecision


def tiers(l1_tools, l2_tools) -> TierSet:
    catalog = Catalog([ModelEntry(id="small", name="s", file="s.gguf", tools=l1_tools),
                       ModelEntry(id="big", name="b", file="b.gguf", tools=l2_tools)])
    return TierSet(manager=SimpleNamespace(catalog=catalog), models={"L1": "small", "L2": "big"},
                   single_model=False, remote=None, kv=None)


def test_a_turn_with_tools_moves_to_the_tier_that_calls_them():
    moved = tiers(False, True).tool_tier(RouteDecision("L1", "ordinary request", 0.0))
    assert moved.level == "L2" and "tools" in moved.reason and moved.wanted == "L1"
    back = tiers(True, False).tool_tier(RouteDecision("L2", "complex request", 0.0))
    assert back.level == "L1"


def test_it_stays_where_both_or_neither_can_or_nothing_is_known():
    for l1, l2 in ((True, True), (False, False), (None, True), (False, None)):
        assert tiers(l1, l2).tool_tier(RouteDecision("L1", "r", 0.0)).level == "L1"
    assert tiers(False, True).tool_tier(RouteDecision("L3", "r", 0.0)).level == "L3"  # L3 passes tools on


def test_the_catalog_says_which_families_call_tools():
    by_family = {}
    for e in load_catalog().entries:
        by_family.setdefault(e.family, set()).add(e.tools)
    assert by_family["qwen2.5"] == by_family["qwen3"] == {True}
    assert by_family["gemma3"] == {False}


def test_tool_results_go_back_to_the_model_that_called():
    """send_tool_results routes to the calling answer's level: kept there even where that model
    is not one the catalog says calls tools (the results extend its KV), with a reason that says so."""
    from engine.chat.config import EngineConfig
    from engine.chat.conversation import Conversation
    from engine.chat.request import TurnRequest
    from engine.chat.session import Message
    from engine.chat.stages.route import Route
    from engine.chat.turn import Turn
    from engine.inference.events import GenerateParams
    from engine.inference.tool_calls import Tool, ToolUse

    route = Route(db=None, tiers=tiers(False, True), kv=None, conversation=None)
    use = ToolUse((Tool("add", "Add"),), "auto", True)
    seen = []

    def run(kind):
        request = TurnRequest(kind=kind, conversation_id=1, route="L1", params=GenerateParams(tools=use))
        turn = Turn(request, EngineConfig(), Conversation(1, "", []), Message("user", "2"))
        list(route(turn, lambda t: iter(seen.append(t.decision) or ())))
        return seen[-1]

    results = run("tool_results")
    assert (results.level, results.reason) == ("L1", "tool results: the model that called")
    assert run("message").level == "L1"  # a user's own route is kept too
