"""The RDB reader (pelengine/ingest/rdb/) against real servers: what it reads from a
server's own snapshot must equal what that server reports, on every kind of server
(Redis 7.0 writes REDIS0010 with stream type 19; Valkey 8.1 REDIS0011 and Valkey 9.1
VALKEY080, both with type 21).

Each seed builds a random dataset (``build_dataset``): streams in several dbs with
explicit and generated IDs (some beyond 2^63), small nodes, XDEL, XTRIM (= and ~),
groups created at 0, $ or an entry, with and without ENTRIESREAD, XGROUP SETID,
XREADGROUP (some NOACK, some re-reading history), XCLAIM (TIME, RETRYCOUNT, JUSTID,
FORCE), XAUTOCLAIM, XACK, consumers with and without pending entries, entries deleted
while pending, values of several KB (compressible ones, so the server stores the node
LZF-compressed, and incompressible ones), empty streams; and keys of every other type
in each encoding, some with expiries, plus a function library. Then ``SAVE`` (or, for
the AOF test, ``BGREWRITEAOF`` with ``aof-use-rdb-preamble yes``) and the file is read
by ``read_rdb`` and compared with:

* ``read_truth`` (``XINFO STREAM FULL`` etc.): the ``streams``, ``groups``, ``pel`` and
  ``ownership`` rows (lag left out: it is computed, not stored); consumers' seen and
  active times exactly (they come from the file);
* ``XRANGE - +`` (every live entry with its fields and values) and ``XINFO STREAM``'s
  ``radix-tree-keys`` (the node count);
* ``SCAN`` + ``TYPE`` (every key and its type), ``PEXPIRETIME`` (every key's expiry) and
  ``OBJECT ENCODING`` (sets, sorted sets and hashes);
* ``FUNCTION LIST`` (the library's name is in the FUNCTION2 payload).

The ``dump.rdb`` is also loaded by a FRESH server of the same kind (a copy of the file,
``--dbfilename dump.rdb`` in a new directory), and the file read must equal what THAT
server reports too, by the same comparisons: what the file holds, as the server itself
reads it back.

Knob: ``PELENGINE_RDB_SEEDS`` (a comma list, or a count N meaning seeds 1..N).
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile
import time
from typing import Any

import pytest
import redis

from pelengine.ingest.aof import list_files
from pelengine.ingest.rdb import RdbFile, RdbStream, read_rdb
from pelengine.model.ids import StreamID
from tests.redis_diff.server import RedisServer, ServerKind, env_seeds, start_or_fail, stop_server
from tests.redis_diff.truth import _id_cols, read_truth

pytestmark = pytest.mark.redis

SEEDS = env_seeds("PELENGINE_RDB_SEEDS", [1, 2, 3], count_from=1)
DBS = range(4)
LIBRARY = (
    "#!lua name=rdblib\nredis.register_function('rdbfn', function(keys, args) return #keys end)"
)
# OBJECT ENCODING of a key the file stores with this RDB type
ENCODINGS = {
    "SET_INTSET": "intset",
    "SET_LISTPACK": "listpack",
    "SET": "hashtable",
    "ZSET_LISTPACK": "listpack",
    "ZSET_2": "skiplist",
    "HASH_LISTPACK": "listpack",
    "HASH": "hashtable",
    "HASH_2": "hashtable",
}


# --------------------------------------------------------------------------- a dataset


def _value(rng: random.Random) -> str:
    roll = rng.random()
    if roll < 0.3:
        return str(rng.randrange(-100000, 100000))  # stored as a listpack integer
    if roll < 0.9:
        return rng.choice(["a", "bb", "ccc", "é", "ключ"]) * rng.randrange(1, 20)
    if roll < 0.95:
        return "compressible-" * rng.randrange(200, 700)  # several KB, LZF shrinks it
    return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(3000))


def _try(client: Any, *args: Any) -> Any:
    try:
        return client.execute_command(*args)
    except redis.ResponseError:  # an invalid random command is fine: the server refuses it
        return None


def _stream(rng: random.Random, c: Any, key: str) -> None:
    fields_pool = [["f"], ["f", "g"], ["name", "n", "x"], ["é"]]
    master = rng.choice(fields_pool)
    # IDs past 2^63 too (an ms delta from the node's master may then not fit an int64)
    ms, seq = rng.choice([1, 1_700_000_000_000, 1_700_000_000_000, (1 << 63) - 3]), 0
    for _ in range(rng.randrange(0, 400)):
        fields = master if rng.random() < 0.7 else rng.choice(fields_pool)
        argv: list[Any] = ["XADD", key]
        if rng.random() < 0.1:
            argv += ["MAXLEN", rng.choice(["=", "~"]), str(rng.randrange(5, 200))]
        if rng.random() < 0.2:
            argv.append("*")
        elif rng.random() < 0.5:  # a later ms: the seq delta from the node's master may be < 0
            jump = rng.choice([1, 1, 7, 1000]) if rng.random() < 0.98 else 1 << 63
            next_ms = min(ms + jump, (1 << 64) - 1)
            argv.append(f"{next_ms}-{rng.choice([0, 0, 5, (1 << 64) - 10])}")
        else:
            argv.append(f"{ms}-{seq + 1}")
        for name in fields:
            argv += [name, _value(rng)]
        added = _try(c, *argv)
        if added is not None:
            ms, seq = (int(part) for part in added.split("-"))
    ids = [e[0] for e in c.execute_command("XRANGE", key, "-", "+")]
    groups = []
    for g in range(rng.randrange(0, 4)):
        group = f"g{g}-{rng.choice(['x', 'é'])}"
        start = rng.choice(["0", "$"] + ids[:: max(1, len(ids) // 5)])
        argv = ["XGROUP", "CREATE", key, group, start, "MKSTREAM"]
        if rng.random() < 0.4:
            argv += ["ENTRIESREAD", str(rng.randrange(0, len(ids) + 3))]
        if _try(c, *argv) is not None:
            groups.append(group)
    consumers = ["alice", "bob", "carol", "дэйв"]
    for _ in range(rng.randrange(0, 60)) if groups else ():
        group = rng.choice(groups)
        consumer = rng.choice(consumers)
        roll = rng.random()
        if roll < 0.45:
            argv = ["XREADGROUP", "GROUP", group, consumer, "COUNT", str(rng.randrange(1, 30))]
            if rng.random() < 0.15:
                argv.append("NOACK")
            _try(c, *argv, "STREAMS", key, "0" if rng.random() < 0.15 else ">")
        elif roll < 0.6:
            pending = _try(c, "XPENDING", key, group, "-", "+", "10") or []
            if pending:
                argv = ["XCLAIM", key, group, rng.choice(consumers), "0"]
                argv += [p[0] for p in rng.sample(pending, rng.randrange(1, len(pending) + 1))]
                option = rng.choice(["", "TIME", "RETRYCOUNT", "JUSTID", "FORCE", "IDLE"])
                if option == "TIME":
                    argv += ["TIME", str(int(time.time() * 1000) - rng.randrange(0, 10**6))]
                elif option == "RETRYCOUNT":
                    argv += ["RETRYCOUNT", str(rng.randrange(0, 50))]
                elif option == "IDLE":
                    argv += ["IDLE", str(rng.randrange(0, 10**6))]
                elif option:
                    argv.append(option)
                _try(c, *argv)
        elif roll < 0.7:
            _try(c, "XAUTOCLAIM", key, group, rng.choice(consumers), "0", "0", "COUNT", "3")
        elif roll < 0.8:
            pending = _try(c, "XPENDING", key, group, "-", "+", "5") or []
            if pending:
                _try(c, "XACK", key, group, *[p[0] for p in pending[: rng.randrange(1, 4)]])
        elif roll < 0.85:
            _try(c, "XGROUP", "CREATECONSUMER", key, group, f"idle-{rng.randrange(3)}")
        elif roll < 0.9:
            argv = ["XGROUP", "SETID", key, group, rng.choice(["0", "$"] + ids[:3])]
            if rng.random() < 0.5:
                argv += ["ENTRIESREAD", str(rng.randrange(0, len(ids) + 3))]
            _try(c, *argv)
        elif roll < 0.95 and ids:  # deletions, pending or not
            _try(c, "XDEL", key, *rng.sample(ids, min(len(ids), rng.randrange(1, 6))))
        elif ids:
            trim = rng.choice(["MAXLEN", "MINID"])
            threshold = str(rng.randrange(0, len(ids))) if trim == "MAXLEN" else rng.choice(ids)
            _try(c, "XTRIM", key, trim, rng.choice(["=", "~"]), threshold)
        if rng.random() < 0.03:
            _try(c, "XGROUP", "DELCONSUMER", key, group, consumer)
    if rng.random() < 0.3 and ids:
        _try(c, "XDEL", key, *ids[: max(1, len(ids) // 2)])
    if rng.random() < 0.15:
        _try(c, "PEXPIREAT", key, str(int(time.time() * 1000) + 3_600_000 + rng.randrange(999)))


def _other_keys(rng: random.Random, c: Any, db: int, kind: ServerKind) -> None:
    for i in range(rng.randrange(5, 25)):
        key = f"k{db}-{i}-{rng.choice(['a', 'é'])}"
        size = rng.choice([1, 3, 10, 200])  # 200: past every listpack/intset limit
        roll = rng.randrange(6)
        if roll == 0:
            c.execute_command("SET", key, rng.choice(["1", "12345678901", "x" * 5000, "short"]))
        elif roll == 1:
            c.execute_command("RPUSH", key, *[_value(rng)[:80] for _ in range(size)])
        elif roll == 2:
            members = [str(n) for n in range(size)] if rng.random() < 0.5 else None
            c.execute_command("SADD", key, *(members or [f"m{n}" for n in range(size)]))
        elif roll == 3:
            args = []
            for n in range(size):
                args += [str(rng.choice([n, n / 3, -n])), f"m{n}"]
            c.execute_command("ZADD", key, *args)
        elif roll == 4:
            args = []
            for n in range(size):
                args += [f"f{n}", rng.choice(["1", "v" * rng.randrange(1, 90)])]
            c.execute_command("HSET", key, *args)
            if kind.name == "valkey-9.1" and rng.random() < 0.5:  # hash with field expiry
                c.execute_command("HEXPIRE", key, "3600", "FIELDS", "1", "f0")
        else:
            c.execute_command("SET", key, "y" * rng.randrange(1, 40))
        if rng.random() < 0.3:
            c.execute_command("EXPIRE", key, str(3600 + rng.randrange(1000)))


def build_dataset(server: RedisServer, seed: int) -> None:
    rng = random.Random(seed)
    with server.client() as c:
        c.execute_command("CONFIG", "SET", "stream-node-max-entries", str(rng.choice([3, 10, 100])))
        c.execute_command("CONFIG", "SET", "stream-node-max-bytes", str(rng.choice([512, 4096])))
        c.execute_command("FUNCTION", "LOAD", "REPLACE", LIBRARY)
    for db in DBS:
        with server.client(db) as c:
            for i in range(rng.randrange(1, 4)):
                _stream(rng, c, f"s{db}-{i}-{rng.choice(['', 'ü'])}")
            _other_keys(rng, c, db, server.kind)
    with server.client(3) as c:
        # an empty stream with a group
        c.execute_command("XGROUP", "CREATE", "empty", "g", "$", "MKSTREAM")
        # big compressible values (the node is stored LZF-compressed), an entry deleted
        # while pending, a consumer with no pending entries
        for i in range(1, 5):
            c.execute_command("XADD", "fixed", f"1-{i}", "big", "compressible-" * 500)
        c.execute_command("XGROUP", "CREATE", "fixed", "g", "0", "ENTRIESREAD", "0")
        c.execute_command(
            "XREADGROUP", "GROUP", "g", "alice", "COUNT", "3", "STREAMS", "fixed", ">"
        )
        c.execute_command("XGROUP", "CREATECONSUMER", "fixed", "g", "bob")
        c.execute_command("XDEL", "fixed", "1-2")


# --------------------------------------------------------------------------- comparisons


def _sid(i: StreamID | None) -> str | None:
    return None if i is None else f"{i.ms}-{i.seq}"


def rdb_tables(f: RdbFile) -> dict[str, list[dict[str, Any]]]:
    """The file's streams as the rows ``read_truth`` gives (lag left out)."""
    out: dict[str, list[dict[str, Any]]] = {"streams": [], "groups": [], "pel": [], "ownership": []}
    for (db, key), s in sorted(f.streams.items()):
        live = s.live_ids
        out["streams"].append(
            {
                "db": db,
                "key": key,
                "length": s.length,
                "last_generated_id": _sid(s.last_id),
                "max_deleted_entry_id": _sid(s.max_deleted_entry_id),
                "entries_added": s.entries_added,
                "first_entry_id": _sid(live[0]) if live else None,
                "last_entry_id": _sid(live[-1]) if live else None,
                "groups": len(s.groups),
            }
        )
        live_set = set(live)
        for g in s.groups:
            out["groups"].append(
                {
                    "db": db,
                    "key": key,
                    "group": g.name,
                    "last_delivered_id": _sid(g.last_delivered_id),
                    "entries_read": g.entries_read,
                    "pending": len(g.pel),
                    "consumers": len(g.consumers),
                }
            )
            for p in g.pel:
                out["pel"].append(
                    {
                        "db": db,
                        "key": key,
                        "group": g.name,
                        **_id_cols(_sid(p.id) or ""),
                        "consumer": p.consumer,
                        "delivery_time_ms": p.delivery_time_ms,
                        "delivery_count": p.delivery_count,
                        "entry_exists": p.id in live_set,
                    }
                )
            by_id = {p.id: p for p in g.pel}
            for c in g.consumers:
                own = [by_id[i] for i in c.pending]
                out["ownership"].append(
                    {
                        "db": db,
                        "key": key,
                        "group": g.name,
                        "consumer": c.name,
                        "pending": len(own),
                        "seen_time_ms": c.seen_time_ms,
                        "active_time_ms": c.active_time_ms,
                        "oldest_pending_id": _sid(min(c.pending)) if own else None,
                        "earliest_delivery_time_ms": (
                            min(p.delivery_time_ms for p in own) if own else None
                        ),
                        "max_delivery_count": max(p.delivery_count for p in own) if own else None,
                    }
                )
    return out


