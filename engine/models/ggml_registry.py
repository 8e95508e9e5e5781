"""ggml's backend registry: which llama.cpp backends this install can load, and their devices.

The shipped llama.cpp is built with `GGML_BACKEND_DL` (packaging/llama/build_wheel.py): the CPU
variants and each GPU backend are separate modules in llama_cpp/lib (libggml-cpu-haswell.so,
libggml-vulkan.so, ...). `load()` asks ggml to load every one that works on this machine: the best
CPU variant by its own score, and a GPU backend only if its driver stack loads (no Vulkan loader or
no CUDA driver: that module is skipped and `skipped` says why). A build without dynamic backends has
its backends registered already; loading then finds nothing more, and the answers are the same.

`ASSISTANT_CPU_VARIANT=haswell` (any `libggml-cpu-<variant>` present) loads that CPU variant instead
of the best one, with ggml's own `ggml_backend_load`: the test suite runs its numerics tests under two
kernels this way, and a user whose processor trips one variant can step down. A variant the processor
cannot run is refused by ggml (its score is 0) and the best one is loaded, with a warning.

This module talks to ggml through ctypes and does not import llama_cpp, so the planner and the
gauges can ask before any model loads. ggml keeps one registry per process: `load()` runs once.
"""

from __future__ import annotations

import ctypes
import importlib.util
import logging
import os
import re
import sys
import threading
from dataclasses import asdict, dataclass
from pathlib import Path

log = logging.getLogger(__name__)

TYPES = ("cpu", "gpu", "igpu", "accel", "meta")  # enum ggml_backend_dev_type, in order
# Vulkan drivers that run on the CPU: real Vulkan devices, much slower than the CPU backend for
# decoding. llama.cpp hides them unless GGML_VK_VISIBLE_DEVICES names them; "auto" never picks them.
NATIVE = ("cuda", "metal", "hip", "musa", "sycl")  # preferred over Vulkan for the same card
SOFTWARE = re.compile(r"llvmpipe|lavapipe|swiftshader|softpipe", re.IGNORECASE)
CPU_VARIANT_ENV = "ASSISTANT_CPU_VARIANT"


@dataclass(frozen=True)
class GgmlDevice:
    name: str          # ggml's device name: "Vulkan0", "CUDA0", "CPU"; what LoadParams.gpu_device takes
    description: str   # the driver's name for it: "NVIDIA GeForce RTX 3060 Laptop GPU"
    backend: str       # "vulkan", "cuda", "metal", "cpu", ... (lower case)
    type: str          # one of TYPES
    free_bytes: int
    total_bytes: int

    @property
    def software(self) -> bool:
        return bool(SOFTWARE.search(self.description))

    @property
    def is_gpu(self) -> bool:
        return self.type in ("gpu", "igpu")

    def as_dict(self) -> dict:
        return asdict(self) | {"software": self.software}


def lib_dir() -> Path | None:
    """llama_cpp's library folder (found without importing llama_cpp), or None if not installed."""
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0]) / "lib"


def _lib_name(stem: str) -> str:
    if sys.platform == "win32":
        return f"{stem}.dll"
    return f"lib{stem}.dylib" if sys.platform == "darwin" else f"lib{stem}.so"


def _ggml_file(directory: Path) -> Path:
    """The libggml file libllama links to. Wheels copy symlinks, so libggml.so and libggml.so.0
    are separate files: opening the other one would load a second ggml with a registry of its own
    (and llama.cpp would then find "no backends loaded")."""
    plain = directory / _lib_name("ggml")
    if sys.platform == "win32":
        return plain
    pattern = "libggml.*.dylib" if sys.platform == "darwin" else "libggml.so.*"
    versioned = sorted(directory.glob(pattern), key=lambda p: (len(p.name), p.name))
    return versioned[0] if versioned else plain  # the shortest: libggml.so.0, the soname


_LOG_CALLBACK = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)


