"""The GPU path on a real Vulkan device: Mesa's lavapipe, a software GPU (CI has no other).

demo-small fully offloaded must answer like the CPU, reuse its cache across turns, park and
restore conversations whose KV cache lives on the device, and allocate what the planner said.
lavapipe is slow (a few prompt tokens a second, about one decoded token a second, and tens of
seconds to compile each shader on first use), so prompts and answers here are short.

Skipped when this llama.cpp has no Vulkan backend or Mesa's lavapipe is not installed
(`packaging/linux/sysdeps.sh`); under ASSISTANT_REQUIRE_VULKAN=1 (CI) that is a failure instead.
"""

import io
import json
import os
import subprocess
import sys
from contextlib import redirect_stdout

import pytest

from engine.api import Assistant, EngineConfig
from engine.config.paths import db_path
from engine.inference.backend import Backend, LoadParams
from engine.inference.generate import prefill
from engine.inference.manager import ModelManager
from engine.kv.tiers import MIN_WARM_TOKENS, KVTiers
from engine.models.ggml_registry import GgmlDevice, registry
from engine.models.planner import plan
from engine.storage import Database

from .helpers import THREADS, assert_logits_agree, forced_logits, run_prompt, turn

OVERHEAD = 16


@pytest.fixture(scope="module")
def lavapipe() -> GgmlDevice:
    reg = registry()
    device = next((d for d in reg.devices() if d.backend == "vulkan" and d.software), None)
    if device is None:
        why = (f"no Vulkan software device (backends {reg.backends()}, skipped {reg.skipped}, "
               f"GGML_VK_VISIBLE_DEVICES={os.environ.get('GGML_VK_VISIBLE_DEVICES')})")
        if os.environ.get("ASSISTANT_REQUIRE_VULKAN") == "1":
            pytest.fail(why + ": run packaging/linux/sysdeps.sh and build llama.cpp with Vulkan")
        pytest.skip(why)
    return device


def _params(device: GgmlDevice | None, n_ctx=2048, **kw) -> LoadParams:
    if device is None:
        return LoadParams(n_ctx=n_ctx, n_threads=THREADS, **kw)
    return LoadParams(n_ctx=n_ctx, n_threads=THREADS, n_gpu_layers=999, gpu_device=device.name, **kw)


def test_devices_report_lists_the_vulkan_backend_and_its_device(lavapipe):
    from engine.cli.main import main
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["devices", "--json"]) == 0
    report = json.loads(out.getvalue())
    assert "cpu" in report["backends"] and "vulkan" in report["backends"]
    (dev,) = [d for d in report["devices"] if d["name"] == lavapipe.name]
    assert dev["backend"] == "vulkan" and dev["software"] and 0 < dev["free_bytes"] <= dev["total_bytes"]
    assert report["chosen_device"] is None  # "auto" never takes a software rasteriser
    (gpu,) = [g for g in report["gpus"] if g["device"] == lavapipe.name]
    assert gpu["software"] and gpu["memory_from"] == "ggml"


@pytest.fixture(scope="module")
def on_device(model_paths, lavapipe):
    """demo-small fully offloaded to lavapipe as the planner plans it (one load for the module:
    lavapipe compiles each shader on first use, tens of seconds each)."""
    p = plan(model_paths["demo-small"], lavapipe.free_bytes / 2**20, 1024, n_gpu_layers=-1)
    load = {k: v for k, v in p.load_kwargs().items() if k != "n_batch"}
    b = Backend(model_paths["demo-small"], LoadParams(n_threads=THREADS, gpu_device=lavapipe.name, **load))
    yield p, b
    b.close()


PROMPT = "<|im_start|>user\nList three colours.<|im_end|>\n<|im_start|>assistant\n"


def test_full_offload_allocates_as_planned_and_answers_like_the_cpu(model_paths, lavapipe, on_device):
    p, b = on_device
    device = lavapipe.name
    assert b.offload == {"backend": "vulkan", "device": device, "n_gpu_layers": 31, "n_layers": 31}
    r = b.memory_report
    on = {kind: r[kind].get(device, 0) for kind in ("weights", "kv", "compute", "output")}
    actual = sum(on.values())
    error = (p.gpu_bytes_total - actual) / actual
    print(f"plan {p.gpu_bytes_total / 2**20:.1f} MiB vs {actual / 2**20:.1f} MiB allocated on {device} "
          f"({error:+.1%}); by kind {on}")
    assert abs(p.weights_bytes_gpu - on["weights"]) / on["weights"] < 0.05
    assert abs(p.kv_bytes_gpu - on["kv"]) / on["kv"] < 0.05
    assert abs(error) < 0.05
    # Answers like the CPU: fed the CPU's greedy answer, the device gives the CPU's logits within the
    # bound (different kernels round differently: comparing two free-running answers would test ties).
    cpu_backend = Backend(model_paths["demo-small"], LoadParams(n_ctx=1024, n_threads=THREADS))
    try:
        prompt = cpu_backend.tokenize(PROMPT, special=True)
        answer = run_prompt(cpu_backend, prompt, max_tokens=8).token_ids
        cpu_backend.reset()
        cpu = forced_logits(cpu_backend, prompt, answer)
    finally:
        cpu_backend.close()
    b.reset()
    stats = assert_logits_agree(cpu, forced_logits(b, prompt, answer), f"{device} vs the CPU")
    print(f"{device} vs the CPU, teacher-forced: {stats}")


