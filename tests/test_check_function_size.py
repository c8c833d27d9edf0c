"""No function over 60 lines in the judging layer and the gate (ipcbench/judging/, ipcbench/check/): the house's
rule, held where check's judge, expectations, evidence rules and outputs live (issue 37: they had grown past it)."""

from __future__ import annotations

import ast

import pytest

from conftest import REPO

MAX_LINES = 60
FILES = sorted(p for d in ("judging", "check") for p in (REPO / "ipcbench" / d).glob("*.py"))


def long_functions(source: str, limit: int = MAX_LINES) -> list[tuple[str, int]]:
    """(name, lines) of every function or method longer than `limit` lines, decorators excluded."""
    return [(n.name, n.end_lineno - n.lineno + 1) for n in ast.walk(ast.parse(source))
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.end_lineno - n.lineno + 1 > limit]


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_no_function_is_over_60_lines(path):
    assert not long_functions(path.read_text()), long_functions(path.read_text())


def test_the_count_sees_a_long_function_and_its_methods():
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_LINES))
    assert long_functions(f"def f():\n{body}\n") == [("f", MAX_LINES + 1)]
    assert long_functions(f"class C:\n    def g(self):\n    {body.replace(chr(10), chr(10) + '    ')}\n") == \
        [("g", MAX_LINES + 1)]
    assert long_functions(f"def f():\n{body}\n", limit=MAX_LINES + 1) == []
    assert FILES and len(FILES) >= 20
