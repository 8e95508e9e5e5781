"""Source patches applied to the llama-cpp-python sdist before a build (see build_wheel.py).

Each patch is an exact text replacement that must match **once**; if upstream moves the text, the
build stops with the patch's name instead of building something else (tests/test_llama_patches.py
applies them all to the sdist the build downloaded). Keep each one small and say why it exists.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Patch:
    name: str
    path: str       # relative to the sdist root
    old: str
    new: str
    why: str


class PatchError(RuntimeError):
    pass


_VK = "vendor/llama.cpp/ggml/src/ggml-vulkan/ggml-vulkan.cpp"
_VK_OLD = """\
    VkBool32 enable_best_practice = layer_settings;
    std::vector<vk::LayerSettingEXT> settings = {
        {
            "VK_LAYER_KHRONOS_validation",
            "validate_best_practices",
            vk::LayerSettingTypeEXT::eBool32,
            1,
            &enable_best_practice
        },
    };
    vk::LayerSettingsCreateInfoEXT layer_setting_info(settings);
    vk::InstanceCreateInfo instance_create_info(vk::InstanceCreateFlags{}, &app_info, layers, extensions, &layer_setting_info);
"""
_VK_NEW = """\
#if VK_HEADER_VERSION >= 261  // offline-assistant patch: vk::LayerSettingEXT arrived in Vulkan-Headers 1.3.261
""" + _VK_OLD + """\
#else
    // Older headers (Debian 12 ships 1.3.239): no validation-layer options; everything else is the same.
    vk::InstanceCreateInfo instance_create_info(vk::InstanceCreateFlags{}, &app_info, layers, extensions);
#endif
"""

_GGML = "vendor/llama.cpp/ggml/src/CMakeLists.txt"
_GGML_OLD_HEAD = "        ggml_add_cpu_backend_variant(x64)\n"
_GGML_OLD_TAIL = ("            ggml_add_cpu_backend_variant(sapphirerapids SSE42 AVX F16C FMA AVX2 BMI2 AVX512 "
                  "AVX512_VBMI AVX512_VNNI AVX512_BF16 AMX_TILE AMX_INT8)\n        endif()\n")
# Laptop CPUs, oldest first. ggml loads the highest-scoring variant the CPU supports at run time.
_GGML_NEW = """\
        # offline-assistant patch: five x86 variants instead of fourteen (each costs a full compile of
        # ggml-cpu on CI's two cores), and none with AMX (its kernels crashed on our build machines).
        ggml_add_cpu_backend_variant(x64)
        ggml_add_cpu_backend_variant(sandybridge        SSE42 AVX)
        ggml_add_cpu_backend_variant(haswell            SSE42 AVX F16C FMA AVX2 BMI2)
        ggml_add_cpu_backend_variant(alderlake          SSE42 AVX F16C FMA AVX2 BMI2 AVX_VNNI)
        if (NOT MSVC)
            ggml_add_cpu_backend_variant(zen4           SSE42 AVX F16C FMA AVX2 BMI2 AVX512 AVX512_VBMI AVX512_VNNI AVX512_BF16)
        endif()
"""

_PY = "CMakeLists.txt"
_PY_OLD = "    llama_cpp_python_install_target(ggml-vulkan)\n"
_PY_NEW = _PY_OLD + """\
    # offline-assistant patch: with GGML_CPU_ALL_VARIANTS each CPU variant is its own module
    # (libggml-cpu-<variant>.so); upstream installs only the single ggml-cpu target.
    foreach(variant x64 sse42 sandybridge ivybridge piledriver haswell skylakex cannonlake cascadelake
            icelake cooperlake zen4 alderlake sapphirerapids apple_m1 apple_m2_m3 apple_m4
            armv8.0_1 armv8.2_1 armv8.2_2 armv8.2_3 armv8.6_1 armv8.6_2 armv9.2_1 armv9.2_2)
        llama_cpp_python_install_target(ggml-cpu-${variant})
    endforeach()
"""


_LOADER = "llama_cpp/llama_cpp.py"
_LOADER_OLD = """\
# Load the library
_lib = load_shared_library(_lib_base_name, _base_path)
"""
_LOADER_NEW = _LOADER_OLD + """\
# offline-assistant patch: with GGML_BACKEND_DL no backend is registered until one is loaded, and
# llama.cpp refuses to load a model ("no backends are loaded"). Load the modules beside libllama
# (the best CPU variant, and each GPU backend whose driver stack loads), unless the host program
# already did (the engine loads them first to keep the reasons a GPU backend was skipped).
_ggml = _lib  # Linux and macOS find ggml's symbols through libllama; Windows asks ggml.dll
if not hasattr(_ggml, "ggml_backend_load_all_from_path") and (_base_path / "ggml.dll").exists():
    _ggml = ctypes.CDLL(str(_base_path / "ggml.dll"))
if hasattr(_ggml, "ggml_backend_load_all_from_path"):
    _ggml.ggml_backend_reg_count.restype = ctypes.c_size_t
    if _ggml.ggml_backend_reg_count() == 0:
        _ggml.ggml_backend_load_all_from_path.argtypes = [ctypes.c_char_p]
        _ggml.ggml_backend_load_all_from_path(str(_base_path).encode())
"""


def _variant_block(text: str) -> str:
    start = text.find(_GGML_OLD_HEAD)
    end = text.find(_GGML_OLD_TAIL, start)
    if start < 0 or end < 0:
        return ""
    return text[start:end + len(_GGML_OLD_TAIL)]


def patches(source: Path) -> list[Patch]:
    """The patches for the sdist unpacked at `source` (the CPU-variant block is found by its ends)."""
    block = _variant_block((source / _GGML).read_text(encoding="utf-8"))
    return [
        Patch("vulkan-headers-1.3.239", _VK, _VK_OLD, _VK_NEW,
              "build ggml-vulkan against Debian 12's Vulkan headers"),
        Patch("cpu-variants", _GGML, block or "<x86 CPU variant block not found>", _GGML_NEW,
              "a laptop-sized set of CPU variants, no AMX"),
        Patch("install-cpu-variants", _PY, _PY_OLD, _PY_NEW,
              "ship the CPU variant modules in the wheel"),
        Patch("load-backends-on-import", _LOADER, _LOADER_OLD, _LOADER_NEW,
              "llama_cpp registers its backend modules itself (its server, bare Llama users)"),
    ]


def apply_all(source: Path) -> list[str]:
    """Apply every patch to the tree at `source`; returns their names. Raises PatchError naming the
    first patch whose text is not found exactly once (nothing is written for that file)."""
    done = []
    for patch in patches(source):
        target = source / patch.path
        text = target.read_text(encoding="utf-8")
        if patch.new in text:
            done.append(patch.name)     # already applied (a rebuild in the same tree)
            continue
        count = text.count(patch.old)
        if count != 1:
            raise PatchError(f"patch {patch.name!r} ({patch.why}): expected its text once in "
                             f"{patch.path}, found it {count} times; llama-cpp-python changed")
        target.write_text(text.replace(patch.old, patch.new), encoding="utf-8")
        done.append(patch.name)
    return done
