"""A headless install (issue 23): `pip install -e .` without the `gui` extra runs the engine, `assistant
chat` and `assistant serve`, and the window says what to install instead of a traceback.

The real check runs in a second venv that holds exactly what the base install would: the project
plus the distributions its base dependencies (pyproject.toml, no extras) need, transitively, linked
from this test venv (symlinks: a fresh `pip install` of llama-cpp-python and the rest would cost CI
minutes and need the network). What is not in that closure — PySide6, pytest, torch, openai — is
simply absent, so a missing base dependency fails here as it would on a team server.
"""

from __future__ import annotations

import ast
import importlib.metadata as md
import json
import os
import re
import signal
import subprocess
import sys
import tomllib
from pathlib import Path

import httpx
import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
QT = re.compile(r"(pyside|shiboken|pyqt|qt)", re.I)
# Top-level modules of the window only: never imported by engine/ (app/main.py's GUI_MODULES + Qt's own).
GUI_IMPORTS = {"PySide6", "shiboken6", "PyQt5", "PyQt6", "markdown_it", "pygments"}
KEY = "headless-key-0123456789abcdef"


def test_the_base_dependencies_hold_no_qt_and_the_gui_extra_does():
    base = [Requirement(r).name for r in PYPROJECT["project"]["dependencies"]]
    assert [n for n in base if QT.search(n)] == []
    gui = [Requirement(r).name for r in PYPROJECT["project"]["optional-dependencies"]["gui"]]
    assert any(n.startswith("pyside6") for n in gui)


def test_the_engine_never_imports_the_window_s_packages():
    offenders = []
    for path in sorted((ROOT / "engine").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module] if isinstance(node, ast.ImportFrom) and node.module and node.level == 0
                     else [])
            offenders += [f"{path.relative_to(ROOT)}: {n}" for n in names if n.split(".")[0] in GUI_IMPORTS]
    assert offenders == []


def base_closure() -> list[md.Distribution]:
    """The installed distributions the project's base dependencies need (markers and extras followed)."""
    env = default_environment()
    found: dict[str, md.Distribution] = {}
    seen: set[tuple[str, str]] = set()
    todo = [(r, "") for r in PYPROJECT["project"]["dependencies"]]
    while todo:
        spec, extra = todo.pop()
        req = Requirement(spec)
        if req.marker and not req.marker.evaluate(env | {"extra": extra}):
            continue
        name = canonicalize_name(req.name)
        wanted = [(name, e) for e in ("", *req.extras) if (name, e) not in seen]
        if not wanted:
            continue
        seen.update(wanted)
        try:
            dist = found.setdefault(name, md.distribution(req.name))
        except md.PackageNotFoundError:
            pytest.fail(f"{req.name} (a base dependency) is not installed in the test venv")
        todo += [(r, e) for _, e in wanted for r in dist.requires or []]
    return list(found.values())


def top_level_entries(dist: md.Distribution) -> set[str]:
    """The names a distribution puts directly in site-packages (packages, modules, its .dist-info)."""
    if not dist.files:
        pytest.fail(f"{dist.metadata['Name']} has no RECORD: cannot tell its files")
    return {f.parts[0] for f in dist.files if f.parts[0] not in ("..", "__pycache__")}


def console_script(venv: Path, name: str, target: str) -> Path:
    """bin/<name> as pip writes it for a [project.scripts] entry ("module:function")."""
    module, func = target.split(":")
    path = venv / "bin" / name
    path.write_text(f"#!{venv / 'bin' / 'python'}\nimport sys\nfrom {module} import {func}\n"
                    f"sys.exit({func}())\n", encoding="utf-8")
    path.chmod(0o755)
    return path


@pytest.fixture(scope="module")
def headless(tmp_path_factory) -> Path:
    """A venv with the project and its base dependencies only; returns its root."""
    if os.name != "posix":
        pytest.skip("the linked venv is built for POSIX layouts")
    venv = tmp_path_factory.mktemp("headless") / "venv"
    subprocess.run([sys._base_executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    site = Path(subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    for dist in base_closure():
        base = Path(dist.locate_file(""))
        for entry in top_level_entries(dist):
            if not (site / entry).exists():
                (site / entry).symlink_to(base / entry)
    (site / "offline_assistant.pth").write_text(str(ROOT) + "\n", encoding="utf-8")  # as `pip install -e .`
    for name, target in PYPROJECT["project"]["scripts"].items():
        console_script(venv, name, target)
    for name, target in PYPROJECT["project"]["gui-scripts"].items():
        console_script(venv, name, target)
    return venv


def headless_env(home: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "QT_"))}
    return env | {"ASSISTANT_HOME": str(home), "PYTHONIOENCODING": "utf-8", "ASSISTANT_API_KEY": KEY}


def test_the_headless_venv_lacks_the_window_s_packages(headless):
    code = ("import importlib.util as u, json; "
            f"print(json.dumps([m for m in {sorted(GUI_IMPORTS)!r} + ['pytest', 'torch'] if u.find_spec(m)]))")
    out = subprocess.run([str(headless / "bin" / "python"), "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []


@pytest.mark.parametrize("argv", [["python", "-m", "app"], ["assistant-gui"], ["assistant-gui", "--selftest"]])
def test_the_window_without_the_gui_extra_says_what_to_install(headless, assistant_home, argv):
    exe = [str(headless / "bin" / argv[0]), *argv[1:]]
    proc = subprocess.run(exe, capture_output=True, text=True, env=headless_env(assistant_home) | {"DISPLAY": ":0"},
                          timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "pip install -e '.[gui]'" in proc.stderr and "PySide6" in proc.stderr


@pytest.mark.model
def test_assistant_chat_answers_a_piped_turn_without_qt(headless, assistant_home, model_paths):
    proc = subprocess.run([str(headless / "bin" / "assistant"), "chat", "--json", "--model", "demo-small",
                           "--temperature", "0", "--max-tokens", "8", "--n-ctx", "1024"],
                          input=b"Hello!\n", capture_output=True, env=headless_env(assistant_home), timeout=300)
    assert proc.returncode == 0, proc.stderr.decode()
    events = [json.loads(line) for line in proc.stdout.decode().splitlines() if line.strip()]
    done = [e for e in events if e["event"] == "done"]
    assert len(done) == 1 and done[0]["stats"]["completion_tokens"] > 0, events
    assert "Traceback" not in proc.stderr.decode()


@pytest.mark.model
def test_assistant_serve_answers_without_qt(headless, assistant_home, model_paths):
    proc = subprocess.Popen([str(headless / "bin" / "assistant"), "serve", "--model", "demo-small", "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=headless_env(assistant_home), text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith("Serving"), (line, proc.poll(), proc.stderr.read() if proc.poll() is not None else "")
        url = line.split(" at ")[1].strip()
        auth = {"Authorization": f"Bearer {KEY}"}
        models = httpx.get(url + "/models", headers=auth, timeout=60)
        assert models.status_code == 200, models.text
        body = {"model": "L1", "max_tokens": 8, "temperature": 0, "messages": [{"role": "user", "content": "Hello!"}]}
        r = httpx.post(url + "/chat/completions", json=body, headers=auth, timeout=300)
        assert r.status_code == 200, r.text
        assert r.json()["usage"]["completion_tokens"] > 0
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0 and "Traceback" not in err, err
