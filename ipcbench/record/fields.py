"""What a field of a recorded JSON object must be: a few combinators that check a value and name the field
that is wrong ("ranks[0].gpu: a string ('0'), expected an integer >= 0"), so that the record's reader
(record/meta_schema.py) says in one line what a hand edit, another tool or a damaged file got wrong, instead of
a reader far away failing on it (a TypeError in a report) or reading it as something it is not.

A key a spec does not name is carried as recorded and not checked (a later version's key); a key it names is
checked only where it is present, unless the spec says it is required: a field absent because the run predates
it is unknown, never an error. pure: no I/O here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

INT64 = 2**63  # an integer no C reader (numpy, pandas) could hold is out of range, never an overflow later


class FieldError(Exception):
    """One field that is not what the record says it is: `field` its key path, `why` what is wrong."""

    def __init__(self, field: str, why: str):
        super().__init__(f"{field}: {why}")
        self.field, self.why = field, why


def kind_of(v: Any) -> str:
    """How a JSON value is named in an error: its type, and the value where it is short."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return f"a boolean ({str(v).lower()})"
    if isinstance(v, (int, float)):
        return f"a number ({v!r})"
    if isinstance(v, str):
        return f"a string ({v[:40]!r})"
    return "a list" if isinstance(v, list) else "an object" if isinstance(v, dict) else type(v).__name__


class Spec:
    """What one value must be; `check` raises FieldError naming `where` when it is not."""

    expected = "?"

    def check(self, v: Any, where: str) -> None:
        raise NotImplementedError

    def wrong(self, v: Any, where: str) -> FieldError:
        return FieldError(where, f"{kind_of(v)}, expected {self.expected}")


@dataclass(frozen=True)
class Int(Spec):
    """An integer (not a boolean) in [low, high]."""

    low: int = 0
    high: int = INT64 - 1

    @property
    def expected(self) -> str:  # type: ignore[override]
        return f"an integer >= {self.low}" if self.high == INT64 - 1 else f"an integer in {self.low}..{self.high}"

    def check(self, v: Any, where: str) -> None:
        if not isinstance(v, int) or isinstance(v, bool) or not self.low <= v <= self.high:
            raise self.wrong(v, where)


@dataclass(frozen=True)
class Num(Spec):
    """A finite number (an integer too: JSON does not tell 2 from 2.0), at least `low`; above it if `strict`; below
    2**63 in size (no field of a run comes near: a larger one is a damaged file, not a measurement)."""

    low: float = 0.0
    strict: bool = False

    @property
    def expected(self) -> str:  # type: ignore[override]
        return f"a finite number {'>' if self.strict else '>='} {self.low:g}"

    def check(self, v: Any, where: str) -> None:
        if (not isinstance(v, (int, float)) or isinstance(v, bool) or abs(v) >= INT64 or not math.isfinite(v)
                or v < self.low or (self.strict and v == self.low)):
            raise self.wrong(v, where)


@dataclass(frozen=True)
class Text(Spec):
    """A string; one of `choices` where given."""

    choices: tuple[str, ...] = ()

    @property
    def expected(self) -> str:  # type: ignore[override]
        return "one of " + ", ".join(map(repr, self.choices)) if self.choices else "a string"

    def check(self, v: Any, where: str) -> None:
        if not isinstance(v, str) or (self.choices and v not in self.choices):
            raise self.wrong(v, where)


@dataclass(frozen=True)
class Bool(Spec):
    expected = "true or false"

    def check(self, v: Any, where: str) -> None:
        if not isinstance(v, bool):
            raise self.wrong(v, where)


@dataclass(frozen=True)
class Null(Spec):
    """`spec`, or null (a writer's "unknown")."""

    spec: Spec

    @property
    def expected(self) -> str:  # type: ignore[override]
        return f"{self.spec.expected} or null"

    def check(self, v: Any, where: str) -> None:
        if v is not None:
            try:
                self.spec.check(v, where)
            except FieldError as e:
                raise self.wrong(v, where) if e.field == where else e from None


@dataclass(frozen=True)
class Either(Spec):
    """One of `specs` (a field an older writer wrote in another form)."""

    specs: tuple[Spec, ...]

    @property
    def expected(self) -> str:  # type: ignore[override]
        return " or ".join(s.expected for s in self.specs)

    def check(self, v: Any, where: str) -> None:
        errors = []
        for s in self.specs:
            try:
                s.check(v, where)
                return
            except FieldError as e:
                errors.append(e)
        deeper = [e for e in errors if e.field != where]  # the form it has, wrong inside: say where
        raise deeper[0] if deeper else self.wrong(v, where)


@dataclass(frozen=True)
class ListOf(Spec):
    """A list of `item`s; of exactly `length` of them where given (a pair of ranks)."""

    item: Spec
    length: int | None = None

    @property
    def expected(self) -> str:  # type: ignore[override]
        return "a list" if self.length is None else f"a list of {self.length}"

    def check(self, v: Any, where: str) -> None:
        if not isinstance(v, list) or (self.length is not None and len(v) != self.length):
            raise self.wrong(v, where)
        for i, x in enumerate(v):
            self.item.check(x, f"{where}[{i}]")


@dataclass(frozen=True)
class MapOf(Spec):
    """An object of any keys (hosts, GPU indices, names), each value `value`; each key `key` where given."""

    value: Spec
    key: Spec | None = None

    @property
    def expected(self) -> str:  # type: ignore[override]
        return "an object"

    def check(self, v: Any, where: str) -> None:
        if not isinstance(v, dict):
            raise self.wrong(v, where)
        for k, x in v.items():
            if self.key is not None:
                self.key.check(k, f"{where}.{k}")
            self.value.check(x, f"{where}.{k}")


@dataclass(frozen=True)
class Digits(Spec):
    """A key that is a non-negative integer written as text (a GPU index as a JSON key)."""

    expected = "a GPU index"

    def check(self, v: Any, where: str) -> None:
        if not (isinstance(v, str) and v.isascii() and v.isdigit()):
            raise FieldError(where, f"key {v!r} is not a GPU index")


@dataclass(frozen=True)
class Obj(Spec):
    """An object whose keys in `fields` are checked where present (`required` ones must be); other keys are
    carried as recorded."""

    fields: dict[str, Spec] = field(default_factory=dict)
    required: tuple[str, ...] = ()

    @property
    def expected(self) -> str:  # type: ignore[override]
        return "an object"

    def check(self, v: Any, where: str) -> None:
        if not isinstance(v, dict):
            raise self.wrong(v, where)
        for k in self.required:
            if k not in v:
                raise FieldError(where, f"lacks {k!r}")
        for k, spec in self.fields.items():
            if k in v:
                spec.check(v[k], f"{where}.{k}" if where else k)
