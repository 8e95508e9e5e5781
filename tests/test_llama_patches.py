"""The llama-cpp-python sdist patches (packaging/llama/patches.py) still apply to the pinned sdist,
each exactly once, and a moved upstream text stops the build with the patch's name."""

import importlib.util
import os
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("patches", ROOT / "packaging" / "llama" / "patches.py")
patches = sys.modules["patches"] = importlib.util.module_from_spec(spec)  # dataclasses look it up
spec.loader.exec_module(patches)
build_wheel_spec = importlib.util.spec_from_file_location("build_wheel", ROOT / "packaging" / "llama" / "build_wheel.py")
build_wheel = importlib.util.module_from_spec(build_wheel_spec)
build_wheel_spec.loader.exec_module(build_wheel)


@pytest.fixture(scope="module")
def sdist_tree(tmp_path_factory) -> Path:
    version = build_wheel.pinned_version()
    sdist = ROOT / "build" / "llama" / f"llama_cpp_python-{version}.tar.gz"
    if not sdist.exists():  # `make venv` downloads it (packaging/llama/build_wheel.py)
        if os.environ.get("ASSISTANT_REQUIRE_VULKAN") == "1":
            pytest.fail(f"{sdist} missing: the llama.cpp wheel was not built from it")
        pytest.skip(f"{sdist} not downloaded (built by `make venv`)")
    into = tmp_path_factory.mktemp("sdist")
    wanted = {patches._VK, patches._GGML, patches._PY, patches._LOADER}  # only the files the patches touch
    with tarfile.open(sdist) as tar:
        members = [m for m in tar.getmembers() if m.name.split("/", 1)[-1] in wanted]
        tar.extractall(into, members=members, filter="data")
    return next(into.iterdir())


def test_every_patch_applies_once_and_again_is_a_no_op(sdist_tree):
    names = [p.name for p in patches.patches(sdist_tree)]
    assert patches.apply_all(sdist_tree) == names
    vk = (sdist_tree / patches._VK).read_text()
    assert vk.count("#if VK_HEADER_VERSION >= 261") == 1 and vk.count("std::vector<vk::LayerSettingEXT>") == 1
    cmake = (sdist_tree / patches._GGML).read_text()
    assert "sapphirerapids" not in cmake.split('GGML_SYSTEM_ARCH STREQUAL "ARM"')[0]  # no AMX variant on x86
    assert "ggml-cpu-${variant}" in (sdist_tree / "CMakeLists.txt").read_text()
    before = {p.path: (sdist_tree / p.path).read_text() for p in patches.patches(sdist_tree)}
    assert patches.apply_all(sdist_tree) == names  # a rebuild in the same tree
    assert {path: (sdist_tree / path).read_text() for path in before} == before


def test_upstream_moving_the_text_stops_the_build_naming_the_patch(sdist_tree, tmp_path):
    copy = tmp_path / "tree"
    for p in patches.patches(sdist_tree):
        (copy / p.path).parent.mkdir(parents=True, exist_ok=True)
        (copy / p.path).write_text((sdist_tree / p.path).read_text())
    # undo our patch and change the upstream line it anchors on
    vk = copy / patches._VK
    vk.write_text(vk.read_text().replace(patches._VK_NEW, patches._VK_OLD.replace("validate_best_practices", "x")))
    with pytest.raises(patches.PatchError, match="vulkan-headers-1.3.239"):
        patches.apply_all(copy)
