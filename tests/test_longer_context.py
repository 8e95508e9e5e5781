"""runtime.n_ctx_max: a model loads with a longer context than runtime.n_ctx where it was trained
for one and the longer cache is cheap, so a long paste is answered without a reload."""
from engine.api import Assistant, Settings
from tests.fake_backend import FakeGPU, fakes, make_assistant  # noqa: F401


def loaded_ctx(fakes, stem):
    return [params.n_ctx for name, params in fakes.loads if name == stem]


def test_the_context_grows_up_to_what_the_model_was_trained_for(fakes, make_assistant):
    path = fakes.model_file("m", context_length=8192)
    make_assistant(str(path), n_ctx=4096, n_ctx_max=16384, vram_budget_mb=1024)
    assert loaded_ctx(fakes, "m") == [8192]  # 16384 asked, the model knows 8192


def test_without_n_ctx_max_the_context_is_as_asked(fakes, make_assistant):
    make_assistant(str(fakes.model_file("m", context_length=32768)), n_ctx=4096)
    assert loaded_ctx(fakes, "m") == [4096]


def test_a_model_trained_for_less_keeps_its_own_context(fakes, make_assistant):
    make_assistant(str(fakes.model_file("m", context_length=2048)), n_ctx=4096, n_ctx_max=16384)
    assert loaded_ctx(fakes, "m") == [2048]


def test_a_longer_context_never_coarsens_the_kv_cache(fakes, make_assistant):
    # 64 MiB of VRAM holds the 8192-token cache only as q8_0: the f16 4096-token plan stands.
    make_assistant(str(fakes.model_file("m", context_length=8192)), n_ctx=4096, n_ctx_max=16384,
                   vram_budget_mb=64)
    assert loaded_ctx(fakes, "m") == [4096]


def test_a_longer_context_never_costs_gpu_layers(fakes, make_assistant):
    # Enough VRAM for every layer at 4096 tokens, not for the 32768-token cache: the plan keeps
    # the layers and halves the context until it fits beside them.
    path = fakes.model_file("m", n_layers=8, context_length=32768)
    short = make_assistant(str(path), n_ctx=4096, devices=FakeGPU(free_mb=64), vram_budget_mb=None)
    layers = short.manager.loaded()[0].plan.n_gpu_layers
    long = make_assistant(str(path), n_ctx=4096, n_ctx_max=32768, devices=FakeGPU(free_mb=64), vram_budget_mb=None)
    p = long.manager.loaded()[0].plan
    assert p.n_gpu_layers == layers and 4096 <= p.n_ctx <= 32768


def test_settings_give_the_floor_and_an_explicit_n_ctx_is_exact(assistant_home, model_paths):
    settings = Settings()
    a = Assistant.from_settings(settings, memory=False)
    try:
        assert a.manager.n_ctx_max == settings.get("runtime.n_ctx_max") == 16384
        assert a.backend.n_ctx == 8192  # demo-small's training context, above runtime.n_ctx (4096)
    finally:
        a.close()
    b = Assistant.from_settings(settings, memory=False, n_ctx=2048)
    try:
        assert b.manager.n_ctx_max is None and b.backend.n_ctx == 2048
    finally:
        b.close()
