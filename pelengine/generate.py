"""Deterministic synthetic Redis Streams workload, as rows of the events table.

Pure Python on purpose (no Spark, no pandas): the rows are plain dicts with the
columns of the events contract (`seq`, `ts_ms`, `argv`, `db`, `client`, `source`).

The workload is what a small fleet of services would send: producers `XADD`
with the IDs Redis would generate from `ts_ms` (some keys trim with exact
`MAXLEN`/`MINID`), consumer groups created with `MKSTREAM`/`$`/`0`, workers
reading with `XREADGROUP` (sometimes several streams, `NOACK`, `BLOCK` or a
history read), acking most of what they get, crashing now and then, and other
workers taking the leftovers with `XCLAIM`/`XAUTOCLAIM`; plus admin commands
(`XDEL`, `XTRIM`, `XGROUP ...`, `XSETID`, `DEL`), read-only and non-stream
commands, and rare faults.

A light simulation tracks entries, group positions and pending entries so that
acks and claims target IDs that are really pending. It follows the Redis 7.0
rules for what it tracks, but it is not the engine's model and does not claim to
be exact: the engine (and a real Redis) are the judges of the resulting state.

Faults are rare and easy to spot by `source`:

* `gen:invalid` - a command Redis rejects (wrong arity, bad ID, unknown group,
  ID not above the stream top, existing group, ...); the simulation ignores it.
* `gen:bad` - not a command at all: `argv` null or empty.
* `gen:dup` - a row reusing the `seq` of the row just before it. Both rows of
  such a pair are read-only commands, so the state does not depend on which of
  them an engine keeps.
"""

from __future__ import annotations

import random
from bisect import bisect_left, bisect_right
from collections import deque
from collections.abc import Iterator, Sequence
from typing import Any, TypeVar

Sid = tuple[int, int]
Row = dict[str, Any]
T = TypeVar("T")

SOURCE = "gen"
SOURCE_INVALID = "gen:invalid"
SOURCE_BAD = "gen:bad"
SOURCE_DUP = "gen:dup"

ZERO: Sid = (0, 0)

GROUP_NAMES = ("billing", "audit", "search", "notify", "analytics")
KEY_PREFIXES = ("orders", "events", "payments", "clicks", "jobs", "mail", "metrics", "signups")
EVENT_KINDS = ("created", "updated", "paid", "shipped", "cancelled", "viewed")
ADMIN_CLIENT = "10.0.9.1:40001"
MIN_IDLES = (0, 100, 500, 1000, 2000, 5000, 10000, 60000)

# Rare events, placed at deterministic positions: rate per event, minimum count
# once the log has at least `_RARE_MIN_EVENTS` rows (so every kind shows up).
_RARE_MIN_EVENTS = 500
_RARE_RATES: dict[str, float] = {
    "destroy": 1 / 4000,
    "del": 1 / 6000,
    "xsetid": 1 / 4000,
    "clock_back": 1 / 5000,
    "multi": 1 / 1500,
}
_FAULT_RATES: dict[str, float] = {
    "invalid": 1 / 1000,
    "null_argv": 1 / 20000,
    "empty_argv": 1 / 20000,
    "dup_seq": 1 / 10000,
}
_INVALID_KINDS = (
    "arity_xadd",
    "bad_id_xack",
    "nogroup_read",
    "id_not_greater",
    "busygroup",
    "arity_xack",
    "bad_id_xadd",
    "nogroup_claim",
    "bad_subcommand",
    "create_no_key",
    "bad_count",
    "xsetid_small",
)


def _fmt(sid: Sid) -> str:
    return f"{sid[0]}-{sid[1]}"


def _exists(entries: list[Sid], sid: Sid) -> bool:
    i = bisect_left(entries, sid)
    return i < len(entries) and entries[i] == sid


class _Group:
    """A consumer group as the simulation sees it: position and pending entries."""

    __slots__ = ("name", "key", "last_id", "pel", "consumers", "alive", "cursor")

    def __init__(self, name: str, key: _Key, last_id: Sid) -> None:
        self.name = name
        self.key = key
        self.last_id = last_id
        # id -> [owner or None, delivery_time]; dict order ~ delivery order
        self.pel: dict[Sid, list[Any]] = {}
        self.consumers: dict[str, None] = {}
        self.alive = True
        self.cursor: Sid = ZERO


