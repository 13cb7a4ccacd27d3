"""Keeping state on both engines: a night saved by either engine is resumed by the other.

The replay UDF (``one_family(make_replay_function(...))``, ``Settings(incremental=True)``)
is called in-process on each engine, as a Spark worker calls it, with the generated workload routed
as the job routes it (``benchmarks/replay_udf.py``). A second night gets each family's
saved model as the ``state`` column of a seed row that sorts first (``seq`` its
``applied_seq``, no ``argv``: as ``pipeline/replay.py``'s ``seed_rows`` builds it).

* one whole replay: every table equal on both engines, the ``state`` row included;
* a log cut at a seq, night 1 on engine A, night 2 on engine B (all four pairs): the
  night-2 tables and the final state rows equal, and equal to one uninterrupted run's
  state tables (pel, ownership, groups, streams) and its ``agg_n``/``agg_x``;
* two saved families merged in one replay (``absorb``);
* ``row_digest`` of random rows (odd strings: quotes, backslashes, controls, every code
  point) on both;
* a saved state that is no model (old version, corrupt): the same error and message.

No Spark; never skipped (fails without a built ``pelengine_native``).
"""

from __future__ import annotations

import json
import random
import sys
from collections.abc import Iterator
from functools import cache
from types import ModuleType
from typing import Any

import pelengine_native as native
import pyarrow as pa
import pytest

from pelengine.engine import udf
from pelengine.engine.python.state import row_digest
from pelengine.model import persist
from pelengine.schemas import SAVED_STATE_TYPE
from pelengine.settings import Settings
from tests.scripts import load_script

AS_OF_MS = 1_800_000_000_000
AS_OF_SEQ = 10**12
ENGINES = ("python", "native")
Row = dict[str, Any]
Tables = dict[str, list[Row]]
Key = tuple[int, str]
# the state tables a resumed run gives as one uninterrupted run does
STATE_TABLES = ("pel", "ownership", "groups", "streams")


@cache
def bench() -> ModuleType:
    return load_script("benchmarks/replay_udf.py", "pelengine_replay_udf_state")


@cache
def input_schema() -> pa.Schema:
    """The replay input with the ``state`` column of incremental runs."""
    schema: pa.Schema = bench().input_schema()
    saved = pa.struct(list(udf._arrow_schema(SAVED_STATE_TYPE)))
    return schema.append(pa.field("state", saved))


@cache
def workload(profile: str, events: int, keys: int, seed: int) -> dict[Key, list[Row]]:
    """Per family: its routed input rows in seq order (no ``state``)."""
    b = bench()
    batches, _ = b.route(b.events(events, keys, seed), profile, 10_000)
    return {key: [r for batch in bs for r in batch.to_pylist()] for key, bs in batches.items()}


def batches(rows: list[Row], size: int = 700) -> list[pa.RecordBatch]:
    table = pa.Table.from_pylist([r | {"state": r.get("state")} for r in rows], input_schema())
    return table.to_batches(max_chunksize=size)


def seed_row(key: Key, state: Row) -> Row:
    """A family's saved model as its seed row (``seed_rows``)."""
    db, family = key
    return {
        "seq": state["applied_seq"],
        "ts_ms": 0,
        "argv": None,
        "db": db,
        "client": None,
        "fanout": False,
        "family": family,
        "marker": False,
        "exec_unit": None,
        "unit": None,
        "lead": True,
        "silent": False,
        "state": {k: state[k] for k in ("state_version", "state", "agg_n", "agg_x")},
    }


def replay(
    engine: str,
    profile: str,
    families: dict[Key, list[Row]],
    mark_seq: int | None = None,
) -> dict[Key, Tables]:
    """Each family's rows through the incremental replay of ``engine``: its tables."""
    fn = udf.one_family(
        udf.make_replay_function(
            Settings(profile=profile, incremental=True),
            AS_OF_MS,
            AS_OF_SEQ,
            mark_seq=mark_seq,
            engine=engine,
        )
    )
    out: dict[Key, Tables] = {}
    for (db, family), rows in families.items():
        key = (pa.scalar(db, pa.int32()), pa.scalar(family, pa.string()))
        tables: Tables = {}
        for table, row in bench().table_rows(list(fn(key, iter(batches(rows))))):
            tables.setdefault(table, []).append(row)
        out[(db, family)] = tables
    return out


def canon(rows: list[Row]) -> list[str]:
    return sorted(json.dumps(r, sort_keys=True, default=str) for r in rows)