def _sorted(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda r: repr(sorted(r.items())))


def assert_file_matches_server(f: RdbFile, server: RedisServer) -> None:
    truth = read_truth(server, DBS)
    for row in truth["groups"]:
        row.pop("lag")
    mine = rdb_tables(f)
    if server.kind.name == "redis-7.0":  # 7.0 has no active time (read_truth gives None)
        assert all(r["active_time_ms"] is None for r in mine["ownership"])
    for table in ("streams", "groups", "pel", "ownership"):
        assert _sorted(mine[table]) == _sorted(truth[table]), table
    assert set(f.dbs) <= set(DBS)
    for db in DBS:
        with server.client(db) as c:
            keys: set[str] = set()
            cursor = "0"
            while True:
                cursor, batch = c.execute_command("SCAN", cursor, "COUNT", "1000")
                keys.update(batch)
                if str(cursor) == "0":
                    break
            in_file = {k: v for (d, k), v in f.keys.items() if d == db}
            assert set(in_file) == keys, f"db {db}"
            for key, info in in_file.items():
                assert info.type == c.execute_command("TYPE", key), (db, key)
                expiry = c.execute_command("PEXPIRETIME", key)
                assert (info.expire_ms if info.expire_ms is not None else -1) == expiry, key
                if info.encoding in ENCODINGS:
                    encoding = c.execute_command("OBJECT", "ENCODING", key)
                    assert ENCODINGS[info.encoding] == encoding, (key, info.encoding)
            for (d, key), s in f.streams.items():
                if d == db:
                    _assert_stream(c, key, s)
    with server.client() as c:
        libraries = c.execute_command("FUNCTION", "LIST")
    assert len(f.functions) == len(libraries) == 1
    assert f.functions[0] == LIBRARY.encode()