class _Key:
    """A stream key: live entry IDs, last generated ID, groups, trimming policy."""

    __slots__ = (
        "name",
        "db",
        "exists",
        "entries",
        "last_id",
        "adds",
        "groups",
        "wanted_groups",
        "maxlen",
        "minid_retention",
        "producer",
    )

    def __init__(self, name: str, db: int, producer: str) -> None:
        self.name = name
        self.db = db
        self.exists = False
        self.entries: list[Sid] = []
        self.last_id: Sid = ZERO
        self.adds = 0
        self.groups: dict[str, _Group] = {}
        self.wanted_groups: tuple[str, ...] = ()
        self.maxlen = 0
        self.minid_retention = 0
        self.producer = producer


class _Worker:
    """A consumer process: one name in one group name, across keys."""

    __slots__ = ("name", "client", "alive", "epoch")

    def __init__(self, name: str, client: str) -> None:
        self.name = name
        self.client = client
        self.alive = True
        self.epoch = 0


class _Workload:
    """State and step functions of the synthetic workload."""

    def __init__(self, n_events: int, n_keys: int, seed: int, start_ms: int, faults: bool) -> None:
        self.rng = random.Random(seed)
        self.rnd = self.rng.random
        self.n_events = n_events
        self.now = start_ms
        self.seq = 0
        self.emitted = 0
        self.out: list[Row] = []
        self._build_keys(max(1, n_keys))
        self._build_pools()
        self.pairs: list[_Group] = []
        self.missing: list[tuple[_Key, str]] = [
            (k, name) for k in self.keys for name in k.wanted_groups
        ]
        self.acks: deque[tuple[_Group, _Worker, int, list[Sid]]] = deque()
        self.invalid_turn = 0
        self._build_tables()
        self._build_schedule(faults)

    # ---- setup -------------------------------------------------------------

    def _build_keys(self, n_keys: int) -> None:
        rng = self.rng
        self.keys: list[_Key] = []
        for i in range(n_keys):
            db = 1 if i % 4 == 3 else 0
            name = f"{KEY_PREFIXES[i % len(KEY_PREFIXES)]}:{i}"
            if i == n_keys - 1 and n_keys >= 4:
                # same key name as key 0 in another db: identity is (db, key)
                name, db = self.keys[0].name, 1 - self.keys[0].db
            k = _Key(name, db, f"10.0.0.{i % 250 + 1}:{41000 + i}")
            n_groups = 1 + rng.randrange(3)
            start = rng.randrange(len(GROUP_NAMES))
            k.wanted_groups = tuple(
                GROUP_NAMES[(start + j) % len(GROUP_NAMES)] for j in range(n_groups)
            )
            policy = i % 3
            if policy == 0:
                k.maxlen = rng.choice((50, 200, 1000))
            elif policy == 1:
                k.minid_retention = rng.choice((5_000, 30_000, 120_000))
            self.keys.append(k)
        self.keys_by_db: dict[int, list[_Key]] = {}
        for k in self.keys:
            self.keys_by_db.setdefault(k.db, []).append(k)
        # hot keys: Zipf-like weights, sampled through a lookup table
        weights = [1.0 / (i + 1) ** 0.8 for i in range(n_keys)]
        total = sum(weights)
        table: list[_Key] = []
        for k, w in zip(self.keys, weights, strict=True):
            table.extend([k] * max(1, round(1024 * w / total)))
        self.key_table = table

    def _build_pools(self) -> None:
        self.pools: dict[str, list[_Worker]] = {}
        host = 1
        for gi, name in enumerate(GROUP_NAMES):
            workers = []
            for c in range(3 + self.rng.randrange(3)):
                workers.append(_Worker(f"{name}-{c + 1}", f"10.0.1.{host}:{42000 + gi * 10 + c}"))
                host += 1
            self.pools[name] = workers

    def _build_tables(self) -> None:
        weights: list[tuple[Any, int]] = [
            (self.step_xadd, 300),
            (self.step_read, 260),
            (self.step_ack, 240),
            (self.step_claim, 35),
            (self.step_autoclaim, 25),
            (self.step_xdel, 15),
            (self.step_xtrim, 10),
            (self.step_setid, 4),
            (self.step_createconsumer, 3),
            (self.step_delconsumer, 3),
            (self.step_other, 30),
        ]
        table: list[Any] = []
        for fn, w in weights:
            table.extend([fn] * w)
        self.step_table = table
        dts: list[int] = []
        dts += [0, 1, 1, 2, 2, 3] * 100
        dts += list(range(4, 11)) * 43
        dts += list(range(11, 101, 1))
        dts += [200, 300, 500, 800, 1200, 1500, 2000, 2500, 3000, 5000]
        self.dt_table = dts

    def _build_schedule(self, faults: bool) -> None:
        n = self.n_events
        rates = dict(_RARE_RATES)
        if faults:
            rates.update(_FAULT_RATES)
        plan: list[tuple[int, str]] = []
        if n >= _RARE_MIN_EVENTS:
            for kind, rate in rates.items():
                count = max(1, int(n * rate))
                for _ in range(count):
                    # leave the first rows to set the scene
                    plan.append((self.rng.randrange(n // 10, n - 4), kind))
        plan.sort(reverse=True)
        self.plan = plan

    # ---- emitting ------------------------------------------------------------

    def emit(
        self, argv: list[str] | None, db: int | None, client: str | None, source: str = SOURCE
    ) -> None:
        self.seq += 1
        self.out.append(
            {
                "seq": self.seq,
                "ts_ms": self.now,
                "argv": argv,
                "db": db,
                "client": client,
                "source": source,
            }
        )
        self.emitted += 1

    def run(self, n_steps: int) -> None:
        """Run `n_steps` steps: advance the clock, emit one step's rows (usually one)."""
        rnd = self.rnd
        dts = self.dt_table
        n_dts = len(dts)
        table = self.step_table
        n_table = len(table)
        plan = self.plan
        missing = self.missing
        xadd = self.step_xadd
        for _ in range(n_steps):
            self.now += dts[int(rnd() * n_dts)]
            if plan and self.emitted >= plan[-1][0] and self.rare(plan.pop()[1]):
                continue
            if missing and rnd() < 0.15:
                self.step_group_create()
            elif not table[int(rnd() * n_table)]():
                xadd()

    # ---- picking -----------------------------------------------------------

    def pick(self, seq: Sequence[T]) -> T:
        return seq[int(self.rnd() * len(seq))]

    def pick_key(self) -> _Key:
        return self.key_table[int(self.rnd() * len(self.key_table))]

    def pick_group(self) -> _Group | None:
        rnd = self.rnd
        k = self.key_table[int(rnd() * len(self.key_table))]
        if k.groups:
            groups = list(k.groups.values())
            return groups[int(rnd() * len(groups))]
        if self.pairs:
            return self.pick(self.pairs)
        return None

    def alive_worker(self, group_name: str, exclude: str | None = None) -> _Worker | None:
        pool = self.pools[group_name]
        for _ in range(4):
            w = self.pick(pool)
            if w.alive and w.name != exclude:
                return w
        for w in pool:
            if w.alive and w.name != exclude:
                return w
        return None

    # ---- producers ----------------------------------------------------------

    def step_xadd(self, k: _Key | None = None) -> bool:
        if k is None:
            k = self.pick_key()
        now = self.now
        last_ms, last_seq = k.last_id
        sid = (now, 0) if now > last_ms else (last_ms, last_seq + 1)
        r = self.rnd()
        argv = ["XADD", k.name]
        nomkstream = r < 0.03
        if nomkstream:
            argv.append("NOMKSTREAM")
        adds = k.adds + 1 if k.exists else 1
        minid: Sid | None = None
        if k.maxlen:
            if r < 0.5:
                argv += ["MAXLEN", str(k.maxlen)]
            else:
                argv += ["MAXLEN", "=", str(k.maxlen)]
        elif k.minid_retention and adds % 10 == 0:
            minid = (max(0, now - k.minid_retention), 0)
            argv += ["MINID", _fmt(minid)]
        argv.append(f"{sid[0]}-*" if 0.97 < r < 0.98 else f"{sid[0]}-{sid[1]}")
        argv += ["kind", EVENT_KINDS[adds % len(EVENT_KINDS)], "n", str(adds)]
        self.seq += 1
        self.emitted += 1
        self.out.append(
            {
                "seq": self.seq,
                "ts_ms": now,
                "argv": argv,
                "db": k.db,
                "client": k.producer,
                "source": SOURCE,
            }
        )
        if nomkstream and not k.exists:
            return True
        k.exists = True
        k.adds = adds
        k.entries.append(sid)
        k.last_id = sid
        entries = k.entries
        if k.maxlen and len(entries) > k.maxlen:
            del entries[: len(entries) - k.maxlen]
        elif minid is not None:
            del entries[: bisect_left(entries, minid)]
        return True
        if not k.exists:
            k.exists = True
            k.adds = 1
        k.entries.append(sid)
        k.last_id = sid
        entries = k.entries
        if k.maxlen and len(entries) > k.maxlen:
            del entries[: len(entries) - k.maxlen]
        elif minid is not None:
            del entries[: bisect_left(entries, minid)]
        return True

    # ---- consumers ------------------------------------------------------------

    def step_read(self) -> bool:
        g = self.pick_group()
        if g is None:
            return False
        r = self.rnd()
        if r < 0.004:
            self.crash(g.name)
            return False
        if r < 0.014 and self.restart():
            return True
        w = self.alive_worker(g.name)
        if w is None:
            return False
        if r < 0.04:
            return self.history_read(g, w)
        k = g.key
        count = self.pick((1, 2, 5, 10, 10, 20, 50))
        keys = [k]
        if r > 0.9:
            for other in self.keys_by_db[k.db]:
                if other is not k and g.name in other.groups and len(keys) < 3:
                    keys.append(other)
        noack = 0.04 < r < 0.08
        block = 0.08 < r < 0.13 and len(keys) == 1
        argv = ["XREADGROUP", "GROUP", g.name, w.name, "COUNT", str(count)]
        groups = [kk.groups[g.name] for kk in keys]
        if block:
            # only when data is there already: the read is served at once
            if bisect_right(k.entries, g.last_id) >= len(k.entries):
                block = False
            else:
                argv += ["BLOCK", self.pick(("100", "1000", "5000"))]
        if noack:
            argv.append("NOACK")
        argv.append("STREAMS")
        argv += [kk.name for kk in keys]
        argv += [">"] * len(keys)
        now = self.now
        self.seq += 1
        self.emitted += 1
        self.out.append(
            {
                "seq": self.seq,
                "ts_ms": now,
                "argv": argv,
                "db": k.db,
                "client": w.client,
                "source": SOURCE,
            }
        )
        for gg in groups:
            entries = gg.key.entries
            i = bisect_right(entries, gg.last_id)
            ids = entries[i : i + count]
            if not ids:
                continue
            gg.last_id = ids[-1]
            gg.consumers[w.name] = None
            if noack:
                continue
            pel = gg.pel
            for sid in ids:
                if sid in pel:
                    del pel[sid]
                pel[sid] = [w.name, now]
            self.acks.append((gg, w, w.epoch, ids))
        return True

    def history_read(self, g: _Group, w: _Worker, count: int = 0) -> bool:
        """A worker re-reads its own pending entries (`0` instead of `>`)."""
        if not count:
            count = self.pick((10, 100))
        owned = sorted(sid for sid, p in g.pel.items() if p[0] == w.name)[:count]
        k = g.key
        start = "0" if self.rnd() < 0.7 else "0-0"
        argv = ["XREADGROUP", "GROUP", g.name, w.name, "COUNT", str(count), "STREAMS", k.name]
        argv.append(start)
        self.emit(argv, k.db, w.client)
        g.consumers[w.name] = None
        now = self.now
        pel = g.pel
        for sid in owned:
            if _exists(k.entries, sid):
                p = pel.pop(sid)
                p[1] = now
                pel[sid] = p
        if owned:
            self.acks.append((g, w, w.epoch, owned))
        return True

    def crash(self, group_name: str) -> None:
        """A worker dies: its unacked deliveries stay pending."""
        pool = self.pools[group_name]
        alive = [w for w in pool if w.alive]
        if len(alive) > 1:
            w = self.pick(alive)
            w.alive = False
            w.epoch += 1

    def restart(self) -> bool:
        """A crashed worker comes back and first reads its own history."""
        for name in GROUP_NAMES:
            for w in self.pools[name]:
                if not w.alive:
                    w.alive = True
                    for g in self.pairs:
                        if g.name == name and any(p[0] == w.name for p in g.pel.values()):
                            return self.history_read(g, w, 100)
                    return False
        return False

    def step_ack(self) -> bool:
        acks = self.acks
        while acks:
            g, w, epoch, ids = acks.popleft()
            if not g.alive or w.epoch != epoch:
                continue
            if len(ids) > 1 and self.rnd() < 0.3:
                # one entry failed processing: it stays pending until claimed
                ids = list(ids)
                del ids[int(self.rnd() * len(ids))]
            argv = ["XACK", g.key.name, g.name]
            argv += [f"{s[0]}-{s[1]}" for s in ids]
            self.seq += 1
            self.emitted += 1
            self.out.append(
                {
                    "seq": self.seq,
                    "ts_ms": self.now,
                    "argv": argv,
                    "db": g.key.db,
                    "client": w.client,
                    "source": SOURCE,
                }
            )
            pel = g.pel
            for sid in ids:
                pel.pop(sid, None)
            return True
        return False

    def claim_target(self) -> tuple[_Group, _Worker] | None:
        """A group with pending entries and a live worker of it to take some over."""
        g = self.pick_group()
        if g is None or not g.pel:
            return None
        claimer = self.alive_worker(g.name)
        return None if claimer is None else (g, claimer)

    def step_claim(self) -> bool:
        target = self.claim_target()
        if target is None:
            return False
        g, claimer = target
        k = g.key
        now = self.now
        cands: list[Sid] = []
        least_idle = 1 << 62
        for sid, p in g.pel.items():
            if p[0] != claimer.name:
                cands.append(sid)
                least_idle = min(least_idle, now - p[1])
                if len(cands) >= 1 + int(self.rnd() * 5):
                    break
        if not cands:
            return False
        r = self.rnd()
        if r < 0.85:
            min_idle = max(m for m in MIN_IDLES if m <= max(0, least_idle))
        else:
            min_idle = self.pick(MIN_IDLES)
        force = justid = False
        idle = when = retry = -1
        lastid: Sid | None = None
        opts: list[str] = []
        if self.rnd() < 0.08:
            idle = self.pick((0, 50, 1000, 100000))
            opts += ["IDLE", str(idle)]
        elif self.rnd() < 0.05:
            when = now - self.pick((0, 10, 2000)) + (5000 if self.rnd() < 0.2 else 0)
            opts += ["TIME", str(when)]
        if self.rnd() < 0.08:
            retry = self.pick((0, 1, 3, 7))
            opts += ["RETRYCOUNT", str(retry)]
        if self.rnd() < 0.05 and k.entries:
            force = True
            extra = k.entries[int(self.rnd() * len(k.entries))]
            if extra not in cands:
                cands.append(extra)
            opts.append("FORCE")
        if self.rnd() < 0.25:
            justid = True
            opts.append("JUSTID")
        if self.rnd() < 0.04:
            lastid = g.last_id if self.rnd() < 0.5 or not k.entries else k.entries[-1]
            opts += ["LASTID", _fmt(lastid)]
        argv = ["XCLAIM", k.name, g.name, claimer.name, str(min_idle)]
        argv += [_fmt(s) for s in cands]
        argv += opts
        self.emit(argv, k.db, claimer.client)
        # apply (Redis 7.0 rules for what the simulation tracks)
        if lastid is not None and lastid > g.last_id:
            g.last_id = lastid
        delivery = now
        if idle >= 0:
            delivery = now - idle
        elif when >= 0:
            delivery = when
        if delivery < 0 or delivery > now:
            delivery = now
        pel = g.pel
        claimed: list[Sid] = []
        for sid in cands:
            found = pel.get(sid)
            if not _exists(k.entries, sid):
                if found is not None:
                    del pel[sid]
                continue
            if found is None:
                if not force:
                    continue
                entry: list[Any] = [None, now]
            elif found[0] is not None and min_idle > 0 and now - found[1] < min_idle:
                continue
            else:
                entry = pel.pop(sid)
            entry[0] = claimer.name
            entry[1] = delivery
            pel[sid] = entry
            claimed.append(sid)
        if claimed:
            g.consumers[claimer.name] = None
            if not justid or self.rnd() < 0.5:
                self.acks.append((g, claimer, claimer.epoch, claimed))
        return True

    def step_autoclaim(self) -> bool:
        target = self.claim_target()
        if target is None:
            return False
        g, claimer = target
        k = g.key
        now = self.now
        min_idle = self.pick(MIN_IDLES[:6])
        start = g.cursor if self.rnd() < 0.8 else ZERO
        argv = ["XAUTOCLAIM", k.name, g.name, claimer.name, str(min_idle)]
        argv.append("0" if start == ZERO and self.rnd() < 0.5 else _fmt(start))
        count = 100
        if self.rnd() < 0.7:
            count = self.pick((1, 5, 10, 25))
            argv += ["COUNT", str(count)]
        justid = self.rnd() < 0.2
        if justid:
            argv.append("JUSTID")
        self.emit(argv, k.db, claimer.client)
        pel = g.pel
        ids = sorted(pel)
        i = bisect_left(ids, start)
        attempts = count * 10
        claimed: list[Sid] = []
        while attempts and count and i < len(ids):
            attempts -= 1
            sid = ids[i]
            i += 1
            p = pel[sid]
            if not _exists(k.entries, sid):
                del pel[sid]
                count -= 1
                continue
            if min_idle and now - p[1] < min_idle:
                continue
            del pel[sid]
            p[0] = claimer.name
            p[1] = now
            pel[sid] = p
            claimed.append(sid)
            count -= 1
        g.cursor = ids[i] if i < len(ids) else ZERO
        if claimed:
            g.consumers[claimer.name] = None
            self.acks.append((g, claimer, claimer.epoch, claimed))
        return True

    # ---- admin ---------------------------------------------------------------

    def admin_db(self, db: int) -> int | None:
        # the admin tool's capture has no db column for db 0 (null means 0)
        return None if db == 0 else db

    def step_xdel(self) -> bool:
        k = self.pick_key()
        if not k.entries:
            return False
        entries = k.entries
        n = 1 + int(self.rnd() * 3)
        ids = [entries[int(self.rnd() * len(entries) * 0.6)] for _ in range(n)]
        if self.rnd() < 0.2:
            ids.append((k.last_id[0] + 1, 0))  # not there: XDEL counts 0 for it
        self.emit(["XDEL", k.name, *(_fmt(s) for s in ids)], self.admin_db(k.db), ADMIN_CLIENT)
        for sid in ids:
            i = bisect_left(entries, sid)
            if i < len(entries) and entries[i] == sid:
                del entries[i]
        return True

    def step_xtrim(self) -> bool:
        k = self.pick_key()
        if len(k.entries) < 4:
            return False
        entries = k.entries
        if self.rnd() < 0.5:
            keep = len(entries) // 2
            argv = ["XTRIM", k.name, "MAXLEN"]
            if self.rnd() < 0.3:
                argv.append("=")
            argv.append(str(keep))
            del entries[: len(entries) - keep]
        else:
            minid = entries[len(entries) // 3]
            argv = ["XTRIM", k.name, "MINID", _fmt(minid)]
            del entries[: bisect_left(entries, minid)]
        self.emit(argv, self.admin_db(k.db), ADMIN_CLIENT)
        return True

    def step_group_create(self) -> None:
        k, name = self.missing.pop(int(self.rnd() * len(self.missing)))
        r = self.rnd()
        argv = ["XGROUP", "CREATE", k.name, name]
        if k.exists:
            if r < 0.5:
                last, spec = k.last_id, "$"
            elif r < 0.9 or not k.entries:
                last, spec = ZERO, "0"
            else:
                last = k.entries[len(k.entries) // 2]
                spec = _fmt(last)
            argv.append(spec)
            if self.rnd() < 0.3:
                argv.append("MKSTREAM")
            if spec == "$" and self.rnd() < 0.2:
                argv += ["ENTRIESREAD", str(k.adds)]
        else:
            last = ZERO
            argv += ["$" if r < 0.6 else "0", "MKSTREAM"]
            k.exists = True
            k.adds = 0
        self.emit(argv, self.admin_db(k.db), ADMIN_CLIENT)
        g = _Group(name, k, last)
        k.groups[name] = g
        self.pairs.append(g)

    def step_setid(self) -> bool:
        g = self.pick_group()
        if g is None:
            return False
        k = g.key
        r = self.rnd()
        argv = ["XGROUP", "SETID", k.name, g.name]
        if r < 0.4 or not k.entries:
            argv.append("$")
            g.last_id = k.last_id
            if self.rnd() < 0.3:
                argv += ["ENTRIESREAD", str(k.adds)]
        elif r < 0.85:
            g.last_id = k.entries[int(self.rnd() * len(k.entries))]
            argv.append(_fmt(g.last_id))
        else:
            g.last_id = ZERO
            argv.append("0")
        self.emit(argv, self.admin_db(k.db), ADMIN_CLIENT)
        return True

    def step_createconsumer(self) -> bool:
        g = self.pick_group()
        if g is None:
            return False
        pool = self.pools[g.name]
        if len(pool) < 8 and self.rnd() < 0.5:
            n = len(pool) + 1
            w = _Worker(f"{g.name}-{n}", f"10.0.2.{n}:{43000 + len(self.pairs)}")
            pool.append(w)
        else:
            w = self.pick(pool)
        self.emit(["XGROUP", "CREATECONSUMER", g.key.name, g.name, w.name], g.key.db, w.client)
        g.consumers[w.name] = None
        return True

    def step_delconsumer(self) -> bool:
        g = self.pick_group()
        if g is None or not g.consumers:
            return False
        names = list(g.consumers)
        dead = {w.name for w in self.pools[g.name] if not w.alive}
        pick = [n for n in names if n in dead] or names
        name = self.pick(pick)
        self.emit(
            ["XGROUP", "DELCONSUMER", g.key.name, g.name, name],
            self.admin_db(g.key.db),
            ADMIN_CLIENT,
        )
        del g.consumers[name]
        for sid in [s for s, p in g.pel.items() if p[0] == name]:
            del g.pel[sid]
        return True

    def drop_group(self, g: _Group) -> None:
        g.alive = False
        del g.key.groups[g.name]
        self.pairs.remove(g)
        self.missing.append((g.key, g.name))

    def step_destroy(self) -> bool:
        g = self.pick_group()
        if g is None:
            return False
        self.emit(["XGROUP", "DESTROY", g.key.name, g.name], self.admin_db(g.key.db), ADMIN_CLIENT)
        self.drop_group(g)
        return True

    def step_del(self) -> bool:
        live = [k for k in self.keys if k.exists]
        if not live:
            return False
        k = self.pick(live)
        self.emit(
            ["DEL" if self.rnd() < 0.7 else "UNLINK", k.name], self.admin_db(k.db), ADMIN_CLIENT
        )
        for g in list(k.groups.values()):
            self.drop_group(g)
        k.exists = False
        k.entries = []
        k.last_id = ZERO
        k.adds = 0
        return True

    def step_xsetid(self) -> bool:
        live = [k for k in self.keys if k.exists]
        if not live:
            return False
        k = self.pick(live)
        new = (max(k.last_id[0], self.now) + 1 + int(self.rnd() * 2000), 0)
        self.emit(["XSETID", k.name, _fmt(new)], self.admin_db(k.db), ADMIN_CLIENT)
        k.last_id = new
        return True

    def step_other(self) -> bool:
        """Commands the engine ignores: other data types and stream reads."""
        k = self.pick_key()
        r = self.rnd()
        client = ADMIN_CLIENT
        cache = f"cache:{int(r * 1000) % 17}"
        if r < 0.25:
            argv = ["SET", cache, str(self.now)]
        elif r < 0.4:
            argv = ["GET", cache]
        elif r < 0.5:
            argv = ["INCR", "stats:reads"]
        elif r < 0.6:
            argv = ["XINFO", "STREAM", k.name]
        elif r < 0.65:
            argv = ["XINFO", "GROUPS", k.name]
        elif r < 0.75 and k.groups:
            g = self.pick(list(k.groups.values()))
            argv = ["XPENDING", k.name, g.name]
            if self.rnd() < 0.5:
                argv += ["-", "+", "10"]
        elif r < 0.8 and k.groups:
            g = self.pick(list(k.groups.values()))
            argv = ["XINFO", "CONSUMERS", k.name, g.name]
        elif r < 0.9:
            argv = ["XRANGE", k.name, "-", "+", "COUNT", "5"]
        elif r < 0.95:
            argv = ["xlen", k.name]
        else:
            argv = ["PING"]
        self.emit(argv, k.db, client)
        return True

    # ---- rare events and faults ----------------------------------------------

    def rare(self, kind: str) -> bool:
        if kind == "destroy":
            return self.step_destroy()
        if kind == "del":
            return self.step_del()
        if kind == "xsetid":
            return self.step_xsetid()
        if kind == "clock_back":
            self.now -= 1 + int(self.rnd() * 200)
            return False
        if kind == "multi":
            return self.multi_block()
        if kind == "invalid":
            self.invalid()
            return True
        if kind == "null_argv":
            self.emit(None, 0, None, SOURCE_BAD)
            return True
        if kind == "empty_argv":
            self.emit([], 0, None, SOURCE_BAD)
            return True
        if kind == "dup_seq":
            k = self.pick_key()
            self.emit(["XLEN", k.name], k.db, ADMIN_CLIENT)
            self.seq -= 1
            self.emit(["GET", "cache:dup"], k.db, ADMIN_CLIENT, SOURCE_DUP)
            return True
        raise AssertionError(kind)

    def multi_block(self) -> bool:
        """`MULTI`, ack one batch, forward it to another stream, `EXEC` (one time)."""
        if not self.acks or self.n_events - self.emitted < 4:
            return False
        g, w = self.acks[0][0], self.acks[0][1]
        first = len(self.out)
        self.emit(["MULTI"], g.key.db, w.client)
        self.step_ack()
        targets = self.keys_by_db[g.key.db]
        self.step_xadd(targets[int(self.rnd() * len(targets))])
        self.emit(["EXEC"], g.key.db, w.client)
        for row in self.out[first:]:
            # one connection sends the whole transaction
            row["client"] = w.client
            row["db"] = g.key.db
        return True

    def invalid(self) -> None:
        """One command Redis rejects; the simulation applies nothing."""
        kind = _INVALID_KINDS[self.invalid_turn % len(_INVALID_KINDS)]
        self.invalid_turn += 1
        g = self.pick_group()
        k = g.key if g is not None else self.pick_key()
        gname = g.name if g is not None else GROUP_NAMES[0]
        top = _fmt(k.last_id) if k.exists and k.last_id != ZERO else "0-0"
        argv: list[str]
        if kind == "arity_xadd":
            argv = ["XADD", k.name]
        elif kind == "arity_xack":
            argv = ["XACK", k.name]
        elif kind == "bad_id_xack":
            argv = ["XACK", k.name, gname, "12-abc"]
        elif kind == "bad_id_xadd":
            argv = ["XADD", k.name, "not-an-id", "kind", "oops"]
        elif kind == "nogroup_read":
            argv = ["XREADGROUP", "GROUP", "no-such-group", "ghost", "STREAMS", k.name, ">"]
        elif kind == "nogroup_claim":
            argv = ["XCLAIM", k.name, "no-such-group", "ghost", "0", top]
        elif kind == "id_not_greater":
            argv = ["XADD", k.name, top, "kind", "late"]
        elif kind == "busygroup" and g is not None:
            argv = ["XGROUP", "CREATE", k.name, g.name, "$"]
        elif kind == "bad_subcommand":
            argv = ["XGROUP", "FROBNICATE", k.name, gname]
        elif kind == "bad_count":
            argv = ["XREADGROUP", "GROUP", gname, "ghost", "COUNT", "many", "STREAMS", k.name]
            argv.append(">")
        elif kind == "xsetid_small" and k.entries:
            argv = ["XSETID", k.name, "1-0"]
        else:
            missing = f"missing:{self.invalid_turn}"
            argv = ["XGROUP", "CREATE", missing, gname, "$"]  # no MKSTREAM, no key
        self.emit(argv, k.db, ADMIN_CLIENT, SOURCE_INVALID)


def generate_events(
    n_events: int,
    n_keys: int,
    seed: int,
    start_ms: int = 1_700_000_000_000,
    *,
    faults: bool = True,
) -> Iterator[Row]:
    """Yield `n_events` rows of a deterministic synthetic workload (see module doc).

    `faults=False` leaves out invalid commands and bad rows (for a clean log).
    """
    if n_events < 0:
        raise ValueError(f"n_events must be >= 0, got {n_events}")
    if n_keys < 1:
        raise ValueError(f"n_keys must be >= 1, got {n_keys}")
    w = _Workload(n_events, n_keys, seed, start_ms, faults)
    out = w.out
    while w.emitted < n_events:
        w.run(256)  # in batches: yielding from a one-row list per step costs more
        if w.emitted >= n_events:
            del out[len(out) - (w.emitted - n_events) :]
        yield from out
        out.clear()
