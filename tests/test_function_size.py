"""No function over 60 lines (the house rule): every module of the package and of the developer's tools/. A long
function is split where it does two things; the test names each one over, with its length."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MAX_LINES = 60


def test_no_function_over_60_lines():
    files = sorted((REPO / "ipcbench").rglob("*.py")) + sorted((REPO / "tools").glob("*.py"))
    assert len(files) > 100
    long = [f"{f.relative_to(REPO)}:{n.lineno} {n.name} ({n.end_lineno - n.lineno + 1} lines)"
            for f in files for n in ast.walk(ast.parse(f.read_text()))
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.end_lineno - n.lineno + 1 > MAX_LINES]
    assert not long, long