def _assert_stream(c: Any, key: str, s: RdbStream) -> None:
    entries = c.execute_command("XRANGE", key, "-", "+")
    mine = [
        [_sid(e.id), [x.decode() for pair in e.fields for x in pair]]
        for e in s.entries
        if not e.deleted
    ]
    assert mine == [[e[0], list(e[1])] for e in entries], key
    info = dict(zip(*[iter(c.execute_command("XINFO", "STREAM", key))] * 2, strict=True))
    assert info["radix-tree-keys"] == len(s.nodes), key
    live = s.live_ids
    # the stored first ID is the first live entry (0-0 when there is none)
    assert s.first_id == (live[0] if live else StreamID(0, 0)), key
    assert sum(n.live for n in s.nodes) == s.length == len(live)


def _expected_header(kind: ServerKind) -> tuple[str, int, set[int]]:
    return {
        "redis-7.0": ("REDIS", 10, {19}),
        "valkey-8.1": ("REDIS", 11, {21}),
        "valkey-9.1": ("VALKEY", 80, {21}),
    }[kind.name]


def _check_header(f: RdbFile, kind: ServerKind) -> None:
    magic, version, stream_types = _expected_header(kind)
    assert (f.magic, f.version) == (magic, version)
    assert {s.rdb_type for s in f.streams.values()} == stream_types
    assert f.checksum and f.checksum_verified and f.end_offset == f.size


