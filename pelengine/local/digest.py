"""Spark's ``xxhash64`` of events rows, without Spark: the count and digest a night's
state keeps of every row up to its ``high_seq`` (``runs.incremental``: the run row's
``rows_upto_high``/``digest_upto_high``). The Spark runner computes them with
``F.xxhash64("seq", "ts_ms", "argv", "db", "client", "source")``; the local runner here,
with the same result, so that a night of either runner continues the other's.

Spark's ``XxHash64`` (seed 42) hashes the columns in order, each with the hash so far as
its seed, and skips nulls: a long as XXH64 of its 8 little-endian bytes, an int of its
4, a string of its UTF-8 bytes, an array element by element. The native core does it
(``pelengine_native.spark_digest``); this module's Python twin is the reference its
tests hold it to, and what runs without the native core (slowly: a Python loop).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import pyarrow as pa

from pelengine.engine.native import load

_M = (1 << 64) - 1
P1, P2, P3, P4, P5 = (
    0x9E3779B185EBCA87,
    0xC2B2AE3D27D4EB4F,
    0x165667B19E3779F9,
    0x85EBCA77C2B2AE63,
    0x27D4EB2F165667C5,
)
SPARK_SEED = 42
#: the columns hashed, in order
COLUMNS = ("seq", "ts_ms", "argv", "db", "client", "source")


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & _M


def _round(acc: int, lane: int) -> int:
    return (_rotl((acc + lane * P2) & _M, 31) * P1) & _M


def xxh64(data: bytes, seed: int) -> int:
    """The standard XXH64 of ``data`` (unsigned)."""
    n, at = len(data), 0
    if n >= 32:
        v = [(seed + P1 + P2) & _M, (seed + P2) & _M, seed, (seed - P1) & _M]
        while at + 32 <= n:
            for i in range(4):
                v[i] = _round(v[i], int.from_bytes(data[at + 8 * i : at + 8 * i + 8], "little"))
            at += 32
        h = (_rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)) & _M
        for lane in v:
            h = (((h ^ _round(0, lane)) * P1) + P4) & _M
    else:
        h = (seed + P5) & _M
    h = (h + n) & _M
    while at + 8 <= n:
        h ^= _round(0, int.from_bytes(data[at : at + 8], "little"))
        h = (_rotl(h, 27) * P1 + P4) & _M
        at += 8
    if at + 4 <= n:
        h ^= (int.from_bytes(data[at : at + 4], "little") * P1) & _M
        h = (_rotl(h, 23) * P2 + P3) & _M
        at += 4
    while at < n:
        h ^= (data[at] * P5) & _M
        h = (_rotl(h, 11) * P1) & _M
        at += 1
    h ^= h >> 33
    h = (h * P2) & _M
    h ^= h >> 29
    h = (h * P3) & _M
    return h ^ (h >> 32)


def spark_row_hash(
    seq: int | None,
    ts_ms: int | None,
    argv: Sequence[str | None] | None,
    db: int | None,
    client: str | None,
    source: str | None,
) -> int:
    """Spark's ``xxhash64(seq, ts_ms, argv, db, client, source)`` of one row (signed)."""
    h = SPARK_SEED
    for value in (seq, ts_ms):
        if value is not None:
            h = xxh64(value.to_bytes(8, "little", signed=True), h)
    for item in argv or ():
        if item is not None:
            h = xxh64(item.encode("utf-8"), h)
    if db is not None:
        h = xxh64(db.to_bytes(4, "little", signed=True), h)
    for text in (client, source):
        if text is not None:
            h = xxh64(text.encode("utf-8"), h)
    return h - (1 << 64) if h >= 1 << 63 else h


Digest = tuple[int, int, int, "int | None"]


def spark_digest(rows: pa.Table, *, native: bool | None = None) -> Digest:
    """(rows with a seq, the XOR of their hashes, rows without one, largest seq) of
    ``rows`` (the events contract's columns and types: seq and ts_ms longs, argv a list of
    strings, db an int, client and source strings; a column missing is null), as
    ``runs.incremental.digest(events, None)`` gives them. ``native``: force the engine
    (None: the native core when importable)."""
    rows = _contract_columns(rows)
    module = load() if native is not False else None
    if native and module is None:
        raise RuntimeError("the native core is not importable")
    if module is not None:
        n = x = null = 0
        top: int | None = None
        for batch in rows.to_batches():
            bn, bx, bnull, btop = module.spark_digest(batch)
            n, x, null = n + bn, x ^ bx, null + bnull
            if btop is not None:
                top = btop if top is None else max(top, btop)
        return n, x, null, top
    return _python_digest(rows.to_pylist())


def _python_digest(rows: Iterable[dict[str, Any]]) -> Digest:
    n = x = null = 0
    top: int | None = None
    for r in rows:
        if r["seq"] is None:
            null += 1
            continue
        n += 1
        x ^= spark_row_hash(r["seq"], r["ts_ms"], r["argv"], r["db"], r["client"], r["source"])
        top = r["seq"] if top is None else max(top, r["seq"])
    return n, x, null, top


def _contract_columns(rows: pa.Table) -> pa.Table:
    """``rows`` as the six hashed columns with the contract's types (a missing one null)."""
    types = {
        "seq": pa.int64(),
        "ts_ms": pa.int64(),
        "argv": pa.list_(pa.string()),
        "db": pa.int32(),
        "client": pa.string(),
        "source": pa.string(),
    }
    columns = []
    for name in COLUMNS:
        if name in rows.column_names:
            columns.append(rows.column(name).cast(types[name]))
        else:
            columns.append(pa.nulls(rows.num_rows, types[name]))
    return pa.table(columns, names=list(COLUMNS))
