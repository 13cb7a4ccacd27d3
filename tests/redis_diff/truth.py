"""Read the real server's consumer-group state as the rows of the output tables.

For every stream key of every db (``SCAN ... TYPE stream``) the state comes from
``XINFO STREAM key FULL COUNT 0`` (absolute delivery and seen times, every entry
and every pending entry) and is cross-checked against ``XINFO GROUPS``,
``XINFO CONSUMERS`` and ``XPENDING`` so a misread of the server fails loudly
instead of becoming the expected value of a test.

Rows carry exactly the columns of docs/outputs.md for ``pel``, ``ownership``,
``groups`` and ``streams`` (without ``as_of_ms``/``as_of_seq``/``idle_ms``):
IDs as ``"ms-seq"`` strings (plus ``id_ms``/``id_seq`` where the contract has
them), times as absolute ms, nil as ``None``.
"""

from __future__ import annotations

from typing import Any

import redis

from tests.redis_diff.capture import parse_id
from tests.redis_diff.server import DATABASES, RedisServer

TABLES = ("pel", "ownership", "groups", "streams")


class TruthReadError(AssertionError):
    """The server's views of the same state disagree with each other (a harness bug)."""


def pairs(flat: Any) -> dict[str, Any]:
    """A RESP2 flat ``[k1, v1, ...]`` map as a dict."""
    if not isinstance(flat, list) or len(flat) % 2:
        raise TruthReadError(f"not a flat map: {flat!r}")
    return {flat[i]: flat[i + 1] for i in range(0, len(flat), 2)}


def stream_keys(client: redis.Redis) -> list[str]:
    keys: set[str] = set()
    cursor = "0"
    while True:
        cursor, batch = client.execute_command("SCAN", cursor, "COUNT", "1000", "TYPE", "stream")
        keys.update(batch)
        if str(cursor) == "0":
            return sorted(keys)


BIGINT_MAX = (1 << 63) - 1


def _id_cols(text: str) -> dict[str, Any]:
    """The server's ID, in the contract's columns: a part beyond BIGINT is null there
    (docs/outputs.md types id_ms/id_seq as BIGINT; the id string carries the exact value)."""
    ms, seq = parse_id(text)
    return {
        "id": text,
        "id_ms": ms if ms <= BIGINT_MAX else None,
        "id_seq": seq if seq <= BIGINT_MAX else None,
    }


def _active_time(consumer: dict[str, Any]) -> int | None:
    """A consumer's ``active-time`` (7.2+ and Valkey; 7.0 has none): ``None`` also where
    the consumer was never active (the server says -1)."""
    value = consumer.get("active-time")
    return None if value is None or int(value) == -1 else int(value)


def read_stream(
    client: redis.Redis, db: int, key: str, cross_check: bool = True
) -> dict[str, list]:
    """The rows of every table for one stream key."""
    full = pairs(client.execute_command("XINFO", "STREAM", key, "FULL", "COUNT", "0"))
    entries = [e[0] for e in full["entries"]]
    if len(entries) != full["length"]:
        raise TruthReadError(f"{db}/{key}: FULL COUNT 0 listed {len(entries)} of {full['length']}")
    live = set(entries)
    out: dict[str, list] = {t: [] for t in TABLES}
    group_list = [pairs(g) for g in full["groups"]]
    out["streams"].append(
        {
            "db": db,
            "key": key,
            "length": full["length"],
            "last_generated_id": full["last-generated-id"],
            "max_deleted_entry_id": full["max-deleted-entry-id"],
            "entries_added": full["entries-added"],
            "first_entry_id": entries[0] if entries else None,
            "last_entry_id": entries[-1] if entries else None,
            "groups": len(group_list),
        }
    )
    for g in group_list:
        name = g["name"]
        pending = g["pending"]
        if len(pending) != g["pel-count"]:
            raise TruthReadError(f"{db}/{key}/{name}: {len(pending)} of {g['pel-count']} pending")
        owners: dict[str, list[tuple[str, int, int]]] = {}
        for entry_id, consumer, delivery_time, count in pending:
            out["pel"].append(
                {
                    "db": db,
                    "key": key,
                    "group": name,
                    **_id_cols(entry_id),
                    "consumer": consumer,
                    "delivery_time_ms": int(delivery_time),
                    "delivery_count": int(count),
                    "entry_exists": entry_id in live,
                }
            )
            owners.setdefault(consumer, []).append((entry_id, int(delivery_time), int(count)))
        consumers = [pairs(c) for c in g["consumers"]]
        for c in consumers:
            own = [(e[0], int(e[1]), int(e[2])) for e in c["pending"]]
            if sorted(own) != sorted(owners.get(c["name"], [])) or len(own) != c["pel-count"]:
                raise TruthReadError(f"{db}/{key}/{name}/{c['name']}: consumer PEL != group PEL")
            out["ownership"].append(
                {
                    "db": db,
                    "key": key,
                    "group": name,
                    "consumer": c["name"],
                    "pending": c["pel-count"],
                    "seen_time_ms": int(c["seen-time"]),
                    "active_time_ms": _active_time(c),
                    "oldest_pending_id": min(own, key=lambda e: parse_id(e[0]))[0] if own else None,
                    "earliest_delivery_time_ms": min(e[1] for e in own) if own else None,
                    "max_delivery_count": max(e[2] for e in own) if own else None,
                }
            )
        if set(owners) - {c["name"] for c in consumers}:
            raise TruthReadError(f"{db}/{key}/{name}: pending entries of unknown consumers")
        out["groups"].append(
            {
                "db": db,
                "key": key,
                "group": name,
                "last_delivered_id": g["last-delivered-id"],
                "entries_read": g["entries-read"],
                "lag": g["lag"],
                "pending": g["pel-count"],
                "consumers": len(consumers),
            }
        )
    if cross_check:
        _cross_check(client, db, key, out)
    return out


