#!/usr/bin/env python3
"""Build the llama-cpp-python wheel the app ships: llama.cpp with backends loaded at run time.

    python packaging/llama/build_wheel.py                    # Linux/Windows: CPU variants + Vulkan
    python packaging/llama/build_wheel.py --backend cuda     # + CUDA (NVIDIA, peak speed; needs nvcc)
    python packaging/llama/build_wheel.py --backend metal    # macOS: Metal + the Apple CPU variants
    python packaging/llama/build_wheel.py --backend cpu      # CPU variants only (no GPU SDK needed)

The wheel lands in build/wheels/<backend>/ with BUILD.json (flags, seconds, megabytes per library).
`GGML_BACKEND_DL` makes every backend a module of its own (libggml-cpu-haswell.so,
libggml-vulkan.so, …) that ggml loads when the engine starts: a machine without a Vulkan loader
or GPU simply doesn't load that module, and the same files run everywhere. The sdist is patched
first (patches.py); why we build instead of taking PyPI's wheel: PyPI has no GPU build of it.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import patches  # noqa: E402  (this folder is not a package: the script runs on a bare Python)

ROOT = Path(__file__).resolve().parents[2]


def pinned_version() -> str:
    """llama-cpp-python's version as pinned in pyproject.toml (one place to bump it)."""
    import re
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    match = re.search(r'"llama-cpp-python==([0-9][^"]*)"', text)
    if not match:
        raise SystemExit("pyproject.toml does not pin llama-cpp-python==<version>")
    return match.group(1)


def cmake_args(backend: str) -> list[str]:
    # LLAVA_BUILD: libmtmd, llama.cpp's image (and audio) encoder library, for vision models (issue 41).
    args = ["-DGGML_NATIVE=OFF", "-DGGML_BACKEND_DL=ON", "-DGGML_CPU_ALL_VARIANTS=ON", "-DLLAVA_BUILD=ON"]
    if backend == "vulkan":
        args.append("-DGGML_VULKAN=ON")
    elif backend == "cuda":
        # sm_90 is the H200 of the GPU check kit; laptops: 75 (Turing) 86 (Ampere) 89 (Ada).
        archs = os.environ.get("CUDA_ARCHS", "75-virtual;86-real;89-real;90-real")
        args += ["-DGGML_CUDA=ON", f"-DCMAKE_CUDA_ARCHITECTURES={archs}"]
    elif backend == "metal":
        args += ["-DGGML_METAL=ON", "-DGGML_METAL_EMBED_LIBRARY=ON"]
    return args


def missing_tools(backend: str) -> list[str]:
    """What the build needs and this machine lacks, in words a person can act on."""
    missing = []
    if backend == "vulkan":
        if not shutil.which("glslc"):
            missing.append("glslc (Debian: apt-get install glslc; or the LunarG Vulkan SDK)")
        headers = [Path("/usr/include/vulkan/vulkan.hpp")]
        if os.environ.get("VULKAN_SDK"):
            headers.append(Path(os.environ["VULKAN_SDK"]) / "include" / "vulkan" / "vulkan.hpp")
        if platform.system() == "Linux" and not any(h.exists() for h in headers):
            missing.append("Vulkan headers (Debian: apt-get install libvulkan-dev spirv-headers)")
    if backend == "cuda" and not shutil.which("nvcc"):
        missing.append("nvcc (the CUDA toolkit)")
    if not shutil.which("cmake"):
        missing.append("cmake")
    return missing


def fetch_sdist(version: str, cache: Path) -> Path:
    cache.mkdir(parents=True, exist_ok=True)
    sdist = cache / f"llama_cpp_python-{version}.tar.gz"
    if not sdist.exists():
        subprocess.run([sys.executable, "-m", "pip", "download", "--disable-pip-version-check",
                        "--no-deps", "--no-binary", ":all:", "-d", str(cache),
                        f"llama-cpp-python=={version}"], check=True)
    return sdist


def unpack(sdist: Path, into: Path) -> Path:
    if into.exists():
        shutil.rmtree(into)
    into.mkdir(parents=True)
    with tarfile.open(sdist) as tar:
        tar.extractall(into, filter="data")
    (source,) = [p for p in into.iterdir() if p.is_dir()]
    return source


def library_sizes(wheel: Path) -> dict[str, float]:
    with zipfile.ZipFile(wheel) as zf:
        return {Path(i.filename).name: round(i.file_size / 2**20, 1) for i in zf.infolist()
                if "/lib/" in i.filename and not i.filename.endswith("/")}


def main(argv: list[str] | None = None) -> int:
    default = "metal" if platform.system() == "Darwin" else "vulkan"
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", choices=["cpu", "vulkan", "cuda", "metal"], default=default)
    ap.add_argument("--out", type=Path, help="wheel folder (default build/wheels/<backend>)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    args = ap.parse_args(argv)

    out = args.out or ROOT / "build" / "wheels" / args.backend
    missing = missing_tools(args.backend)
    if missing:
        print(f"cannot build the {args.backend} backend; missing: " + "; ".join(missing)
              + "\n(Linux: `sudo packaging/linux/sysdeps.sh` installs them; "
              "or `make LLAMA_BACKEND=cpu` for a CPU-only engine)", file=sys.stderr)
        return 2

    version = pinned_version()
    work = ROOT / "build" / "llama"
    source = unpack(fetch_sdist(version, work), work / f"src-{args.backend}")
    applied = patches.apply_all(source)
    flags = cmake_args(args.backend)
    env = dict(os.environ, CMAKE_ARGS=" ".join(flags), CMAKE_BUILD_PARALLEL_LEVEL=str(args.jobs))
    print(f"building llama-cpp-python {version} [{args.backend}] with {' '.join(flags)}", flush=True)

    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    t0 = time.monotonic()
    # --no-cache-dir: pip's wheel cache is keyed on the sdist, not on CMAKE_ARGS, and would hand back
    # a wheel built with other flags.
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--disable-pip-version-check",
                    "--no-cache-dir", "--no-deps", "-w", str(out), str(source)], check=True, env=env)
    seconds = time.monotonic() - t0
    (wheel,) = out.glob("llama_cpp_python-*.whl")
    report = {"version": version, "backend": args.backend, "cmake_args": flags,
              "patches": applied, "build_seconds": round(seconds), "jobs": args.jobs,
              "wheel": wheel.name, "wheel_mb": round(wheel.stat().st_size / 2**20, 1),
              "libraries_mb": library_sizes(wheel)}
    (out / "BUILD.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
