"""core/phases.py: exclusive time per nested phase, on a fake clock (pure logic)."""

from __future__ import annotations

import json

from ipcbench.core.phases import Phases, table

from conftest import tool


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_each_second_is_charged_to_the_innermost_open_phase_once():
    c = Clock()
    p = Phases(clock=c)
    with p.phase("measure"):
        c.t += 1.0
        with p.phase("gpu"):
            c.t += 2.0
        with p.phase("gpu"):
            c.t += 0.5
        c.t += 0.25
    c.t += 9.0  # outside any phase: nobody's
    snap = p.snapshot()
    assert snap == {"measure/gpu": {"s": 2.5, "n": 2}, "measure": {"s": 1.25, "n": 1}}
    assert sum(v["s"] for v in snap.values()) == 3.75


def test_a_wrapped_function_is_one_span_and_errors_still_close_it():
    c = Clock()
    p = Phases(clock=c)

    @p.wrap("start")
    def start():
        c.t += 1.0
        raise ValueError("boom")

    try:
        start()
    except ValueError:
        pass
    with p.phase("after"):
        c.t += 1.0
    assert p.snapshot() == {"start": {"s": 1.0, "n": 1}, "after": {"s": 1.0, "n": 1}}


def test_the_table_and_the_command_read_meta_json(tmp_path, capsys):
    main = tool("phases").main
    per_rank = {"rank 0": {"measure/gpu": {"s": 2.0, "n": 3}}, "rank 1": {"measure/gpu": {"s": 1.0, "n": 3}}}
    text = table(per_rank, wall_s=4.0)
    assert "measure/gpu" in text and "50.0%" in text
    (tmp_path / "meta.json").write_text(json.dumps({"rows": 3, "wall_s": 4.0, "time_breakdown_s": per_rank}))
    old = tmp_path / "old"
    old.mkdir()
    (old / "meta.json").write_text(json.dumps({"rows": 3, "wall_s": 4.0}))
    assert main([str(tmp_path), str(old)]) == 0
    out = capsys.readouterr().out
    assert "measure/gpu" in out and "no time breakdown recorded" in out
    assert main([str(tmp_path / "missing")]) == 2
    (old / "meta.json").write_text(json.dumps({"rows": 3, "wall_s": "4"}))  # read through the record: strictly
    assert main([str(old)]) == 2 and "field wall_s" in capsys.readouterr().err


def test_threads_nest_their_own_phases_and_no_time_is_negative():
    """Two threads inside phases at once (a helper thread, or the CPU tests' ranks, which run as threads): each
    charges its own spans from its own mark. With one stack and mark for the process, their spans interleaved into
    paths like "a/b/a" and a span charged from the other thread's later mark came out negative, which meta.json's
    record refuses."""
    import threading
    import time

    p = Phases()
    start = threading.Barrier(2)

    def work(name: str) -> None:
        start.wait()
        for _ in range(200):
            with p.phase(name):
                time.sleep(0)  # the other thread runs here, inside its own phases
                with p.phase("inner"):
                    time.sleep(0)

    threads = [threading.Thread(target=work, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    snap = p.snapshot()
    assert set(snap) == {"a", "a/inner", "b", "b/inner"}
    assert all(v["s"] >= 0 for v in snap.values()) and all(v["n"] == 200 for v in snap.values())
