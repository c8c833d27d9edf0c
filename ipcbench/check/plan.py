"""What `ipcbench check` measures: every GPU pair of the node, the engines a job relies on (the copy engine
both ways, SM kernels reading and writing), at a per-transfer size and a bandwidth size, every row verified,
under --quick's stopping rule; pairs in rounds where the node allows (NVSwitch). Pure: the steps are the
transfer suites' own (suites/transfer.method_steps)."""

from __future__ import annotations

from ipcbench.catalogue.methods import METHOD_FACTS as METHODS
from ipcbench.catalogue.methods import suite_of
from ipcbench.catalogue.suites import ORDER
from ipcbench.judging.judge import METHODS_JUDGED

SIZES = "4K,256M"  # the per-transfer cost and the peak: what the shipped expectations name (judging/defaults.toml)


def check_methods(text: str | None) -> list[str]:
    """--methods: a comma list of one-way transfer methods (copy, kernel, pool, vmm suites, nccl); ValueError
    naming what is not one."""
    if not text:
        return list(METHODS_JUDGED)
    names = [m.strip() for m in text.split(",") if m.strip()]
    bad = [m for m in names if m not in METHODS]
    if bad or not names:
        raise ValueError(f"{', '.join(bad) or 'none given'}: choose from {', '.join(METHODS)}")
    return list(dict.fromkeys(names))


def suites_of(methods: list[str]) -> list[str]:
    """The suites whose steps measure these methods, in the catalogue's suite order."""
    return sorted({"nccl" if m == "nccl" else suite_of(m) for m in methods}, key=ORDER.index)


def make_steps(methods: list[str], sizes: list[int]):
    """make_steps(local_size, gpu_of) for run/runner.start: each method's steps (every direction it has) over
    every ordered pair of the node's ranks (unordered for bidir)."""
    def steps(n: int, _gpu_of):
        from ipcbench.suites.transfer import method_steps, suite_of

        out = []
        for m in methods:
            if m == "nccl":
                from ipcbench.suites import nccl

                out += [s for s in nccl.SUITE.steps(n, list(sizes)) if s.label in ("nccl push", "nccl bidir")]
            else:
                out += method_steps(suite_of(m), [m], n, list(sizes))
        return out

    return steps
