"""Build llama.cpp's CUDA backend module (libggml-cuda.so) on the GPU box, in the background.

Only the module is built: with GGML_BACKEND_DL, libggml-cuda.so is loaded at run time next to the
kit's own libllama / libggml / libggml-base (the same patched sources, the same ggml ABI), so the
build compiles ggml-base and ggml-cuda alone. It runs at nice 19 in its own process group, so
gpu_check.py can pause it while the CPU is being timed and stop it at a deadline. Standard library
only: it runs before anything is unpacked.
"""

from __future__ import annotations

import glob
import os
import re
import shlex
import shutil
import signal
import site
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

CUDA_ROOTS = ["/usr/local/cuda", "/opt/cuda", "/usr"]
DRIVER_DIRS = ["/usr/local/nvidia/lib64", "/usr/local/nvidia/lib", "/usr/lib/x86_64-linux-gnu", "/usr/lib64",
               "/usr/local/cuda/lib64/stubs", "/usr/local/cuda/targets/x86_64-linux/lib/stubs"]


def _elf(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False


def _which(name: str) -> str | None:
    # the interpreter's own bin/ first: the box's cmake and ninja are pip packages of its venv
    return shutil.which(name, path=os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")]))


def _site_dirs() -> list[str]:
    dirs = [sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
    try:
        dirs += site.getsitepackages()
    except AttributeError:
        pass
    return list(dict.fromkeys(d for d in dirs if os.path.isdir(d)))


def _ldconfig(name: str) -> str | None:
    try:
        text = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    for line in text.splitlines():
        if line.strip().startswith(name + " ") and "x86-64" in line:
            return line.rsplit("=>", 1)[-1].strip()
    return None


def find_toolchain() -> dict:
    """What the build needs: nvcc, cmake, ninja, cuBLAS (header + library), the CUDA runtime's
    folder, and the driver library (for ggml's virtual-memory pool). `missing` names what is not there."""
    found: dict = {"missing": []}
    nvcc = next((p for p in [os.environ.get("CUDACXX", ""), *(f"{r}/bin/nvcc" for r in CUDA_ROOTS), _which("nvcc") or ""]
                 if p and _elf(os.path.realpath(p))), None)
    found["nvcc"] = os.path.realpath(nvcc) if nvcc else None
    if nvcc:
        root = Path(found["nvcc"]).parent.parent
        found["cuda_root"] = str(root)
        found["cudart_dir"] = next((str(p.parent) for p in sorted(root.glob("**/libcudart.so*"))), None)
        try:
            found["nvcc_version"] = subprocess.run([found["nvcc"], "--version"], capture_output=True, text=True,
                                                   timeout=30).stdout.strip().splitlines()[-1]
        except (OSError, subprocess.SubprocessError, IndexError):
            pass
    found["cmake"], found["ninja"] = _which("cmake"), _which("ninja")
    header = lib = lt = None
    roots = [os.environ.get("CUBLAS_ROOT", ""), found.get("cuda_root", "")] + CUDA_ROOTS
    patterns = [f"{r}/include/cublas_v2.h" for r in roots if r]
    patterns += [f"{r}/targets/x86_64-linux/include/cublas_v2.h" for r in roots if r]
    patterns += [f"{d}/nvidia/*/include/cublas_v2.h" for d in _site_dirs()]
    patterns += ["/opt/*/.venv/lib/python3*/site-packages/nvidia/*/include/cublas_v2.h",
                 "/usr/local/lib/python3*/dist-packages/nvidia/*/include/cublas_v2.h"]
    for pattern in patterns:
        for h in sorted(glob.glob(pattern)):
            base = Path(h).parent.parent
            libs = [d for d in (base / "lib64", base / "lib", base / "targets/x86_64-linux/lib",
                                Path("/usr/lib/x86_64-linux-gnu")) if d.is_dir()]
            lib = next((str(p) for d in libs for p in sorted(d.glob("libcublas.so*"))), None)
            lt = next((str(p) for d in libs for p in sorted(d.glob("libcublasLt.so*"))), None)
            if lib:
                header = h
                break
        if header:
            break
    found["cublas_include"] = str(Path(header).parent) if header else None
    found["cublas_lib"], found["cublaslt_lib"] = lib, lt
    found["cuda_driver"] = _ldconfig("libcuda.so") or _ldconfig("libcuda.so.1") or next(
        (p for d in DRIVER_DIRS for p in sorted(glob.glob(f"{d}/libcuda.so*"))), None)
    for key, what in [("nvcc", "nvcc (the CUDA compiler)"), ("cmake", "cmake"), ("ninja", "ninja"),
                      ("cublas_include", "cuBLAS (cublas_v2.h and libcublas.so)")]:
        if not found.get(key):
            found["missing"].append(what)
    return found


class CudaBuild:
    """One background build of libggml-cuda.so from the kit's ggml sources.

    Args:
        source: the unpacked `ggml/` folder.
        build: build folder (kept: a second run on a still-warm machine continues where this stopped).
        arch: CMAKE_CUDA_ARCHITECTURES ("90-real": the H200).
        flash_attn: compile the flash-attention kernels (most of the build time; the planner's q8_0/q4_0
            KV cache needs them on the device).
    """

    def __init__(self, source: Path, build: Path, tools: dict, arch: str = "90-real", jobs: int | None = None,
                 flash_attn: bool = True):
        self.source, self.build, self.tools = source, build, tools
        self.arch, self.jobs, self.flash_attn = arch, jobs or os.cpu_count() or 4, flash_attn
        self.log = build / "build.log"
        self.rc_file = build / "build.rc"
        self.proc: subprocess.Popen | None = None
        self.started = self.finished = None
        self.paused_s, self._paused_at = 0.0, None

    def cmake_args(self) -> list[str]:
        t = self.tools
        inc = t["cublas_include"]
        args = ["-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release", "-DBUILD_SHARED_LIBS=ON", "-DGGML_BACKEND_DL=ON",
                "-DGGML_CPU=OFF", "-DGGML_CUDA=ON", "-DGGML_NATIVE=OFF", "-DGGML_CUDA_NCCL=OFF",
                "-DGGML_BUILD_TESTS=OFF", "-DGGML_BUILD_EXAMPLES=OFF",
                f"-DGGML_CUDA_FA={'ON' if self.flash_attn else 'OFF'}",
                f"-DCMAKE_CUDA_ARCHITECTURES={self.arch}", f"-DCMAKE_CUDA_COMPILER={t['nvcc']}",
                f"-DCMAKE_MAKE_PROGRAM={t['ninja']}",
                # cuBLAS may live outside the toolkit (a pip wheel): name it to FindCUDAToolkit directly
                f"-DCUDA_cublas_LIBRARY={t['cublas_lib']}", f"-DCMAKE_CUDA_FLAGS=-I{inc}", f"-DCMAKE_CXX_FLAGS=-I{inc}"]
        if t.get("cublaslt_lib"):
            args.append(f"-DCUDA_cublasLt_LIBRARY={t['cublaslt_lib']}")
        if t.get("cuda_driver"):
            args.append(f"-DCUDA_cuda_driver_LIBRARY={t['cuda_driver']}")
        else:
            args.append("-DGGML_CUDA_NO_VMM=ON")  # no libcuda to link: the pool without virtual memory
        return args

    def start(self) -> None:
        self.build.mkdir(parents=True, exist_ok=True)
        self.rc_file.unlink(missing_ok=True)
        # ggml built on its own configures its pkg-config file, which llama-cpp-python's sdist leaves out
        (self.source / "ggml.pc.in").touch()
        configure = [self.tools["cmake"], "-S", str(self.source), "-B", str(self.build), *self.cmake_args()]
        make = [self.tools["cmake"], "--build", str(self.build), "--target", "ggml-cuda", "-j", str(self.jobs)]
        script = (f"{shlex.join(configure)} && {shlex.join(make)}; echo $? > {shlex.quote(str(self.rc_file))}")
        self.log.write_text(f"$ {script}\n", encoding="utf-8")
        with open(self.log, "a", encoding="utf-8") as log:
            self.proc = subprocess.Popen(["nice", "-n", "19", "sh", "-c", script], stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        self.started = time.monotonic()

    def _signal(self, sig: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                pass

    def pause(self) -> None:
        if self._paused_at is None and self.running():
            self._signal(signal.SIGSTOP)
            self._paused_at = time.monotonic()

    def resume(self) -> None:
        if self._paused_at is not None:
            self._signal(signal.SIGCONT)
            self.paused_s += time.monotonic() - self._paused_at
            self._paused_at = None

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def progress(self) -> tuple[int, int] | None:
        """(steps done, steps in all) from ninja's last [k/n] line."""
        try:
            text = self.log.read_text(encoding="utf-8", errors="replace")[-20000:]
        except OSError:
            return None
        steps = re.findall(r"^\[(\d+)/(\d+)\]", text, re.MULTILINE)
        return (int(steps[-1][0]), int(steps[-1][1])) if steps else None

    def module(self) -> Path | None:
        found = sorted(self.build.glob("**/libggml-cuda.so"))
        return found[0] if found else None

    def wait(self, deadline: float) -> dict:
        """Wait until the build ends or time.time() passes `deadline` (then stop it). Returns the outcome."""
        self.resume()
        while self.running() and time.time() < deadline:
            time.sleep(1.0)
        timed_out = self.running()
        if timed_out:
            self._signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
            try:  # the compilers too, not only the shell that started them
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()
        seconds = round(time.monotonic() - self.started, 1) if self.started else None
        rc = self.rc_file.read_text().strip() if self.rc_file.exists() else None
        out = {"seconds": seconds, "paused_s": round(self.paused_s, 1), "progress": self.progress(),
               "jobs": self.jobs, "arch": self.arch, "flash_attn": self.flash_attn, "rc": rc}
        module = self.module()
        if rc == "0" and module is not None:
            out |= {"status": "built", "module": str(module), "module_bytes": module.stat().st_size}
        elif timed_out:
            out |= {"status": "timeout", "reason": f"not built by its deadline ({out['progress']} steps done)"}
        else:
            out |= {"status": "failed", "reason": f"the build failed (exit {rc})", "log_tail": self.tail()}
        return out

    def tail(self, n: int = 40) -> list[str]:
        try:
            return self.log.read_text(encoding="utf-8", errors="replace").splitlines()[-n:]
        except OSError:
            return []
