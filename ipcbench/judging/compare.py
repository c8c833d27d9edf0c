"""The engine of `ipcbench compare BASE [BASE ...] NEW`: a statistical compare of runs, usable as a CI regression gate
(report/compare_command.py is its command line, report/compare_view.py its text, markdown and CSV).

The last run is NEW, every run before it a BASE run of the reference code. Rows are matched on (suite, method,
direction, GPUs, bytes) and judged in their natural unit: a change counts when it is larger than --threshold
(default 2%) and than what the row is known to move between runs of the same code (one BASE: both rows' noise
summed; several: the BASE runs' spread, never below both sides' noise; runs older than the between-runs noise:
their within-run noise and the between-runs floor of the row's kind combined, as the current code writes it:
catalogue/noise.py, each side by its own GPU model). Host-timed rows need several BASE runs and must move further
than the tail of their kind (catalogue/noise.HOST_TAIL); time-sliced rows need several and a t-test on their
between-run variation. docs/report.md gives every rule; compare_table.py, significance.py, bounds.py and
compare_verdicts.py hold the pieces, each row's verdict a RowVerdict (row_verdict.py). The gate
fails (exit 1) on a regression, a row missing from NEW (without --subset), an impossible or an invalid NEW row.
pandas only when comparing.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

from ipcbench.errors import UsageError
from ipcbench.judging.bounds import bounds, gpu_model, noise_basis, pct
from ipcbench.judging.compare_table import change, identifying_columns, side_by_side
from ipcbench.judging.compare_verdicts import ENGINE_ORDER, catches, row_verdicts, worst_first
from ipcbench.judging.evidence_notes import compare_warnings
from ipcbench.judging.matching import drop_unplanned, meta_warnings, unplanned_warning
from ipcbench.judging.row_verdict import ORDER, RowVerdict
from ipcbench.judging.significance import BANDS, row_significance
from ipcbench.record.run import Run, load_run, locate
from ipcbench.record.table import Frame

DEFAULT_ALPHA = 0.01
# The smallest change that counts whatever the noise: 2%, so a 3% change of a large transfer (its noise ~0.3%)
# fails the gate; the recorded runs of unchanged code pass at 0% (tests/test_compare_h100x2.py).
DEFAULT_THRESHOLD = 0.02
# the noise rule that judged the rows, by the runs' noise basis (meta.json "noise_basis"; docs/report.md)
NOISE_RULES = {"between-runs": "between-runs noise",
               "within-run": "within-run noise + between-runs floors for runs older than the between-runs noise"}


def _fraction(text: str, what: str, low: float, high: float, example: str) -> float:
    """'0.05' or '5%' -> 0.05, within [low, high) (threshold) or (low, high] (alpha)."""
    t = str(text).strip()
    try:
        v = float(t[:-1]) / 100.0 if t.endswith("%") else float(t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a {what}: {text!r} (use e.g. {example})") from None
    if not (low <= v < high if what == "threshold" else low < v <= high):
        raise argparse.ArgumentTypeError(f"{what} {text!r} out of range: use e.g. {example}")
    return v


def threshold_arg(text: str) -> float:
    return _fraction(text, "threshold", 0.0, 1.0, "0.05 or 5%")


def alpha_arg(text: str) -> float:
    return _fraction(text, "significance level", 0.0, 0.5, "0.01")


def load(path) -> Run:
    """One run of the comparison (a run directory, a tree holding one run, or a CSV file)."""
    return load_run(locate(path))


@dataclass
class Comparison:
    """The outcome: `table` has one row per key (matched, missing from NEW, or new; `invalid` names NEW's
    invalid values), `impossible` NEW's rows above a physical ceiling (ceilings.py), `warnings` what differs
    between the runs, `info` the settings, the noise rule and per kind of row the smallest change caught."""

    table: Frame
    impossible: Frame
    warnings: list[str] = field(default_factory=list)
    info: dict = field(default_factory=dict)

    def counts(self) -> dict[str, int]:
        """How many rows of each RowVerdict (keyed by the verdict, which is its word), NEW's impossible rows and its
        invalid values."""
        v = self.table["verdict"].value_counts()
        out: dict[str, int] = {k: int(v.get(k, 0)) for k in ORDER}
        out["impossible"] = len(self.impossible)
        out["invalid"] = int((self.table["invalid"] != "").sum()) if "invalid" in self.table.columns else 0
        return out

    def failures(self) -> dict[str, int]:
        """What fails the gate, by kind, where any: regressions, NEW's impossible rows and invalid values, and rows
        missing from NEW unless --subset allows them."""
        c = self.counts()
        fail = {"regression": c[RowVerdict.REGRESSION], "impossible": c["impossible"], "invalid": c["invalid"]}
        fail["missing"] = 0 if self.info.get("subset") else c[RowVerdict.MISSING]
        return {k: v for k, v in fail.items() if v}

    @property
    def exit_code(self) -> int:
        return 1 if self.failures() else 0


def compare(bases: list[Run], new: Run, threshold: float = DEFAULT_THRESHOLD, alpha: float = DEFAULT_ALPHA,
            subset: bool = False) -> Comparison:
    """Judge NEW against one or several BASE runs (docs/report.md). Pure over the runs' frames and metas;
    UsageError when the runs share no row."""
    import numpy as np

    bases, said = _distinct(bases, new)
    _whole(bases, new, subset)
    m, new_imp, mode = side_by_side(bases, new)
    m, unplanned = drop_unplanned(m, bases, new)  # rows of sizes NEW never planned: not compared, not missing
    basis = "between-runs" if all(noise_basis(r) == "between-runs" for r in [*bases, new]) else "within-run"
    info = {"mode": mode, "base_runs": len(bases), "base_rows": [len(b.frame) for b in bases],
            "new_rows": len(new.frame), "threshold": threshold, "alpha": alpha, "subset": subset,
            "base_labels": [b.label for b in bases], "new_label": new.label,
            "noise_basis": basis, "noise_rule": NOISE_RULES[basis]}
    matched = (m["_merge"] == "both").to_numpy()
    if not matched.any():
        raise UsageError(f"no common rows between BASE and NEW ({mode}; "
                         f"{' + '.join(map(str, info['base_rows']))} and {info['new_rows']} rows)")
    out = identifying_columns(m)
    g = change(m, out)
    p, exact, use_runs, enough = row_significance(m, out, g, len(bases))
    out["p"] = np.where(matched, p, np.nan)
    out["test"] = np.where(~matched, "", np.where(use_runs, "runs", np.where(exact, "samples", "cv")))
    bound, rule, unchanged_why, no_noise = bounds(m, out, len(bases), basis == "within-run",
                                                  (gpu_model(bases[0]), gpu_model(new)))
    verdict, note, valued = row_verdicts(m, out, g, bound, unchanged_why, p < alpha, enough, threshold, len(bases))
    note = np.where(valued & (no_noise != ""), np.where(note == "", no_noise, note + "; " + no_noise), note)
    out["verdict"], out["note"] = verdict, note
    out["bound"] = np.where(valued, bound, np.nan)
    out["rule"] = np.where(valued, rule, "")
    imp_b, imp_n = (m[f"impossible_{s}"].fillna("").astype(str).to_numpy() for s in "bn")
    out["impossible"] = np.where(imp_n != "", imp_n, np.where(imp_b != "", "BASE: " + imp_b, ""))
    out["invalid"] = m["bad_n"].fillna("").astype(str).to_numpy()
    out.loc[~matched, ["p", "ratio", "change", "gain"]] = np.nan
    info["matched"] = int(matched.sum())
    info["no_noise"] = int((valued & (no_noise != "")).sum())
    info["catches"] = catches(out[valued], threshold)
    info["host_rule"] = host_rule(out[valued & (out["rule"] == "tail").to_numpy()], len(bases))
    if info["host_rule"]:
        info["noise_rule"] += "; " + info["host_rule"]
    return Comparison(worst_first(out), new_imp, _incomplete(bases, new) + said + _warnings(bases, new, info)
                      + unplanned_warning(new, unplanned), info)


def host_rule(rows, nb: int) -> str:
    """The rule that judged host-timed rows by value, as the noise-rule line says it, with the tail of each kind
    judged (an engine whose bands share one tail said once); "" where none was."""
    from ipcbench.catalogue.noise import host_tail

    tails: dict[str, dict[str, float]] = {}
    order = {e: i for i, e in enumerate(ENGINE_ORDER)}
    for engine, band, nbytes in sorted(zip(rows["_engine"], rows["_band"], rows["bytes"]),
                                       key=lambda x: (order.get(x[0], len(order)), x[0], x[1])):
        tails.setdefault(str(engine), {})[BANDS[int(band)]] = host_tail(str(engine), int(nbytes)).fraction
    if not tails:
        return ""
    said = [f"{e} ±{pct(next(iter(t.values())))}" if len(set(t.values())) == 1 and len(t) > 1 else
            ", ".join(f"{e} {b} ±{pct(v)}" for b, v in t.items()) for e, t in tails.items()]
    return (f"host-timed rows: {nb} BASE runs, bound: the tail of their kind ({'; '.join(said)}), never below "
            "both sides' noise")


def _distinct(bases: list[Run], new: Run) -> tuple[list[Run], list[str]]:
    """The BASE runs, each once (a run given twice would count its own numbers as the between-run spread), and
    what was said about it; UsageError when NEW is one of them: a run compared with itself passes any gate."""
    if not bases:
        raise UsageError("no BASE run")
    for b in bases:
        if b.identity == new.identity:
            raise UsageError(f"NEW {new.label} is the same run as BASE {b.label} (the same file, or the same run id "
                             "and start in meta.json): a run always matches itself; give the run to judge as NEW")
    out: dict[str, Run] = {}
    said = []
    for b in bases:
        if b.identity in out:
            said.append(f"BASE {b.label} is the same run as BASE {out[b.identity].label}: counted once")
        out.setdefault(b.identity, b)
    return list(out.values()), said


def _whole(bases: list[Run], new: Run, subset: bool) -> None:
    """UsageError for a BASE that did not complete (NEW's rows it lacks would be new, never judged: part of a run
    compared as the whole), and for a NEW that did not complete under --subset (its rows missing would pass)."""
    for side, r in [("BASE", b) for b in bases] + ([("NEW", new)] if subset else []):
        if r.incomplete:
            raise UsageError(f"{side} {r.label} did not complete ({r.incomplete}): compare judges whole runs"
                             + (", and --subset would pass the rows it lacks" if side == "NEW" else
                                ", and NEW's rows it lacks would go unjudged"))


def _incomplete(bases: list[Run], new: Run) -> list[str]:
    """Said first: a run that did not complete holds only the rows measured before it stopped."""
    return [f"{side} {r.label} did not complete ({r.incomplete}): it holds only the rows measured before it "
            "stopped; the others are missing from it" for side, r in [("NEW", new)] + [("BASE", b) for b in bases]
            if r.incomplete]


def _warnings(bases: list[Run], new: Run, info: dict) -> list[str]:
    """What differs between the runs."""
    out = [n for r in list(bases) + [new] for n in r.notes]
    for b in bases:
        out += meta_warnings(b, new)
        out += compare_warnings(b.label, b.meta.evidence, new.label, new.meta.evidence)  # the nodes' own evidence
    if info["no_noise"]:
        out.append(f"{info['no_noise']} row(s) have no noise on a side (runs older than that column, or a row "
                   "whose noise could not be estimated): judged with the between-runs floor of their kind")
    return out
