"""A turn with images goes to a local tier whose model has a vision projector beside it, off one
whose model has none (and off L3 unless the user says its model reads images: l3.images); a
user's own route, and tiers without a model, are kept."""

from types import SimpleNamespace

from engine.chat.tier_set import TierSet
from engine.inference.remote import RemoteClient, RemoteConfig
from engine.models.catalog import Catalog
from engine.routing.router import RouteDecision


def tiers(tmp_path, l1_sees: bool, l2_sees: bool, remote: RemoteClient | None = None) -> TierSet:
    models = {}
    for level, sees in (("L1", l1_sees), ("L2", l2_sees)):
        model = tmp_path / f"{level.lower()}-model.gguf"
        model.write_bytes(b"GGUF")
        if sees:
            (tmp_path / f"mmproj-{model.stem}.gguf").write_bytes(b"GGUF")
        models[level] = str(model)
    return TierSet(manager=SimpleNamespace(catalog=Catalog([])), models=models, single_model=False, remote=remote,
                   kv=None)


def test_an_image_turn_moves_to_the_tier_that_sees(tmp_path):
    moved = tiers(tmp_path, False, True).vision_tier(RouteDecision("L1", "ordinary request", 0.0))
    assert moved.level == "L2" and "images" in moved.reason and moved.wanted == "L1"
    # L3 not known to read images: a complex image turn goes to a local model that reads them.
    plain = RemoteClient(RemoteConfig("http://127.0.0.1:9/v1"))
    local = tiers(tmp_path, False, True, plain).vision_tier(RouteDecision("L3", "complex request", 0.0))
    assert local.level == "L2" and local.wanted == "L3"
    # The user says it does (l3.images): it stays there.
    seeing = RemoteClient(RemoteConfig("http://127.0.0.1:9/v1", images=True))
    assert tiers(tmp_path, False, True, seeing).vision_tier(RouteDecision("L3", "complex request", 0.0)).level == "L3"


def test_it_stays_where_both_or_neither_see_or_nothing_is_known(tmp_path):
    for k, (l1, l2) in enumerate(((True, True), (False, False), (True, False))):
        folder = tmp_path / str(k)
        folder.mkdir()
        assert tiers(folder, l1, l2).vision_tier(RouteDecision("L1", "r", 0.0)).level == "L1"
    nothing = TierSet(manager=SimpleNamespace(catalog=Catalog([])), models={}, single_model=False, remote=None,
                      kv=None)
    assert nothing.sees_images("L1") is None and nothing.sees_images("L3") is False
    assert nothing.vision_tier(RouteDecision("L3", "r", 0.0)).level == "L3"  # nowhere better: it says so


def test_with_no_local_tier_that_sees_an_image_turn_goes_to_an_l3_that_does(tmp_path):
    seeing = RemoteClient(RemoteConfig("http://127.0.0.1:9/v1", images=True))
    moved = tiers(tmp_path, False, False, seeing).vision_tier(RouteDecision("L1", "ordinary request", 0.0))
    assert moved.level == "L3" and moved.wanted == "L1"
