#!/usr/bin/env python3
"""The GPU check kit: CPU, Vulkan and (if it builds in time) CUDA on one machine, in one go.

    python3 packaging/gpu_kit/gpu_check.py [--budget 540] [--quick] [--local] [--no-cuda]

Needs the payload pack.py made (build/gpu_kit/) and the repository; standard library only until the
workers start. In order, within `--budget` seconds: unpack; start building libggml-cuda.so for sm_90
in the background (cuda_build.py); rebuild the two demo-shaped models (synth.py); time the CPU with
the build paused; run the Vulkan measurements while the build goes on at nice 19; wait for the build
until its deadline and run the same measurements on CUDA. Each backend runs in a worker process of
its own (worker.py). The JSON report is written after every step to $OUT/gpu_report.json (or --out),
with the markdown table (report_table.py) beside it, even when a part fails.

--local runs the workers on this interpreter's packages instead of the carried wheels (a machine
whose Python is not the box's, e.g. testing on lavapipe with GGML_VK_VISIBLE_DEVICES=0).
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

KIT = Path(__file__).resolve().parent
ROOT = KIT.parents[1]
sys.path.insert(0, str(KIT))

import cuda_build  # noqa: E402
import report_table  # noqa: E402

ICD_DIRS = ["/etc/vulkan/icd.d", "/usr/share/vulkan/icd.d", "/usr/local/share/vulkan/icd.d",
            "/usr/local/nvidia/share/vulkan/icd.d", "/usr/local/nvidia/icd.d"]
DRIVER_DIRS = ["/usr/local/nvidia/lib64", "/usr/local/nvidia/lib", "/usr/lib/x86_64-linux-gnu"]
DEFAULT_ICD_DIRS = ICD_DIRS[:3]  # where the Vulkan loader looks by itself
# A worker at its deadline leaves out the last tasks: passes (issue 40's ceiling) comes early.
GPU_TASKS = ["speed", "passes", "kv", "vram"]
OUT_FILE_LIMIT = 4 << 20  # a log copied to $OUT keeps its last 4 MiB (the runner returns 16 MiB a file)


class Check:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.t0 = time.time()
        self.end = self.t0 + args.budget
        self.payload = args.payload
        self.work = args.work
        self.out = args.out
        for d in (self.work, self.out, self.work / "logs"):
            d.mkdir(parents=True, exist_ok=True)
        self.logfile = open(self.work / "logs" / "gpu_check.log", "a", encoding="utf-8")
        self.report: dict = {"kit": 1, "started": time.strftime("%Y-%m-%d %H:%M:%S"), "budget_s": args.budget,
                             "args": {k: str(v) for k, v in vars(args).items()}, "machine": machine(),
                             "parts": {}, "backends": {}, "notes": []}
        self.ld_extra: list[str] = []
        self.vk_env: dict[str, str] = {}
        self.cuda: cuda_build.CudaBuild | None = None
        self.tools: dict = {}

    # ---- bookkeeping
    def log(self, msg: str) -> None:
        line = f"[{time.time() - self.t0:6.1f}s] {msg}"
        print(line, file=sys.stderr, flush=True)
        self.logfile.write(line + "\n")
        self.logfile.flush()

    def left(self) -> float:
        return self.end - time.time()

    def part(self, name: str, **facts) -> None:
        self.report["parts"].setdefault(name, {}).update(facts)
        self.save()

    def save(self) -> None:
        self.report["elapsed_s"] = round(time.time() - self.t0, 1)
        tmp = self.out / "gpu_report.json.tmp"
        tmp.write_text(json.dumps(self.report, indent=1), encoding="utf-8")
        os.replace(tmp, self.out / "gpu_report.json")
        try:
            (self.out / "gpu_table.md").write_text(report_table.render(self.report), encoding="utf-8")
        except Exception as exc:  # noqa: BLE001 - the JSON is the record; the table is a convenience
            self.report["notes"].append(f"table: {exc.__class__.__name__}: {exc}")

    # ---- unpacking
    def unpack(self) -> None:
        t = time.time()
        self.manifest = json.loads((self.payload / "MANIFEST.json").read_text(encoding="utf-8"))
        base = self.work / "llama"
        shutil.rmtree(base, ignore_errors=True)
        shutil.rmtree(self.work / "run", ignore_errors=True)  # no reference logits from an earlier run
        untar(self.payload / "llama_cpp.tar.xz", base)
        untar(self.payload / "syslibs.tar.xz", self.work / "syslibs-carried")
        for backend, roles in (("cpu", {"core", "cpu"}), ("vulkan", {"core", "cpu", "vulkan"})):
            self.package(backend, [n for n, lib in self.manifest["libs"].items() if lib["role"] in roles])
        site = self.work / "site"
        use_wheels = not self.args.local and self.manifest.get("wheels")
        if use_wheels and self.manifest.get("python") != "%d.%d" % sys.version_info[:2]:
            self.report["notes"].append(f"the wheels are for Python {self.manifest.get('python')}, this is "
                                        f"{platform.python_version()}: using this Python's own packages")
            use_wheels = False
        if use_wheels:
            shutil.rmtree(site, ignore_errors=True)
            for whl in self.manifest["wheels"]:
                with zipfile.ZipFile(self.payload / "wheels" / whl) as zf:
                    zf.extractall(site)
        self.site = site if use_wheels else None
        self.syslibs()
        self.part("unpack", seconds=round(time.time() - t, 1), wheels=bool(use_wheels),
                  payload_bytes=self.manifest.get("payload_bytes"), build=self.manifest.get("build"))

    def package(self, backend: str, libs: list[str], extra: list[Path] = ()) -> Path:
        """work/pkg-<backend>/llama_cpp: the Python files and exactly these libraries (hard links)."""
        src = self.work / "llama" / "llama_cpp"
        pkg = self.work / f"pkg-{backend}" / "llama_cpp"
        shutil.rmtree(pkg.parent, ignore_errors=True)
        (pkg / "lib").mkdir(parents=True)
        for f in src.iterdir():
            if f.is_file():
                link(f, pkg / f.name)
        for name in libs:
            link(src / "lib" / name, pkg / "lib" / name)
            for alias in self.manifest["libs"][name]["aliases"]:
                os.symlink(name, pkg / "lib" / alias)
        for f in extra:
            link(f, pkg / "lib" / f.name)
        return pkg.parent

    def syslibs(self) -> None:
        """Carried system libraries go on the workers' library path only where this machine lacks them."""
        chosen, folder = {}, self.work / "syslibs"
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir()
        for name in self.manifest.get("syslibs", {}):
            system = cuda_build._ldconfig(name)
            need = system is None or (name == "libstdc++.so.6" and b"GLIBCXX_3.4.30" not in Path(system).read_bytes())
            chosen[name] = "carried" if need else system
            if need:
                link(self.work / "syslibs-carried" / name, folder / name)
        self.ld_extra = [str(folder)] + [d for d in DRIVER_DIRS if os.path.isdir(d)]
        self.part("syslibs", libraries=chosen)

    def vulkan_setup(self) -> None:
        """Point the Vulkan loader at the NVIDIA driver when it sits outside the loader's own folders
        (the box: /usr/local/nvidia), with the driver library's absolute path."""
        info: dict = {"env": {k: os.environ[k] for k in ("VK_DRIVER_FILES", "VK_ICD_FILENAMES",
                                                          "GGML_VK_VISIBLE_DEVICES") if k in os.environ}}
        icds = [str(p) for d in ICD_DIRS for p in sorted(Path(d).glob("*.json"))] if not info["env"] else []
        info["icd_files"] = icds
        nvidia = [p for p in icds if "nvidia" in Path(p).name.lower()]
        if nvidia and not any(os.path.dirname(p) in DEFAULT_ICD_DIRS for p in nvidia):
            try:
                data = json.loads(Path(nvidia[0]).read_text())
                lib = data["ICD"]["library_path"]
                if "/" not in lib:
                    lib = cuda_build._ldconfig(lib) or next(
                        (f"{d}/{lib}" for d in DRIVER_DIRS if os.path.exists(f"{d}/{lib}")), lib)
                data["ICD"]["library_path"] = lib
                mine = self.work / "nvidia_icd.json"
                mine.write_text(json.dumps(data), encoding="utf-8")
                self.vk_env = {"VK_DRIVER_FILES": str(mine), "VK_ICD_FILENAMES": str(mine)}
                info |= {"icd_written": data, "from": nvidia[0]}
                ldd = subprocess.run(["ldd", lib], capture_output=True, text=True, timeout=20).stdout
                info["icd_missing_libs"] = [line.strip() for line in ldd.splitlines() if "not found" in line]
            except (OSError, KeyError, ValueError, subprocess.SubprocessError) as exc:
                info["icd_error"] = f"{exc.__class__.__name__}: {exc}"
        self.part("vulkan_setup", **info)

    # ---- models
    def models(self) -> list[dict]:
        t, out = time.time(), []
        for mid, entry in self.manifest["models"].items():
            if self.args.models and mid not in self.args.models:
                continue
            dest = self.work / "models" / entry["file"]
            if not (dest.exists() and dest.stat().st_size == entry["file_size"]):
                cmd = [*self.python(), str(KIT / "synth.py"), "make", str(self.payload / "models" / entry["skeleton"]),
                       str(dest), str(self.payload / "MANIFEST.json")]
                subprocess.run(cmd, env=self.env("cpu"), check=True, capture_output=True, text=True, timeout=300)
            out.append({"id": mid, "path": str(dest), "file_size": entry["file_size"], "arch": entry["arch"],
                        "tensor_types": entry["tensor_types"]})
        self.part("models", seconds=round(time.time() - t, 1), models=out,
                  weights="random, valid blocks of each tensor's own type (synth.py); shapes and types as the original")
        return out

    def real_models(self, demo: list[dict]) -> list[dict]:
        """Catalog-shaped models (bench/real_size_model.py: the catalog's layers, widths, heads and
        vocabulary in llama-quantize's Q4_K_M mix, random blocks), written here from the catalog's
        facts: 4.7-5 GB files that could never travel. The tokenizer is the rebuilt demo-small's."""
        donor = next((m["path"] for m in demo if m["id"] == "demo-small"), None)
        if not self.args.real or donor is None:
            return []
        t, out = time.time(), []
        for mid in self.args.real:
            cmd = [*self.python(), str(ROOT / "bench" / "real_size_model.py"), mid, "--dest",
                   str(self.work / "models"), "--donor", donor]
            try:
                proc = subprocess.run(cmd, env=self.env("cpu"), capture_output=True, text=True, timeout=240)
            except subprocess.TimeoutExpired:
                self.report["notes"].append(f"{mid}: the synthetic model took over 240 s; left out")
                continue
            if proc.returncode != 0:
                self.report["notes"].append(f"{mid}: not synthesised: {proc.stderr.strip()[-500:]}")
                continue
            path = Path(proc.stdout.strip().splitlines()[-1])
            out.append({"id": mid, "path": str(path), "file_size": path.stat().st_size, "real_shape": True})
        self.part("real_models", seconds=round(time.time() - t, 1), models=out,
                  weights="catalog shapes, llama-quantize's Q4_K_M mix, random valid blocks (bench/real_size_model.py)")
        return out

    # ---- workers
    def python(self) -> list[str]:
        # `python3 -S gpu_check.py` (no site-packages) passes -S on: the workers then see the carried
        # wheels alone, which shows the kit brings everything it imports.
        return [sys.executable] + (["-S"] if sys.flags.no_site else [])

    def env(self, backend: str) -> dict:
        env = dict(os.environ)
        paths = [str(self.work / f"pkg-{backend}")] + ([str(self.site)] if self.site else []) + [str(ROOT)]
        env["PYTHONPATH"] = os.pathsep.join(paths)
        ld = self.ld_extra + (self.cuda_lib_dirs() if backend == "cuda" else [])
        env["LD_LIBRARY_PATH"] = os.pathsep.join(ld + [p for p in env.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p])
        env["ASSISTANT_HOME"] = str(self.work / "home")
        env["PYTHONUNBUFFERED"] = "1"
        if backend == "vulkan":
            env.update(self.vk_env)
        return env

    def cuda_lib_dirs(self) -> list[str]:
        t = self.tools
        dirs = [os.path.dirname(t["cublas_lib"]) if t.get("cublas_lib") else None, t.get("cudart_dir")]
        return [d for d in dirs if d]

    def worker(self, backend: str, tasks: list[str], models: list[dict], deadline: float,
               profile: str | None) -> dict:
        spec = {"backend": backend, "tasks": tasks, "models": models, "deadline": deadline, "profile": profile,
                "workdir": str(self.work / "run" / backend),
                "reference_dir": str(self.work / "run" / "cpu") if backend != "cpu" else None,
                "threads": os.cpu_count()}
        spec_path = self.work / f"spec-{backend}.json"
        result_path = self.work / f"result-{backend}{'-probe' if not tasks else ''}.json"
        spec_path.write_text(json.dumps(spec), encoding="utf-8")
        result_path.unlink(missing_ok=True)
        logf = self.work / "logs" / f"worker-{backend}.log"
        # A step may outlast the worker's deadline; the kill comes before the runner's own limit.
        timeout = max(10.0, min(deadline + 60, self.end + 20) - time.time())
        t = time.time()
        with open(logf, "a", encoding="utf-8") as lf:
            lf.write(f"\n=== {backend} tasks={tasks} profile={profile}\n")
            lf.flush()
            try:
                proc = subprocess.run([*self.python(), str(KIT / "worker.py"), str(spec_path), str(result_path)],
                                      env=self.env(backend), stdout=lf, stderr=subprocess.STDOUT, timeout=timeout,
                                      cwd=str(ROOT))
                rc = proc.returncode
            except subprocess.TimeoutExpired:
                rc = "timeout"
        result = json.loads(result_path.read_text(encoding="utf-8")) if result_path.exists() else {}
        result["exit"] = rc
        result["wall_s"] = round(time.time() - t, 1)
        if rc != 0:
            result.setdefault("errors", []).append(f"worker exited {rc}; log tail: {tail(logf, 15)}")
        self.log(f"{backend} worker {tasks or 'probe'}: exit {rc} in {result['wall_s']} s, "
                 f"errors: {result.get('errors') or 'none'}")
        return result

    def speculative(self, backend: str, reserve: float) -> None:
        """Issue 40 on this backend's GPU: bench/speculative.py side by side on the real demo-small
        (`--speculative`, a file that travels apart from the kit: its 98 MB do not fit in one call),
        every model of the bench on the device. Its table goes into the report and the output."""
        if not self.args.speculative:
            return
        limit = min(self.args.spec_seconds, self.end - reserve - time.time())
        if limit < 30:
            self.report["notes"].append(f"speculative on {backend}: {limit:.0f} s left, not run")
            return
        cmd = [*self.python(), str(ROOT / "bench" / "speculative.py"), "--model", str(self.args.speculative),
               "--gpu-layers", "999", "--threads", str(os.cpu_count()), "--reps", str(self.args.spec_reps),
               "--tokens", str(self.args.spec_tokens)]
        t = time.time()
        try:
            proc = subprocess.run(cmd, env=self.env(backend), capture_output=True, text=True, timeout=limit,
                                  cwd=str(ROOT))
            facts = {"exit": proc.returncode, "table": proc.stdout, "stderr_tail": proc.stderr[-3000:]}
        except subprocess.TimeoutExpired as exc:
            out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
            facts = {"exit": "timeout", "table": out}
        facts |= {"seconds": round(time.time() - t, 1), "command": " ".join(cmd[1:])}
        self.report.setdefault("speculative", {})[backend] = facts
        self.log(f"speculative on {backend}: exit {facts['exit']} in {facts['seconds']} s")
        print(f"\n## speculative decoding on {backend}\n{facts['table']}", flush=True)
        self.save()

    # ---- the run
    def start_cuda(self) -> None:
        if self.args.no_cuda:
            self.part("cuda_build", status="skipped", reason="--no-cuda")
            return
        self.tools = cuda_build.find_toolchain()
        if self.tools["missing"]:
            self.part("cuda_build", status="skipped", reason="missing: " + "; ".join(self.tools["missing"]),
                      tools=self.tools)
            return
        src, stamp = self.work / "ggml-src", self.manifest["created"]
        if not (src / "stamp").exists() or (src / "stamp").read_text() != stamp:
            shutil.rmtree(src, ignore_errors=True)  # sources of another payload
            untar(self.payload / "ggml-src.tar.xz", src)
            (src / "stamp").write_text(stamp)
        self.cuda = cuda_build.CudaBuild(src / "ggml", self.work / "cuda-build", self.tools, arch=self.args.cuda_arch,
                                         jobs=self.args.cuda_jobs, flash_attn=not self.args.cuda_no_fa)
        self.cuda.start()
        self.part("cuda_build", status="running", tools=self.tools, cmake_args=self.cuda.cmake_args())
        self.log(f"CUDA build started ({self.cuda.jobs} jobs, {self.cuda.arch})")

    def run(self) -> int:
        self.unpack()
        self.start_cuda()
        self.vulkan_setup()
        models = self.models()
        models += self.real_models(models)
        backends = self.args.backends
        profile = "quick" if self.args.quick else None
        probe = {}
        if "vulkan" in backends:
            probe = self.worker("vulkan", [], models, time.time() + 60, profile)
            dev = probe.get("device")
            self.report["backends"]["vulkan"] = probe
            if dev and dev.get("software") and profile is None:
                profile = "quick"
                self.report["notes"].append(f"Vulkan device {dev['description']} is software: quick profile for every backend")
        profile = profile or "full"
        self.report["profile"] = profile
        cuda_reserve = self.args.cuda_reserve if self.cuda else 0
        if "cpu" in backends:
            if self.cuda:
                self.cuda.pause()  # the CPU is timed alone
            # The CPU reference for the demo shapes only: a 7-8B model on the CPU would eat the GPUs' time.
            demo = [m for m in models if not m.get("real_shape")]
            self.report["backends"]["cpu"] = self.worker("cpu", ["speed", "passes"], demo, self.end - cuda_reserve - 30,
                                                         profile)
            if self.cuda:
                self.cuda.resume()
            self.save()
        # The speculative runs come after each GPU's worker: the Vulkan one's before CUDA's time.
        spec = self.args.spec_seconds if self.args.speculative else 0
        cuda_spec = spec if self.cuda and "cuda" in backends else 0
        if "vulkan" in backends and probe.get("device"):
            result = self.worker("vulkan", GPU_TASKS, models, self.end - cuda_reserve - cuda_spec - spec - 15, profile)
            result["probe_registry"] = probe.get("registry")
            self.report["backends"]["vulkan"] = result
            self.save()
            self.speculative("vulkan", cuda_reserve)
        if self.cuda:
            self.log(f"waiting for the CUDA build (progress {self.cuda.progress()})")
            outcome = self.cuda.wait(self.end - cuda_reserve - cuda_spec)
            self.part("cuda_build", **outcome)
            copy_tail(self.cuda.log, self.out / "cuda_build.log")
            if outcome["status"] == "built" and "cuda" in backends:
                libs = [n for n, lib in self.manifest["libs"].items() if lib["role"] in ("core", "cpu")]
                self.package("cuda", libs, [Path(outcome["module"])])
                self.report["backends"]["cuda"] = self.worker("cuda", GPU_TASKS, models, self.end - cuda_spec - 15,
                                                              profile)
                self.speculative("cuda", 5)
            elif "cuda" in backends:
                self.report["backends"]["cuda"] = {"skipped": outcome.get("reason")}
        self.report["finished"] = time.strftime("%Y-%m-%d %H:%M:%S")
        self.save()
        for name in ("gpu_check.log", "worker-cpu.log", "worker-vulkan.log", "worker-cuda.log"):
            copy_tail(self.work / "logs" / name, self.out / name)
        print(report_table.render(self.report))
        return 0


