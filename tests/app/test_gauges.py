"""The Resources panel's CPU threads row, drawn from hand-made status dicts as the engine publishes
them (engine/api/status.py: each model's "threads", thread_policy.ThreadState's fields): a
calibrated count, one lowered while other programs are busy, a count set in Settings, a prompt
count that differs, several models; in English and Chinese. Screenshots of the panel
(ASSISTANT_SCREENSHOTS=docs/screenshots refreshes the docs' copies)."""

from __future__ import annotations

from app.gauges import GaugePanel

from .helpers import in_language, save_screenshot, screenshot_dir

GIB = 2**30


def threads(decode=2, batch=2, best_decode=2, best_batch=2, cpus=2, others=0.1, reason="calibrated") -> dict:
    return dict(decode=decode, batch=batch, best_decode=best_decode, best_batch=best_batch, cpus=cpus,
                others=others, reason=reason)


def status(*models: dict | None) -> dict:
    """The published status with a loaded model per `threads` dict (None: a model without a reading)."""
    entries = [{"id": f"m{i}", "identity": f"model-{i}.gguf:1000", "threads": t} for i, t in enumerate(models)]
    return {"ready": True, "models": entries,
            "kv": {e["identity"]: {"capacity": 16, "used": 5, "conversations": {"1": {"hot": 5}}} for e in entries},
            "devices": {"ram_total_bytes": 16 * GIB, "ram_available_bytes": 9 * GIB,
                        "process_rss_bytes": 420 * 2**20, "note": ""}}


def panel(qtbot, shown: dict) -> tuple[GaugePanel, list[str]]:
    """A panel reading `shown` (changed in place by the test), and the strip lines it reported."""
    strip: list[str] = []
    p = GaugePanel(lambda: shown)
    p.timer.stop()  # drawn when the test asks
    p.on_summary = strip.append
    qtbot.addWidget(p)
    return p, strip


def test_the_threads_row_says_how_many_and_why(qtbot):
    shown = status(threads())
    p, strip = panel(qtbot, shown)
    p.update_now()
    assert p.threads.text() == "2 threads"
    assert "Measured for this model" in p.threads.toolTip() and "0.1 of 2 CPUs" in p.threads.toolTip()
    assert "CPU threads" not in strip[-1]  # the strip speaks of threads only while they are fewer

    shown.update(status(threads(decode=1, batch=1, others=1.3, reason="busy")))
    p.update_now()
    assert p.threads.text() == "1 thread while other programs are busy (2 threads when quiet)"
    assert "1.3 of 2 CPUs" in p.threads.toolTip()
    assert strip[-1].endswith("1/2 CPU threads (other programs busy)"), strip[-1]

    shown.update(status(threads(reason="manual", others=1.5)))
    p.update_now()
    assert p.threads.text() == "2 threads (set in Settings)" and "Settings" in p.threads.toolTip()
    assert "CPU threads" not in strip[-1]

    shown.update(status(threads(decode=1, batch=4, best_decode=1, best_batch=4, cpus=4, reason="manual")))
    p.update_now()
    assert p.threads.text() == "1 thread, 4 for prompts (set in Settings)"

    shown.update(status(threads(decode=2, batch=3, best_decode=2, best_batch=4, cpus=4, others=0.9, reason="busy")))
    p.update_now()  # only the prompt count was lowered: still "while busy"
    assert p.threads.text() == "2 threads, 3 for prompts while other programs are busy (2 threads when quiet)"

    shown.update(status(threads(reason="default")))
    p.update_now()
    assert p.threads.text() == "2 threads (one per core)" and "not measured" in p.threads.toolTip()


def test_one_line_per_loaded_model_and_none_before_a_load(qtbot):
    shown = status()
    p, _ = panel(qtbot, shown)
    p.update_now()
    assert p.threads.text() == "no model loaded"
    shown.update(status(threads(), threads(decode=1, batch=1, others=1.2, reason="busy"), None))
    p.update_now()
    assert p.threads.text().splitlines() == [
        "model-0: 2 threads", "model-1: 1 thread while other programs are busy (2 threads when quiet)"]


def test_the_threads_row_in_chinese_and_screenshots(qtbot, tmp_path):
    out = screenshot_dir(tmp_path)
    words = {"en": "1 thread while other programs are busy (2 threads when quiet)",
             "zh_CN": "1 个线程，其他程序正忙（空闲时 2 个线程）"}
    for language in ("en", "zh_CN"):
        with in_language(language):
            p, strip = panel(qtbot, status(threads(decode=1, batch=1, others=1.3, reason="busy")))
            p.conversation_id = 1
            p.set_water_level({"water_level": 0.42, "used": 1720, "n_ctx": 4096})
            p.update_now()
            assert p.threads.text() == words[language]
            if language == "zh_CN":
                assert strip[-1].endswith("CPU 线程 1/2（其他程序正忙）") and "其他程序当前占用" in p.threads.toolTip()
            save_screenshot(qtbot, p, out / f"resources-threads-{language}.png", 420, 420)
            p.close()