def assert_tables_equal(a: Tables, b: Tables, what: str) -> None:
    assert sorted(a) == sorted(b), f"{what}: tables {sorted(a)} / {sorted(b)}"
    for table in a:
        left, right = canon(a[table]), canon(b[table])
        if left != right:
            only_a = [r for r in left if r not in right][:2]
            only_b = [r for r in right if r not in left][:2]
            raise AssertionError(
                f"{what}: {table}: {len(left)} / {len(right)} rows\n"
                f"  first only: {only_a}\n  second only: {only_b}"
            )


def the_state(tables: Tables) -> Row:
    (state,) = tables["state"]
    return state


# ---- (a) one whole replay ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("profile", "events", "keys", "seed"),
    [("7.0", 4_000, 4, 21), ("7.4", 4_000, 3, 22), ("valkey-9.1.2", 3_000, 5, 23)],
)
def test_whole_replay_keeping_state_is_equal(
    profile: str, events: int, keys: int, seed: int
) -> None:
    families = workload(profile, events, keys, seed)
    mark = sorted(r["seq"] for rows in families.values() for r in rows)[events // 2]
    py = replay("python", profile, families, mark_seq=mark)
    nat = replay("native", profile, families, mark_seq=mark)
    assert py.keys() == nat.keys()
    for key in py:
        assert_tables_equal(py[key], nat[key], f"{key}")
        state = the_state(nat[key])
        assert state["state"] == the_state(py[key])["state"]  # as Python data
        assert state["agg_n"] == len(families[key])
        assert state["mark_n"] == sum(r["seq"] <= mark for r in families[key])
        assert (state["db"], state["family"]) == key
        assert state["applied_seq"] == max(r["seq"] for r in families[key])
    marked = [the_state(t)["mark_n"] for t in nat.values()]
    assert 0 < sum(marked) < sum(len(rows) for rows in families.values())


# ---- (b) a night saved by one engine, resumed by the other -----------------------------------


@pytest.mark.parametrize(("profile", "seed"), [("7.0", 31), ("7.4", 32), ("valkey-8.1", 33)])
def test_cross_resume(profile: str, seed: int) -> None:
    families = workload(profile, 5_000, 4, seed)
    seqs = sorted(r["seq"] for rows in families.values() for r in rows)
    cut, mark = seqs[len(seqs) // 2], seqs[3 * len(seqs) // 4]
    night1 = {k: [r for r in rows if r["seq"] <= cut] for k, rows in families.items()}
    night1 = {k: rows for k, rows in night1.items() if rows}
    later = {k: [r for r in rows if r["seq"] > cut] for k, rows in families.items()}
    whole = replay("python", profile, families, mark_seq=mark)

    saved = {a: replay(a, profile, night1) for a in ENGINES}
    for k in night1:
        assert_tables_equal(saved["python"][k], saved["native"][k], f"night 1 {k}")
    finals: dict[tuple[str, str], dict[Key, Tables]] = {}
    for a in ENGINES:
        for b in ENGINES:
            night2 = {
                k: ([seed_row(k, the_state(saved[a][k]))] if k in saved[a] else []) + rows
                for k, rows in later.items()
                if rows
            }
            finals[(a, b)] = replay(b, profile, night2, mark_seq=mark)
    reference = finals[("python", "python")]
    assert reference, "night 2 replays no family"
    for pair, out in finals.items():
        assert out.keys() == reference.keys()
        for k in out:
            assert_tables_equal(out[k], reference[k], f"night 2 {pair} {k}")
    for k, tables in reference.items():
        for table in STATE_TABLES:
            assert canon(tables.get(table, [])) == canon(whole[k].get(table, [])), (k, table)
        resumed, once = the_state(tables), the_state(whole[k])
        # every row the family received, over both nights
        assert (resumed["agg_n"], resumed["agg_x"]) == (once["agg_n"], once["agg_x"])
        assert resumed["applied_seq"] == once["applied_seq"]
        # the model itself: its keyspace, groups, PELs (counters and open segments
        # start anew at each save)
        for section in ("keys", "streams", "nodes", "groups", "consumers", "pending"):
            assert resumed["state"][section] == once["state"][section], (k, section)


@cache
def random_workload(seed: int, n: int) -> dict[Key, list[Row]]:
    """A random log (``random_logs``: units, scripts, blocked readers, odd IDs, other
    types, several dbs) routed as the job routes it."""
    from tests.native.random_logs import as_rows, random_log

    rows = [r | {"db": r["db"] or 0} for r in as_rows(random_log(seed, n))]
    batches, _ = bench().route(rows, "7.4", 10_000)
    return {key: [r for batch in bs for r in batch.to_pylist()] for key, bs in batches.items()}


@pytest.mark.parametrize("seed", range(6))
def test_cross_resume_of_random_logs(seed: int) -> None:
    """Cut anywhere (inside a MULTI, with readers blocked, ...): resumed on either engine,
    the same tables, and the uninterrupted run's state tables."""
    profile = ("7.0", "7.4", "valkey-8.1")[seed % 3]
    families = random_workload(seed, 400)
    seqs = sorted(r["seq"] for rows in families.values() for r in rows)
    whole = replay("python", profile, families)
    for cut in seqs[:: max(1, len(seqs) // 5)][1:]:
        night1 = {k: [r for r in rows if r["seq"] <= cut] for k, rows in families.items()}
        night1 = {k: rows for k, rows in night1.items() if rows}
        saved = {a: replay(a, profile, night1) for a in ENGINES}
        for k in night1:
            assert_tables_equal(saved["python"][k], saved["native"][k], f"night 1 {k} {cut}")
        finals = {}
        for a in ENGINES:
            night2 = {
                k: ([seed_row(k, the_state(saved[a][k]))] if k in saved[a] else [])
                + [r for r in rows if r["seq"] > cut]
                for k, rows in families.items()
            }
            night2 = {k: rows for k, rows in night2.items() if any(r["seq"] > cut for r in rows)}
            for b in ENGINES:
                finals[(a, b)] = replay(b, profile, night2)
        reference = finals[("python", "python")]
        for pair, out in finals.items():
            assert out.keys() == reference.keys()
            for k in out:
                assert_tables_equal(out[k], reference[k], f"night 2 {pair} {k} cut {cut}")
        for k, tables in reference.items():
            for table in STATE_TABLES:
                assert canon(tables.get(table, [])) == canon(whole[k].get(table, [])), (
                    k,
                    table,
                    cut,
                )
            resumed, once = the_state(tables), the_state(whole[k])
            assert (resumed["agg_n"], resumed["agg_x"]) == (once["agg_n"], once["agg_x"])


@pytest.mark.parametrize("profile", ["7.0", "7.4"])
def test_cross_resume_of_the_hand_log_at_every_seq(profile: str) -> None:
    """The hand log of test_face (blocked readers, MULTI, RENAME, FLUSHDB, ...) as one
    family, cut after every event."""
    from tests.native.test_face import hand_rows, with_units

    key = (0, "f")
    rows = [
        r | {"fanout": False, "family": "f", "marker": False, "unit": None}
        for r in with_units(hand_rows())
    ]
    rows = [r | {"lead": True, "silent": False} for r in rows]
    whole = replay("python", profile, {key: rows})[key]
    sections: set[str] = set()
    for cut in range(1, len(rows)):
        saved = {a: replay(a, profile, {key: rows[:cut]})[key] for a in ENGINES}
        assert_tables_equal(saved["python"], saved["native"], f"night 1 to {cut}")
        sections |= {s for s, v in the_state(saved["python"])["state"].items() if v}
        finals = {
            (a, b): replay(b, profile, {key: [seed_row(key, the_state(saved[a])), *rows[cut:]]})[
                key
            ]
            for a in ENGINES
            for b in ENGINES
        }
        for pair, out in finals.items():
            assert_tables_equal(out, finals[("python", "python")], f"night 2 {pair} from {cut}")
        for table in STATE_TABLES:
            assert canon(finals[("native", "native")].get(table, [])) == canon(
                whole.get(table, [])
            ), (table, cut)
    assert {"blocked", "calls", "pending", "records"} <= sections


# ---- (c) two saved families merged -----------------------------------------------------------


@pytest.mark.parametrize("profile", ["7.0", "7.4"])
def test_two_saved_families_merge(profile: str) -> None:
    families = workload(profile, 4_000, 4, 41)
    by_size = sorted(families.items(), key=lambda kv: -len(kv[1]))
    ka, rows_a = by_size[0]
    kb, rows_b = next((k, rows) for k, rows in by_size[1:] if k[0] == ka[0])
    seqs = sorted(r["seq"] for r in rows_a + rows_b)
    cut = seqs[len(seqs) // 2]
    first = {ka: [r for r in rows_a if r["seq"] <= cut], kb: [r for r in rows_b if r["seq"] <= cut]}
    # rows both families got (fan-out) are one row of the merged family
    rest = {r["seq"]: r for r in rows_a + rows_b if r["seq"] > cut}
    later = [rest[s] | {"family": ka[1]} for s in sorted(rest)]
    outs = {}
    for a in ENGINES:
        saved = replay(a, profile, first)
        seeds = sorted(
            (seed_row(k, the_state(saved[k])) | {"family": ka[1]} for k in (ka, kb)),
            key=lambda r: r["seq"],
        )
        # merged alone: the keyspace of the first seed, then the second's
        keys = [
            row
            for seed in seeds
            for row in seed["state"]["state"]["keys"]  # type: ignore[index]
        ]
        for b in ENGINES:
            outs[(a, b)] = replay(b, profile, {ka: seeds + later})[ka]
            alone = the_state(replay(b, profile, {ka: seeds})[ka])
            assert alone["state"]["keys"] == keys, (a, b)
            assert alone["agg_n"] == sum(seed["state"]["agg_n"] for seed in seeds)
            assert len({row["key"] for row in keys}) == len(keys) > 1
    reference = outs[("python", "python")]
    for pair, out in outs.items():
        assert_tables_equal(out, reference, f"merged {pair}")
    state = the_state(reference)
    saved_n = sum(the_state(replay("python", profile, first)[k])["agg_n"] for k in (ka, kb))
    assert state["agg_n"] == saved_n + len(later)


# ---- (d) row_digest -------------------------------------------------------------------------


def _odd_string(rng: random.Random) -> str:
    pools = [
        "'\"\\\n\r\t\x00\x7f\x80\xa0\xad ",
        "abcXYZ019 -*$>",
        "\u00e9\u0663\u200b\u2028\u3000\ufeff\ufffd\U0001f600\U000e0001\U0010ffff",
    ]
    out = []
    for _ in range(rng.randrange(0, 12)):
        if rng.random() < 0.3:
            code = rng.randrange(0, sys.maxunicode + 1)
            if 0xD800 <= code <= 0xDFFF:  # no lone surrogates in Arrow's utf8
                code = 0xFFFD
            out.append(chr(code))
        else:
            out.append(rng.choice(rng.choice(pools)))
    return "".join(out)


def test_row_digest_of_random_rows() -> None:
    rng = random.Random(5)
    for _ in range(5_000):
        seq = rng.choice([0, 1, -1, rng.randrange(-(2**63), 2**63)])
        ts_ms = rng.randrange(-(2**63), 2**63)
        argv = None if rng.random() < 0.1 else [_odd_string(rng) for _ in range(rng.randrange(5))]
        db = None if rng.random() < 0.2 else rng.randrange(-(2**31), 2**31)
        client = None if rng.random() < 0.3 else _odd_string(rng)
        marker = rng.choice([True, False, None])
        args = (seq, ts_ms, argv, db, client, marker)
        assert native.row_digest(*args) == row_digest(*args), args


def test_row_digest_of_every_code_point() -> None:
    """Python's repr escapes what ``str.isprintable`` refuses: the native table of those
    is the one of this Python's Unicode database."""
    codes = [c for c in range(sys.maxunicode + 1) if not 0xD800 <= c <= 0xDFFF]
    for start in range(0, len(codes), 512):
        argv = [
            "".join(map(chr, codes[start : start + 256])),
            "".join(map(chr, codes[start + 256 : start + 512])),
        ]
        args = (start, 0, argv, 0, "\"'" + argv[0][:3], True)
        assert native.row_digest(*args) == row_digest(*args), hex(codes[start])


# ---- (e) a saved state that is no model -------------------------------------------------------


def _saved(profile: str) -> tuple[Key, Row, list[Row]]:
    families = workload(profile, 2_000, 2, 51)
    key, rows = max(families.items(), key=lambda kv: len(kv[1]))
    cut = rows[len(rows) // 2]["seq"]
    state = the_state(replay("python", profile, {key: [r for r in rows if r["seq"] <= cut]})[key])
    return key, state, [r for r in rows if r["seq"] > cut]


def _corrupt(state: Row) -> Iterator[tuple[str, Row]]:
    def with_state(**sections: Any) -> Row:
        return state | {"state": state["state"] | sections}

    yield "old version", state | {"state_version": 0}
    yield "new version", state | {"state_version": 4}
    yield "no version", state | {"state_version": None}
    yield "no state", state | {"state": None}
    yield "a section missing", with_state(pending=None, calls=None)
    yield "no model row", with_state(model=[])
    yield "two model rows", with_state(model=state["state"]["model"] * 2)
    yield (
        "an unknown profile",
        with_state(model=[state["state"]["model"][0] | {"profile": "redis-1.0"}]),
    )
    yield "streams without keys", with_state(keys=[])
    yield "a group of no stream", with_state(streams=[], keys=[], nodes=[])
    pending = state["state"]["pending"]
    if pending:
        stray = pending[0] | {"consumer": "nobody-of-this-group"}
        yield "a pending entry of no consumer", with_state(pending=[stray, *pending[1:]])
    yield (
        "a call out of range",
        with_state(model=[state["state"]["model"][0] | {"last_call": 10**6}]),
    )


def test_corrupt_saved_state_fails_alike() -> None:
    key, state, later = _saved("7.4")
    assert state["state"]["groups"], "the saved model has groups"
    cases = list(_corrupt(state))
    assert len(cases) >= 11
    for what, bad in cases:
        rows = [seed_row(key, bad), *later]
        errors = {}
        for engine in ENGINES:
            with pytest.raises(persist.StateError) as err:
                replay(engine, "7.4", {key: rows})
            errors[engine] = (type(err.value), str(err.value))
        assert errors["native"] == errors["python"], what
        if "version" in what:
            assert errors["python"][0] is persist.StateVersionError, what


def test_native_state_errors_are_exported() -> None:
    assert issubclass(native.StateVersionError, native.StateError)
    assert issubclass(native.StateError, ValueError)


def _backlog(seed: int, entries: int) -> dict[Key, list[Row]]:
    """One stream whose group holds a PEL of ``entries`` entries at its widest: delivered
    in batches, then acknowledged in a shuffled order mixed with new deliveries, claims
    and a consumer deleted (a group's delivery records leave in every order: the native
    core's record holes and their compaction)."""
    rng = random.Random(seed)
    rows: list[Row] = []

    def add(*argv: str) -> None:
        seq = len(rows) + 1
        rows.append({"seq": seq, "ts_ms": AS_OF_MS - 10_000_000 + seq, "argv": list(argv)})
        rows[-1] |= {"db": 0, "client": f"c:{rng.randrange(3)}", "source": "test"}

    add("XGROUP", "CREATE", "k", "g", "$", "MKSTREAM")
    for n in range(1, entries + 1):
        add("XADD", "k", f"{n}-0", "f", "v")
    for _ in range(0, entries, 50):
        add("XREADGROUP", "GROUP", "g", f"c{rng.randrange(4)}", "COUNT", "50", "STREAMS", "k", ">")
    pending = list(range(1, entries + 1))
    rng.shuffle(pending)
    for i, n in enumerate(pending):
        add("XACK", "k", "g", f"{n}-0")
        if i % 97 == 0:
            add("XADD", "k", f"{entries + i + 1}-0", "f", "v")
            add("XREADGROUP", "GROUP", "g", "c9", "COUNT", "3", "STREAMS", "k", ">")
        if i % 131 == 0:
            add("XCLAIM", "k", "g", "c8", "0", f"{pending[-1 - i // 131]}-0")
        if i == entries // 2:
            add("XGROUP", "DELCONSUMER", "k", "g", "c2")
    routed, _ = bench().route(rows, "7.4", 10_000)
    return {key: [r for batch in bs for r in batch.to_pylist()] for key, bs in routed.items()}


@pytest.mark.parametrize("seed", range(3))
def test_cross_resume_of_a_backlog_acknowledged_in_any_order(seed: int) -> None:
    """A PEL of hundreds of entries emptied in a random order, cut at three points: both
    engines save the same state and, resumed on either, give the same tables and the
    uninterrupted run's state tables."""
    families = _backlog(seed, 600)
    seqs = sorted(r["seq"] for rows in families.values() for r in rows)
    whole = replay("python", "7.4", families)
    assert_tables_equal(
        whole[next(iter(whole))], replay("native", "7.4", families)[next(iter(whole))], "whole"
    )
    for cut in (seqs[len(seqs) // 3], seqs[len(seqs) // 2], seqs[5 * len(seqs) // 6]):
        night1 = {k: [r for r in rows if r["seq"] <= cut] for k, rows in families.items()}
        saved = {a: replay(a, "7.4", night1) for a in ENGINES}
        for k in night1:
            assert_tables_equal(saved["python"][k], saved["native"][k], f"night 1 {k} {cut}")
        for a in ENGINES:
            night2 = {
                k: [seed_row(k, the_state(saved[a][k]))] + [r for r in rows if r["seq"] > cut]
                for k, rows in families.items()
            }
            outs = {b: replay(b, "7.4", night2) for b in ENGINES}
            for k in night2:
                assert_tables_equal(outs["native"][k], outs["python"][k], f"{a} -> {k} {cut}")
                for table in STATE_TABLES:
                    assert canon(outs["native"][k].get(table, [])) == canon(
                        whole[k].get(table, [])
                    ), (k, table, cut)