class Registry:
    """The process's ggml registry, loaded once. Thread-safe; reads are cheap (memory queries)."""

    def __init__(self, directory: Path | None = None):
        self.directory = directory or lib_dir()
        self._lock = threading.Lock()
        self._lib = None
        self.error = ""                    # why nothing could be loaded (no llama_cpp, no libggml)
        self.skipped: dict[str, str] = {}  # backend module -> why ggml did not load it
        self.log_lines: list[str] = []
        self._cpu_module: Path | None | bool = False  # False: not looked for yet

    # ---- loading
    def load(self) -> bool:
        """Load ggml and every backend module that works here; True when ggml is usable."""
        with self._lock:
            if self._lib is not None or self.error:
                return self._lib is not None
            # ggml's crash handler runs gdb when it finds one and prints its output to stdout, into
            # the CLI's JSON lines; a crash must say what it says on stderr only. Set before ggml
            # first loads (it reads it when it crashes).
            os.environ.setdefault("GGML_NO_BACKTRACE", "1")
            try:
                self._lib = self._open()
            except (OSError, AttributeError) as exc:  # no library, or one without the registry API
                self.error = f"llama.cpp's ggml library could not be loaded: {exc}"
                log.warning(self.error)
                return False
            self._load_all()
            return True

    def _open(self):
        if self.directory is None:
            raise OSError("llama_cpp is not installed")
        if sys.platform == "win32":
            os.add_dll_directory(str(self.directory))
        lib = ctypes.CDLL(str(_ggml_file(self.directory)))
        vp, sz = ctypes.c_void_p, ctypes.c_size_t
        for name, res, args in [
            ("ggml_backend_load_all_from_path", None, [ctypes.c_char_p]),
            ("ggml_backend_load", vp, [ctypes.c_char_p]),
            ("ggml_backend_reg_count", sz, []), ("ggml_backend_reg_get", vp, [sz]),
            ("ggml_backend_reg_name", ctypes.c_char_p, [vp]),
            ("ggml_backend_dev_count", sz, []), ("ggml_backend_dev_get", vp, [sz]),
            ("ggml_backend_dev_name", ctypes.c_char_p, [vp]),
            ("ggml_backend_dev_description", ctypes.c_char_p, [vp]),
            ("ggml_backend_dev_type", ctypes.c_int, [vp]),
            ("ggml_backend_dev_memory", None, [vp, ctypes.POINTER(sz), ctypes.POINTER(sz)]),
            ("ggml_backend_dev_backend_reg", vp, [vp]),
            ("ggml_backend_dev_by_name", vp, [ctypes.c_char_p]),
        ]:
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = res, args
        return lib

    def _load_all(self) -> None:
        # ggml logs each module it tries; keep those lines (the reasons a GPU backend was skipped)
        # instead of printing them, then hand logging back to whoever had it.
        lib, lines = self._lib, self.log_lines
        get = getattr(lib, "ggml_log_get", None)
        old_cb, old_data = _LOG_CALLBACK(), ctypes.c_void_p()
        if get is not None:
            get.argtypes = [ctypes.POINTER(_LOG_CALLBACK), ctypes.POINTER(ctypes.c_void_p)]
            get(ctypes.byref(old_cb), ctypes.byref(old_data))

        @_LOG_CALLBACK
        def keep(level, text, _data):
            lines.append((text or b"").decode("utf-8", "replace"))

        lib.ggml_log_set.argtypes = [_LOG_CALLBACK, ctypes.c_void_p]
        lib.ggml_log_set(keep, None)
        try:
            # Loaded already (llama_cpp loads them at import when it comes first, our patched
            # wheel; a static build registers them at start): loading twice would list every
            # device twice.
            if not lib.ggml_backend_reg_count():
                wanted = os.environ.get(CPU_VARIANT_ENV, "").strip()
                if not (wanted and self._load_variant(wanted)):
                    lib.ggml_backend_load_all_from_path(str(self.directory).encode())
        finally:
            lib.ggml_log_set(old_cb if get is not None and old_cb else _LOG_CALLBACK(), old_data)
        self.skipped = _skipped(self.directory, "".join(lines), self.backends_unlocked())
        log.info("ggml backends: %s; skipped: %s", self.backends_unlocked(), self.skipped or "none")

    def _load_variant(self, variant: str) -> bool:
        """Every GPU module that loads, then the CPU variant asked for (ggml's own order); False,
        with nothing loaded, when that variant is missing or the processor cannot run it."""
        lib, directory = self._lib, self.directory
        path = directory / _lib_name(f"ggml-cpu-{variant}")
        present = cpu_variants(directory)
        if variant not in present:
            log.warning("%s=%s: no such CPU variant here (present: %s); loading the best one",
                        CPU_VARIANT_ENV, variant, ", ".join(present) or "none")
            return False
        try:
            score = _variant_score(path)
        except (OSError, AttributeError):
            score = 0
        if score <= 0:
            log.warning("%s=%s: this processor cannot run that CPU variant; loading the best one",
                        CPU_VARIANT_ENV, variant)
            return False
        for module in sorted(directory.glob(_lib_name("ggml-*"))):
            backend = module.name.split("ggml-", 1)[1].split(".")[0]
            if backend != "base" and not backend.startswith("cpu"):
                lib.ggml_backend_load(str(module).encode())  # one without a driver stack is skipped
        if not lib.ggml_backend_load(str(path).encode()):
            # The GPU modules are in already: load_all would add them twice. ggml's own pick instead.
            log.warning("%s=%s: ggml could not load %s; loading the best CPU variant", CPU_VARIANT_ENV,
                        variant, path.name)
            best = (cpu_variants(directory, runnable=True) or [variant])[0]
            path = directory / _lib_name(f"ggml-cpu-{best}")
            lib.ggml_backend_load(str(path).encode())
        self._cpu_module = path
        log.info("ggml CPU variant %s, as %s asks", variant, CPU_VARIANT_ENV)
        return True

    # ---- reading
    def backends(self) -> list[str]:
        """Backends compiled in and loaded, lower case: ["cpu", "vulkan"]."""
        if not self.load():
            return []
        return self.backends_unlocked()

    def backends_unlocked(self) -> list[str]:
        lib = self._lib
        return [lib.ggml_backend_reg_name(lib.ggml_backend_reg_get(i)).decode().lower()
                for i in range(lib.ggml_backend_reg_count())]

    def devices(self, memory: bool = True, memory_except: frozenset[str] = frozenset()) -> list[GgmlDevice]:
        """Every device ggml offers, with free/total memory (0/0 when `memory` is False, and for
        backends in `memory_except`: asking CUDA creates a context of a few hundred MiB on the card,
        so the gauges ask NVML instead)."""
        if not self.load():
            return []
        lib, out = self._lib, []
        for i in range(lib.ggml_backend_dev_count()):
            dev = lib.ggml_backend_dev_get(i)
            free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
            backend = lib.ggml_backend_reg_name(lib.ggml_backend_dev_backend_reg(dev)).decode().lower()
            if memory and backend not in memory_except:
                lib.ggml_backend_dev_memory(dev, ctypes.byref(free), ctypes.byref(total))
            kind = lib.ggml_backend_dev_type(dev)
            out.append(GgmlDevice(
                name=lib.ggml_backend_dev_name(dev).decode(),
                description=(lib.ggml_backend_dev_description(dev) or b"").decode("utf-8", "replace"),
                backend=backend,
                type=TYPES[kind] if 0 <= kind < len(TYPES) else str(kind),
                free_bytes=int(free.value), total_bytes=int(total.value)))
        return out

    def cpu_module(self) -> Path | None:
        """The CPU variant module ggml picked for this processor (the one with the highest score of
        those present; ggml scores them the same way), or None in a build without variants."""
        if not self.load() or self.directory is None:
            return None
        if self._cpu_module is not False:
            return self._cpu_module
        best, best_score = None, 0
        for path in self.directory.glob(_lib_name("ggml-cpu-*")):
            try:
                score = _variant_score(path)
            except (OSError, AttributeError):
                continue
            if score > best_score:
                best, best_score = path, score
        self._cpu_module = best
        return best

    def cpu_variant(self) -> str | None:
        """The loaded CPU variant's name ("zen4", "haswell", ...), or None without variants."""
        module = self.cpu_module()
        return None if module is None else _variant_name(module)

    def device_handle(self, name: str) -> int | None:
        """ggml's device pointer for a device name (for llama_model_params.devices), or None."""
        if not self.load():
            return None
        return self._lib.ggml_backend_dev_by_name(name.encode()) or None


