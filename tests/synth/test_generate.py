"""The synthetic workload generator: shape, mix, faults, determinism (no Spark)."""

from __future__ import annotations

import itertools
import re
from collections import Counter
from typing import Any

import pytest

from pelengine.synth import (
    SOURCE,
    SOURCE_BAD,
    SOURCE_DUP,
    SOURCE_INVALID,
    generate_events,
)

N = 20_000
ID_RE = re.compile(r"^\d+-\d+$")


@pytest.fixture(scope="module")
def rows() -> list[dict[str, Any]]:
    return list(generate_events(N, 20, seed=7))


def kind(argv: list[str]) -> str:
    name = argv[0].upper()
    if name in ("XGROUP", "XINFO"):
        return f"{name} {argv[1].upper()}"
    return name


def test_row_shape(rows: list[dict[str, Any]]) -> None:
    assert len(rows) == N
    for row in rows:
        assert set(row) == {"seq", "ts_ms", "argv", "db", "client", "source"}
        assert isinstance(row["seq"], int) and isinstance(row["ts_ms"], int)
        assert row["db"] in (None, 0, 1)
        assert row["source"] in (SOURCE, SOURCE_BAD, SOURCE_DUP, SOURCE_INVALID)
        if row["argv"] is not None:
            assert all(isinstance(a, str) for a in row["argv"])


def test_deterministic_per_seed() -> None:
    first = list(generate_events(3000, 6, seed=42))
    assert first == list(generate_events(3000, 6, seed=42))
    assert first != list(generate_events(3000, 6, seed=43))