def machine() -> dict:
    facts = {"platform": platform.platform(), "python": platform.python_version(), "cores": os.cpu_count()}
    try:
        cpu = Path("/proc/cpuinfo").read_text()
        facts["cpu"] = next((line.split(":", 1)[1].strip() for line in cpu.splitlines() if line.startswith("model name")), "")
        mem = Path("/proc/meminfo").read_text().split()
        facts["ram_gib"] = round(int(mem[mem.index("MemTotal:") + 1]) / 2**20, 1)
    except (OSError, ValueError):
        pass
    if shutil.which("nvidia-smi"):
        try:
            facts["nvidia_smi"] = subprocess.run(
                ["nvidia-smi", "--query-gpu=name,driver_version,memory.total,memory.used", "--format=csv,noheader"],
                capture_output=True, text=True, timeout=30).stdout.strip()
        except (OSError, subprocess.SubprocessError) as exc:
            facts["nvidia_smi"] = f"failed: {exc}"
    return facts


def untar(archive: Path, dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    try:
        with tarfile.open(archive) as tar:
            tar.extractall(dest, filter="data")
    except (tarfile.CompressionError, ImportError):  # a Python built without lzma: the xz tool then
        subprocess.run(["tar", "-xJf", str(archive), "-C", str(dest)], check=True)


def link(src: Path, dest: Path) -> None:
    try:
        os.link(src, dest)
    except OSError:
        shutil.copy2(src, dest)


def tail(path: Path, n: int) -> str:
    try:
        return " | ".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-n:])
    except OSError:
        return ""


