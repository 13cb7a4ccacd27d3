"""The replay UDF's two engines give the same output tables, in-process (no Spark).

The generated workload (``pelengine.synth``, with faults: invalid commands, bad IDs,
other types, transactions...) is routed the way the job routes it (``make_router``;
RENAME and multi-stream XREADGROUP tie keys into families, FLUSHDB/FLUSHALL reach every
family as fan-out rows) by ``benchmarks/replay_udf.py``, and every family's batches go
through ``one_family(make_replay_function(engine="python"))`` and ``(engine="native")``: the
unpacked rows of every table (history, state, outcome, stats) must be equal.
"""

from __future__ import annotations

import json
from types import ModuleType

import pytest

from tests.scripts import load_script


def _bench() -> ModuleType:
    return load_script("benchmarks/replay_udf.py", "pelengine_replay_udf_script")


def _tables(bench: ModuleType, out: list) -> dict[str, list[str]]:
    per: dict[str, list[str]] = {}
    for table, row in bench.table_rows(out):
        per.setdefault(table, []).append(json.dumps(row, sort_keys=True, default=str))
    return {t: sorted(rows) for t, rows in per.items()}


@pytest.mark.parametrize(
    ("profile", "events", "keys", "seed", "batch_rows"),
    [
        ("7.0", 6_000, 4, 11, 700),
        ("valkey-9.1.2", 6_000, 4, 12, 10_000),
        ("7.2", 4_000, 2, 13, 333),
        ("7.4", 4_000, 6, 14, 1_000),
    ],
)
def test_replay_function_engines_equal(
    profile: str, events: int, keys: int, seed: int, batch_rows: int
) -> None:
    import pelengine_native  # noqa: F401 - fails (never skips) when the core is missing

    bench = _bench()
    batches, _ = bench.route(bench.events(events, keys, seed), profile, batch_rows)
    _, py_out = bench.replay_all(batches, profile, "python")
    _, nat_out = bench.replay_all(batches, profile, "native")
    py, nat = _tables(bench, py_out), _tables(bench, nat_out)
    assert sorted(py) == sorted(nat), f"tables: python {sorted(py)}, native {sorted(nat)}"
    for table in py:
        if py[table] != nat[table]:
            only_py = [r for r in py[table] if r not in nat[table]][:3]
            only_nat = [r for r in nat[table] if r not in py[table]][:3]
            raise AssertionError(
                f"{table}: {len(py[table])} python rows, {len(nat[table])} native rows\n"
                f"  python only: {only_py}\n  native only: {only_nat}"
            )
    assert sum(len(r) for r in py.values()) > events  # the workload reached every table
