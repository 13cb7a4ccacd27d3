"""The replayer: applies logged commands in order and reports the resulting state.

``Replayer.apply`` takes one command as the server executed it (its ``seq``,
its time, argv, db and client) and changes the model exactly as Redis would,
or leaves it untouched when Redis would have replied with an error. It keeps
what Redis does not: every change of a pending entry (``ownership_changes``),
the life of each delivered entry (``delivery_counts``) and every version of
each pending entry (``pel_history``: what the PEL showed, from when to when).
It appends those history rows column by column (``calls.Columns``), and hands
them on when drained.

The state tables at a moment (pel, ownership, groups, streams, delivery rows) are
rendered from the replayer by ``pelengine.model.snapshot``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from types import EllipsisType

from pelengine.model import commands as cmd
from pelengine.model.calls import BlockedRead, Call, Columns, Model, Profile, Row
from pelengine.model.commands import CommandError
from pelengine.model.delivery import (
    INCARNATION_COLUMNS,
    SEGMENT_COLUMNS,
    append_incarnation,
    append_segment,
)
from pelengine.model.ids import StreamID, id_parts
from pelengine.model.state import (
    Consumer,
    Counters,
    DeliveryRecord,
    Group,
    OtherValue,
    PelVersion,
    PendingEntry,
    Stream,
)
from pelengine.model.units import LUA_CLIENT, SCRIPT_CALLS

# The columns of the history rows the replayer records, in the order it appends them.
CHANGE_COLUMNS = (
    "db",
    "key",
    "group",
    "id",
    "id_ms",
    "id_seq",
    "seq",
    "request_seq",
    "ts_ms",
    "command",
    "change",
    "from_consumer",
    "to_consumer",
    "delivery_count",
    "delivery_time_ms",
)
# What one pending entry is, in ``pel`` and in each version of it in ``pel_history``.
PEL_ENTRY_COLUMNS = (
    "db",
    "key",
    "group",
    "id",
    "id_ms",
    "id_seq",
    "consumer",
    "delivery_time_ms",
    "delivery_count",
    "entry_exists",
)
# a pel_history version (without ``as_of_*``): the entry, then ``PelVersion``'s fields,
# then when it ended (``valid_to_*`` None: still open)
VERSION_COLUMNS = (
    *PEL_ENTRY_COLUMNS,
    "valid_from_seq",
    "valid_from_ms",
    "valid_to_seq",
    "valid_to_ms",
)
# what ``Replayer.drain_tables`` hands on, per output table
HISTORY_TABLES = ("ownership_changes", "pel_history", "delivery_segments", "group_incarnations")


# each profile as what changes from the one before it
_REDIS_7_0 = Profile(
    "7.0",
    active_time=False,
    eager_consumers=False,
    xsetid_checks_max_deleted=False,
    unit_time_snapshot=False,
    script_block=False,
)
_REDIS_7_2 = replace(
    _REDIS_7_0,
    name="7.2",
    active_time=True,
    eager_consumers=True,
    xsetid_checks_max_deleted=True,
    unit_time_snapshot=True,
)
_REDIS_7_4 = replace(_REDIS_7_2, name="7.4", script_block=True)
_VALKEY_8_1 = replace(_REDIS_7_4, name="valkey-8.1", strict_lag=True)
PROFILES: dict[str, Profile] = {
    p.name: p for p in (_REDIS_7_0, _REDIS_7_2, _REDIS_7_4, _VALKEY_8_1)
}


@dataclass(frozen=True)
class ServerFamily:
    """Server versions one profile describes, and how that is known."""

    server: str  # "redis" or "valkey"
    major_minor: tuple[int, int]
    profile: str
    basis: str
    patches: tuple[int, int] = (0, 10**6)  # the patch levels covered (inclusive)

    def covers(self, server: str, major_minor: tuple[int, int], patch: int | None) -> bool:
        lo, hi = self.patches
        if patch is None:  # "7.4": the whole line, only when every patch is covered
            return (server, major_minor) == (self.server, self.major_minor) and lo == 0
        return (server, major_minor) == (self.server, self.major_minor) and lo <= patch <= hi

    def describe(self) -> str:
        lo, hi = self.patches
        line = f"{self.server}-{self.major_minor[0]}.{self.major_minor[1]}"
        if (lo, hi) == (0, 10**6):
            return f"{line}.x"
        return f"{line}.{lo}+" if hi == 10**6 else f"{line}.{lo}-{hi}"


# Every server version a profile is known to describe. "measured": the live differential
# suite runs it (tests/redis_diff); "source": read from the server's source, not run here.
# Redis 7.4.2+ back-ported estimate fixes of its own (unlike Valkey's): not described.
SERVER_FAMILIES: tuple[ServerFamily, ...] = (
    ServerFamily("redis", (7, 0), "7.0", "measured live against Redis 7.0.15"),
    ServerFamily("redis", (7, 2), "7.2", "the 7.2+ family, from the 7.2.4 source"),
    ServerFamily("redis", (7, 4), "7.4", "the 7.2+ family, from the 7.4.1 source", (0, 1)),
    ServerFamily("valkey", (8, 0), "7.4", "from the Valkey 8.0.1 source (as Redis 7.4.1)"),
    ServerFamily("valkey", (8, 1), "valkey-8.1", "measured live against Valkey 8.1.8", (1, 10**6)),
    ServerFamily("valkey", (9, 1), "valkey-8.1", "measured live against Valkey 9.1.2"),
)

_VERSION = re.compile(
    r"^(?:(?P<server>redis|valkey)[-_ ]?(?:v(?:ersion)?)?[-_ ]?)?"
    r"(?P<major>\d+)\.(?P<minor>\d+)(?:\.(?P<patch>\d+))?$",
    re.IGNORECASE,
)


def known_versions() -> str:
    """The accepted ``--redis-version`` values, for messages."""
    names = ", ".join(sorted(p for p in PROFILES))
    families = ", ".join(f.describe() for f in SERVER_FAMILIES)
    return f"profile names {names}; server versions {families}"


def resolve_profile(version: str) -> tuple[Profile, str]:
    """The profile for a profile name ("7.0", "7.4", "valkey-8.1") or a server version as
    the server reports it ("7.0.15", "7.4.1", "valkey-9.1.2"), with the reason."""
    text = str(version).strip()
    if text in PROFILES:
        return PROFILES[text], f"profile {text} named"
    match = _VERSION.match(text)
    if match is not None:
        server = (match["server"] or "redis").lower()
        wanted = (int(match["major"]), int(match["minor"]))
        patch = None if match["patch"] is None else int(match["patch"])
        for family in SERVER_FAMILIES:
            if family.covers(server, wanted, patch):
                return PROFILES[family.profile], f"{text}: {family.basis}"
    raise ValueError(
        f"unknown Redis version {version!r}: no profile is known to describe it. "
        f"Known: {known_versions()}"
    )


def get_profile(name: str) -> Profile:
    """The profile for a profile name or a server version (see ``resolve_profile``)."""
    return resolve_profile(name)[0]


@dataclass(frozen=True)
class Outcome:
    """What became of one command: ``applied``, ``ignored`` or ``error`` (with its kind)."""

    kind: str
    error: str | None = None


Handler = Callable[[Model, Call], None]

# name -> (handler, arity as Redis declares it: n exact, -n at least n)
STREAM_COMMANDS: dict[str, tuple[Handler, int]] = {
    "XADD": (cmd.xadd, -5),
    "XTRIM": (cmd.xtrim, -4),
    "XDEL": (cmd.xdel, -3),
    "XREADGROUP": (cmd.xreadgroup, -7),
    "XCLAIM": (cmd.xclaim, -6),
    "XAUTOCLAIM": (cmd.xautoclaim, -6),
    "XACK": (cmd.xack, -4),
    "XGROUP": (cmd.xgroup, -2),
    "XSETID": (cmd.xsetid, -3),
    "DEL": (cmd.del_keys, -2),
    "UNLINK": (cmd.del_keys, -2),
    "RENAME": (cmd.rename, 3),
    "RENAMENX": (cmd.rename, 3),
    "FLUSHDB": (cmd.flush, -1),
    "FLUSHALL": (cmd.flush, -1),
    cmd.LOAD_COMMAND: (cmd.load, -2),
}

# Commands on other types that matter only because they can replace a stream
# key or make a later stream command fail with WRONGTYPE.
OTHER_WRITERS: dict[str, tuple[Handler, int]] = {
    "SET": (cmd.set_string, -3),
    "MSET": (cmd.mset, -3),
    **{
        name: (cmd.make_type_writer(type_name), -2)
        for type_name, names in {
            "string": (
                "SETNX APPEND INCR INCRBY DECR DECRBY INCRBYFLOAT SETRANGE SETEX PSETEX GETSET"
            ),
            "list": "LPUSH RPUSH",
            "set": "SADD",
            "hash": "HSET HSETNX HMSET HINCRBY HINCRBYFLOAT",
            "zset": "ZADD ZINCRBY",
        }.items()
        for name in names.split()
    },
}

# Key-level commands: applied when they reach a stream, ignored otherwise (the
# model cannot tell a missing key from a key of another type it never saw).
KEYSPACE_COMMANDS = frozenset({"DEL", "UNLINK", "RENAME", "RENAMENX", "FLUSHDB", "FLUSHALL"})

# Stream commands of newer Redis versions: unknown to the profiles modelled here.
NEWER_STREAM_COMMANDS = frozenset({"XACKDEL", "XDELEX", "XNACK"})


def command_name(argv: Sequence[str]) -> str:
    """The upper-cased command name of an argv."""
    return argv[0].upper() if argv else ""


class Replayer:
    """Replays stream commands against an exact model of Redis' stream state."""

    def __init__(
        self,
        profile: Profile | str = "7.0",
        *,
        record_changes: bool = True,
        node_max_entries: int = 100,
        node_max_bytes: int = 4096,
        spill_closed_records: bool = False,
    ) -> None:
        # a resolved profile, or a profile name or server version (``resolve_profile``)
        self.profile = profile if isinstance(profile, Profile) else get_profile(profile)
        # Redis' stream-node-max-entries: how many entries one internal node holds
        # (decides what approximate trimming can drop).
        self.node_max_entries = node_max_entries
        # Redis' stream-node-max-bytes: the size limit of one node's listpack.
        self.node_max_bytes = node_max_bytes
        self.keys: dict[tuple[int, str], Stream | OtherValue] = {}
        self.counters = Counters()
        self.notes: dict[str, int] = {}
        self.record_changes = record_changes
        self.last_seq: int | None = None
        self.last_ts_ms: int | None = None
        # ownership_changes rows not drained yet
        self._changes = Columns(CHANGE_COLUMNS)
        # closed pel_history versions not drained yet (open ones live on PendingEntry)
        self._pel_history = Columns(VERSION_COLUMNS)
        # open MULTI blocks per client -> (the MULTI's seq, the unit's "now": None until
        # its first command, and on 7.0 always)
        self._units: dict[str | None, tuple[int, int | None]] = {}
        # blocked readers in the order they blocked, and keys signalled as ready
        self._blocked: list[BlockedRead] = []
        # keys signalled since the last serve, each with the last write that signalled it
        self._ready: dict[tuple[int, str], Call | None] = {}
        # records of groups that ended (db, key, group, created_seq, id, record)
        self._closed: list[tuple[int, str, str, int, StreamID, DeliveryRecord]] = []
        # Spilling (see pelengine.model.delivery): a record leaves the model as a
        # segment row when its entry leaves the PEL, a group that ends leaves an
        # incarnation row; both wait here until drained. Memory then follows the
        # PEL, not the history.
        self.spill_closed_records = spill_closed_records
        self._segments = Columns(SEGMENT_COLUMNS)
        self._incarnations = Columns(INCARNATION_COLUMNS)
        self._segment_n = 0

    # -- applying commands -------------------------------------------------

    def apply(
        self,
        seq: int,
        ts_ms: int,
        argv: Sequence[str],
        db: int | None = 0,
        client: str | None = None,
        unit: int | None | EllipsisType = ...,
    ) -> Outcome:
        """Apply one logged command; return whether it was applied, ignored or failed.

        ``unit``: the execution unit the command ran in (see ``_place``), when the
        caller knows it: a replay that sees only some of the log's rows (one family)
        cannot tell it from them. Left out, the replayer follows the units itself.
        """
        name = command_name(argv)
        counters = self.counters
        counters.commands[name] = counters.commands.get(name, 0) + 1
        self.last_seq = seq
        self.last_ts_ms = ts_ms
        ts_ms, placed = self._place(seq, name, ts_ms, client)
        self._enter(placed if unit is ... else unit)
        if self._blocked:
            self._end_waits(self.last_ts_ms, client)
        entry = STREAM_COMMANDS.get(name)
        is_stream = entry is not None
        if entry is None:
            entry = OTHER_WRITERS.get(name)
        if entry is None:
            if name in NEWER_STREAM_COMMANDS:
                return self._fail("unknown_command")
            counters.ignored += 1
            return Outcome("ignored")
        handler, arity = entry
        argc = len(argv)
        if (arity > 0 and argc != arity) or (arity < 0 and argc < -arity):
            if not is_stream:
                counters.ignored += 1
                return Outcome("ignored")
            return self._fail("wrong_arity")
        call = Call(seq, ts_ms, db or 0, client, list(argv), name)
        self._call = call
        # inside a unit, keys signalled by its earlier commands stay signalled
        before = dict(self._ready) if self._unit is not None and self._ready else {}
        try:
            handler(self, call)
            if self._ready and self._unit is None:
                self._serve_ready()
        except CommandError as exc:
            self._ready = before
            if not is_stream or (name in KEYSPACE_COMMANDS and exc.kind == "no_such_key"):
                counters.ignored += 1
                return Outcome("ignored")
            return self._fail(exc.kind)
        if is_stream and (name not in KEYSPACE_COMMANDS or call.touched_stream):
            counters.applied += 1
            return Outcome("applied")
        counters.ignored += 1
        return Outcome("ignored")

    # Execution units (see ``_place``). Class defaults, so that a model saved before
    # units were modelled resumes: the script whose ``lua`` rows follow (its clock and
    # its unit), and the unit the last command ran in.
    _script_now: int | None = None
    _script_unit: int | None = None
    _unit: int | None = None
    _call: Call | None = None

    def _place(self, seq: int, name: str, ts_ms: int, client: str | None) -> tuple[int, int | None]:
        """The "now" of a command and the execution unit it belongs to (None: none).

        Units: what one client sends between ``MULTI`` and ``EXEC``/``DISCARD`` (named
        by the ``MULTI``'s seq); and a script: its ``EVAL``/``EVALSHA``/``FCALL`` row
        followed by the rows of the commands it ran, client ``lua``, as MONITOR shows
        them (named by the call row's seq, or by the transaction's when it ran inside
        one). A server runs a unit without running anything else, and serves blocked
        readers only once it ended; a read inside a unit never blocks.

        A 7.2+ server reads its clock once per unit, before the unit's first command:
        every command of the unit sees that one time (a transaction's first command's
        time; a script's call row's time). 7.0 reads the live clock on every call.
        """
        snapshot = self.profile.unit_time_snapshot
        if client == LUA_CLIENT:
            if snapshot and self._script_now is not None:
                ts_ms = self._script_now
            return ts_ms, self._script_unit
        unit = None
        if name == "MULTI":
            self._units[client] = (seq, None)
        elif name in ("EXEC", "DISCARD"):
            self._units.pop(client, None)
        elif client in self._units:
            unit, unit_now = self._units[client]
            if snapshot:
                if unit_now is None:
                    self._units[client] = (unit, ts_ms)
                else:
                    ts_ms = unit_now
        # a script's rows follow its call row; any other client's row ends them
        if name in SCRIPT_CALLS:
            self._script_now = ts_ms
            self._script_unit = seq if unit is None else unit
            unit = self._script_unit
        else:
            self._script_now = self._script_unit = None
        return ts_ms, unit

    def _enter(self, unit: int | None) -> None:
        """The next command runs in ``unit``: when the unit of the last one ended, the
        readers its writes unblocked are served first."""
        if self._unit is not None and unit != self._unit:
            self.settle()
        self._unit = unit

    def settle(self) -> None:
        """End the current execution unit: serve the readers its writes unblocked (the
        end of a log, or of the rows a caller has, ends a unit too)."""
        self._unit = None
        if self._ready:
            self._serve_ready()

    def absorb(self, other: Replayer) -> None:
        """Take over ``other``'s keys, closed delivery records (or segments) and waiting clients.

        Used when new commands tie two families together (a RENAME or a multi-stream
        XREADGROUP across keys replayed apart until then): their keys are disjoint, so
        the union is the state one replay of both would have; waiting clients keep the
        order in which they blocked.
        """
        self.keys.update(other.keys)
        self._closed.extend(other._closed)
        self._segments.extend(other._segments)
        self._incarnations.extend(other._incarnations)
        self._segment_n = max(self._segment_n, other._segment_n)
        self._changes.extend(other._changes)
        self._pel_history.extend(other._pel_history)
        for client, unit in other._units.items():
            self._units.setdefault(client, unit)
        self._blocked = sorted([*self._blocked, *other._blocked], key=lambda b: b.seq)
        self._ready.update(other._ready)
        if other.last_seq is not None and (self.last_seq is None or other.last_seq > self.last_seq):
            self.last_seq, self.last_ts_ms = other.last_seq, other.last_ts_ms

    def reset_counters(self) -> None:
        """Start counting outcomes afresh (a saved model continuing in a new run)."""
        self.counters = Counters()
        self.notes = {}

    def _fail(self, kind: str) -> Outcome:
        self.counters.failed += 1
        self.counters.errors[kind] = self.counters.errors.get(kind, 0) + 1
        return Outcome("error", kind)

    def note(self, what: str) -> None:
        """Count something the run report should mention (not an error)."""
        self.notes[what] = self.notes.get(what, 0) + 1

    # -- keyspace ------------------------------------------------------------

    def lookup_any(self, db: int, key: str) -> Stream | OtherValue | None:
        return self.keys.get((db, key))

    def lookup_stream(self, db: int, key: str) -> Stream | None:
        """The stream at ``key``; WRONGTYPE when the key holds another type."""
        value = self.keys.get((db, key))
        if isinstance(value, OtherValue):
            raise CommandError("wrongtype")
        return value

    def create_stream(self, db: int, key: str) -> Stream:
        stream = Stream()
        self.keys[(db, key)] = stream
        self.signal(db, key)
        return stream

    def set_other(self, db: int, key: str, type_name: str) -> None:
        self.keys[(db, key)] = OtherValue(type_name)
        self.signal(db, key)

    def delete_key(self, call: Call, db: int, key: str) -> None:
        """Remove a key; a stream's pending entries close as ``key_deleted``."""
        value = self.keys.pop((db, key), None)
        if isinstance(value, Stream):
            call.touched_stream = True
            self.signal(db, key)
            for group in value.groups.values():
                self.close_group(call, db, key, group, "key_deleted")

    def move_key(self, call: Call, db: int, src: str, dst: str) -> None:
        """RENAME: the value moves; a stream's pending entries end their ``pel_history``
        versions under ``src`` and start new ones under ``dst``. Every delivery record
        a group holds changes its key (stamped with ``call``), and so does each group
        (``moved_seq``/``moved_ms``: for the records it already spilled)."""
        value = self.keys.pop((db, src))
        if isinstance(value, Stream):
            call.touched_stream = True
            self.signal(db, src)
            for group in value.groups.values():
                group.moved_seq = call.seq
                group.moved_ms = call.now
                for rec in group.records.values():
                    rec.changed(call.seq, call.now)
            if self.record_changes:
                for group in value.groups.values():
                    for entry_id, nack in group.pel.items():
                        self._end_version(call, db, src, group.name, entry_id, nack)
                        exists = entry_id in value.entries
                        self._track_version(call, db, dst, group.name, entry_id, nack, exists)
        self.keys[(db, dst)] = value
        self.signal(db, dst)

    def flush(self, call: Call, db: int | None) -> None:
        """Remove every key of ``db`` (None: of every db)."""
        for key_db, key in [k for k in self.keys if db is None or k[0] == db]:
            self.delete_key(call, key_db, key)

    # -- blocked readers -------------------------------------------------------

    def in_transaction(self, client: str | None) -> bool:
        """Whether a command of ``client`` runs inside an execution unit (MULTI or a
        script), where a read may not block."""
        return self._unit is not None or client in self._units or client == LUA_CLIENT

    def block(
        self,
        call: Call,
        keys: list[str],
        group: str,
        consumer: str,
        count: int,
        noack: bool,
        timeout_ms: int,
        deadline: int | None = None,
    ) -> None:
        """Put the calling client in the wait queue of its keys (after those already there)."""
        if deadline is None and timeout_ms:
            deadline = call.now + timeout_ms
        self._blocked.append(
            BlockedRead(
                call.request_seq if call.request_seq is not None else call.seq,
                call.client,
                call.db,
                list(call.argv),
                list(keys),
                group,
                consumer,
                count,
                noack,
                deadline,
            )
        )

    def signal(self, db: int, key: str) -> None:
        """A write that may serve readers blocked on ``key`` (Redis' signalKeyAsReady):
        they are served after the command, or after its execution unit, by the last
        write that signalled the key (its seq and time)."""
        if self._blocked:
            self._ready[(db, key)] = self._call

    def client_activity(
        self, ts_ms: int, client: str | None, unit: int | None | EllipsisType = ...
    ) -> None:
        """``client`` sent a command this replay does not otherwise see (it touches
        other keys): a blocked connection sends nothing, so its wait here is over.
        ``unit``: the execution unit of that command, as for ``apply``."""
        if unit is not ...:
            self._enter(unit)
        if self._blocked:
            self._end_waits(ts_ms, client)

    def blocked_clients(self) -> list[BlockedRead]:
        """The readers still waiting, in the order they blocked."""
        return list(self._blocked)

    def _end_waits(self, now: int, client: str | None) -> None:
        """Before a command: waits past their timeout end, and so does the wait of the
        command's own client (a blocked connection sends nothing)."""
        self._blocked = [
            b
            for b in self._blocked
            if (b.deadline is None or b.deadline >= now) and (client is None or b.client != client)
        ]

    def _serve_ready(self) -> None:
        """After a command (or a unit): serve, in the order the keys were signalled and
        then in blocking order, the readers of every signalled key."""
        while self._ready:
            db, key = next(iter(self._ready))
            trigger = self._ready.pop((db, key)) or self._call
            assert trigger is not None
            for blocked in [b for b in self._blocked if b.db == db and key in b.keys]:
                if blocked not in self._blocked:
                    continue
                call = Call(
                    trigger.seq,
                    trigger.now,
                    db,
                    blocked.client,
                    blocked.argv,
                    "XREADGROUP",
                    request_seq=blocked.seq,
                )
                if not self.profile.eager_consumers:
                    if cmd.serve_blocked_7_0(self, call, key, blocked):
                        self._blocked.remove(blocked)
                    continue
                # 7.2+: the blocked command runs again; it blocks again (behind the
                # others) when it still finds nothing, keeping its deadline.
                self._blocked.remove(blocked)
                before = len(self._blocked)
                try:
                    cmd.xreadgroup(self, call)
                except CommandError:
                    continue
                if len(self._blocked) > before:
                    self._blocked[-1].deadline = blocked.deadline

    # -- history -------------------------------------------------------------

    def close_group(self, call: Call, db: int, key: str, group: Group, status: str) -> None:
        """Close every pending entry of a group that is going away, keep its history."""
        for entry_id, nack in list(group.pel.items()):
            self.record(call, key, group, entry_id, status, nack.consumer, None, nack, status, db)
        group.pel.clear()
        if self.spill_closed_records:
            # every record was open (spilled as it closed just now)
            append_incarnation(self._incarnations, db, key, group)
        else:
            for entry_id, rec in group.records.items():
                self._closed.append((db, key, group.name, group.created_seq, entry_id, rec))
        group.records = {}

    def record(
        self,
        call: Call,
        key: str,
        group: Group,
        entry_id: StreamID,
        change: str,
        from_consumer: Consumer | None,
        to_consumer: Consumer | None,
        nack: PendingEntry,
        status: str | None = None,
        db: int | None = None,
    ) -> None:
        """Note one change of a pending entry in the history tables (``status``: it left
        the PEL with that status); its delivery record is stamped with ``call``."""
        db = call.db if db is None else db
        rec = group.records.get(entry_id)
        if status is None:
            assert to_consumer is not None
            if rec is None:
                rec = DeliveryRecord(
                    nack.delivery_count, 0, set(), nack.delivery_time, nack.delivery_time
                )
                group.records[entry_id] = rec
            else:
                if rec.status != "pending":
                    rec.status = "pending"
                    rec.closed_ms = None
                if rec.first_delivery_ms is None:  # a segment restarted between runs
                    rec.first_delivery_ms = nack.delivery_time
            rec.deliveries += 1
            rec.owners.add(to_consumer.name)
            rec.last_delivery_ms = nack.delivery_time
            rec.delivery_count = nack.delivery_count
            rec.changed(call.seq, call.now)
        elif rec is not None:
            rec.status = status
            rec.closed_ms = call.now
            rec.delivery_count = nack.delivery_count
            rec.changed(call.seq, call.now)
            if self.spill_closed_records:
                del group.records[entry_id]
                self._segment_n += 1
                append_segment(self._segments, db, key, group, entry_id, rec, self._segment_n)
        if self.record_changes:
            if status is None:
                stream = self.keys.get((db, key))
                exists = isinstance(stream, Stream) and entry_id in stream.entries
                self._track_version(call, db, key, group.name, entry_id, nack, exists)
            else:
                self._end_version(call, db, key, group.name, entry_id, nack)
            self._changes.append(
                db,
                key,
                group.name,
                *id_parts(entry_id),
                call.seq,
                call.seq if call.request_seq is None else call.request_seq,
                call.now,
                call.command,
                change,
                from_consumer.name if from_consumer else None,
                to_consumer.name if to_consumer else None,
                nack.delivery_count,
                nack.delivery_time,
            )

    def loaded(
        self, call: Call, key: str, group: Group, entry_id: StreamID, nack: PendingEntry
    ) -> None:
        """A pending entry a snapshot holds (``PELENGINE.LOAD PENDING``): its history
        starts here, with the counter the snapshot has and no delivery seen (the record
        stamped with ``call``)."""
        assert nack.consumer is not None
        group.records[entry_id] = DeliveryRecord(
            nack.delivery_count,
            0,
            {nack.consumer.name},
            None,
            None,
            changed_seq=call.seq,
            changed_ms=call.now,
        )
        if not self.record_changes:
            return
        stream = self.keys.get((call.db, key))
        exists = isinstance(stream, Stream) and entry_id in stream.entries
        self._track_version(call, call.db, key, group.name, entry_id, nack, exists)
        self._changes.append(
            call.db,
            key,
            group.name,
            *id_parts(entry_id),
            call.seq,
            call.seq,
            call.now,
            call.command,
            "loaded",
            None,
            nack.consumer.name,
            nack.delivery_count,
            nack.delivery_time,
        )

    def drain_tables(self) -> dict[str, Columns]:
        """The history rows recorded since the last call, per output table
        (``HISTORY_TABLES``), column by column: ``ownership_changes``, the closed
        ``pel_history`` versions (without ``as_of_*``) and, spilling, the closed delivery
        segments and the group incarnations that ended. The open versions, segments and
        live incarnations are part of the snapshot (``pelengine.model.snapshot``)."""
        sinks = (self._changes, self._pel_history, self._segments, self._incarnations)
        return {table: sink.take() for table, sink in zip(HISTORY_TABLES, sinks, strict=True)}

    def drain_changes(self) -> list[Row]:
        """The ``ownership_changes`` rows recorded since the last call."""
        return self._changes.take().rows()

    def drain_delivery_segments(self) -> list[Row]:
        """Spilling: the delivery segments closed since the last call (the open ones are
        part of the snapshot)."""
        return self._segments.take().rows()

    def drain_group_incarnations(self) -> list[Row]:
        """Spilling: the group incarnations that ended since the last call (the live ones
        are part of the snapshot)."""
        return self._incarnations.take().rows()

    def restart_open_records(self) -> None:
        """Spilling, once the snapshot gave the open records as segments and the model is
        saved to continue later: each open record starts a new, empty segment, so that
        the next run's segments hold only what happens after this point (an untouched
        record's next segment carries no change: ``changed_*`` None)."""
        self._segment_n += 1
        for value in self.keys.values():
            if isinstance(value, Stream):
                for group in value.groups.values():
                    for rec in group.records.values():
                        rec.deliveries = 0
                        rec.owners = set()
                        rec.first_delivery_ms = None
                        rec.last_delivery_ms = None
                        rec.changed_seq = None
                        rec.changed_ms = None

    def record_count(self) -> int:
        """How many delivery records the model holds (closed ones kept included)."""
        held = len(self._closed)
        for value in self.keys.values():
            if isinstance(value, Stream):
                held += sum(len(group.records) for group in value.groups.values())
        return held

    # -- pel_history -----------------------------------------------------------
    #
    # A version of a pending entry (db, key, group, id) starts when the entry
    # enters the PEL or one of the fields the PEL shows changes (consumer,
    # delivery time, delivery count, entry_exists), and ends when the next one
    # starts or the entry leaves the PEL. The open version is kept on the
    # PendingEntry (``version``); closed ones wait in ``_pel_history`` until
    # drained. A version that starts and ends within one command (same seq) was
    # never visible between commands and is dropped.

    def entries_changed(self, call: Call, key: str, stream: Stream, ids: list[StreamID]) -> None:
        """Entries ``ids`` left the stream (XDEL, trimming) or came back (XADD): the
        pending entries of those IDs change ``entry_exists``."""
        if not self.record_changes:
            return
        for group in stream.groups.values():
            pel = group.pel
            if not pel:
                continue
            for entry_id in ids:
                nack = pel.get(entry_id)
                if nack is not None:
                    exists = entry_id in stream.entries
                    self._track_version(call, call.db, key, group.name, entry_id, nack, exists)

    def _track_version(
        self,
        call: Call,
        db: int,
        key: str,
        group: str,
        entry_id: StreamID,
        nack: PendingEntry,
        exists: bool,
    ) -> None:
        """After ``call`` left the pending entry as it is now: a new version when what the
        PEL shows differs from the open version (which then ends)."""
        consumer = nack.consumer.name if nack.consumer is not None else None
        old = nack.version
        if old is not None:
            if (
                old.consumer == consumer
                and old.delivery_time == nack.delivery_time
                and old.delivery_count == nack.delivery_count
                and old.entry_exists == exists
            ):
                return
            self._close_version(call, db, key, group, entry_id, old)
        nack.version = PelVersion(
            consumer, nack.delivery_time, nack.delivery_count, exists, call.seq, call.now
        )

    def _end_version(
        self, call: Call, db: int, key: str, group: str, entry_id: StreamID, nack: PendingEntry
    ) -> None:
        """The pending entry leaves the PEL (or its key) with ``call``."""
        old = nack.version
        if old is not None:
            nack.version = None
            self._close_version(call, db, key, group, entry_id, old)

    def _close_version(
        self, call: Call, db: int, key: str, group: str, entry_id: StreamID, version: PelVersion
    ) -> None:
        if version.from_seq == call.seq:
            return  # started and ended within one command: never visible
        self._pel_history.append(db, key, group, *id_parts(entry_id), *version, call.seq, call.now)

    def drain_pel_history(self) -> list[Row]:
        """The closed ``pel_history`` versions recorded since the last call (without
        ``as_of_*``; the open versions are part of the snapshot)."""
        return self._pel_history.take().rows()

    # -- state -----------------------------------------------------------------

    def streams(self) -> list[tuple[int, str, Stream]]:
        """Every live stream as (db, key, stream), ordered by db and key."""
        return sorted(
            (db, key, value) for (db, key), value in self.keys.items() if isinstance(value, Stream)
        )
