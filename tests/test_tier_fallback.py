"""The order a turn's tiers are tried in when one is missing (engine/chat/tier_set.py
FALLBACK_ORDER): a local model before the remote L3, and of two local ones the stronger first."""

from types import SimpleNamespace

from engine.chat.tier_set import TierSet
from engine.inference.errors import ModelLoadError
from engine.models.catalog import Catalog, ModelEntry


class Manager:
    """Loads any model but the broken ones, as ModelManager.get does (no file is read)."""

    catalog = Catalog([ModelEntry(id="small", name="s", file="s.gguf", instruct=True),
                       ModelEntry(id="big", name="b", file="b.gguf", instruct=True)])

    def __init__(self, broken=()):
        self.broken = set(broken)

    def get(self, model, gpu):
        if model in self.broken:
            raise ModelLoadError(f"{model} is broken")
        return SimpleNamespace(before_close=None)


def tried(level, *, broken=(), remote=True, local_only=False):
    tiers = TierSet(manager=Manager(broken), models={"L1": "small", "L2": "big"}, single_model=False,
                    remote=SimpleNamespace() if remote else None, kv=None)
    return [(target.level, note) for target, note in tiers.targets(level, local_only=local_only)]


def levels(*args, **kwargs):
    return [level for level, _ in tried(*args, **kwargs)]


def test_every_tier_tries_the_local_ones_before_l3():
    assert levels("L1") == ["L1", "L2", "L3"]
    assert levels("L2") == ["L2", "L1", "L3"]
    assert levels("L3") == ["L3", "L2", "L1"]


def test_a_broken_l2_is_answered_by_l1_even_with_l3_reachable():
    assert tried("L2", broken={"big"}) == [("L1", "L2 unavailable → L1"), ("L3", "L2 unavailable → L3")]
    assert tried("L1", broken={"small"})[0] == ("L2", "L1 unavailable → L2")
    assert tried("L1", broken={"small", "big"}) == [("L3", "L1 unavailable → L3")]


def test_l3_is_left_out_when_the_turn_must_stay_or_none_is_set_up():
    assert levels("L2", broken={"big"}, local_only=True) == ["L1"]
    assert tried("L3", local_only=True)[0] == ("L2", "L3 not used: documents stay on this computer → L2")
    assert tried("L3", remote=False)[0] == ("L2", "L3 not configured → L2")
