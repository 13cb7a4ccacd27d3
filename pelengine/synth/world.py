"""What the simulation tracks: stream keys (live entry IDs, last ID, groups, trimming
policy), consumer groups (position and pending entries), pools of workers, the clock
and the rows emitted so far. It follows the Redis 7.0 rules for what it tracks, but it
is not the engine's model: the engine (and a real Redis) judge the resulting state."""

from __future__ import annotations

import random
from bisect import bisect_left
from collections import deque
from typing import Any

Sid = tuple[int, int]
Row = dict[str, Any]

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


def fmt_id(sid: Sid) -> str:
    """An ID as Redis writes it: ``ms-seq``."""
    return f"{sid[0]}-{sid[1]}"


def has_id(entries: list[Sid], sid: Sid) -> bool:
    """Whether the sorted ``entries`` hold ``sid``."""
    i = bisect_left(entries, sid)
    return i < len(entries) and entries[i] == sid


class Group:
    """A consumer group as the simulation sees it: position and pending entries."""

    __slots__ = ("name", "key", "last_id", "pel", "consumers", "alive", "cursor")

    def __init__(self, name: str, key: Key, last_id: Sid) -> None:
        self.name = name
        self.key = key
        self.last_id = last_id
        # id -> [owner or None, delivery_time]; dict order ~ delivery order
        self.pel: dict[Sid, list[Any]] = {}
        self.consumers: dict[str, None] = {}
        self.alive = True
        self.cursor: Sid = ZERO


class Key:
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
        self.groups: dict[str, Group] = {}
        self.wanted_groups: tuple[str, ...] = ()
        self.maxlen = 0
        self.minid_retention = 0
        self.producer = producer


class Worker:
    """A consumer process: one name in one group name, across keys."""

    __slots__ = ("name", "client", "alive", "epoch")

    def __init__(self, name: str, client: str) -> None:
        self.name = name
        self.client = client
        self.alive = True
        self.epoch = 0


class World:
    """The simulation's state, and how a row is emitted."""

    def __init__(self, n_events: int, n_keys: int, seed: int, start_ms: int) -> None:
        self.rng = random.Random(seed)
        self.rnd = self.rng.random
        self.n_events = n_events
        self.now = start_ms
        self.seq = 0
        self.emitted = 0
        self.out: list[Row] = []
        self._build_keys(max(1, n_keys))
        self._build_pools()
        self.pairs: list[Group] = []
        self.missing: list[tuple[Key, str]] = [
            (k, name) for k in self.keys for name in k.wanted_groups
        ]
        self.acks: deque[tuple[Group, Worker, int, list[Sid]]] = deque()
        self.invalid_turn = 0

    # ---- setup -------------------------------------------------------------

    def _build_keys(self, n_keys: int) -> None:
        rng = self.rng
        self.keys: list[Key] = []
        for i in range(n_keys):
            db = 1 if i % 4 == 3 else 0
            name = f"{KEY_PREFIXES[i % len(KEY_PREFIXES)]}:{i}"
            if i == n_keys - 1 and n_keys >= 4:
                # same key name as key 0 in another db: identity is (db, key)
                name, db = self.keys[0].name, 1 - self.keys[0].db
            k = Key(name, db, f"10.0.0.{i % 250 + 1}:{41000 + i}")
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
        self.keys_by_db: dict[int, list[Key]] = {}
        for k in self.keys:
            self.keys_by_db.setdefault(k.db, []).append(k)
        # hot keys: Zipf-like weights, sampled through a lookup table
        weights = [1.0 / (i + 1) ** 0.8 for i in range(n_keys)]
        total = sum(weights)
        table: list[Key] = []
        for k, w in zip(self.keys, weights, strict=True):
            table.extend([k] * max(1, round(1024 * w / total)))
        self.key_table = table

    def _build_pools(self) -> None:
        self.pools: dict[str, list[Worker]] = {}
        host = 1
        for gi, name in enumerate(GROUP_NAMES):
            workers = []
            for c in range(3 + self.rng.randrange(3)):
                workers.append(Worker(f"{name}-{c + 1}", f"10.0.1.{host}:{42000 + gi * 10 + c}"))
                host += 1
            self.pools[name] = workers

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
