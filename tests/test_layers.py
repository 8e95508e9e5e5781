"""The engine's groups depend on each other one way, and front-ends come in through engine.api.

Read from the source (ast), so a function-local import counts as much as a top-level one.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Lower first: a group may import only from groups at a lower or equal rank (equal: itself).
# docs (local documents) sits above memory, whose embedder and hybrid store it reuses, and below
# chat, whose turns retrieve from it. server (the local API) is a front-end on engine.api that
# the command line starts (`assistant serve`).
RANK = {"config": 0, "storage": 1, "routing": 1, "models": 2, "inference": 3, "kv": 4, "memory": 4,
        "docs": 5, "chat": 6, "api": 7, "server": 8, "cli": 9}


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


def test_front_ends_use_only_engine_api():
    """The window (app/) and the local API server (engine/server/) are front-ends: engine.api only."""
    offenders = []
    for path in sorted([*(ROOT / "app").rglob("*.py"), *(ROOT / "engine" / "server").rglob("*.py")]):
        for module in imports(path):
            if module.startswith("engine.server") and path.is_relative_to(ROOT / "engine" / "server"):
                continue  # the server's own modules
            if module != "engine.api" and not module.startswith("engine.api."):
                offenders.append(f"{path.relative_to(ROOT)} imports {module}")
    assert not offenders, "\n".join(offenders)
