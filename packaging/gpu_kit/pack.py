#!/usr/bin/env python3
"""Build the GPU check kit's payload here, for a machine with no network (see docs/gpu.md).

    .venv/bin/python packaging/gpu_kit/pack.py            # -> build/gpu_kit/ (checked <= 64 MiB with the tree)

What goes in (build/gpu_kit/, ignored by git, named in the device runner's `carry` list):
  llama_cpp.tar.xz   llama-cpp-python's Python files + one copy of each library of the Vulkan wheel
                     (libllama, libggml, libggml-base, the CPU variants, libggml-vulkan; the wheel's
                     soname copies become links again when unpacked)
  ggml-src.tar.xz    the patched ggml sources, to build libggml-cuda.so for sm_90 on the box
  models/*.skel.xz   each demo model's skeleton (synth.py): metadata, tokenizer, tensor table
  wheels/*.whl       the Python packages the engine's load path imports, for the box's Python
  syslibs.tar.xz     this machine's Vulkan loader, libGLdispatch, libgomp and libstdc++: used there
                     only where the box lacks them
  MANIFEST.json      what each file is, sizes, digests, the wheel's BUILD.json
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "packaging" / "llama"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import patches  # noqa: E402  (packaging/llama: the same sdist patches as the shipped wheel)
import synth  # noqa: E402
from engine.models.catalog import load_catalog  # noqa: E402

LIMIT_MIB = 64  # the device runner's limit on everything that travels: the tree plus `carry`
DEMO_MODELS = ("demo-small", "demo-int4")
# The engine's load path (Backend, planner, KV tiers) and llama-cpp-python's import chain. The box's
# Python may hold some already; carried, the kit does not depend on which.
WHEELS = ("numpy", "jinja2", "markupsafe", "diskcache", "typing_extensions", "psutil", "pyyaml", "gguf",
          "platformdirs", "nvidia-ml-py")
SYSLIBS = ("libvulkan.so.1", "libGLdispatch.so.0", "libgomp.so.1", "libstdc++.so.6")
# Other backends' folders stay behind: the box builds ggml-base and ggml-cuda only.
GGML_KEEP_BACKENDS = {"ggml-cuda", "ggml-cpu"}  # ggml-base includes ggml-cpu headers


def xz_tar(dest: Path, members: list[tuple[str, bytes, int]]) -> None:
    """(name, data, mode) -> dest as tar.xz, names and order as given."""
    with tarfile.open(dest, "w:xz", preset=9) as tar:
        for name, data, mode in members:
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), mode, 0
            tar.addfile(info, io.BytesIO(data))


def pack_llama(wheel: Path, out: Path) -> dict:
    """The wheel's Python files and one copy of each library; aliases = the soname copies."""
    members, libs, by_digest = [], {}, {}
    with zipfile.ZipFile(wheel) as zf:
        for info in sorted(zf.infolist(), key=lambda i: (len(i.filename), i.filename)):
            name = info.filename
            if not name.startswith("llama_cpp/") or name.endswith("/") or "/server/" in name:
                continue
            data = zf.read(info)
            if "/lib/" not in name:
                members.append((name, data, 0o644))
                continue
            lib = Path(name).name
            digest = hashlib.sha256(data).hexdigest()
            if digest in by_digest:  # libllama.so.0 = libllama.so: one file, a link there
                libs[by_digest[digest]]["aliases"].append(lib)
                continue
            if lib.startswith("libmtmd"):
                continue  # images: no task of the kit reads one
            by_digest[digest] = lib
            role = ("vulkan" if "vulkan" in lib else "cpu" if lib.startswith("libggml-cpu") else "core")
            libs[lib] = {"bytes": len(data), "sha256": digest, "role": role, "aliases": []}
            members.append((name, data, 0o755))
    xz_tar(out / "llama_cpp.tar.xz", members)
    return libs


def pack_ggml(sdist: Path, out: Path) -> dict:
    """ggml's sources from the sdist, patched as the wheel's were, other GPU backends left out."""
    with tempfile.TemporaryDirectory() as tmp:
        with tarfile.open(sdist) as tar:
            tar.extractall(tmp, filter="data")
        (source,) = [p for p in Path(tmp).iterdir() if p.is_dir()]
        applied = patches.apply_all(source)
        ggml = source / "vendor" / "llama.cpp" / "ggml"
        members = []
        for path in sorted(ggml.rglob("*")):
            rel = path.relative_to(ggml)
            if path.is_dir() or (len(rel.parts) > 2 and rel.parts[0] == "src" and rel.parts[1].startswith("ggml-")
                                 and rel.parts[1] not in GGML_KEEP_BACKENDS):
                continue
            members.append((f"ggml/{rel.as_posix()}", path.read_bytes(), 0o644))
        xz_tar(out / "ggml-src.tar.xz", members)
    return {"files": len(members), "patches": applied, "sdist": sdist.name}


