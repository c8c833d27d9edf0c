"""The package's layering, read from its source (ast: nothing of the measuring side is imported here):
no import circles, imports that point one way between packages, the modules that must import no CUDA or
MPI at import time, and collective calls that say so. docs/architecture.md."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "ipcbench"


def modules() -> dict[str, Path]:
    out = {}
    for p in sorted(PACKAGE.rglob("*.py")):
        name = ".".join(p.relative_to(ROOT).with_suffix("").parts)
        out[name.removesuffix(".__init__")] = p
    return out


def named_imports(node: ast.AST) -> list[str]:
    """What an `importlib.import_module(...)` call names: each "ipcbench.x.y" string in its argument, and the fixed
    start of an f-string (f"ipcbench.ipc.{name}": the package ipcbench.ipc, whichever module it becomes)."""
    if not (isinstance(node, ast.Call) and node.args and (getattr(node.func, "attr", None) == "import_module"
                                                          or getattr(node.func, "id", None) == "import_module")):
        return []
    out = []
    for sub in ast.walk(node.args[0]):
        if isinstance(sub, ast.Constant) and isinstance(sub.value, str) and sub.value.startswith("ipcbench."):
            out.append(sub.value.rstrip("."))
        elif isinstance(sub, ast.JoinedStr) and sub.values and isinstance(sub.values[0], ast.Constant):
            fixed = str(sub.values[0].value)
            if fixed.startswith("ipcbench."):
                out.append(fixed.rsplit(".", 1)[0] if not fixed.endswith(".") else fixed[:-1])
    return out


def imports_of(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The ipcbench modules `name` imports anywhere in its source (module top or inside a function), by an import
    statement or by name (importlib.import_module: a string that names a module, or the package an f-string's
    fixed start names): a string import that goes up the layers is an import that goes up the layers."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.Call):
            targets = named_imports(node)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = name.split(".")[: len(name.split(".")) - node.level + (path.name == "__init__.py")]
                base = ".".join(parts + ([base] if base else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        for t in targets:
            while t not in known and "." in t:
                t = t.rsplit(".", 1)[0]
            if t in known and t != name and t.startswith("ipcbench."):
                found.add(t)
    return found


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports_of(name, path, known) for name, path in known.items()}


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in edges:
        if v not in index:
            visit(v)
    return out


def test_no_import_circles():
    """Sharers and suites are found by name within their own package (ipc/sharers.py, suites/registry.py), and a
    two-sided engine's pair transfer is registered with core by its ipc module (core/methods.register_pair_transfer),
    so no module imports one that imports it back, at the top or inside a function, by a statement or by name."""
    assert circles(graph()) == []


def test_a_string_import_counts_as_an_import(tmp_path):
    """core/methods.py once imported f"ipcbench.ipc.{module}" while ipc/nccl.py imports core.methods: a core <-> ipc
    loop no import statement showed. The import by name is an edge of the graph, to the package of the f-string's
    fixed part where the module is not fixed."""
    known = {"ipcbench.core.x": Path("x"), "ipcbench.ipc": Path("i"), "ipcbench.ipc.nccl": Path("n")}
    code = ('import importlib\n'
            'def f(m):\n    return importlib.import_module(f"ipcbench.ipc.{m}")\n'
            'def g():\n    return importlib.import_module("ipcbench.ipc.nccl")\n')
    probe = tmp_path / "x.py"
    probe.write_text(code)
    assert imports_of("ipcbench.core.x", probe, known) == {"ipcbench.ipc", "ipcbench.ipc.nccl"}
    edges = package_graph()
    assert "ipc" not in edges.get("core", set())  # core names no ipc module, not even as a string


def package_of(module: str) -> str:
    return module.split(".")[1] if module.count(".") else module


# What each package may import besides itself: imports point down, never back up, and no two packages import each
# other (test_no_package_circles). The catalogue (methods, suites' rows, link rates) is the bottom both sides stand on;
# the reading side (record/, judging/, report/, check --from) imports nothing of the measuring side (core/, ipc/,
# suites/, run/, config). judging/ (row matching, validity, ceilings, significance, compare's engine, check's judge,
# expectations, evidence rules and findings) sits below report/ (rendering) and check/ (the gate), above record/,
# evidence/ and the catalogue: report/ and check/ never import each other, not even inside a function.
MAY_IMPORT = {
    "catalogue": {"results"},
    # the node's evidence: its record (model, delta) is pure, read.py imports pynvml inside its functions
    "evidence": {"catalogue"},
    "core": {"catalogue", "errors", "results"},
    "ipc": {"core", "errors"},
    "suites": {"catalogue", "core", "ipc", "errors", "results", "sizes"},
    "config": {"core", "errors", "sizes", "suites"},
    "run": {"ipcbench", "catalogue", "config", "core", "evidence", "ipc", "record", "suites", "errors", "results",
            "sizes"},
    "selftest": {"catalogue", "config", "core", "judging", "run", "suites", "errors", "sizes", "status"},
    "record": {"catalogue", "errors", "evidence", "results", "sizes"},
    "judging": {"catalogue", "evidence", "record", "errors", "results", "sizes", "status"},
    "report": {"ipcbench", "catalogue", "evidence", "judging", "record", "errors", "results", "sizes", "status"},
    "check": {"catalogue", "evidence", "judging", "record", "errors", "results", "sizes", "status"},
}
# check measures too: these modules reach the measuring side, and only inside functions (a check --from, the
# layer above, never loads them; test_check_reaches_the_measuring_side_only_lazily).
CHECK_MEASURES = {"ipcbench.check.plan": {"core", "suites"}, "ipcbench.check.command": {"config", "run"}}


def package_graph() -> dict[str, set[str]]:
    """{package: the other packages its modules import}, at the top or inside a function."""
    out: dict[str, set[str]] = {}
    for m, ts in graph().items():
        out.setdefault(package_of(m), set()).update(package_of(t) for t in ts if package_of(t) != package_of(m))
    return out


def test_no_package_circles():
    """No two packages import each other, directly or through others (report and check once did, through a lazy
    import in report/headline.py): neither the imports found nor the rules allow a circle."""
    assert circles(package_graph()) == []
    assert circles({p: set(ts) | set().union(*(CHECK_MEASURES[m] for m in CHECK_MEASURES if package_of(m) == p))
                    for p, ts in MAY_IMPORT.items()}) == []


def test_report_and_check_never_import_each_other():
    edges = package_graph()
    assert "check" not in edges.get("report", set()) and "report" not in edges.get("check", set())
    assert edges.get("judging", set()) <= MAY_IMPORT["judging"]


@pytest.mark.parametrize("package", sorted(MAY_IMPORT))
def test_imports_point_one_way(package):
    above = {(m, t) for m, ts in graph().items() if package_of(m) == package for t in ts
             if package_of(t) != package and package_of(t) not in MAY_IMPORT[package] | CHECK_MEASURES.get(m, set())}
    assert above == set()


def top_level_imports(path: Path) -> set[str]:
    """The modules a file imports at its top (not inside a function)."""
    out = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
    return out


def test_check_reaches_the_measuring_side_only_lazily():
    """check/plan.py and check/command.py measure, so they may import the measuring side, inside functions only:
    importing them (check --from) loads none of it."""
    known = modules()
    eager = {(m, t) for m in CHECK_MEASURES for t in top_level_imports(known[m])
             if t.startswith("ipcbench.") and package_of(t) in CHECK_MEASURES[m]}
    assert eager == set()


# Reading a run (report, compare, check --from) loads none of the measuring side: no NCCL, fdpass or suite code.
READER = """
import sys
import ipcbench.record.run, ipcbench.report.command, ipcbench.report.compare_command, ipcbench.check.command
print(" ".join(sorted(m for m in sys.modules if m.split(".")[:2] in (["ipcbench", "suites"], ["ipcbench", "core"],
                                                                      ["ipcbench", "ipc"], ["ipcbench", "run"]))))
