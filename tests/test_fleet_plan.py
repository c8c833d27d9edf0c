"""Fleet planning by simulation: `mpiexec -n 8` split into pretend nodes (IPCBENCH_NODE_KEY, test-only)
runs `ipcbench all --dry-run`; the plan must count nodes, ranks per node and pairs formed within nodes
only. No GPU: a dry run does no GPU work."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import launcher_free_env, mpiexec_or_skip

from ipcbench.config import QUICK_SIZES
from ipcbench.core.schedule import decide_mode
from ipcbench.run.walk import measured
from ipcbench.sizes import parse_sizes
from ipcbench.suites.registry import plan


@pytest.mark.timeout(300)
@pytest.mark.parametrize("nodes,per_node", [(2, 4), (4, 2)])
def test_pretend_fleet_plan(nodes, per_node):
    n = nodes * per_node
    script = (f'IPCBENCH_NODE_KEY=pretend$(( ${{PMI_RANK:-${{OMPI_COMM_WORLD_RANK:-0}}}} / {per_node} )) '
              f'exec "{sys.executable}" -m ipcbench all --quick --dry-run --json')
    env = launcher_free_env()
    p = subprocess.run([mpiexec_or_skip(), "-n", str(n), "sh", "-c", script], capture_output=True, text=True,
                       timeout=240, env=env)
    assert p.returncode == 0, p.stderr[-2000:]
    got = json.loads(p.stdout)  # rank 0 alone prints, one JSON object
    assert got["nodes"] == nodes and got["ranks"] == n
    assert got["hosts"] == [f"pretend{i}" for i in range(nodes)]
    assert got["ranks_per_node"] == {f"pretend{i}": per_node for i in range(nodes)}
    # Pairs never cross nodes: the per-node plan is the plan of `per_node` ranks (no NVML here: one pair at a
    # time; --quick: the serial steps on a ring).
    mode = decide_mode("auto", 1, None, per_node, "auto", quick=True)
    assert got["pair_mode"] == mode.as_dict() and mode.serial.ring
    expected = sum(measured(s, mode) for s in plan(["all"], per_node, parse_sizes(QUICK_SIZES), quick=True))
    assert got["measurements"] == expected
    assert got["pairs"] == per_node * (per_node - 1)
