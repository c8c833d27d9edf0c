"""No function over 60 lines (the house rule), in the modules held to it so far: the report, the command line and
its configuration, the dry run. Add a package here once its functions are all short."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "ipcbench"
HELD = ["report", "cli.py", "config.py", "sizes.py", "errors.py", "run/dryrun.py"]
MAX_LINES = 60


def test_no_function_over_60_lines():
    files = [f for h in HELD for f in ((PACKAGE / h).rglob("*.py") if (PACKAGE / h).is_dir() else [PACKAGE / h])]
    assert len(files) > 15
    long = [f"{f.relative_to(PACKAGE)}:{n.lineno} {n.name} ({n.end_lineno - n.lineno + 1} lines)"
            for f in files for n in ast.walk(ast.parse(f.read_text()))
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.end_lineno - n.lineno + 1 > MAX_LINES]
    assert not long, long
