"""Presets ("assistants"): a name, a system prompt, a temperature, a default tier, and whether the
chat uses the documents and the tools. A new chat starts from the default preset; a chat keeps the
one it was given (the conversations table's `preset`). Kept in presets.json in the data dir, under
its lock (the window and `assistant` commands may both write it), and importable and exportable as
JSON, so a preset can be shared as a file.

The built-in "Default" preset always exists: it can be edited, never deleted."""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

from engine.config.locked_file import locked, write_atomic
from engine.config.paths import user_dir

DEFAULT_ID = "default"
TIERS = ("auto", "L1", "L2", "L3")
MAX_PRESETS = 200
MAX_NAME = 80
MAX_SYSTEM_PROMPT = 20_000
MAX_FILE_BYTES = 4 << 20
FORMAT = "offline-assistant-presets"  # an exported file's "format": what an import checks first


class PresetError(ValueError):
    """A preset or a presets file that cannot be taken; the message says which field and why."""


@dataclass(frozen=True)
class Preset:
    id: str
    name: str
    system_prompt: str = ""
    # None in the three below: as the app has it (its temperature; the chat's own "Use my
    # documents" and the "Tools" switch as they stand), which is what the built-in Default does.
    temperature: float | None = None
    tier: str = "auto"              # auto | L1 | L2 | L3: the chat's route
    documents: bool | None = None   # "Use my documents" for its chats
    tools: bool | None = None       # the model may call tools in its chats

    def checked(self) -> "Preset":
        """This preset, or PresetError naming the field that is wrong."""
        if not isinstance(self.id, str) or not re.fullmatch(r"[a-z0-9][a-z0-9-]{0,63}", self.id):
            raise PresetError(f"preset id {self.id!r}: lowercase letters, digits and '-', 1–64 characters")
        if not isinstance(self.name, str) or not self.name.strip() or len(self.name) > MAX_NAME:
            raise PresetError(f"preset {self.id!r}: a name is 1–{MAX_NAME} characters")
        if not isinstance(self.system_prompt, str) or len(self.system_prompt) > MAX_SYSTEM_PROMPT:
            raise PresetError(f"preset {self.name!r}: the system prompt is text of at most {MAX_SYSTEM_PROMPT:,} "
                              "characters")
        if "\x00" in self.system_prompt or "\x00" in self.name:
            raise PresetError(f"preset {self.name!r}: NUL characters are not allowed")
        t = self.temperature
        if t is not None and (isinstance(t, bool) or not isinstance(t, (int, float)) or not 0.0 <= t <= 2.0):
            raise PresetError(f"preset {self.name!r}: temperature is a number from 0 to 2 (or null: the app's)")
        if self.tier not in TIERS:
            raise PresetError(f"preset {self.name!r}: tier is one of {', '.join(TIERS)}")
        for name in ("documents", "tools"):
            if getattr(self, name) is not None and not isinstance(getattr(self, name), bool):
                raise PresetError(f"preset {self.name!r}: {name} is true, false or null (as it stands)")
        return replace(self, name=self.name.strip(), temperature=None if t is None else float(t))


BUILT_IN = Preset(DEFAULT_ID, "Default")


def from_json(data: object) -> Preset:
    """A preset from its JSON object (unknown keys ignored: a newer version's file still reads)."""
    if not isinstance(data, dict):
        raise PresetError("a preset is a JSON object")
    known = {f.name for f in fields(Preset)}
    values = {k: v for k, v in data.items() if k in known}
    if "name" not in values:
        raise PresetError("a preset needs a name")
    values.setdefault("id", new_id(str(values["name"])))
    return Preset(**values).checked()


def new_id(name: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:40]
    return f"{slug or 'preset'}-{uuid.uuid4().hex[:6]}"