def test_start_ms_and_clock(rows: list[dict[str, Any]]) -> None:
    ts = [r["ts_ms"] for r in rows]
    assert ts[0] >= 1_700_000_000_000
    steps = [b - a for a, b in itertools.pairwise(ts)]
    backwards = sum(1 for s in steps if s < 0)
    assert 0 < backwards < len(steps) / 1000  # monotonic mostly, a few clock steps
    assert sorted(steps)[len(steps) // 2] <= 10  # a few ms between commands


def test_every_command_kind_present(rows: list[dict[str, Any]]) -> None:
    kinds = Counter(kind(r["argv"]) for r in rows if r["argv"])
    expected = {
        "XADD",
        "XREADGROUP",
        "XACK",
        "XCLAIM",
        "XAUTOCLAIM",
        "XDEL",
        "XTRIM",
        "XSETID",
        "XGROUP CREATE",
        "XGROUP SETID",
        "XGROUP DESTROY",
        "XGROUP CREATECONSUMER",
        "XGROUP DELCONSUMER",
        "MULTI",
        "EXEC",
        "XPENDING",
        "XINFO STREAM",
        "GET",
        "SET",
    }
    assert expected <= set(kinds), expected - set(kinds)
    assert kinds["DEL"] + kinds["UNLINK"] >= 1
    # the bulk is producers, readers and acks
    assert kinds["XADD"] > kinds["XCLAIM"] and kinds["XACK"] > kinds["XAUTOCLAIM"]


def test_options_present(rows: list[dict[str, Any]]) -> None:
    def has(name: str, token: str) -> bool:
        return any(r["argv"] and r["argv"][0] == name and token in r["argv"] for r in rows)

    for token in ("MAXLEN", "MINID", "NOMKSTREAM"):
        assert has("XADD", token), token
    for token in ("NOACK", "BLOCK", "COUNT"):
        assert has("XREADGROUP", token), token
    for token in ("IDLE", "TIME", "RETRYCOUNT", "FORCE", "JUSTID", "LASTID"):
        assert has("XCLAIM", token), token
    assert has("XAUTOCLAIM", "JUSTID") and has("XAUTOCLAIM", "COUNT")
    creates = [r["argv"] for r in rows if r["argv"] and kind(r["argv"]) == "XGROUP CREATE"]
    assert any("MKSTREAM" in a for a in creates)
    assert {"$", "0"} <= {a[4] for a in creates}
    multi = [r for r in rows if r["argv"] and r["argv"][0] == "XREADGROUP" and r["argv"][-2] == ">"]
    assert any(a["argv"].count(">") > 1 for a in multi)  # several streams at once
    history = [r for r in rows if r["argv"] and r["argv"][0] == "XREADGROUP"]
    assert any(r["argv"][-1] in ("0", "0-0") for r in history)


def test_xadd_ids_are_generated_from_ts(rows: list[dict[str, Any]]) -> None:
    last: dict[tuple[int, str], tuple[int, int]] = {}
    for r in rows:
        a = r["argv"]
        if not a or a[0] != "XADD" or r["source"] != SOURCE:
            continue
        id_arg = a[a.index("kind") - 1]
        ms = int(id_arg.split("-")[0])
        assert ms >= r["ts_ms"] or (r["db"] or 0, a[1]) in last
        last[(r["db"] or 0, a[1])] = (ms, 0)


def test_acks_and_claims_target_delivered_ids(rows: list[dict[str, Any]]) -> None:
    added: set[tuple[str, str]] = set()  # (key, id); `ms-*` IDs count by their ms
    for r in rows:
        a = r["argv"]
        if a and a[0] == "XADD" and r["source"] == SOURCE:
            added.add((a[1], a[a.index("kind") - 1].replace("-*", "-0")))
    for command, first_id in (("XACK", 3), ("XCLAIM", 5)):
        targets = [
            (r["argv"][1], x)
            for r in rows
            if r["argv"] and r["argv"][0] == command and r["source"] == SOURCE
            for x in r["argv"][first_id:]
            if ID_RE.match(x)
        ]
        assert targets
        hits = sum(
            1 for key, x in targets if (key, x) in added or (key, x.split("-")[0] + "-0") in added
        )
        assert hits >= 0.97 * len(targets), command


def test_faults_are_rare_and_marked(rows: list[dict[str, Any]]) -> None:
    sources = Counter(r["source"] for r in rows)
    assert 0 < sources[SOURCE_INVALID] < N / 200
    assert 0 < sources[SOURCE_BAD] < N / 1000
    assert 0 < sources[SOURCE_DUP] < N / 1000
    bad = [r for r in rows if r["source"] == SOURCE_BAD]
    assert any(r["argv"] is None for r in bad) and any(r["argv"] == [] for r in bad)
    assert all(r["argv"] for r in rows if r["source"] != SOURCE_BAD)


def test_seq_unique_except_marked_duplicates(rows: list[dict[str, Any]]) -> None:
    seqs = Counter(r["seq"] for r in rows)
    dup_seqs = {s for s, c in seqs.items() if c > 1}
    marked = {r["seq"] for r in rows if r["source"] == SOURCE_DUP}
    assert dup_seqs == marked and all(seqs[s] == 2 for s in dup_seqs)
    # the duplicated pair is harmless whichever row an engine keeps
    for r in rows:
        if r["seq"] in dup_seqs:
            assert r["argv"][0] in ("XLEN", "GET")
    assert [r["seq"] for r in rows] == sorted(r["seq"] for r in rows)


def test_no_faults_option() -> None:
    clean = list(generate_events(5000, 5, seed=1, faults=False))
    assert len(clean) == 5000
    assert {r["source"] for r in clean} == {SOURCE}
    assert len({r["seq"] for r in clean}) == 5000


def test_small_and_edge_sizes() -> None:
    assert list(generate_events(0, 3, seed=1)) == []
    assert len(list(generate_events(7, 1, seed=1))) == 7
    with pytest.raises(ValueError, match="n_keys"):
        list(generate_events(10, 0, seed=1))


def test_keys_spread_over_dbs(rows: list[dict[str, Any]]) -> None:
    dbs = Counter(r["db"] or 0 for r in rows if r["argv"] and r["argv"][0] == "XADD")
    assert dbs[0] > 0 and dbs[1] > 0
    # one key name lives in two dbs: stream identity is (db, key)
    names: dict[str, set[int]] = {}
    for r in rows:
        if r["argv"] and r["argv"][0] == "XADD":
            names.setdefault(r["argv"][1], set()).add(r["db"] or 0)
    assert any(len(d) == 2 for d in names.values())


def test_arrow_batches_keep_rows_and_nulls() -> None:
    from pelengine.runs.events import EVENTS_ARROW_SCHEMA
    from pelengine.runs.generate import generated_arrow_table

    table = generated_arrow_table(1500, 5, seed=3, chunk_rows=400)
    assert table.schema == EVENTS_ARROW_SCHEMA
    assert table.to_pylist() == list(generate_events(1500, 5, seed=3))


@pytest.mark.spark
def test_generated_dataframe_has_events_schema(spark: Any) -> None:
    from pelengine.runs.generate import generated_events_df
    from pelengine.schemas import EVENTS_SCHEMA

    df = generated_events_df(spark, 2000, 4, seed=5)
    assert df.schema == EVENTS_SCHEMA
    got = sorted((r.asDict() for r in df.collect()), key=lambda r: (r["seq"], r["source"]))
    want = sorted(generate_events(2000, 4, seed=5), key=lambda r: (r["seq"], r["source"]))
    assert got == want
    assert any(r["argv"] is None for r in got) and any(r["argv"] == [] for r in got)


@pytest.mark.parametrize("profile", ["7.0", "7.4"])
def test_simulated_pel_agrees_with_the_model(profile: str) -> None:
    """The generator's light simulation and the Redis model end with the same PEL
    (owner and delivery time of every pending entry), and only `gen:invalid` rows fail."""
    from pelengine.model import Replayer, snapshot_tables
    from pelengine.synth import Workload

    n = 3000
    w = Workload(n, 8, seed=11, start_ms=1_700_000_000_000, faults=True)
    while w.emitted < n:
        w.run(1)
    rows, seen = w.out[:n], set()
    replayer = Replayer(profile=profile)
    for r in rows:
        if not r["argv"] or r["seq"] in seen:
            continue
        seen.add(r["seq"])
        outcome = replayer.apply(r["seq"], r["ts_ms"], r["argv"], r["db"] or 0, r["client"])
        assert (outcome.kind == "error") == (r["source"] == SOURCE_INVALID), (r, outcome)
    snap = snapshot_tables(replayer, rows[-1]["ts_ms"], rows[-1]["seq"])
    model = {
        (p["db"], p["key"], p["group"], p["id"]): (p["consumer"], p["delivery_time_ms"])
        for p in snap["pel"]
    }
    sim = {
        (g.key.db, g.key.name, g.name, f"{i[0]}-{i[1]}"): (p[0], p[1])
        for g in w.pairs
        for i, p in g.pel.items()
    }
    assert sim and sim == model
