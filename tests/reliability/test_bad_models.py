"""Broken, foreign and oversized model files: a clear message naming the file and the reason, and
the app keeps answering on the tier that works (the Assistant's fallback, the CLI, the window).

Already proven elsewhere, not repeated here: `tests/model/test_cli.py::test_bad_model_files` (a text
file and a truncated GGUF as the only model: `assistant chat` exits 3 with the reason),
`::test_unknown_or_missing_model`, and `tests/app/test_window.py::
test_a_model_that_cannot_load_shows_a_banner_and_the_window_stays` (a text file: banner, window stays).
"""

import json
import os
import re
import subprocess

import gguf
import numpy as np
import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtCore import Qt  # noqa: E402

from app.engine_worker import EngineWorker  # noqa: E402
from app.main_window import MainWindow  # noqa: E402
from tests.app.helpers import ready_window  # noqa: E402
from engine.inference.backend import LoadParams  # noqa: E402
from engine.inference.errors import ModelLoadError  # noqa: E402
from engine.models.catalog import ModelNotFound  # noqa: E402
from engine.api import Assistant, EngineConfig, TurnDone  # noqa: E402
from engine.inference.manager import ModelManager, ram_bytes  # noqa: E402
from engine.config.paths import db_path  # noqa: E402
from engine.storage import Database  # noqa: E402
from tests.model.helpers import greedy  # noqa: E402
from tests.util import cli, cli_env  # noqa: E402

pytestmark = pytest.mark.model

FALLBACK = "L2 unavailable → L1"
# One thread: on a shared 2-core machine llama.cpp's two spinning threads crawl when anything else
# runs (20 s instead of 0.7 s for a turn); these tests measure behaviour, not speed.
PARAMS = LoadParams(n_ctx=1024, n_threads=1)


