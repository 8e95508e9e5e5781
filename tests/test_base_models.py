"""No default path answers a chat with a base model: the router, its fallbacks and the cascade
move off a tier whose model is not instruction-tuned; only the user's explicit route reaches it."""
import math

import pytest

from engine.api import Retracted
from engine.config.settings import DEFAULTS
from engine.models.catalog import load_catalog
from engine.models.instruct import is_instruct
from tests.conftest import MODELS as MODEL_PATHS
from tests.fake_backend import Answer, dones, fakes, make_assistant, send  # noqa: F401

SKY = "Explain in two sentences why the sky is blue"  # the router's L2 ("ordinary request")
HELLO = "hi"


def done_of(events):
    return dones(events)[-1]


def test_the_default_tiers_are_instruction_tuned():
    catalog = load_catalog()
    for key in ("tier.L1", "tier.L2"):
        assert is_instruct(DEFAULTS[key], catalog) is True, key


@pytest.mark.parametrize("model, expected", [("demo-small", True), ("demo-int4", False)])
def test_the_demo_files_tell_themselves_apart_without_the_catalog(model, expected):
    # The GGUF header alone: SmolLM2 carries a chat template, the Gemma 270M base file doesn't.
    path = MODEL_PATHS[model]
    if not path.is_file():
        pytest.skip("demo models not fetched")
    assert is_instruct(str(path)) is expected


def test_auto_routing_moves_off_a_base_l2_and_an_explicit_route_still_reaches_it(fakes, make_assistant):
    l1, base = fakes.model_file("chat"), fakes.model_file("base", instruct=False)
    a = make_assistant(tiers={"L1": str(l1), "L2": str(base)})
    cid = a.new_conversation()
    wanted = a.route(cid, SKY)
    assert (wanted.level, wanted.wanted) == ("L1", "L2") and "L2 holds a base model" in wanted.reason
    fakes.script("chat").enqueue(Answer("Rayleigh scattering."))
    done = done_of(send(a, cid, SKY))
    assert (done.level, done.text) == ("L1", "Rayleigh scattering.")
    fakes.script("base").enqueue(Answer("Continue the text"))
    forced = done_of(send(a, a.new_conversation(), SKY, route="L2"))
    assert (forced.level, forced.route_reason) == ("L2", "user override")


def test_a_fallback_skips_a_base_model_for_an_instruct_tier(fakes, make_assistant):
    # L3 wanted, none configured: the nearest tier is L2, a base model; L1 answers instead.
    l1, base = fakes.model_file("chat"), fakes.model_file("base", instruct=False)
    a = make_assistant(tiers={"L1": str(l1), "L2": str(base)})
    cid = a.new_conversation()
    fakes.script("chat").enqueue(Answer("Answered on L1."))
    done = done_of(send(a, cid, SKY, route="L3"))
    assert done.level == "L1"
    assert done.fallback == "L3 not configured, L2 holds a base model → L1"
    assert not fakes.script("base").served


def test_the_cascade_never_re_asks_on_a_base_model(fakes, make_assistant):
    l1, base = fakes.model_file("chat"), fakes.model_file("base", instruct=False)
    fakes.script("chat").enqueue(Answer("Maybe.", logprob=math.log(0.2)))
    a = make_assistant(tiers={"L1": str(l1), "L2": str(base)}, cascade=True, cascade_threshold=0.5)
    events = send(a, a.new_conversation(), HELLO)
    assert [d.level for d in dones(events)] == ["L1"]
    assert not [e for e in events if isinstance(e, Retracted)]