def copy_tail(src: Path, dest: Path) -> None:
    try:
        data = src.read_bytes()
    except OSError:
        return
    dest.write_bytes(data[-OUT_FILE_LIMIT:])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--payload", type=Path, default=ROOT / "build" / "gpu_kit")
    ap.add_argument("--work", type=Path, default=ROOT / "build" / "gpu_kit_work",
                    help="unpacked kit, models, CUDA build (kept: a rerun on a warm machine continues the build)")
    ap.add_argument("--out", type=Path, default=Path(os.environ["OUT"]) if os.environ.get("OUT")
                    else ROOT / "build" / "gpu_kit_out", help="where the report goes (default $OUT)")
    ap.add_argument("--budget", type=float, default=560, help="seconds for the whole run (the device runner allows 600)")
    ap.add_argument("--quick", action="store_true", help="small token counts everywhere (smoke test)")
    ap.add_argument("--local", action="store_true", help="this Python's packages, not the carried wheels")
    ap.add_argument("--backends", default="cpu,vulkan,cuda", type=lambda s: s.split(","))
    ap.add_argument("--models", default="", type=lambda s: [m for m in s.split(",") if m])
    ap.add_argument("--real", default="qwen2.5-7b-instruct-q4_k_m,qwen3-8b", type=lambda s: [m for m in s.split(",") if m],
                    help="catalog ids to synthesise at their real size and measure on the GPUs ('' for none)")
    ap.add_argument("--no-cuda", action="store_true", help="do not build the CUDA backend")
    ap.add_argument("--cuda-arch", default="90-real")
    ap.add_argument("--cuda-jobs", type=int, default=None)
    ap.add_argument("--cuda-no-fa", action="store_true", help="leave out flash-attention kernels (faster build)")
    ap.add_argument("--cuda-reserve", type=float, default=90, help="seconds kept for the CUDA measurements")
    ap.add_argument("--speculative", type=Path, default=None,
                    help="demo-small's real file: run bench/speculative.py on each GPU backend with it")
    ap.add_argument("--spec-seconds", type=float, default=150, help="the most each speculative run may take")
    ap.add_argument("--spec-reps", type=int, default=2)
    ap.add_argument("--spec-tokens", type=int, default=200)
    args = ap.parse_args(argv)
    args.payload, args.work, args.out = args.payload.resolve(), args.work.resolve(), args.out.resolve()
    check = Check(args)
    try:
        return check.run()
    except Exception as exc:  # noqa: BLE001 - the report is written whatever broke
        check.report["fatal"] = f"{exc.__class__.__name__}: {exc}"
        check.log(f"fatal: {check.report['fatal']}")
        check.save()
        raise
    finally:
        if check.cuda is not None and check.cuda.running():
            check.cuda.wait(time.time())  # stops it


if __name__ == "__main__":
    sys.exit(main())