def pack_syslibs(out: Path) -> dict:
    found, members = {}, []
    for name in SYSLIBS:
        path = Path("/usr/lib/x86_64-linux-gnu") / name
        if not path.exists():
            continue
        data = path.resolve().read_bytes()
        members.append((name, data, 0o755))
        found[name] = {"bytes": len(data), "from": str(path.resolve())}
    xz_tar(out / "syslibs.tar.xz", members)
    return found


def pack_wheels(out: Path, python: str, names: tuple[str, ...]) -> list[str]:
    """cp<python> manylinux wheels, versions pinned to what this venv runs (tested together)."""
    folder = out / "wheels"
    folder.mkdir(exist_ok=True)
    pins = [f"{n}=={importlib.metadata.version(n)}" for n in names]
    tag = python.replace(".", "")
    platforms = [f"--platform={p}" for p in ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64",
                                              "manylinux_2_17_x86_64", "manylinux2014_x86_64")]
    subprocess.run([sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "--no-deps",
                    "--only-binary=:all:", f"--python-version={python}", "--implementation=cp", f"--abi=cp{tag}",
                    "--abi=abi3", "--abi=none", *platforms, "--platform=any", "-d", str(folder), *pins],
                   check=True, stdout=subprocess.DEVNULL)
    return sorted(p.name for p in folder.glob("*.whl"))


def travelling_tree_bytes() -> int:
    """Bytes of the files the device runner sends anyway: tracked, and untracked but not ignored."""
    names = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                           capture_output=True, check=True).stdout.split(b"\0")
    return sum((ROOT / n.decode()).stat().st_size for n in names if n and (ROOT / n.decode()).is_file())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--wheel-dir", type=Path, default=ROOT / "build" / "wheels" / "vulkan",
                    help="packaging/llama/build_wheel.py's output (the wheel and BUILD.json)")
    ap.add_argument("--out", type=Path, default=ROOT / "build" / "gpu_kit")
    ap.add_argument("--python", default="3.12", help="the box's Python (wheels are fetched for it)")
    ap.add_argument("--no-wheels", action="store_true", help="carry no Python packages (the box has them)")
    ap.add_argument("--box-has", default="", type=lambda s: {n for n in s.split(",") if n},
                    help="packages the box's Python has (KINDS.md): their wheels stay here, leaving room to carry more")
    ap.add_argument("--limit-mib", type=float, default=LIMIT_MIB)
    args = ap.parse_args(argv)

    build = json.loads((args.wheel_dir / "BUILD.json").read_text(encoding="utf-8"))
    wheel = args.wheel_dir / build["wheel"]
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    for old in [*out.glob("*.xz"), *out.glob("models/*"), *out.glob("wheels/*")]:
        old.unlink()
    t0 = time.monotonic()
    manifest: dict = {"kit": 1, "created": time.strftime("%Y-%m-%d %H:%M:%S"), "build": build,
                      "libs": pack_llama(wheel, out)}
    sdist = ROOT / "build" / "llama" / f"llama_cpp_python-{build['version']}.tar.gz"
    manifest["ggml_src"] = pack_ggml(sdist, out)
    manifest["syslibs"] = pack_syslibs(out)
    (out / "models").mkdir(exist_ok=True)
    catalog, manifest["models"] = load_catalog(), {}
    for mid in DEMO_MODELS:
        entry = catalog.get(mid)
        manifest["models"][mid] = synth.make_skeleton(entry.path(), out / "models" / f"{mid}.skel.xz")
    manifest["wheels"] = [] if args.no_wheels else pack_wheels(out, args.python, tuple(n for n in WHEELS if n not in args.box_has))
    manifest["python"] = None if args.no_wheels else args.python
    files = {p.relative_to(out).as_posix(): p.stat().st_size for p in sorted(out.rglob("*"))
             if p.is_file() and p.name != "MANIFEST.json"}
    manifest["files"] = files
    manifest["payload_bytes"] = sum(files.values())
    manifest["tree_bytes"] = travelling_tree_bytes()
    manifest["pack_seconds"] = round(time.monotonic() - t0)
    (out / "MANIFEST.json").write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    total = manifest["payload_bytes"] + manifest["tree_bytes"] + (out / "MANIFEST.json").stat().st_size
    for name, size in files.items():
        print(f"{size / 2**20:8.2f} MiB  {name}")
    print(f"payload {manifest['payload_bytes'] / 2**20:.1f} MiB + the tree that travels "
          f"{manifest['tree_bytes'] / 2**20:.1f} MiB = {total / 2**20:.1f} MiB (limit {args.limit_mib:g} MiB)")
    if total > args.limit_mib * 2**20:
        print("TOO LARGE for the device runner", file=sys.stderr)
        return 1
    rel = os.path.relpath(out, ROOT)
    print(f"\ncarry: [\"{rel}\"]\ncommand: python3 packaging/gpu_kit/gpu_check.py --payload {rel}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
