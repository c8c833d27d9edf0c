"""Which methods x directions x sizes make each suite. `all` is the list of suites in SUITE_ORDER.

A suite is a list of Steps. A Step is one thing measured over the node's pair schedule: for each of
its pairs the two ranks of the pair run it while the others wait (DESIGN rule 4), or, for a
concurrent step, all ranks of the node run it together. This module only plans; it imports no CUDA.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .world import ordered_pairs, unordered_pairs


@dataclass
class Step:
    suite: str
    label: str
    pairs: list[tuple[int, int]]  # node-local (src, dst); [] for a concurrent step
    sizes: list[int]
    run: Callable  # run(ctx, src, dst, sizes) -> rows (pair step) / run(ctx, sizes) -> rows (concurrent)
    concurrent: bool = False
    needs: tuple[str, ...] = ()  # buffer kinds it needs ("legacy", "pool")
    cost: float = 1.0  # relative cost of one measurement, for the ETA

    @property
    def measurements(self) -> int:
        return len(self.sizes) * (1 if self.concurrent else len(self.pairs))


@dataclass
class SuiteSpec:
    name: str
    about: str
    steps: Callable[[int, list[int]], list[Step]]  # (local ranks, sizes) -> steps


def _pair_method_steps(suite: str, method_names: list[str], n: int, sizes: list[int]) -> list[Step]:
    from .methods import METHODS

    steps = []
    for name in method_names:
        m = METHODS[name]
        for d in m.directions:
            pairs = unordered_pairs(n) if d == "bidir" else ordered_pairs(n)
            steps.append(Step(suite, f"{name} {d}", pairs, sizes, _pair_runner(suite, name, d),
                              needs=(m.buffers,), cost=2.0 if d == "bidir" else 1.0))
    return steps


def _pair_runner(suite: str, method_name: str, direction: str):
    def run(ctx, src, dst, sizes):
        from .measure import measure_pair
        from .methods import METHODS

        return measure_pair(ctx, suite, METHODS[method_name], direction, src, dst, sizes)

    return run


def _alltoall_step(suite: str, method_name: str, n: int, sizes: list[int]) -> list[Step]:
    big = [s for s in sizes if s >= 4 << 20] or sizes[-1:]
    if n < 3:
        return []  # with two ranks all-to-all is the bidirectional pair, already measured

    def run(ctx, sizes):
        from .alltoall import measure_alltoall
        from .methods import METHODS

        return measure_alltoall(ctx, METHODS[method_name], sizes, suite)

    return [Step(suite, f"{method_name} all-to-all", [], big, run, concurrent=True,
                 needs=("legacy",), cost=float(n))]


def copy_steps(n: int, sizes: list[int]) -> list[Step]:
    return _pair_method_steps("copy", ["ce"], n, sizes) + _alltoall_step("copy", "ce", n, sizes)


def kernel_steps(n: int, sizes: list[int]) -> list[Step]:
    return _pair_method_steps("kernel", ["sm_read", "sm_write"], n, sizes)


def pool_steps(n: int, sizes: list[int]) -> list[Step]:
    return _pair_method_steps("pool", ["pool_ce", "pool_sm_read", "pool_sm_write"], n, sizes)


def latency_steps(n: int, sizes: list[int]) -> list[Step]:
    from .latency import lat_sizes

    small = lat_sizes(sizes)

    def oneway(method, direction):
        def run(ctx, src, dst, sizes):
            from .latency import oneway_copy

            return oneway_copy(ctx, method, direction, src, dst, sizes)

        return Step("latency", f"{method} one-way", ordered_pairs(n), small, run, needs=("legacy",))

    def pingpong(kind):
        def run(ctx, src, dst, sizes):
            from . import latency

            return getattr(latency, kind)(ctx, src, dst, sizes)

        return Step("latency", kind.replace("_", " "), unordered_pairs(n), [4], run, needs=("legacy",), cost=3.0)

    def staged(method):
        def run(ctx, src, dst, sizes):
            from . import staged as st

            fn = st.run_shm_staged if method == "shm_staged" else st.run_mpi_staged
            rows = fn(ctx, src, dst, small, suite="latency")
            for r in rows:  # the same host paths as the staged suite, at the small sizes, as one-way times
                r.direction = "oneway"
                r.note = "push: time per message; " + r.note
            return rows

        return Step("latency", f"{method} one-way", ordered_pairs(n), small, run, cost=1.5)

    return [oneway("ce", "push"), oneway("sm_write", "push"), oneway("sm_read", "pull"),
            staged("shm_staged"), staged("mpi_staged"), pingpong("sm_pingpong"), pingpong("event_pingpong")]


SUITES: dict[str, SuiteSpec] = {}
SUITE_ORDER: list[str] = []


def register(name: str, about: str, steps: Callable[[int, list[int]], list[Step]]) -> None:
    SUITES[name] = SuiteSpec(name, about, steps)
    if name not in SUITE_ORDER:
        SUITE_ORDER.append(name)


register("copy", "copy engine (cudaMemcpyAsync) into and out of a peer's legacy-IPC buffer: push, pull, "
         "bidir, and all pairs at once", copy_steps)
register("kernel", "SM kernels reading (sm_read) and writing (sm_write) a peer's memory over P2P", kernel_steps)
register("pool", "the copy and kernel methods on pointers imported from peers' IPC memory pools "
         "(POSIX fds over a Unix socket)", pool_steps)
register("latency", "small messages (4 B - 64 KiB) one way by ce/sm, a device-side P2P flag ping-pong, and "
         "interprocess-event ping-pong", latency_steps)


CANONICAL_ORDER = ("copy", "kernel", "pool", "staged", "latency", "handles", "pipeline")


def _ordered_suites() -> list[str]:
    """Registered suites, the documented ones in their documented order, any others after them."""
    known = [s for s in CANONICAL_ORDER if s in SUITES]
    return known + [s for s in SUITE_ORDER if s not in known]


def resolve(names: list[str]) -> list[str]:
    """Expand `all`, keep the given order otherwise, reject unknown names with the list of known ones."""
    out: list[str] = []
    for n in names:
        if n == "all":
            out.extend(s for s in _ordered_suites() if s not in out)
        elif n in SUITES:
            if n not in out:
                out.append(n)
        else:
            raise KeyError(f"unknown suite {n!r} (known: all, {', '.join(_ordered_suites())})")
    return out


def plan(names: list[str], n_local: int, sizes: list[int]) -> list[Step]:
    steps: list[Step] = []
    for name in resolve(names):
        steps.extend(SUITES[name].steps(n_local, sizes))
    return steps


from . import handles, pipeline  # noqa: E402,F401
from . import suite_staged  # noqa: E402,F401
