"""The code's shape stays readable: no Python file over 500 lines and no function over 80, in the
product (engine/, app/), its packaging, benchmarks and tests. A file that grows past it is split by
what it does (docs/architecture.md), not trimmed of its comments."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("engine", "app", "packaging", "bench", "tests")
MAX_FILE_LINES = 500
MAX_FUNCTION_LINES = 80  # a function longer than this is read as several


def python_files():
    for folder in FOLDERS:
        yield from sorted(p for p in (ROOT / folder).rglob("*.py") if "__pycache__" not in p.parts)


def test_no_file_is_over_500_lines():
    long = {str(p.relative_to(ROOT)): n for p in python_files()
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_FILE_LINES}
    assert not long, f"split these by what they do: {long}"


def test_no_function_is_80_lines_or_more():
    long = {}
    for path in python_files():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines >= MAX_FUNCTION_LINES:
                    long[f"{path.relative_to(ROOT)}:{node.lineno} {node.name}"] = lines
    assert not long, f"split these into named steps: {long}"


def test_the_check_sees_a_long_function(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    tree = ast.parse(f"def long():\n{body}\n")
    (node,) = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]
    assert node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
