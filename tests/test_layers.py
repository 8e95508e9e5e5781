"""The engine's groups depend on each other one way, and front-ends come in through engine.api.

Read from the source (ast), so a function-local import counts as much as a top-level one.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Lower first: a group may import only from groups at a lower or equal rank (equal: itself).
# retrieval (the hybrid index, fusion and indexing thread) sits below memory and docs, which both
# search with it; docs (local documents) sits above memory, whose embedder it reuses, and below
# chat, whose turns retrieve from it. server (the local API) is a front-end on engine.api that
# the command line starts (`assistant serve`).
# tools (what the engine runs for the window: built-in tools, later MCP servers) sits above docs
# and memory, which its built-in tools search, and below chat, whose tool loop runs them.
# update (the release manifest and its check) needs only config.
RANK = {"config": 0, "storage": 1, "routing": 1, "update": 1, "models": 2, "retrieval": 2, "inference": 3,
        "kv": 4, "memory": 4, "docs": 5, "tools": 6, "chat": 7, "api": 8, "server": 9, "cli": 10}


def imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append(node.module)
            found += [f"{node.module}.{a.name}" for a in node.names if node.module == "engine"]
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names]
    return [m for m in found if m == "engine" or m.startswith("engine.")]


def group(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def test_engine_groups_depend_one_way():
    back_edges = []
    for path in sorted((ROOT / "engine").rglob("*.py")):
        rel = path.relative_to(ROOT / "engine")
        if len(rel.parts) < 2:
            continue  # engine/__init__.py
        own = rel.parts[0]
        assert own in RANK, f"engine/{own}/ is not in the layer table of this test"
        for module in imports(path):
            other = group(module)
            if other is None or other == own or other == "__version__":
                continue
            assert other in RANK, f"{rel} imports {module}: unknown group"
            if RANK[other] > RANK[own] or (RANK[other] == RANK[own] and other != own):
                back_edges.append(f"{rel} → {module}")
    assert not back_edges, "imports against the layer order:\n" + "\n".join(back_edges)


def test_no_module_left_at_the_engine_top_level():
    loose = [p.name for p in (ROOT / "engine").glob("*.py") if p.name != "__init__.py"]
    assert loose == [], f"put these in a group: {loose}"


# Front-ends and what each may import from `engine` besides the front door, `engine.api`: its own
# modules, and the local API server's door (`engine.server`, its __init__ only): the window runs the
# server beside its own chats and `assistant serve` runs it alone, so both compose that front-end
# rather than the engine reaching up to it. The version string comes through the door too.
FRONT_ENDS = {"app": ("app", "engine.server"), "engine/cli": ("engine.cli", "engine.server"),
              "engine/server": ("engine.server",)}


def front_end_offenders(paths: list[Path], allowed: tuple[str, ...]) -> list[tuple[Path, str]]:
    """(file, module) for each import of an `engine` module other than engine.api and `allowed`.
    `allowed[0]` is the front-end's own package (any of its modules); the
    others are doors: the package itself, none of its modules."""
    own = allowed[0]
    offenders = []
    for path in paths:
        for module in imports(path):
            if module in ("engine", "engine.api") or module.startswith("engine.api."):
                continue  # `from engine import X` also lists engine.X, checked on its own
            if module not in allowed and not module.startswith(own + "."):
                offenders.append((path, module))
    return offenders


def test_front_ends_use_only_engine_api():
    """The window (app/), the terminal (engine/cli/) and the local API server (engine/server/) are
    front-ends: engine.api, their own modules, and the server's door."""
    offenders = [f"{path.relative_to(ROOT)} imports {module}" for folder, allowed in FRONT_ENDS.items()
                 for path, module in front_end_offenders(sorted((ROOT / folder).rglob("*.py")), allowed)]
    assert not offenders, "\n".join(offenders)


def test_the_front_end_check_catches_a_way_around_the_door(tmp_path):
    """The check itself: a CLI module reaching past engine.api (at any depth, by any import form)
    or into the server's modules fails it; the door, its own modules and the server's door pass."""
    cases = {"from engine.storage import Database\n": ["engine.storage"],
             "def f():\n    import engine.kv.tiers\n": ["engine.kv.tiers"],
             "from engine import models\n": ["engine.models"],
             "from engine.server.config import load_api_key\n": ["engine.server.config"],
             "from engine import __version__\n": ["engine.__version__"],
             "from engine.api import Assistant, __version__\nfrom engine.api.memory import Memories\n"
             "from engine.cli import chat\nfrom engine.server import ApiServer\n": []}
    probe = tmp_path / "probe.py"
    for source, caught in cases.items():
        probe.write_text(source, encoding="utf-8")
        assert [m for _, m in front_end_offenders([probe], FRONT_ENDS["engine/cli"])] == caught, source


def defined_names(path: Path) -> set[str]:
    """Names a module defines or imports at any depth (classes, functions, assignments, imports)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):  # X: TypeAlias = …
            names.add(node.target.id)
        elif isinstance(node, ast.ImportFrom):
            names |= {a.asname or a.name for a in node.names}
    return names


def test_the_front_door_names_lower_groups_only():
    """engine.api's lazy `_EXPORTS` are strings, not imports: read them here. They may name modules
    of engine.api and the groups below it, never a front-end (engine.server is one: the window and
    `assistant serve` import its door themselves); each name is defined in its module."""
    tree = ast.parse((ROOT / "engine" / "api" / "__init__.py").read_text(encoding="utf-8"))
    table = next(node.value for node in tree.body if isinstance(node, ast.AnnAssign)
                 and getattr(node.target, "id", None) == "_EXPORTS")
    renamed = ast.literal_eval(next(node.value for node in tree.body if isinstance(node, ast.Assign)
                                    and getattr(node.targets[0], "id", None) == "_RENAMED"))
    wrong = []
    for key, value in zip(table.keys, table.values):
        name, module = key.value, value.value
        other = group(module)
        if other not in RANK or RANK[other] > RANK["api"]:
            wrong.append(f"{name} → {module}: above engine.api")
            continue
        path = ROOT / Path(*module.split(".")).with_suffix(".py")
        if not path.is_file():
            path = ROOT / Path(*module.split(".")) / "__init__.py"
        if renamed.get(name, name) not in defined_names(path):
            wrong.append(f"{name}: not defined in {module}")
    assert not wrong, "\n".join(wrong)