class Presets:
    """presets.json: {"default": id, "presets": [...]}. Every change is read-merge-write under the
    file's lock; an unreadable file is said in `problem` and left as it is until a change."""

    def __init__(self, path: Path | None = None):
        self.path = path or user_dir() / "presets.json"
        self.problem = ""

    def _read(self) -> tuple[str, list[Preset]]:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return DEFAULT_ID, [BUILT_IN]
        except OSError as exc:
            self.problem = f"{self.path} could not be read ({exc.strerror or exc})"
            return DEFAULT_ID, [BUILT_IN]
        try:
            data = json.loads(raw.decode("utf-8")) if len(raw) <= MAX_FILE_BYTES else None
            if not isinstance(data, dict) or not isinstance(data.get("presets"), list):
                raise ValueError("not a presets file")
            presets, seen = [], set()
            for item in data["presets"]:
                try:
                    p = from_json(item)
                except (PresetError, TypeError):
                    continue  # one bad entry costs only itself
                if p.id not in seen:
                    presets.append(p)
                    seen.add(p.id)
        except (ValueError, UnicodeDecodeError) as exc:
            self.problem = f"{self.path} could not be read ({exc}); the built-in preset is used"
            return DEFAULT_ID, [BUILT_IN]
        self.problem = ""
        if DEFAULT_ID not in seen:
            presets.insert(0, BUILT_IN)
        default = data.get("default")
        return (default if default in seen or default == DEFAULT_ID else DEFAULT_ID), presets

    def _write(self, default: str, presets: list[Preset]) -> None:
        data = {"format": FORMAT, "default": default, "presets": [asdict(p) for p in presets]}
        write_atomic(self.path, (json.dumps(data, ensure_ascii=False, indent=2) + "\n").encode("utf-8"))
        self.problem = ""

    # ---- reading
    def all(self) -> list[Preset]:
        return self._read()[1]

    def default(self) -> Preset:
        default, presets = self._read()
        return next(p for p in presets if p.id == default) if any(p.id == default for p in presets) else BUILT_IN

    def get(self, preset_id: str | None) -> Preset:
        """The preset with this id, or the default one (a chat whose preset was deleted)."""
        return next((p for p in self.all() if p.id == preset_id), None) or self.default()

    # ---- changing
    def save(self, preset: Preset) -> Preset:
        """Add or replace (by id)."""
        preset = preset.checked()
        with locked(self.path):
            default, presets = self._read()
            if preset.id not in {p.id for p in presets} and len(presets) >= MAX_PRESETS:
                raise PresetError(f"at most {MAX_PRESETS} presets")
            out = [preset if p.id == preset.id else p for p in presets]
            if preset.id not in {p.id for p in presets}:
                out.append(preset)
            self._write(default, out)
        return preset

    def create(self, name: str) -> Preset:
        """A new preset named `name` (an id of its own), saved."""
        return self.save(Preset(new_id(name), name))

    def delete(self, preset_id: str) -> None:
        if preset_id == DEFAULT_ID:
            raise PresetError("the built-in Default preset can be edited, not deleted")
        with locked(self.path):
            default, presets = self._read()
            self._write(DEFAULT_ID if default == preset_id else default, [p for p in presets if p.id != preset_id])

    def set_default(self, preset_id: str) -> None:
        with locked(self.path):
            _, presets = self._read()
            if preset_id not in {p.id for p in presets}:
                raise PresetError(f"no preset {preset_id!r}")
            self._write(preset_id, presets)

    # ---- files to share
    def export_json(self, ids: list[str] | None = None) -> str:
        chosen = [p for p in self.all() if ids is None or p.id in ids]
        return json.dumps({"format": FORMAT, "presets": [asdict(p) for p in chosen]}, ensure_ascii=False, indent=2)

    def import_json(self, text: str) -> tuple[list[str], list[str]]:
        """Add the presets of an exported file: (names added, problems). An imported preset gets a
        new id, so it never replaces one of the user's."""
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise PresetError(f"not a presets file: not valid JSON ({exc})") from None
        items = data.get("presets") if isinstance(data, dict) else data if isinstance(data, list) else None
        if not isinstance(items, list):
            raise PresetError("not a presets file: expected {\"presets\": [...]}")
        added, problems = [], []
        for k, item in enumerate(items, 1):
            try:
                p = from_json(item)
                if any(replace(q, id="") == replace(p, id="") for q in self.all()):
                    problems.append(f"preset {k} ({p.name}): already here")
                    continue
                p = self.save(replace(p, id=new_id(p.name)))
                added.append(p.name)
            except (PresetError, TypeError) as exc:
                problems.append(f"preset {k}: {exc}")
        return added, problems
