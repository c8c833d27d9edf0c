"""Whether a run's rows are the rows its record says it measured: the one check of results.csv against meta.json,
made where a run is read (record/run.load_run), so that report, compare and check --from refuse alike a run whose
rows disagree with its record, one error naming the rows (a few, then a count) or the field, never a gate that
judged part of a run as the whole.

- Every run: no row twice (its key, results.RUN_KEY, names one measurement), every row of a method its suite writes
  (catalogue/suites.ROWS: a suite or method changed), and every row's ranks where meta.json's `ranks` (where
  recorded) put them: the rank listed, on the row's host and GPU.
- Schema 5 on (meta.json's `planned_rows`, catalogue/planned.py): every row planned, and every planned row there but
  those of a step skipped with its reason (meta.json's `skipped`) and those a step may leave out (RowShape.unless: a
  pair's rows of the shape, all of them or none). A partial run (record/run.py: it did not complete, its last line
  was cut, nodes' rows recovered) holds some of them: `Agreement.held` says how many.
- A complete run: meta.json's `rows` count is results.csv's.

A run older than the planned rows keeps the checks its record allows (the count, the ranks), and `Agreement.unchecked`
says what it cannot check. pure: the frame and the record in, an Agreement or an error out.
"""

from __future__ import annotations

import os
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from ipcbench.catalogue.suites import row_facts
from ipcbench.errors import ResultsError
from ipcbench.record.meta import Meta, MetaError
from ipcbench.results import META_NAME, RUN_KEY
from ipcbench.sizes import fmt_size

NAMED = 3  # rows an error names; the others it counts
Key = tuple  # a row's values of RUN_KEY, in its order


class RowsError(ResultsError):
    """results.csv's rows disagree with the run's record (a row missing, doubled, or not planned): `path` the CSV.
    A ResultsError: report skips the run, compare and check exit 2."""

    def __init__(self, path: str | os.PathLike, why: str):
        super().__init__(f"{path}: {why}")
        self.path, self.why = str(path), why


@dataclass
class Agreement:
    """What the check found that is no error: `held` how many of its planned rows a partial run holds ("" for a
    complete one), `unchecked` what the run's record cannot check ("" where it checks everything), `notes` the
    planned rows left out as their step allows."""

    held: str = ""
    unchecked: str = ""
    notes: list[str] = field(default_factory=list)


def agree(frame, meta: Meta, csv_path: str | os.PathLike, meta_path: str | os.PathLike, partial: bool,
          written: int) -> Agreement:
    """The run's rows (`frame`, every part file's included) against its record; RowsError (naming the rows) or
    MetaError (naming the field) where they disagree. `partial`: the run is known not to hold all its rows;
    `written`: the rows of results.csv itself (what meta.json's rows counts)."""
    keys = list(zip(*(frame[c].tolist() for c in RUN_KEY))) if len(frame) else []
    hosts = len({k[0] for k in keys}) > 1
    doubled = [k for k, n in Counter(keys).items() if n > 1]
    if doubled:
        raise RowsError(csv_path, f"{len(doubled)} row(s) written twice or more ({named(doubled, hosts)}): a row "
                                  "names one measurement")
    unknown = [k for k in keys if row_facts(k[1], k[2]) is None]
    if unknown:
        raise RowsError(csv_path, f"{len(unknown)} row(s) of a method no suite writes under that name "
                                  f"({named(unknown, hosts)}): catalogue/suites.ROWS")
    _ranks_hold(keys, meta, csv_path, meta_path, hosts)
    out = Agreement()
    if meta.planned_rows is not None:
        out = _against_plan(keys, meta, csv_path, meta_path, partial, hosts)
    else:
        out.unchecked = unchecked(meta)
    _count_holds(written, meta, meta_path, partial)
    return out


def named(keys: list[Key], hosts: bool = False) -> str:
    """The first rows in words, then how many more: "copy/ce push rank 0->1 (GPU 0->1) 256M, ..., and 456 more"."""
    words = [f"{k[1]}/{k[2]} {k[3]} rank {k[4]}->{k[5]} (GPU {k[6]}->{k[7]}) {fmt_size(int(k[8]))}"
             + (f" on {k[0]}" if hosts else "") for k in sorted(keys)[:NAMED]]
    return ", ".join(words) + (f", and {len(keys) - NAMED} more" if len(keys) > NAMED else "")


def _ranks_hold(keys: list[Key], meta: Meta, csv_path, meta_path, hosts: bool) -> None:
    """Every rank a row names is one meta.json's `ranks` lists, on the row's host and GPU (where ranks are recorded).
    A rank that every row puts elsewhere than the record is the record's error; rows that put it elsewhere than its
    other rows and the record are the rows' own."""
    if meta.n_ranks is None:
        return
    where = {r.rank: (i, r.host, r.gpu) for i, r in enumerate(meta.ranks)}
    seen: dict[int, Counter] = defaultdict(Counter)
    for k in keys:
        for rank, gpu in ((k[4], k[6]), (k[5], k[7])):
            if rank >= 0:
                seen[rank][(k[0], gpu)] += 1
    for rank, places in sorted(seen.items()):
        (host, gpu), n = places.most_common(1)[0]
        if rank not in where and meta.planned_rows is None:  # with planned rows, such a row is one not planned
            listed = f"{len(where)} rank(s)" + (f" ({', '.join(map(str, sorted(where)))})" if where else "")
            rows = [k for k in keys if rank in (k[4], k[5])]
            raise MetaError(meta_path, "ranks", f"lists {listed}, but {len(rows)} row(s) of results.csv name rank "
                                                f"{rank} ({named(rows, hosts)})")
        if rank not in where:
            continue
        i, h, g = where[rank]
        if (h, g) not in places:
            raise MetaError(meta_path, f"ranks[{i}]", f"rank {rank} on {h}, GPU {g}, but results.csv's rows put it "
                                                      f"on {host}, GPU {gpu} ({n} row(s))")
    odd = [k for k in keys if any(r in where and (k[0], g) != where[r][1:] for r, g in ((k[4], k[6]), (k[5], k[7])))]
    if odd:
        raise RowsError(csv_path, f"{len(odd)} row(s) put a rank where neither meta.json's ranks nor its other rows "
                                  f"do ({named(odd, hosts)})")