def _variant_name(module: Path) -> str:
    return module.name.split("ggml-cpu-", 1)[1].split(".")[0]


def _variant_score(path: Path) -> int:
    """ggml's score for a CPU variant module on this processor (0: it cannot run here)."""
    score = ctypes.CDLL(str(path)).ggml_backend_score
    score.restype = ctypes.c_int
    return int(score())


def cpu_variants(directory: Path | None = None, runnable: bool = False) -> list[str]:
    """The CPU variant modules present ("x64", "haswell", "zen4", ...), best first when `runnable`
    (then only those this processor can run, by ggml's own score)."""
    directory = directory or lib_dir()
    if directory is None:
        return []
    paths = sorted(directory.glob(_lib_name("ggml-cpu-*")))
    if not runnable:
        return [_variant_name(p) for p in paths]
    scored = []
    for path in paths:
        try:
            score = _variant_score(path)
        except (OSError, AttributeError):
            continue
        if score > 0:
            scored.append((score, _variant_name(path)))
    return [name for _, name in sorted(scored, reverse=True)]


def _skipped(directory: Path, log_text: str, loaded: list[str]) -> dict[str, str]:
    """GPU backend modules present in `directory` that ggml did not load, with the reason it gave."""
    out = {}
    for path in sorted(directory.glob(_lib_name("ggml-*"))):
        backend = path.name.split("ggml-", 1)[1].split(".")[0]
        if backend in ("base",) or backend.startswith("cpu") or backend in loaded:
            continue
        reason = next((line.strip() for line in log_text.splitlines() if path.name in line
                       and ("fail" in line.lower() or "error" in line.lower())), "")
        out[backend] = reason or "its driver stack did not load (no device or no loader)"
    return out


def choose_gpu(devices: list[GgmlDevice], want: str = "auto") -> GgmlDevice | None:
    """The device a GPU load goes to.

    Args:
        want: "auto" (a discrete GPU before an integrated one, then the most free memory; never a
            software rasteriser), "none" (CPU only), or a device name ("Vulkan0").
    """
    if want == "none":
        return None
    if want != "auto":
        return next((d for d in devices if d.name == want), None)
    real = [d for d in devices if d.is_gpu and not d.software]
    # One card seen by two backends (a CUDA build also finds it through Vulkan): its native backend.
    native = {d.description for d in real if d.backend in NATIVE}
    real = [d for d in real if d.backend in NATIVE or d.description not in native]
    return max(real, key=lambda d: (d.type == "gpu", d.free_bytes), default=None)


_registry: Registry | None = None
_registry_lock = threading.Lock()


def registry() -> Registry:
    """The process's registry (loaded on first use)."""
    global _registry
    if _registry is None:
        with _registry_lock:
            if _registry is None:
                _registry = Registry()
    return _registry
