"""Compare two sets of output tables (truth vs model or job), row by row.

Rows are matched on their natural key; every column the expected row has is
compared exactly, except the times a capture can only know to the ms
(``TIME_COLUMNS``, within ``tolerance_ms``). ``as_of_ms``, ``as_of_seq`` and
``idle_ms`` are never compared; columns only the actual rows have (extra
columns are allowed by the contract) are ignored. A missing or extra row is a
mismatch.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

KEYS: dict[str, tuple[str, ...]] = {
    "pel": ("db", "key", "group", "id"),
    "ownership": ("db", "key", "group", "consumer"),
    "groups": ("db", "key", "group"),
    "streams": ("db", "key"),
    "delivery_counts": ("db", "key", "group", "id"),
}
TIME_COLUMNS = frozenset(
    {"delivery_time_ms", "seen_time_ms", "active_time_ms", "earliest_delivery_time_ms"}
)
IGNORED_COLUMNS = frozenset({"as_of_ms", "as_of_seq", "idle_ms"})
DEFAULT_TABLES = ("pel", "ownership", "groups", "streams")


@dataclass(frozen=True)
class Mismatch:
    table: str
    key: tuple[Any, ...]
    column: str  # "<row>" for a missing or extra row
    expected: Any
    got: Any

    def __str__(self) -> str:
        where = "/".join(str(k) for k in self.key)
        return f"{self.table} [{where}] {self.column}: expected {self.expected!r}, got {self.got!r}"


def _norm(value: Any) -> Any:
    """Plain Python values: numpy/Decimal ints -> int, bools stay bools."""
    if value is None or isinstance(value, bool | str):
        return value
    if hasattr(value, "item") and not isinstance(value, list | tuple | dict):
        value = value.item()  # numpy scalars
    if isinstance(value, float) and value.is_integer():
        return int(value)
    try:
        if not isinstance(value, bool) and int(value) == value:
            return int(value)
    except (TypeError, ValueError):
        pass
    return value


def _key(table: str, row: Mapping[str, Any]) -> tuple[Any, ...]:
    out = []
    for col in KEYS[table]:
        value = _norm(row.get(col))
        if col == "db" and value is None:
            value = 0
        out.append(value)
    return tuple(out)


def _index(table: str, rows: Iterable[Mapping[str, Any]], side: str) -> tuple[dict, list[Mismatch]]:
    index: dict[tuple[Any, ...], Mapping[str, Any]] = {}
    problems: list[Mismatch] = []
    for row in rows:
        k = _key(table, row)
        if k in index:
            problems.append(Mismatch(table, k, "<duplicate row>", side, dict(row)))
        index[k] = row
    return index, problems


def _sort_key(k: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple((v is None, str(type(v)), v if v is not None else 0) for v in k)


def compare_table(
    table: str,
    expected: Iterable[Mapping[str, Any]],
    got: Iterable[Mapping[str, Any]],
    tolerance_ms: int = 2,
    columns: Iterable[str] | None = None,
) -> list[Mismatch]:
    exp, problems = _index(table, expected, "expected")
    act, more = _index(table, got, "got")
    problems += more
    for k in sorted(set(exp) | set(act), key=_sort_key):
        e, a = exp.get(k), act.get(k)
        if a is None:
            problems.append(Mismatch(table, k, "<row>", "present", "missing"))
            continue
        if e is None:
            problems.append(Mismatch(table, k, "<row>", "absent", _brief(a)))
            continue
        cols = list(columns) if columns is not None else list(e)
        for col in cols:
            if col in IGNORED_COLUMNS or col in KEYS[table]:
                continue
            ev = _norm(e.get(col))
            if col not in a:
                problems.append(Mismatch(table, k, col, ev, "<no such column>"))
                continue
            av = _norm(a.get(col))
            if col in TIME_COLUMNS and isinstance(ev, int) and isinstance(av, int):
                if abs(ev - av) > tolerance_ms:
                    problems.append(Mismatch(table, k, col, ev, av))
            elif ev != av or type(ev) is not type(av):
                problems.append(Mismatch(table, k, col, ev, av))
    return problems


def _brief(row: Mapping[str, Any]) -> dict[str, Any]:
    return {k: _norm(v) for k, v in row.items() if k not in IGNORED_COLUMNS}


def compare_tables(
    expected: Mapping[str, Iterable[Mapping[str, Any]]],
    got: Mapping[str, Iterable[Mapping[str, Any]]],
    tables: Iterable[str] = DEFAULT_TABLES,
    tolerance_ms: int = 2,
) -> list[Mismatch]:
    """Every mismatch between ``expected`` (the server) and ``got``, table by table."""
    problems: list[Mismatch] = []
    for table in tables:
        if table not in got:
            problems.append(Mismatch(table, (), "<table>", "present", "missing"))
            continue
        problems += compare_table(table, expected.get(table, []), got[table], tolerance_ms)
    return problems


def format_mismatches(problems: list[Mismatch], limit: int = 20) -> str:
    lines = [str(p) for p in problems[:limit]]
    if len(problems) > limit:
        lines.append(f"... and {len(problems) - limit} more")
    return "\n".join(lines)