def write_gguf(path, arch: str, metadata: bool = True) -> None:
    """A tiny well-formed GGUF (header, metadata, one tensor) of any architecture."""
    w = gguf.GGUFWriter(str(path), arch)
    if metadata:
        w.add_block_count(2)
        w.add_context_length(256)
        w.add_embedding_length(64)
        w.add_feed_forward_length(128)
        w.add_head_count(4)
        w.add_head_count_kv(4)
    w.add_tensor("token_embd.weight", np.zeros((32, 64), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# kind -> (exception, what the message must say)
BAD = {
    "missing": (ModelNotFound, r"model file not found: .*missing\.gguf"),
    "random-bytes": (ModelLoadError, r"random-bytes\.gguf is not a GGUF model file \(it starts with"),
    "truncated": (ModelLoadError, r"truncated\.gguf is truncated: its tensors need at least \d+ bytes, "
                                  r"the file has 5000000"),
    "unknown-arch": (ModelLoadError, r"could not load unknown-arch\.gguf \(architecture 'nosucharch'\).*"
                                     r"does not support"),
    "no-metadata": (ModelLoadError, r"no-metadata\.gguf: no llama\.block_count in the metadata"),
}


@pytest.fixture(scope="module")
def bad_files(tmp_path_factory, model_paths):
    d = tmp_path_factory.mktemp("bad-models")
    paths = {kind: d / f"{kind}.gguf" for kind in BAD}
    noise = np.random.default_rng(0).bytes(1 << 20)
    assert noise[:4] != b"GGUF"
    paths["random-bytes"].write_bytes(noise)
    with open(model_paths["demo-small"], "rb") as f:
        paths["truncated"].write_bytes(f.read(5_000_000))
    write_gguf(paths["unknown-arch"], "nosucharch")   # valid GGUF, an architecture llama.cpp lacks
    write_gguf(paths["no-metadata"], "llama", metadata=False)  # valid GGUF, no hyperparameters at all
    return paths


def ask(a: Assistant, cid: int, text: str, route: str = "auto", max_tokens: int = 6) -> TurnDone:
    [done] = [x for x in a.send(cid, text, greedy(max_tokens), route=route) if isinstance(x, TurnDone)]
    return done


@pytest.mark.parametrize("kind", BAD)
def test_a_bad_file_is_refused_with_its_reason(bad_files, kind):
    error, message = BAD[kind]
    manager = ModelManager(params=LoadParams(n_ctx=512, n_threads=1), vram_budget_mb=0)
    try:
        for gpu in (False, True):  # the CPU tier's plan and the GPU tier's plan alike
            with pytest.raises(error, match=message):
                manager.get(str(bad_files[kind]), gpu=gpu)
        assert manager.loaded() == []
    finally:
        manager.close()


@pytest.fixture(scope="module")
def routed(model_paths, tmp_path_factory):
    """The two-tier Assistant; each test below points its L2 at a different bad file."""
    db = Database(tmp_path_factory.mktemp("routed") / "assistant.db")
    a = Assistant(db, EngineConfig(tiers={"L1": "demo-small", "L2": "demo-int4"}, base_models=True, load=PARAMS, kv_tiers=False))
    yield a
    a.close()
    db.close()


@pytest.mark.parametrize("kind", BAD)
def test_a_broken_l2_leaves_l1_answering(routed, bad_files, kind, caplog):
    a = routed
    a.tiers["L2"] = str(bad_files[kind])  # what settings' tier.L2 becomes at the next start
    cid = a.new_conversation()
    forced = ask(a, cid, "Explain what a hash map is.", route="L2")
    assert (forced.level, forced.model, forced.fallback) == ("L1", "demo-small", FALLBACK)
    assert forced.stats.completion_tokens > 0 and forced.text
    warnings = [r.getMessage() for r in caplog.records if r.getMessage().startswith("tier L2 unavailable")]
    assert warnings and all(re.search(BAD[kind][1], w) for w in warnings), warnings  # the log says why
    auto = ask(a, cid, "Thanks!")
    assert auto.level == "L1" and auto.fallback is None
    rows = a.db.messages(cid)
    assert [r["role"] for r in rows] == ["user", "assistant"] * 2
    assert rows[1]["stats"]["fallback"] == FALLBACK and rows[1]["level"] == "L1"
    assert [w.model.id for w in a.manager.loaded()] == ["demo-small"]


@pytest.mark.parametrize("kind", ["unknown-arch", "no-metadata"])
def test_the_cli_names_the_problem_and_exits_3(bad_files, kind, assistant_home):
    # test_cli.py covers a text file and a truncated GGUF; these two reached llama.cpp / the planner.
    proc = subprocess.run(cli("chat", "--json", "--no-memory", "--model", str(bad_files[kind])), input=b"hi\n",
                          capture_output=True, env=cli_env(assistant_home), timeout=120)
    events = [json.loads(line) for line in proc.stdout.decode().splitlines() if line.strip()]
    assert proc.returncode == 3, proc.stderr.decode()
    assert events[-1]["event"] == "error"
    assert re.search(BAD[kind][1], events[-1]["message"]), events[-1]
    assert "Traceback" not in proc.stderr.decode()


@pytest.mark.parametrize("kind", ["missing", "unknown-arch"])
def test_a_broken_l1_leaves_l2_answering_everything(bad_files, kind, tmp_path):
    l1 = str(tmp_path / "gone.gguf") if kind == "missing" else str(bad_files[kind])
    a = Assistant(Database(db_path()), EngineConfig(tiers={"L1": l1, "L2": "demo-small"}, load=PARAMS, kv_tiers=False))
    try:
        assert a.degraded and a.degraded.startswith("L1 model unavailable") and "L2 model answers" in a.degraded
        cid = a.new_conversation()
        for route in ("auto", "L1", "L2"):
            done = ask(a, cid, "Explain what a hash map is.", route=route)
            assert done.model == "demo-small" and done.text and done.stats.completion_tokens > 0
        assert [r["role"] for r in a.db.messages(cid)] == ["user", "assistant"] * 3
    finally:
        a.close()
        a.db.close()


def test_both_tiers_broken_is_the_l2_error(bad_files):
    with pytest.raises(ModelLoadError, match="nosucharch"):
        Assistant(Database(db_path()), EngineConfig(tiers={"L1": str(bad_files["random-bytes"]),
                                              "L2": str(bad_files["unknown-arch"])}, load=PARAMS, kv_tiers=False))


@pytest.mark.gui
def test_the_window_runs_on_l2_when_l1_is_broken_and_says_so(qtbot, bad_files, monkeypatch):
    monkeypatch.setenv("ASSISTANT_TIER_L1", str(bad_files["truncated"]))  # settings: tier.L1
    monkeypatch.setenv("ASSISTANT_TIER_L2", "demo-small")
    w = MainWindow(EngineWorker(None, n_ctx=1024, memory=False), temperature=0.0, max_tokens=6)
    qtbot.addWidget(w)
    w.show()
    qtbot.waitUntil(lambda: bool(w.engine_ready or w.engine_error), timeout=120_000)
    try:
        assert w.engine_ready and w.banner.isVisible() and "L1 model unavailable" in w.banner.text(), w.engine_error
        w.send_message("Hello!")
        qtbot.waitUntil(lambda: not w.busy, timeout=120_000)
        assert w.last_done.model == "demo-small" and w.last_done.text
    finally:
        w.close()


def test_a_model_larger_than_the_ram_budget_is_refused_and_l1_stays(model_paths):
    params = PARAMS
    probe = ModelManager(params=params, vram_budget_mb=0)
    small = ram_bytes(probe.plan_for(probe.resolve("demo-small"), gpu=False))
    big = ram_bytes(probe.plan_for(probe.resolve("demo-int4"), gpu=True))
    assert big > small * 1.5, (small, big)
    budget = (small + big) // 2  # room for L1, not for L2 even with L1 evicted
    manager = ModelManager(budget_bytes=budget, params=params, vram_budget_mb=0)
    a = Assistant(Database(db_path()), EngineConfig(tiers={"L1": "demo-small", "L2": "demo-int4"}, base_models=True, load=params, kv_tiers=False), manager=manager)
    try:
        cid = a.new_conversation()
        done = ask(a, cid, "Explain what a hash map is.", route="L2")
        assert (done.level, done.model, done.fallback) == ("L1", "demo-small", FALLBACK)
        # Refused before anything was evicted: L1 stayed loaded and answered.
        assert manager.evictions == 0 and [w.model.id for w in manager.loaded()] == ["demo-small"]
        with pytest.raises(ModelLoadError, match=rf"model demo-int4 needs ~{big >> 20} MiB of memory .*more "
                                                 rf"than the {budget >> 20} MiB budget"):
            manager.get("demo-int4")
    finally:
        a.close()
        a.db.close()


@pytest.mark.gui
def test_the_window_answers_on_l1_when_l2_is_broken(qtbot, bad_files, monkeypatch):
    monkeypatch.setenv("ASSISTANT_TIER_L2", str(bad_files["unknown-arch"]))  # settings: tier.L2
    w = ready_window(qtbot, None, n_ctx=1024, max_tokens=6)
    try:
        w.composer.route.setCurrentIndex(w.composer.route.findData("L2"))
        w.composer.edit.setPlainText("Explain what a hash map is.")
        qtbot.keyClick(w.composer.edit, Qt.Key_Return)
        qtbot.waitUntil(lambda: not w.busy, timeout=120_000)
        assert w.last_done.level == "L1" and w.last_done.fallback == FALLBACK, w.banner.text()
        assert w.last_done.text and not w.banner.isVisible()
        assert f"fallback: {FALLBACK}" in w.view.toHtml()  # the answer says where it came from
        assert [m.role for m in w.view.messages] == ["user", "assistant"]
        assert w.composer.send_button.isEnabled()  # ready for the next message
    finally:
        w.close()


@pytest.mark.gui
def test_the_window_shows_an_unknown_architecture_in_its_banner(qtbot, bad_files):
    w = MainWindow(EngineWorker(str(bad_files["unknown-arch"]), memory=False))
    qtbot.addWidget(w)
    w.show()
    qtbot.waitUntil(w.banner.isVisible, timeout=60_000)
    assert "could not be loaded" in w.banner.text() and "architecture 'nosucharch'" in w.banner.text()
    assert not w.composer.send_button.isEnabled() and w.isVisible() and not w.engine_ready
    assert w.settings_button.isEnabled() and w.models_button.isEnabled()  # the way forward stays open
    w.close()