def _count_holds(n: int, meta: Meta, meta_path, partial: bool) -> None:
    """A complete run's rows count is results.csv's `n` rows (a partial run's, at least)."""
    if meta.rows is None or (partial and n <= meta.rows):
        return
    if n != meta.rows:
        why = ("every one of them planned, once" if meta.planned_rows is not None else
               f"rows of results.csv lost or doubled, or this count changed (a run of schema {meta.schema_version} "
               "records no planned rows to say which)")
        raise MetaError(meta_path, "rows", f"{meta.rows}, but results.csv holds {n} row(s): {why}")


def _against_plan(keys: list[Key], meta: Meta, csv_path, meta_path, partial: bool, hosts: bool) -> Agreement:
    """Every row planned and every planned row there (a complete run), or how many of them a partial run holds."""
    expected, skipped = _planned(meta, meta_path)
    have = set(keys)
    unplanned = [k for k in keys if k not in expected]
    missing = [k for k, unit in expected.items() if unit is None and k not in have]
    units: dict[tuple, list[Key]] = defaultdict(list)
    for k, unit in expected.items():
        if unit is not None:
            units[unit].append(k)
    absent = [u for u, ks in units.items() if not have.intersection(ks)]
    missing += [k for u, ks in units.items() if u not in absent for k in ks if k not in have]
    problems = []
    if unplanned:
        of_skipped = sum(1 for k in unplanned if k in skipped)
        problems.append(f"{len(unplanned)} row(s) not planned ({named(unplanned, hosts)})"
                        + (f", {of_skipped} of a step recorded as skipped" if of_skipped else ""))
    if missing and not partial:
        problems.append(f"{len(missing)} planned row(s) missing ({named(missing, hosts)})")
    if problems:
        raise RowsError(csv_path, f"disagrees with meta.json's planned_rows: {'; '.join(problems)}")
    if partial:
        return Agreement(held=f"{len(keys)} of its {len(expected)} planned rows")
    return Agreement(notes=_left_out(absent))


def _planned(meta: Meta, meta_path) -> tuple[dict[Key, tuple | None], set[Key]]:
    """({planned row key: its unit}, the keys of steps skipped with a reason), every key planned once."""
    rank_of = {(r.host, r.local_rank): (r.rank, r.gpu) for r in meta.ranks if r.local_rank is not None}
    skips = {(s.host, s.suite, s.step) for s in meta.skipped}
    expected: dict[Key, tuple | None] = {}
    skipped: set[Key] = set()
    for i, step in enumerate(meta.planned_rows or []):
        for host in step.hosts:
            skip = (host, step.suite, step.step) in skips or ("", step.suite, step.step) in skips
            try:
                got = list(step.keys(lambda h, local: rank_of.get((h, local)), (host,)))
            except KeyError as e:
                raise MetaError(meta_path, f"planned_rows[{i}].pairs", f"names {e.args[0]}, which ranks does not "
                                                                       "list") from None
            for k, unit in got:
                if k in expected or k in skipped:
                    raise MetaError(meta_path, f"planned_rows[{i}]", f"plans a row another step plans ({named([k])})")
                if skip:
                    skipped.add(k)
                else:
                    expected[k] = unit
    return expected, skipped


def _left_out(absent: list[tuple]) -> list[str]:
    """The planned rows a step left out as it may, by step and reason: "handles/pool handles wrote no rows for 2 of
    its pairs (1->0, 0->1): a GPU of the pair cannot share memory this way (...)"."""
    by: dict[tuple[str, str, str], list[str]] = defaultdict(list)
    for host, suite, step, (a, b), unless in absent:
        by[(suite, step, unless)].append(f"{a}->{b}" + (f" on {host}" if len({u[0] for u in absent}) > 1 else ""))
    return [f"{suite}/{step} wrote no rows for {len(pairs)} of its pairs (node-local ranks {', '.join(pairs)}), as "
            f"the step may where {unless}" for (suite, step, unless), pairs in by.items()]


def unchecked(meta: Meta) -> str:
    """What a run without planned rows (schema 4 and older) cannot check, in one phrase ("" for a run that has them)."""
    if meta.planned_rows is not None:
        return ""
    if not meta.found:
        return f"no {META_NAME} to hold its rows to: each row once is all that is checked"
    kept = [w for w, known in (("rows count", meta.rows is not None), ("ranks", meta.n_ranks is not None)) if known]
    lost = "whose key was changed" if meta.rows is not None else "lost, or whose key was changed,"
    return (f"rows checked against meta.json's {' and '.join(kept) or 'nothing but each row once'}: a run of schema "
            f"{meta.schema_version} records no planned rows (schema 5 on), so a row {lost} cannot be told from one "
            "measured")
