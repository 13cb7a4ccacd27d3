"""PELENGINE.LOAD rows: a snapshot's state, applied exactly (hand-written facts)."""

from __future__ import annotations

import pytest

from pelengine.model import Replayer, snapshot_tables

L = "PELENGINE.LOAD"
SNAPSHOT = [
    [L, "BEGIN"],
    [L, "KEY", "str", "string"],
    [L, "STREAM", "s", "5-0", "7", "2-0", "1-0"],
    [L, "NODE", "s", "1-0", "120", "1", "f", "1-0", "1", "2-0", "0", "3-0", "1"],
    [L, "NODE", "s", "4-0", "80", "1", "f", "4-0", "1", "5-0", "1"],
    [L, "GROUP", "s", "g", "3-0", "4"],
    [L, "CONSUMER", "s", "g", "alice", "900", "950"],
    [L, "CONSUMER", "s", "g", "bob", "800", "-1"],
    [L, "PENDING", "s", "g", "1-0", "alice", "940", "3", "2-0", "alice", "945", "1"],
]


def load(profile: str = "7.4", extra: list[list[str]] = ()) -> Replayer:  # type: ignore[assignment]
    r = Replayer(profile)
    for seq, argv in enumerate([*SNAPSHOT, *extra], start=1):
        r.apply(seq, 1000, argv, 0, None)
    return r


@pytest.mark.parametrize("profile", ["7.0", "7.4", "valkey-8.1"])
def test_a_snapshot_is_the_state(profile: str) -> None:
    r = load(profile)
    assert r.counters.failed == 0 and r.counters.applied == len(SNAPSHOT)
    snap = snapshot_tables(r, 1000, 9)
    (stream,) = snap["streams"]
    assert (stream["length"], stream["last_generated_id"], stream["entries_added"]) == (4, "5-0", 7)
    assert (stream["max_deleted_entry_id"], stream["first_entry_id"]) == ("2-0", "1-0")
    (group,) = snap["groups"]
    assert (group["last_delivered_id"], group["entries_read"], group["pending"]) == ("3-0", 4, 2)
    pel = [
        (p["id"], p["consumer"], p["delivery_time_ms"], p["delivery_count"]) for p in snap["pel"]
    ]
    assert pel == [("1-0", "alice", 940, 3), ("2-0", "alice", 945, 1)]
    assert not snap["pel"][1]["entry_exists"]  # 2-0 is a tombstone in its node
    times = {o["consumer"]: (o["seen_time_ms"], o["active_time_ms"]) for o in snap["ownership"]}
    assert times["bob"] == (800, None)
    assert times["alice"] == (900, 950 if profile != "7.0" else None)


def test_history_starts_at_the_snapshot() -> None:
    r = load()
    changes = [
        (c["id"], c["change"], c["to_consumer"], c["delivery_count"]) for c in r.drain_changes()
    ]
    assert changes == [("1-0", "loaded", "alice", 3), ("2-0", "loaded", "alice", 1)]
    r.apply(20, 2000, ["XCLAIM", "s", "g", "bob", "0", "1-0"], 0, None)
    records = {d["id"]: d for d in snapshot_tables(r, 2000, 20)["delivery_counts"]}
    assert (records["2-0"]["deliveries"], records["2-0"]["first_delivery_ms"]) == (0, None)
    one = records["1-0"]
    assert (one["deliveries"], one["delivery_count"], one["first_delivery_ms"]) == (1, 4, 2000)
    assert one["owner_names"] == ["alice", "bob"] and one["owners"] == 2


def test_the_loaded_nodes_and_counters_behave_as_the_servers() -> None:
    r = load("7.4", [["XADD", "s", "*", "f", "v"], ["XTRIM", "s", "MAXLEN", "~", "2"]])
    (stream,) = snapshot_tables(r, 1000, 11)["streams"]
    # the first node (1-0..3-0) goes whole; the second and the new entry stay
    assert (stream["length"], stream["first_entry_id"], stream["last_generated_id"]) == (
        3,
        "4-0",
        "1000-0",
    )
    assert r.lookup_any(0, "str") is not None
    assert r.apply(12, 1000, ["XADD", "str", "*", "f", "v"], 0, None).error == "wrongtype"


@pytest.mark.parametrize(
    "argv",
    [
        [L, "NODE", "nokey", "1-0", "10", "0", "1-0", "1"],
        [L, "STREAM", "t", "x", "1", "0-0", "0-0"],
        [L, "GROUP", "s", "g2", "1-0"],
        [L, "PENDING", "s", "g", "1-0", "nobody", "1", "1"],
        [L, "PENDING", "s", "nogroup", "1-0", "alice", "1", "1"],
        [L, "NODE", "s", "1-0", "10", "0", "1-0", "1"],  # not after the tail node
        [L, "WHAT", "s"],
    ],
)
def test_a_malformed_row_fails_alone(argv: list[str]) -> None:
    r = load()
    before = snapshot_tables(r, 1000, 9)
    outcome = r.apply(30, 1000, argv, 0, None)
    assert outcome.kind == "error"
    after = snapshot_tables(r, 1000, 9)
    assert {t: before[t] for t in ("streams", "groups", "pel")} == {
        t: after[t] for t in ("streams", "groups", "pel")
    }
