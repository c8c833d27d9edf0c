"""How the report writes numbers into cells, and the order methods are listed in: one look for every table,
figure title and file name of `ipcbench report` (docs/architecture.md). Pure Python; the frames passed to
method_sort are pandas, but pandas is not imported here.
"""

from __future__ import annotations

from ipcbench.sizes import fmt_size
from ipcbench.catalogue.suites import ORDER

DIR_ORDER = {"push": 0, "pull": 1, "bidir": 2, "oneway": 3, "op": 4}
SUITE_ORDER = {name: i for i, name in enumerate(ORDER)}  # the one list of suites (catalogue/suites.py)


def f1(v) -> str:
    return "" if v is None or v != v else f"{v:.1f}"


def us(v) -> str:
    if v is None or v != v:
        return ""
    return f"{v:.0f}" if v >= 1000 else f"{v:.3g}"


def times(v) -> str:
    return "" if v is None or v != v else f"{v:.2f}x"


def size_text(v) -> str:
    return "" if v is None or v != v else fmt_size(int(v))


def method_label(suite, method, direction=None) -> str:
    return f"{suite}/{method}" + (f" {direction}" if direction else "")


def slug(s: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in str(s))


def method_sort(df, cols=("suite", "method", "direction")):
    key = {"suite": lambda s: s.map(lambda v: (SUITE_ORDER.get(v, 99), v)),
           "direction": lambda s: s.map(lambda v: DIR_ORDER.get(v, 9)),
           "method": lambda s: s}
    cols = [c for c in cols if c in df.columns]
    return df.sort_values(cols, key=lambda s: key.get(s.name, lambda x: x)(s), kind="stable")