def test_park_to_ram_and_disk_and_restore_onto_the_device(on_device, tmp_path):
    """KVTiers with the cache on the device: a sequence parked in RAM, then written to disk, comes
    back (from a new tier, as after a restart) and continues exactly as it was."""
    _, b = on_device
    system = "<|im_start|>system\nYou are brief. Answer in one short line, in plain English.<|im_end|>\n"
    a_ids = b.tokenize(system + PROMPT + "Red, green and", special=True)
    assert len(a_ids) >= MIN_WARM_TOKENS  # long enough to be parked
    b_ids = b.tokenize("<|im_start|>user\nName two rivers in Europe, please.<|im_end|>\n", special=True)
    b.reset()
    b.eval(a_ids + b.tokenize(" blue", special=False))
    expected = b.first_logits()  # the next token's logits after A + " blue", evaluated straight
    tiers = KVTiers(tmp_path / "kv", 64 << 20, 64 << 20, min_cold_tokens=16)
    b.reset()
    tiers.prepare(b, 1, a_ids)
    prefill(b, a_ids)
    tiers.prepare(b, 2, b_ids)  # B takes the context: A is parked in RAM
    cached, _, _ = prefill(b, b_ids)
    assert cached < len(b_ids) and b.kv_tokens == b_ids
    warm = tiers.prepare(b, 1, a_ids + [0])
    assert (warm.restored_from, b.kv_tokens) == ("warm", a_ids)
    tiers.release(b)  # unloading: A to RAM, and at close every parked state to disk
    tiers.close()
    b.reset()
    cold_tiers = KVTiers(tmp_path / "kv", 64 << 20, 64 << 20, min_cold_tokens=16)  # a new process's tiers
    try:
        cold = cold_tiers.prepare(b, 1, a_ids + [0])
        assert (cold.restored_from, b.kv_tokens) == ("cold", a_ids), cold
        assert b.eval(b.tokenize(" blue", special=False)) == 1  # one new token evaluated, the rest restored
        # " blue" alone after the restored state vs in one batch with A: the same within the bound.
        assert_logits_agree(expected[None], b.first_logits()[None], "restored from disk onto the device")
    finally:
        cold_tiers.close()


def test_a_cpu_plan_keeps_every_tensor_and_batch_off_the_device(model_paths, lavapipe):
    b = Backend(model_paths["demo-small"], _params(None))
    try:
        assert b.offload == {"backend": "cpu", "device": None, "n_gpu_layers": 0, "n_layers": 31}
        buffers = {k for kind in ("weights", "kv", "compute", "output") for k in b.memory_report[kind]}
        assert not any(k.startswith("Vulkan") for k in buffers), buffers
    finally:
        b.close()


def _assistant(lavapipe, **kw) -> Assistant:
    manager = ModelManager(params=LoadParams(n_ctx=1024, n_threads=THREADS), gpu_device=lavapipe.name,
                           n_gpu_layers=-1)
    return Assistant(Database(db_path()), EngineConfig(model="demo-small", **kw), manager=manager)


def new_tokens(a: Assistant, text: str) -> int:
    return len(a.vocab.tokenize(text, special=False))


def test_turn_two_evaluates_only_its_new_tokens_and_a_switch_restores_from_ram(model_paths, lavapipe):
    a = _assistant(lavapipe)
    try:
        convs = [a.new_conversation("You are brief and kind. Answer in one line."),
                 a.new_conversation("You are terse. Answer in one word.")]
        first = turn(a, convs[0], "Hi! Name a fruit.", max_tokens=2)
        assert first.stats.offload == {"backend": "vulkan", "device": lavapipe.name, "n_gpu_layers": 31,
                                          "n_layers": 31, "note": None}
        assert first.fallback is None
        text = "And a vegetable?"
        second = turn(a, convs[0], text, max_tokens=2)
        assert second.stats.cache_mode == "append" and second.stats.restored_from == "hot"
        assert second.stats.prompt_tokens_evaluated <= new_tokens(a, text) + OVERHEAD
        turn(a, convs[1], "Hi!", max_tokens=2)  # the other chat takes the context
        back = turn(a, convs[0], "One more?", max_tokens=2)
        assert back.stats.restored_from == "warm", back.stats
        assert back.stats.prompt_tokens_evaluated <= new_tokens(a, "One more?") + OVERHEAD
    finally:
        a.close()
        a.db.close()


def test_no_vulkan_driver_loads_on_the_cpu_and_says_why(model_paths, lavapipe, tmp_path):
    """A machine whose Vulkan loader finds no driver: the chat runs on the CPU; done.fallback says so."""
    env = dict(os.environ, VK_ICD_FILENAMES=str(tmp_path / "no-driver.json"), ASSISTANT_HOME=str(tmp_path / "home"),
               VK_DRIVER_FILES=str(tmp_path / "no-driver.json"))
    run = subprocess.run([sys.executable, "-m", "engine.cli.main", "chat", "--json", "--model", "demo-small",
                          "--no-memory", "--max-tokens", "4", "--temperature", "0", "--gpu-device", lavapipe.name,
                          "--n-gpu-layers", "-1", "--n-ctx", "1024"],
                         input="Hello!\n", capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    (done,) = [e for e in map(json.loads, run.stdout.splitlines()) if e.get("event") == "done"]
    assert done["stats"]["offload"]["backend"] == "cpu"
    assert f"no GPU device '{lavapipe.name}': running on the CPU" in done["fallback"]
    assert "vulkan backend not loaded" in done["fallback"]  # ggml found no driver, and that is said
