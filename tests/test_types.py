"""The turn's code type-checks (issue 39): mypy over engine/chat and engine/tools, with the
stages, the pipeline, the turn's records, targets and requests held to "every function typed, no
`Any`" ([tool.mypy] in pyproject.toml). A stage that takes an untyped target, or a field typed
`Any`, fails here rather than in a user's turn."""

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_chat_engine_and_the_tools_type_check(tmp_path):
    run = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache")], cwd=ROOT,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "no issues found" in run.stdout


def test_the_turns_contract_is_held_to_the_strict_rules():
    """The stages and what they pass are in the strict override: every function typed, no
    explicit `Any`, no bare generics (a bare `dict` is `dict[Any, Any]`)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["mypy"]
    strict = next(o for o in config["overrides"] if "engine.chat.stages.*" in o["module"])
    assert {"engine.chat.pipeline", "engine.chat.turn", "engine.chat.target", "engine.chat.request",
            "engine.chat.stages"} <= set(strict["module"])
    for rule in ("disallow_untyped_defs", "disallow_any_explicit", "disallow_any_generics", "warn_return_any"):
        assert strict[rule] is True, rule