def _cross_check(client: redis.Redis, db: int, key: str, out: dict[str, list]) -> None:
    groups = {pairs(g)["name"]: pairs(g) for g in client.execute_command("XINFO", "GROUPS", key)}
    mine = {g["group"]: g for g in out["groups"]}
    if set(groups) != set(mine):
        raise TruthReadError(f"{db}/{key}: XINFO GROUPS {sorted(groups)} != FULL {sorted(mine)}")
    for name, g in groups.items():
        row = mine[name]
        view = {
            "last_delivered_id": g["last-delivered-id"],
            "entries_read": g["entries-read"],
            "lag": g["lag"],
            "pending": g["pending"],
            "consumers": g["consumers"],
        }
        for col, value in view.items():
            if row[col] != value:
                raise TruthReadError(
                    f"{db}/{key}/{name}: XINFO GROUPS {col}={value!r} != {row[col]!r}"
                )
        consumers = {
            pairs(c)["name"]: pairs(c)
            for c in client.execute_command("XINFO", "CONSUMERS", key, name)
        }
        owned = {r["consumer"]: r["pending"] for r in out["ownership"] if r["group"] == name}
        if {n: c["pending"] for n, c in consumers.items()} != owned:
            raise TruthReadError(f"{db}/{key}/{name}: XINFO CONSUMERS != FULL")
        # 'inactive' (7.2+ and Valkey) is -1 exactly where FULL's active-time is
        inactive = {n: c["inactive"] for n, c in consumers.items() if "inactive" in c}
        never = {
            r["consumer"]
            for r in out["ownership"]
            if r["group"] == name and r["active_time_ms"] is None
        }
        if inactive and {n for n, v in inactive.items() if v == -1} != never:
            raise TruthReadError(f"{db}/{key}/{name}: XINFO CONSUMERS inactive != FULL")
        summary = client.execute_command("XPENDING", key, name)
        if summary[0] != row["pending"]:
            raise TruthReadError(
                f"{db}/{key}/{name}: XPENDING count {summary[0]} != {row['pending']}"
            )
        ids = (
            [
                (e[0], e[1], int(e[3]))
                for e in client.execute_command(
                    "XPENDING", key, name, "-", "+", str(row["pending"] + 1)
                )
            ]
            if row["pending"]
            else []
        )
        pel = [
            (r["id"], r["consumer"], r["delivery_count"]) for r in out["pel"] if r["group"] == name
        ]
        if ids != pel:
            raise TruthReadError(f"{db}/{key}/{name}: XPENDING - + != FULL pending")


def read_truth(
    server: RedisServer,
    dbs: list[int] | range | None = None,
    cross_check: bool = True,
    binary: bool = False,
) -> dict[str, list[dict[str, Any]]]:
    """All tables for every stream key in ``dbs`` (default: every db of the server).
    ``binary``: names that are not UTF-8 are read as str with their bytes as lone
    surrogates (``name.encode("utf-8", "surrogateescape")`` is the server's bytes)."""
    tables: dict[str, list[dict[str, Any]]] = {t: [] for t in TABLES}
    extra = {"encoding_errors": "surrogateescape"} if binary else {}
    for db in dbs if dbs is not None else range(DATABASES):
        client = server.client(db, **extra)
        try:
            for key in stream_keys(client):
                for table, rows in read_stream(client, db, key, cross_check).items():
                    tables[table].extend(rows)
        finally:
            client.close()
    return tables