"""


def test_reading_a_run_loads_no_measuring_module():
    res = subprocess.run([sys.executable, "-c", READER], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == []


# The real command line, run as a user runs it, on recorded runs: `ipcbench report` (figures included) and `ipcbench
# compare` load no module of core/, suites/, ipc/ or run/ (cli.py imports config.py, which reaches them, only for a
# measuring command). Its stdout is left out; the modules it loaded are written to a file at its exit.
MEASURING = ("core", "suites", "ipc", "run")
LOADED = """
import atexit, sys
def loaded():
    with open(sys.argv[1], "w") as fh:
        fh.write(" ".join(sorted(m for m in sys.modules if m.startswith("ipcbench."))))
atexit.register(loaded)
from ipcbench.cli import main
sys.exit(main(sys.argv[2:]))
"""
RUNS = ROOT / "tests" / "data" / "results-1126"


@pytest.mark.parametrize("argv", [["report", str(RUNS / "h200x2-all-1"), str(RUNS / "h200x2-check-1"), "--quiet"],
                                  ["compare", str(RUNS / "h200x2-all-1"), str(RUNS / "h200x2-all-2")],
                                  ["compare", str(RUNS / "h200x2-all-1"), str(RUNS / "h200x2-all-2"),
                                   str(RUNS / "h200x2-all-3"), "--format", "csv"],
                                  ["check", "--from", str(RUNS / "h200x2-check-1")]])
def test_report_compare_and_check_from_load_no_measuring_module(argv, tmp_path):
    out = ["--out", str(tmp_path / "report")] if argv[0] == "report" else []
    res = subprocess.run([sys.executable, "-c", LOADED, str(tmp_path / "loaded"), *argv, *out], capture_output=True,
                         text=True, cwd=tmp_path, timeout=300)
    assert res.returncode in (0, 1), res.stderr
    loaded = (tmp_path / "loaded").read_text().split()
    assert "ipcbench.judging.judge" in loaded or argv[0] == "compare"  # it ran: the judging layer was loaded
    assert "ipcbench.judging.compare" in loaded or argv[0] != "compare"
    assert [m for m in loaded if m.split(".")[1] in MEASURING] == []


# Modules that `--help`, `report`, `compare`, `--version`, a dry run (through run/runner.py), and `info` and
# `selftest` before their GPU work import, and a plan (config -> suites/registry.plan -> every suite module):
# no CUDA, no MPI (importing mpi4py.MPI initialises MPI), no pandas or matplotlib.
GPU_FREE = """
import sys
import ipcbench.cli, ipcbench.config, ipcbench.errors, ipcbench.results, ipcbench.run.meta, ipcbench.sizes
from ipcbench.suites import registry
registry.plan(list(registry.ORDER), 8, [4096, 1 << 20])
for name in registry.ORDER:
    for method in registry.spec(name).rows:
        registry.row_facts(name, method)
