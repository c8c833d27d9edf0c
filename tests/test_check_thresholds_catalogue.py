"""A thresholds file is held against what the rows can be (judging/expect.py): the methods, engines, directions and
link kinds of the catalogue (ipcbench/catalogue/), the evidence items the rules read, a GPU pattern that can match
a name; what it names that the catalogue does not know is refused with FILE:LINE (exit 2), never silently ignored
(before, `method = "sm-read"` judged nothing and the node was HEALTHY). A GPU pattern that matches no model
ipcbench has measured may be a site's new GPU: kept, with a warning naming its line. A floor above the pair's link
ceiling (catalogue/links.py: NVLink 4.0 x 18 = 478.125 GB/s per direction, twice that both ways) judges nothing:
the rows it names cannot be judged (exit 2), the ceiling named."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from conftest import REPO, ipcbench_cli, launcher_free_env
from ipcbench.catalogue.links import LINK_KINDS
from ipcbench.catalogue.methods import ENGINES, METHOD_FACTS
from ipcbench.catalogue.suites import ROWS
from ipcbench.errors import UsageError
from ipcbench.judging import evidence_rules, expect, judge
from ipcbench.status import Status

QUIET = REPO / "tests" / "data" / "compare" / "quiet1"  # 2 x H200 through NVSwitch (NVLink 4.0 x 18)

ONE = """# a site's thresholds
[[expect]]
gpu = "NVIDIA H200"
link = "nvswitch"
method = "{method}"
direction = "{direction}"
sizes = "64M:1G"
floor_gbps = {floor}
why = "this site's own"
"""


def one(method="ce", direction="push", floor=300, gpu="NVIDIA H200", link="nvswitch") -> str:
    return ONE.format(method=method, direction=direction, floor=floor).replace('"NVIDIA H200"', f'"{gpu}"', 1) \
        .replace('"nvswitch"', f'"{link}"', 1)


def refused(text: str) -> str:
    with pytest.raises(UsageError) as e:
        expect.read(text, "site.toml")
    return str(e.value)


def check(*args: str) -> subprocess.CompletedProcess:
    return ipcbench_cli("check", *args, cwd=REPO, env=launcher_free_env())


# ---- methods, engines, directions, links: the catalogue's ----------------------------------------------------

@pytest.mark.parametrize("method, words", [
    ("sm-read", "site.toml:5: method: 'sm-read' is not a method ipcbench measures (did you mean sm_read?)"),
    ("SM_READ", "site.toml:5: method: 'SM_READ' is not a method ipcbench measures"),
    ("copy", "site.toml:5: method: 'copy' is not a method ipcbench measures"),
    ("ce_alltoall", "site.toml:5: method: 'ce_alltoall' is not a method ipcbench measures"),
    ("sm", "site.toml:5: method: 'sm' is an engine, not a method: its methods are sm_read, sm_write, pool_sm_read, "
           "pool_sm_write, vmm_sm_read, vmm_sm_write"),
    ("sm_bulk", "site.toml:5: method: 'sm_bulk' is an engine, not a method: its methods are sm_bulk_read, "
                "sm_bulk_write"),
])
def test_an_unknown_method_or_an_engine_is_refused_at_its_line(method, words):
    assert refused(one(method=method)).startswith(words)


def test_the_methods_are_the_catalogues_and_an_engine_that_is_also_a_method_is_one():
    assert [e for e in ENGINES if e not in METHOD_FACTS] == ["sm", "sm_bulk"]  # ce and nccl name a method too
    for m, facts in METHOD_FACTS.items():
        for d in facts.directions:
            (e,) = expect.read(one(method=m, direction=d), "site.toml").expect
            assert (e.method, e.direction) == (m, d)


@pytest.mark.parametrize("method, direction, ok", [
    ("sm_read", "push", False), ("sm_read", "pull", True), ("sm_write", "pull", False), ("sm_write", "push", True),
    ("core_ce", "bidir", False), ("nccl", "pull", False), ("nccl", "bidir", True),
    ("ce", "oneway", True), ("sm_read", "oneway", True), ("sm_write", "oneway", True),  # the latency suite's rows
    ("sm_bulk_read", "oneway", False), ("pool_ce", "oneway", False), ("ce", "both", False), ("ce", "op", False)])
def test_a_direction_must_be_one_the_methods_rows_have(method, direction, ok):
    text = one(method=method, direction=direction)
    if ok:
        assert expect.read(text, "site.toml").expect[0].direction == direction
    else:
        said = refused(text)
        assert said.startswith(f"site.toml:6: direction: {direction!r} is not a direction of {method}'s rows "
                               f"(its rows: {', '.join(expect.directions_of(method))})"), said


def test_a_methods_directions_come_from_the_catalogue():
    for m, facts in METHOD_FACTS.items():
        assert expect.directions_of(m) == facts.directions + (("oneway",) if m in ROWS["latency"] else ())
    assert {m for m in METHOD_FACTS if "oneway" in expect.directions_of(m)} == {"ce", "sm_read", "sm_write"}


def test_the_link_kinds_are_the_catalogues_and_same_gpu():
    assert set(expect.LINKS) == (set(LINK_KINDS) - {"unknown"}) | {"same_gpu"}
    for link in expect.LINKS:
        assert expect.read(one(link=link), "site.toml").expect[0].link == link
    assert refused(one(link="unknown")).startswith("site.toml:4: link: 'unknown' is not one of")


def test_a_users_file_with_an_unknown_method_stops_check_with_one_line(tmp_path):
    f = tmp_path / "site.toml"
    f.write_text(one(method="sm-read"))
    p = check("--from", str(QUIET), "--thresholds", str(f))
    assert p.returncode == 2 and p.stdout.startswith(f"REASON: cannot judge: {f}:5: method: "), p.stdout
    assert p.stderr == f"ipcbench: error: {f}:5: method: 'sm-read' is not a method ipcbench measures (did you mean " \
                       f"sm_read?); methods: {', '.join(METHOD_FACTS)}\n"


# ---- the evidence items: the rules' ----------------------------------------------------------------------------

def test_the_evidence_items_a_table_can_require_are_those_the_rules_read_and_recorded():
    assert expect.ITEMS == (*expect.ITEM_WORDS, "recorded")
    assert evidence_rules.ITEM_WORDS is expect.ITEM_WORDS  # one vocabulary: the rules say each in these words
    text = '[[evidence]]\ngpu = "NVIDIA H200"\nrequire = ["ecc", "nvlink_state"]\nwhy = "w"\n'
    assert refused(text).startswith("site.toml:3: require: 'nvlink_state' is not one of nvlinks, nvlink_speed")
    for item in expect.ITEMS:
        (t,) = expect.read(text.replace('"nvlink_state"', f'"{item}"'), "site.toml").evidence
        assert t.get("require") == ("ecc", item)


# ---- GPU patterns: malformed refused, unknown warned ----------------------------------------------------------

@pytest.mark.parametrize("gpu, words", [(" NVIDIA H200", "has spaces at its ends"),
                                        ("NVIDIA H200 ", "has spaces at its ends"),
                                        ("NVIDIA [H200", "opens a '[' it never closes"),
                                        ("NVIDIA H[12]00 [", "opens a '[' it never closes")])
def test_a_gpu_pattern_that_can_match_no_name_is_refused(gpu, words):
    assert refused(one(gpu=gpu)).startswith(f"site.toml:3: gpu: {gpu!r} {words}")
    ev = f'# mine\n[[evidence]]\ngpu = "{gpu}"\nnvlinks = 18\nwhy = "w"\n'
    assert refused(ev).startswith(f"site.toml:3: gpu: {gpu!r} {words}")


def test_the_models_ipcbench_knows_are_those_its_shipped_tables_name():
    assert expect.known_models() == ("NVIDIA H100 80GB HBM3", "NVIDIA H200")
    assert expect.shipped().warnings == ()


@pytest.mark.parametrize("gpu", ["NVIDIA H200", "*", "NVIDIA H*", "*H100*", "NVIDIA H[12]00*"])
def test_a_pattern_matching_a_known_model_is_said_nothing_of(gpu):
    assert expect.read(one(gpu=gpu), "site.toml").warnings == ()


@pytest.mark.parametrize("gpu, hint", [
    ("NVIDIA B200", "check the spelling against NVML's name: nvidia-smi --query-gpu=name --format=csv"),
    ("NVIDIA H200 NVL", "check the spelling"),
    ("nvidia h200", "it matches NVIDIA H200 only ignoring case, and patterns are case-sensitive"),
    ("*h100*", "it matches NVIDIA H100 80GB HBM3 only ignoring case")])
def test_a_pattern_matching_no_known_model_is_kept_with_a_warning_at_its_line(gpu, hint):
    got = expect.read("\n" + one(gpu=gpu), "site.toml")
    (e,) = got.expect
    assert e.gpu == gpu and e.where == "site.toml:3"  # kept: a site's new GPU is judged by it
    (w,) = got.warnings
    assert w.startswith(f"site.toml:4: gpu: {gpu!r} matches no GPU model ipcbench has measured (NVIDIA H100 80GB "
                        f"HBM3, NVIDIA H200): kept for a GPU it has not measured, but ") and hint in w, w
    ev = expect.read(f'[[evidence]]\nnvlinks = 18\ngpu = "{gpu}"\nwhy = "w"\n', "site.toml")
    assert len(ev.evidence) == 1 and ev.warnings[0].startswith(f"site.toml:3: gpu: {gpu!r} matches no GPU model")


def test_check_says_the_warning_once_and_judges_as_without_it(tmp_path):
    f = tmp_path / "site.toml"
    f.write_text(one(gpu="NVIDIA B200"))
    p = check("--from", str(QUIET), "--thresholds", str(f))
    assert p.returncode == 0, p.stdout + p.stderr
    warning = f"ipcbench: warning: {f}:3: gpu: 'NVIDIA B200' matches no GPU model ipcbench has measured"
    assert p.stderr.startswith(warning) and p.stderr.count("\n") == 1, p.stderr
    j = check("--from", str(QUIET), "--thresholds", str(f), "--json")
    assert j.returncode == 0 and json.loads(j.stdout)["warnings"][0].startswith(f"{f}:3: gpu: 'NVIDIA B200'")
    assert json.loads(check("--from", str(QUIET), "--json").stdout)["warnings"] == []


# ---- a floor above the link's physical ceiling ----------------------------------------------------------------

def _pair_run(direction: str, gbps: float, link: str = "nvswitch"):
    """One H200 row of GPU 0 -> GPU 1 through a link of 18 NVLink 4.0 links (ceiling 478.125 GB/s per direction)."""
    import pandas as pd

    from ipcbench.record.meta import parse_meta
    from ipcbench.record.run import Run

    links = [{"src_gpu": 0, "dst_gpu": 1, "kind": link, "nvlink_count": 18, "nvlink_version": "4.0"}]
    meta = parse_meta({"hosts": ["h"], "topology": {"h": {"links": links}}})
    frame = pd.DataFrame([dict(host="h", method="ce", direction=direction, kind="bandwidth", timing="gated",
                               bytes=256 << 20, src_rank=0, dst_rank=1, src_gpu=0, dst_gpu=1, verified=True,
                               bw_gbps_median=gbps, time_us_median=1.0, note="", same_gpu=False)])
    return Run("r", Path("r"), Path("r/results.csv"), meta, frame), next(frame.itertuples())


@pytest.mark.parametrize("direction, floor, status", [
    ("push", 478.125, Status.FAIL), ("push", 478.2, Status.UNJUDGED), ("push", 99999, Status.UNJUDGED),
    ("bidir", 956.25, Status.FAIL), ("bidir", 956.3, Status.UNJUDGED), ("bidir", 500.0, Status.FAIL)])
def test_a_floor_above_the_links_ceiling_cannot_judge_the_row(direction, floor, status):
    """At the ceiling a floor still judges (a 400 GB/s row fails it); above it no link of the pair could pass,
    so the expectation is wrong: the row is not judged by it (exit 2, never 1 for the node)."""
    run, r = _pair_run(direction, 400.0)
    e = expect.Expectation("NVIDIA H200", "nvswitch", "ce", direction, 1, 1 << 30, floor_gbps=floor, why="w",
                           where="site.toml:2")
    c = judge._against(run, r, e)
    assert c.status is status and c.by == "site.toml:2", c
    if status is Status.UNJUDGED:
        both = ", both ways" if direction == "bidir" else ""
        ceiling = "956" if direction == "bidir" else "478"
        assert c.brief == f"GPU 0 -> GPU 1 ce {direction} 256M: floor {floor:.0f} GB/s above the link's ceiling " \
                          f"{ceiling} GB/s (its signalling rate)"
        peak = "900" if direction == "bidir" else "450"
        assert f"is above the link's physical ceiling {ceiling} GB/s (18 x 26.5625 GB/s, NVLink 4.0 per " \
               f"direction{both}: its signalling rate, above the {peak} GB/s peak quoted as its data rate; " \
               "catalogue/links.py): the pair's link cannot reach it" in c.reason


def test_a_floor_as_a_share_of_the_peak_is_never_above_the_ceiling_and_a_pair_without_one_is_judged():
    run, r = _pair_run("push", 400.0)
    e = expect.Expectation("*", "nvswitch", "ce", "push", 1, 1 << 30, floor_peak=1.0, why="w", where="f:1")
    assert judge._against(run, r, e).status is Status.FAIL  # 100% of the 450 GB/s peak: 450 < 478
    run.meta.links.clear()  # no link table: no ceiling known, the floor judges as given
    e = expect.Expectation("*", "nvswitch", "ce", "push", 1, 1 << 30, floor_gbps=99999, why="w", where="f:1")
    assert judge._against(run, r, e).status is Status.FAIL


def test_check_from_a_run_with_a_floor_above_the_ceiling_is_exit_2_naming_it(tmp_path):
    f = tmp_path / "site.toml"
    f.write_text(one(floor=99999))
    p = check("--from", str(QUIET), "--thresholds", str(f))
    assert p.returncode == 2, p.stdout
    assert "?? [thresholds] GPU 0 -> GPU 1 ce push 128M: floor 99999 GB/s above the link's ceiling 478 GB/s (its " \
        "signalling rate)" in \
        p.stdout.replace("??   ", "?? ")
    assert "FAIL" not in p.stdout  # the node is not blamed for an expectation no link can meet


# ---- --verbose: what judged each row ---------------------------------------------------------------------------

def test_verbose_says_which_expectation_judged_each_row(tmp_path):
    f = tmp_path / "site.toml"
    f.write_text(one(floor=300))
    p = check("--from", str(QUIET), "--thresholds", str(f), "--verbose", "--baseline", str(QUIET.with_name("quiet2")))
    assert p.returncode == 0, p.stdout
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("  ok ")]
    mine = [ln for ln in lines if "[thresholds]" in ln and " ce push " in ln and "GB/s" in ln]
    assert len(mine) == 4 and all(ln.endswith(f"(judged by {f}:2)") for ln in mine), mine  # 2 pairs x 128M, 512M
    shipped = [ln for ln in lines if "[thresholds]" in ln and ln not in mine]
    assert shipped and all("(judged by ipcbench/judging/defaults.toml:" in ln for ln in shipped)
    assert all(ln.endswith("(judged by peers)") for ln in lines if "[peers]" in ln)
    assert all(ln.endswith("(judged by baseline)") for ln in lines if "[baseline]" in ln)
    assert any("[baseline]" in ln for ln in lines) and any("[peers]" in ln for ln in lines)
    assert "(judged by" not in check("--from", str(QUIET), "--thresholds", str(f)).stdout  # the summary stays short


def test_the_line_a_verdict_names_is_its_expect_table():
    """Every shipped expectation's FILE:LINE is the line of its [[expect]] header, the table's keys below it."""
    text = (REPO / "ipcbench" / "judging" / "defaults.toml").read_text().splitlines()
    for e in expect.defaults():
        n = int(e.where.rsplit(":", 1)[1])
        assert text[n - 1].strip() == "[[expect]]", e.where
        table = text[n:n + 8]
        assert f'method = "{e.method}"' in table and f'direction = "{e.direction}"' in table, e.where