# --------------------------------------------------------------------------- tests


def start_on_rdb(kind: ServerKind, rdb_path: str) -> RedisServer:
    """A FRESH server of ``kind`` that loaded a copy of ``rdb_path`` when it started."""
    workdir = tempfile.mkdtemp(prefix=f"pelengine-{kind.name}-rdb-load-")
    shutil.copyfile(rdb_path, os.path.join(workdir, "dump.rdb"))
    return start_or_fail(kind, extra_args=["--dbfilename", "dump.rdb"], workdir=workdir)


@pytest.mark.parametrize("seed", SEEDS)
def test_dump_rdb_equals_the_server(server_kind: ServerKind, seed: int) -> None:
    """The file read equals the server that wrote it, and a fresh server of the same kind
    that loaded it (what the file holds, as the server reads it back)."""
    server = start_or_fail(server_kind)
    try:
        build_dataset(server, seed)
        with server.client() as c:
            c.execute_command("SAVE")
        path = os.path.join(server.workdir, "dump.rdb")
        f = read_rdb(path)
        _check_header(f, server_kind)
        assert f.aux_text("aof-base") == "0"
        assert f.lzf_strings  # the big compressible values
        assert any(e.deleted for s in f.streams.values() for e in s.entries)
        assert_file_matches_server(f, server)
        loaded = start_on_rdb(server_kind, path)
    finally:
        stop_server(server)
    try:
        with loaded.client() as c:
            assert int(c.execute_command("DBSIZE")) > 0, "the fresh server loaded nothing"
        assert_file_matches_server(f, loaded)
    finally:
        stop_server(loaded)


def test_aof_base_rdb_equals_the_server(server_kind: ServerKind) -> None:
    """``aof-use-rdb-preamble yes`` (the default): after BGREWRITEAOF the AOF's base file
    is an RDB snapshot of the whole dataset; it reads like a dump.rdb."""
    args = ["--appendonly", "yes", "--aof-use-rdb-preamble", "yes"]
    server = start_or_fail(server_kind, extra_args=args)
    try:
        build_dataset(server, 101)
        with server.client() as c:
            c.execute_command("BGREWRITEAOF")
            deadline = time.monotonic() + 20
            while True:
                info = c.execute_command("INFO", "persistence")
                if "aof_rewrite_in_progress:0" in info and "aof_rewrite_scheduled:0" in info:
                    break
                assert time.monotonic() < deadline, "BGREWRITEAOF did not finish"
                time.sleep(0.02)
        [base] = [a for a in list_files(server.workdir) if a.kind == "base"]
        assert base.name.endswith(".base.rdb")
        f = read_rdb(base.path)
        _check_header(f, server_kind)
        assert f.aux_text("aof-base") == "1"
        assert_file_matches_server(f, server)
    finally:
        stop_server(server)