import ipcbench.core.bulk, ipcbench.core.link_rates, ipcbench.core.sampler, ipcbench.core.schedule
import ipcbench.info, ipcbench.run.dryrun, ipcbench.run.runner, ipcbench.selftest.command
import ipcbench.record.run, ipcbench.report.command, ipcbench.report.compare_command, ipcbench.check.command
heavy = ("cupy", "mpi4py", "cuda.bindings", "cuda.core", "pynvml", "pandas", "matplotlib")
print(" ".join(m for m in heavy if m in sys.modules))
"""


def test_the_gpu_free_modules_import_no_cuda_mpi_or_pandas():
    res = subprocess.run([sys.executable, "-c", GPU_FREE], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == []


EVERY_MODULE = """
import importlib, pkgutil, sys
import ipcbench
for m in pkgutil.walk_packages(ipcbench.__path__, "ipcbench."):
    if m.name != "ipcbench.__main__":  # runs the command line
        importlib.import_module(m.name)
print("mpi4py" in sys.modules)
"""


def test_importing_a_module_never_initialises_mpi():
    """Only the functions that talk MPI import mpi4py (core/world.py, ipc/fdpass.py, ...): importing a module,
    as the tests, `ipcbench info` and the plan do, never starts MPI."""
    res = subprocess.run([sys.executable, "-c", EVERY_MODULE], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["False"]


# Calls that every rank of a node, or both ranks of a pair, must make in the same order: each says so first.
COLLECTIVE = {
    "ipc/pool.py": ["PoolIpc", "sharer"],
    "ipc/cucore.py": ["CoreIpc", "sharer"],
    "ipc/vmm.py": ["share_fd_exports", "VmmIpc.allgather_exports"],
    "ipc/buffers.py": ["BufferSet.create", "BufferSet.destroy"],
    "ipc/fdpass.py": ["FdExchange", "FdExchange.exchange"],
    "ipc/nccl.py": ["NcclPair.create", "NcclTransfer.batch", "pair_for", "pair_transfer"],
    "ipc/sharers.py": ["node_has", "setup_gpu_features", "setup_libraries", "setup_buffers", "destroy_buffers"],
    "ipc/shm.py": ["agree", "malloc_agreed", "open_pair_segment"],
    "core/methods.py": ["Method.bind", "PairEngine.bind"],
    "evidence/take.py": ["start_snapshot", "Reading.done", "record"],
    "run/shm_release.py": ["arm"],
}


def docstrings(path: Path) -> dict[str, str]:
    out = {}
    tree = ast.parse(path.read_text())
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            out[node.name] = ast.get_docstring(node) or ""
            if isinstance(node, ast.ClassDef):
                for sub in node.body:
                    if isinstance(sub, ast.FunctionDef):
                        out[f"{node.name}.{sub.name}"] = ast.get_docstring(sub) or ""
    return out


@pytest.mark.parametrize("path", sorted(COLLECTIVE))
def test_collective_calls_say_so_first(path):
    docs = docstrings(PACKAGE / path)
    assert [name for name in COLLECTIVE[path] if not docs[name].startswith("Collective over ")] == []


def test_every_package_is_installed():
    """pyproject.toml lists its packages by name: a package missing there is left out of a wheel or a plain
    `pip install .` (the catalogue once was: every run, report and compare then failed to import), while an
    editable install, as CI's, still finds it."""
    import tomllib

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "ipcbench").rglob("__init__.py")}
    assert found <= listed, sorted(found - listed)


# No function over 60 lines where the judging layer, its two users and the command line live (run/runner.py's
# `start` and the suites' measurement loops are longer: issue 37 names them). A long function is where rules hide.
SHORT = ["judging", "check", "report", "selftest", "evidence", "cli.py", "config.py", "status.py"]


def test_no_function_over_60_lines_on_the_reading_side():
    long = [f"{p.relative_to(ROOT)}:{n.lineno} {n.name} ({n.end_lineno - n.lineno + 1} lines)"
            for part in SHORT for p in sorted((PACKAGE / part).rglob("*.py") if (PACKAGE / part).is_dir()
                                              else [PACKAGE / part])
            for n in ast.walk(ast.parse(p.read_text())) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
            and n.end_lineno - n.lineno + 1 > 60]
    assert long == []
