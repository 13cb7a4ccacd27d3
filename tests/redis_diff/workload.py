"""A seeded random workload of stream commands, run against the real server and recorded.

``run_workload(server, seed, n_commands, db)`` sends ``n_commands`` commands (every
command of the events contract, valid and invalid ones, plus read-only and
non-stream commands) on one connection to ``db`` and returns what ``Recorder``
captured: the events rows (with the server's own ``ts_ms``) and the replies.

Idle checks never sit on a boundary the capture cannot resolve: before an
``XCLAIM``/``XAUTOCLAIM`` with a positive min-idle-time the driver reads the
group's delivery times (an unrecorded probe) and picks a threshold away from
every candidate's idle time; after the command it verifies, from the ``TIME``
before and after, that the threshold could not have been decided differently by
a replay that only knows ``ts_ms``. A run where that fails (a stall of many ms
between probe and command) raises ``AmbiguousTimingError`` and ``run_workload``
redoes the seed from an empty db.

Execution units (``cmd_unit``): a ``MULTI``/``EXEC`` block (sometimes ``DISCARD``)
or a script (``EVAL``, sometimes ``EVALSHA``) of 2-5 stream commands (``XADD``
mostly with ``*``, ``XREADGROUP`` with ``BLOCK`` at times, ``XCLAIM`` with
``TIME``/``IDLE``, ``XAUTOCLAIM``, ``XACK``, ``XDEL``, ``XGROUP SETID`` /
``CREATECONSUMER``), sometimes with one that fails when run (WRONGTYPE,
NOGROUP, syntax) or, rarely, one the server refuses when it is queued
(``EXECABORT``). They go out as one round trip each (``Recorder.run_multi`` /
``run_script``). An idle threshold inside a unit also stays away from the idle
times the unit's earlier commands may give (a delivery at the unit's time, or
``IDLE``/``TIME`` of an ``XCLAIM``), and is verified from the unit's ``TIME``s.
"""

from __future__ import annotations

import random
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tests.redis_diff.capture import (
    Record,
    Recorder,
    SeqCounter,
    Unit,
    format_id,
    key_positions,
    parse_id,
)
from tests.redis_diff.server import RedisServer

STREAM_KEYS = ["s0", "s1", "s2", "s3"]
STREAM_KEY_WEIGHTS = [4, 3, 2, 1]
STRING_KEY = "str0"
MISSING_KEY = "nokey"
GROUPS = ["g0", "g1", "g2"]
CONSUMERS = ["c0", "c1", "c2", "c3", "c4"]
HUGE_MIN_IDLE = 9_999_999_999_999

# Margins (ms) between a chosen min-idle-time and the idle time of every candidate.
BELOW_MARGIN = 8  # candidates meant to be claimed: idle >= min_idle + BELOW_MARGIN
ABOVE_MARGIN = 15  # candidates meant to stay: idle + ABOVE_MARGIN <= min_idle


class AmbiguousTimingError(RuntimeError):
    """An idle check sat on a boundary that ``ts_ms`` cannot resolve; the run is void."""


@dataclass
class IdleGuard:
    min_idle: int
    deliveries: list[int]  # delivery times (server ms) of the candidates
    # idle times the candidates may have from deliveries inside the same unit: a
    # delivery at "the unit's time - x" (x = 0: a read or claim; x: XCLAIM ... IDLE x)
    unit_idles: list[int] = field(default_factory=list)


@dataclass
class Planned:
    """A command built but not sent yet (alone or as one of a unit)."""

    argv: list[str]
    star_index: int | None = None
    guard: IdleGuard | None = None


def unit_deliveries(argv: list[str], now: int) -> list[tuple[str, str, int | None, int | None]]:
    """The delivery times a command may set, as ``(key, group, unit_idle, at)``: a
    delivery at "the unit's time - unit_idle", or at the absolute time ``at``.

    Conservative: every ``IDLE``/``TIME`` of an ``XCLAIM`` counts (the last one wins on
    the server), and a value the server replaces by its now counts as now.
    """
    upper = [a.upper() for a in argv]
    name = upper[0] if upper else ""
    if name == "XREADGROUP" and "GROUP" in upper[:-1]:
        group = argv[upper.index("GROUP") + 1]
        return [(argv[j], group, 0, None) for j in key_positions(argv)]
    if name not in ("XCLAIM", "XAUTOCLAIM") or len(argv) < 3:
        return []
    key, group = argv[1], argv[2]
    if name == "XAUTOCLAIM":
        return [(key, group, 0, None)]
    out: list[tuple[str, str, int | None, int | None]] = []
    for j in range(5, len(argv) - 1):
        if upper[j] not in ("IDLE", "TIME"):
            continue
        try:
            value = int(argv[j + 1])
        except ValueError:
            continue
        if not 0 <= value <= now:
            out.append((key, group, 0, None))  # the server clamps it to its now
        elif upper[j] == "IDLE":
            out.append((key, group, value, None))
        else:
            out.append((key, group, None, value))
    return out or [(key, group, 0, None)]


@dataclass
class UnitPlan:
    """The commands of one unit being built, and the delivery times they may set."""

    now: int  # the driver's last known server time
    commands: list[Planned] = field(default_factory=list)
    idles: dict[tuple[str, str], list[int]] = field(default_factory=lambda: defaultdict(list))
    times: dict[tuple[str, str], list[int]] = field(default_factory=lambda: defaultdict(list))

    def add(self, planned: Planned) -> None:
        self.commands.append(planned)
        for key, group, idle, at in unit_deliveries(planned.argv, self.now):
            if idle is not None:
                self.idles[(key, group)].append(idle)
            if at is not None:
                self.times[(key, group)].append(at)


@dataclass
class WorkloadResult:
    seed: int
    db: int
    records: list[Record]
    attempts: int
    elapsed_s: float
    max_span_ms: int
    checkpoints: list[tuple[int, Any]] = field(default_factory=list)
    units: list[Unit] = field(default_factory=list)

    @property
    def rows(self) -> list[dict[str, Any]]:
        return [r.row() for r in self.records]

    def by_seq(self) -> dict[int, Record]:
        return {r.seq: r for r in self.records}


@dataclass
class _Knowledge:
    """What the driver believes about the db, from replies (used only to bias choices)."""

    ids: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    delivered: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    last: dict[str, tuple[int, int]] = field(default_factory=dict)
    groups: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    cursors: dict[tuple[str, str], str] = field(default_factory=dict)
    string_present: bool = False
    now_ms: int = 0

    def forget(self, key: str) -> None:
        self.last.pop(key, None)
        self.groups.pop(key, None)
        for ck in [ck for ck in self.cursors if ck[0] == key]:
            del self.cursors[ck]

    def move(self, src: str, dst: str) -> None:
        self.forget(dst)
        if src in self.last:
            self.last[dst] = self.last.pop(src)
        if src in self.groups:
            self.groups[dst] = self.groups.pop(src)
        self.ids[dst] = self.ids[dst][-100:] + self.ids.get(src, [])[-100:]
        self.delivered[dst] = self.delivered.get(src, [])[-50:]


def _cap(lst: list[str], n: int = 600) -> None:
    if len(lst) > n:
        del lst[: len(lst) - n]


class Workload:
    """One seeded run. Use ``run_workload`` (it handles ``AmbiguousTimingError`` retries)."""

    def __init__(
        self,
        recorder: Recorder,
        seed: int,
        n_commands: int,
        *,
        allow_flushdb: bool = True,
        checkpoint_every: int | None = None,
        checkpoint: Callable[[], Any] | None = None,
        shape: str = "mixed",
    ):
        self.rec = recorder
        self.rng = random.Random(seed)
        self.n = n_commands
        self.allow_flushdb = allow_flushdb
        self.k = _Knowledge()
        self.checkpoint_every = checkpoint_every
        self.checkpoint = checkpoint
        self.checkpoints: list[tuple[int, Any]] = []
        self.shape = shape

    # ------------------------------------------------------------------ helpers
    def kw(self, word: str) -> str:
        """A keyword in the case a client might send it (Redis is case-insensitive)."""
        r = self.rng.random()
        if r < 0.08:
            return word.lower()
        if r < 0.1:
            return word.capitalize()
        return word

    def stream_key(self) -> str:
        return self.rng.choices(STREAM_KEYS, STREAM_KEY_WEIGHTS)[0]

    def some_key(self) -> str:
        r = self.rng.random()
        if r < 0.025:
            return STRING_KEY
        if r < 0.035:
            return MISSING_KEY
        return self.stream_key()

    def group_for(self, key: str, pending: float = 0.0) -> str:
        """A group of the key (mostly a known one); ``pending``: the chance to look for
        one with pending entries first (a probe)."""
        if pending and self.rng.random() < pending:
            _now, groups = self.rec.probe("XINFO", "GROUPS", key)
            with_pel = sorted(
                g["name"] for g in map(_pairs, groups or []) if int(g.get("pending", 0)) > 0
            )
            if with_pel:
                return self.rng.choice(with_pel)
        known = sorted(self.k.groups.get(key, ()))
        if known and self.rng.random() < 0.85:
            return self.rng.choice(known)
        return self.rng.choice(GROUPS)

    def consumer(self) -> str:
        return self.rng.choice(CONSUMERS)

    def pick(self, lst: list[str]) -> str | None:
        if not lst:
            return None
        if self.rng.random() < 0.7:
            return self.rng.choice(lst[-20:])
        return self.rng.choice(lst)

    def known_id(self, key: str) -> str:
        """An ID of the key: live, deleted or trimmed, or made up."""
        r = self.rng.random()
        if r < 0.45:
            got = self.pick(self.k.delivered.get(key, []))
            if got:
                return got
        if r < 0.9:
            got = self.pick(self.k.ids.get(key, []))
            if got:
                return got
        ms, seq = self.k.last.get(key, (self.k.now_ms, 0))
        return format_id(max(0, ms + self.rng.randint(-3, 3)), self.rng.randint(0, 3))

    def bad_id(self) -> str:
        return self.rng.choice(["abc", "1-x", "-1", "1-2-3", "", "18446744073709551616-0", "x-1"])

    def count_arg(self) -> str:
        return str(self.rng.choice([1, 1, 2, 2, 3, 5, 10, 0, -1]))

    # ------------------------------------------------------------------ running
    def send(self, argv: list[Any], star_index: int | None = None, note: str = "") -> Record:
        record = self.rec.run([str(a) for a in argv], star_index=star_index, note=note)
        self.k.now_ms = record.ts_after_ms
        self.learn(record)
        return record

    def send_planned(self, planned: Planned) -> Record:
        record = self.send(planned.argv, star_index=planned.star_index)
        self.verify_idle(planned.guard, record)
        return record

    def run(self) -> None:
        table = [
            (22, self.cmd_xadd),
            (17, self.cmd_xreadgroup),
            (9, self.cmd_xclaim),
            (6, self.cmd_xautoclaim),
            (9, self.cmd_xack),
            (4, self.cmd_xdel),
            (2.5, self.cmd_xtrim),
            (4, self.cmd_xgroup_create),
            (2, self.cmd_xgroup_setid),
            (1, self.cmd_xgroup_destroy),
            (2, self.cmd_xgroup_createconsumer),
            (1.5, self.cmd_xgroup_delconsumer),
            (1.5, self.cmd_xsetid),
            (0.8, self.cmd_del),
            (0.8, self.cmd_rename),
            (0.08 if self.allow_flushdb else 0.0, self.cmd_flushdb),
            (4, self.cmd_readonly),
            (1.2, self.cmd_string),
            (2.5, self.cmd_invalid),
            (4, self.cmd_unit),
        ]
        if self.shape == "long_streams":
            # streams of hundreds of entries over several internal nodes: '~' trimming,
            # XDEL inside nodes, long PELs (XAUTOCLAIM scan limits)
            boost = {self.cmd_xadd: 45, self.cmd_xdel: 2, self.cmd_xtrim: 3, self.cmd_del: 0.1}
            boost.update({self.cmd_rename: 0.05, self.cmd_flushdb: 0.0, self.cmd_string: 0.1})
            boost[self.cmd_unit] = 2
            table = [(boost.get(f, w), f) for w, f in table]
        weights = [w for w, _ in table]
        funcs = [f for _, f in table]
        # Start from something to work with: keys, groups, entries.
        for key in STREAM_KEYS[:3]:
            for _ in range(3):
                self.send(["XADD", key, "*", "f", "v"], star_index=2)
            self.send(["XGROUP", "CREATE", key, "g0", "0"])
        self.send(["SET", STRING_KEY, "x"])
        next_checkpoint = self.checkpoint_every
        # what every run has at least once, whatever the dice say: the rare units, and
        # a FLUSHDB
        scheduled: list[tuple[int, Callable[[], None]]] = [
            (self.n // 3, lambda: self.cmd_unit("EXECABORT")),
            (2 * self.n // 3, lambda: self.cmd_unit("DISCARD")),
            # a RENAME that succeeds: the drawn ones (~8 in 2,000 commands, their sources
            # at the mercy of earlier DELs and FLUSHDBs) can all fail in a slow run
            (5 * self.n // 6, self.cmd_rename_present),
        ]
        if self.allow_flushdb and shape_flushes(self.shape):
            scheduled.append((self.n // 2, self.cmd_flushdb))
        scheduled.sort(key=lambda s: s[0])
        while len(self.rec.records) < self.n:
            if scheduled and len(self.rec.records) >= scheduled[0][0]:
                scheduled.pop(0)[1]()
            else:
                self.rng.choices(funcs, weights)[0]()
            if next_checkpoint and self.checkpoint and len(self.rec.records) >= next_checkpoint:
                # the state right after this seq, read between two commands (not logged)
                self.checkpoints.append((self.rec.records[-1].seq, self.checkpoint()))
                next_checkpoint += self.checkpoint_every or 0
            r = self.rng.random()
            if r < 0.015:
                time.sleep(self.rng.uniform(0.002, 0.03))
            elif r < 0.017:
                time.sleep(0.06)

    # ------------------------------------------------------------------ learning
    def learn(self, rec: Record) -> None:
        if rec.error is not None:
            return
        argv = [a.upper() if i == 0 else a for i, a in enumerate(rec.sent)]
        name = argv[0]
        reply = rec.reply
        if name == "XADD" and isinstance(reply, str):
            key = argv[1]
            self.k.ids[key].append(reply)
            _cap(self.k.ids[key])
            self.k.last[key] = parse_id(reply)
        elif name == "XREADGROUP" and isinstance(reply, list):
            for item in reply:
                key, entries = item[0], item[1]
                for entry in entries or []:
                    self.k.delivered[key].append(entry[0])
                _cap(self.k.delivered[key], 200)
        elif name == "XCLAIM" and isinstance(reply, list):
            key = argv[1]
            for entry in reply:
                self.k.delivered[key].append(entry if isinstance(entry, str) else entry[0])
        elif name == "XAUTOCLAIM" and isinstance(reply, list):
            key, group = argv[1], argv[2]
            self.k.cursors[(key, group)] = reply[0]
        elif name == "XGROUP" and len(argv) >= 4:
            sub = argv[1].upper()
            key, group = argv[2], argv[3]
            if sub == "CREATE" and reply == "OK":
                self.k.groups[key].add(group)
                self.k.last.setdefault(key, (0, 0))
            elif sub == "DESTROY" and reply == 1:
                self.k.groups[key].discard(group)
        elif name == "XSETID" and reply == "OK":
            self.k.last[argv[1]] = parse_id(argv[2])
        elif name in ("DEL", "UNLINK"):
            for key in argv[1:]:
                self.k.forget(key)
                if key == STRING_KEY:
                    self.k.string_present = False
        elif name == "RENAME" or (name == "RENAMENX" and reply == 1):
            self.k.move(argv[1], argv[2])
            if argv[1] == STRING_KEY and argv[2] != STRING_KEY:
                self.k.string_present = False
        elif name == "FLUSHDB":
            for key in list(self.k.last) + list(self.k.groups):
                self.k.forget(key)
            self.k.string_present = False
        elif name == "SET" and argv[1] == STRING_KEY:
            self.k.string_present = True
        elif name == "SET":
            self.k.forget(argv[1])

    # ------------------------------------------------------------------ probes (not logged)
    def pel(self, key: str, group: str) -> tuple[int, list[tuple[str, int]]] | None:
        """(server ms, [(id, delivery time), ...]) of the group's PEL; None: no such group."""
        now, info = self.rec.probe("XINFO", "STREAM", key, "FULL", "COUNT", "0")
        if not isinstance(info, list):
            return None
        full = _pairs(info)
        for g in full.get("groups", []):
            gd = _pairs(g)
            if gd.get("name") == group:
                return now, [(p[0], int(p[2])) for p in gd.get("pending", [])]
        return None

    def pel_delivery_times(self, key: str, group: str) -> tuple[int, list[int]] | None:
        probed = self.pel(key, group)
        return None if probed is None else (probed[0], [t for _, t in probed[1]])

    def stream_info(self, key: str) -> dict[str, Any] | None:
        _now, info = self.rec.probe("XINFO", "STREAM", key)
        return _pairs(info) if isinstance(info, list) else None

    def read_would_serve(self, keys: list[str], group: str) -> bool:
        """True when an XREADGROUP ``>`` on these keys cannot block (served, or an error)."""
        for key in keys:
            info = self.stream_info(key)
            if info is None:
                return True  # missing key or wrong type: an error, no blocking
            _now, groups = self.rec.probe("XINFO", "GROUPS", key)
            last_delivered = None
            for g in groups or []:
                gd = _pairs(g)
                if gd.get("name") == group:
                    last_delivered = gd.get("last-delivered-id")
            if last_delivered is None:
                return True  # NOGROUP error
            last_entry = info.get("last-entry")
            if last_entry and parse_id(last_entry[0]) > parse_id(last_delivered):
                return True
        return False

    def choose_min_idle(
        self, key: str, group: str, unit: UnitPlan | None = None
    ) -> tuple[str, IdleGuard | None]:
        """A min-idle-time away from every candidate's idle (from a probe of the PEL, and
        inside a unit from what the unit's earlier commands may deliver)."""
        rng = self.rng
        r = rng.random()
        zero = 0.6 if unit is not None else 0.15  # a unit's claims mostly claim
        if r < zero:
            return "0", None
        if r < zero + 0.07:
            return str(-rng.randint(1, 5000)), None
        if r < zero + 0.1:
            return str(HUGE_MIN_IDLE), None
        probed = self.pel_delivery_times(key, group)
        unit_times = list(unit.times.get((key, group), [])) if unit else []
        unit_idles = list(unit.idles.get((key, group), [])) if unit else []
        if probed is None and not (unit_times or unit_idles):
            return str(rng.choice([1, 10, 100, 5000])), None  # NOGROUP/WRONGTYPE: no idle check
        now, deliveries = probed or (self.k.now_ms, [])  # (a group the unit may create)
        deliveries = deliveries + unit_times
        if not deliveries and not unit_idles:
            return str(rng.choice([1, 10, 100, 5000])), IdleGuard(0, [])
        idles = sorted({now - d for d in deliveries} | set(unit_idles))
        all_claimed: list[int] = []
        if idles[0] - BELOW_MARGIN >= 1:
            all_claimed.append(rng.randint(1, idles[0] - BELOW_MARGIN))
        none_claimed = [idles[-1] + ABOVE_MARGIN + rng.randint(0, 300)]
        partial = [
            rng.randint(a + ABOVE_MARGIN, b - BELOW_MARGIN)
            for a, b in zip(idles, idles[1:], strict=False)
            if a + ABOVE_MARGIN <= b - BELOW_MARGIN
        ]
        if partial and rng.random() < 0.6:
            m = rng.choice(partial)
        else:
            m = rng.choice(all_claimed + none_claimed + all_claimed)
        return str(m), IdleGuard(m, deliveries, unit_idles)

    def verify_idle(self, guard: IdleGuard | None, rec: Record) -> None:
        """Every candidate's idle must be decided the same from ``ts_ms`` as by the server."""
        if guard is None or guard.min_idle <= 0 or rec.error is not None:
            return
        span = self.rec.max_span_ms
        # a delivery inside the unit happened at its time, in [ts_ms, ts_after_ms]
        for d in guard.deliveries + [rec.ts_ms - x for x in guard.unit_idles]:
            lowest = rec.ts_ms - d
            highest = rec.ts_after_ms - d + span
            if not (guard.min_idle <= lowest - 1 or guard.min_idle >= highest + 2):
                raise AmbiguousTimingError(
                    f"min-idle {guard.min_idle} vs idle in [{lowest}, {highest}] "
                    f"(delivery {d}) at {rec.describe()}"
                )

    # ------------------------------------------------------------------ commands
    def xadd_id(self, key: str) -> tuple[str, bool]:
        """(ID argument, is_star)."""
        rng = self.rng
        ms, seq = self.k.last.get(key, (0, 0))
        now = self.k.now_ms
        r = rng.random()
        if r < 0.45:
            return "*", True
        if r < 0.55:
            return f"{rng.choice([ms, ms, ms + 1, now, max(0, ms - 1)])}-*", False
        if r < 0.8:
            if rng.random() < 0.5:
                return format_id(ms, seq + rng.randint(1, 3)), False
            base = max(ms, now) if rng.random() < 0.7 else ms
            return format_id(base + rng.randint(1, 4), rng.randint(0, 2)), False
        if r < 0.83:
            return str(max(ms, now) + rng.randint(1, 3)), False  # ms only: seq 0
        if r < 0.84:
            return format_id(max(ms, now) + 100_000, 0), False  # a jump: '*' then follows last.ms
        if r < 0.93:
            # equal or smaller than the top: an error unless the driver is out of date
            return format_id(ms, seq) if rng.random() < 0.5 else format_id(max(0, ms - 1), 5), False
        return rng.choice(["0-0", "0", "0-1", "0-*", self.bad_id(), "-", "+", "$"]), False

    def trim_args(self, key: str, allow_invalid: bool = True) -> list[str]:
        rng = self.rng
        r = rng.random()
        args: list[str]
        approx = rng.random() < (0.9 if self.shape == "long_streams" else 0.25)
        if r < 0.6:
            args = [self.kw("MAXLEN")]
            if approx or rng.random() < 0.3:
                args.append("~" if approx else "=")
            if self.shape == "long_streams":
                args.append(str(rng.choice([10, 20, 50, 100, 150])))
            else:
                args.append(str(rng.choice([0, 1, 2, 5, 10, 20, 30, 40, 60, 80])))
        else:
            args = [self.kw("MINID")]
            if approx or rng.random() < 0.3:
                args.append("~" if approx else "=")
            ms, seq = self.k.last.get(key, (self.k.now_ms, 0))
            known = self.k.ids.get(key, [])
            if self.shape == "long_streams":
                # keeps the last ~150 IDs ever added
                args.append(known[rng.randint(0, len(known) - 150)] if len(known) > 150 else "0-1")
            elif rng.random() < 0.6:
                args.append(self.known_id(key))
            else:
                args.append(format_id(max(0, ms - rng.randint(0, 5)), rng.randint(0, 2)))
        if approx and rng.random() < 0.3:
            args += [self.kw("LIMIT"), str(rng.choice([0, 1, 5, 50, 100, 150]))]
        if allow_invalid and rng.random() < 0.06:
            args = rng.choice(
                [
                    ["MAXLEN", "-1"],
                    ["MAXLEN", "x"],
                    ["MAXLEN", "5", "LIMIT", "10"],
                    ["MINID", self.bad_id()],
                    ["MAXLEN", "=", "5", "MINID", "1-1"],
                ]
            )
        return args

    def plan_xadd(self, key: str | None = None, star: float = 0.0) -> Planned:
        """An XADD; ``star``: the chance of ``*`` before the usual mix of IDs."""
        rng = self.rng
        key = key or self.some_key()
        argv: list[str] = [self.kw("XADD"), key]
        if rng.random() < 0.08 or key == "s3" and rng.random() < 0.3:
            argv.append(self.kw("NOMKSTREAM"))
        if rng.random() < 0.15:
            argv += self.trim_args(key)
        id_arg, is_star = ("*", True) if rng.random() < star else self.xadd_id(key)
        star_index = len(argv) if is_star else None
        argv.append(id_arg)
        nfields = rng.choice([1, 1, 1, 2])
        for i in range(nfields):
            argv += [f"f{i}", f"v{rng.randint(0, 999)}"]
        if rng.random() < 0.02:
            argv = argv[:-1]  # a field without a value: arity error
        return Planned(argv, star_index)

    def cmd_xadd(self) -> None:
        self.send_planned(self.plan_xadd())

    def cmd_xreadgroup(self) -> None:
        first = self.some_key()
        if not self.k.groups.get(first) and first in STREAM_KEYS and self.rng.random() < 0.5:
            self.cmd_xgroup_create(first)
            return
        self.send_planned(self.plan_xreadgroup(first))

    def plan_xreadgroup(self, first: str, in_unit: bool = False) -> Planned:
        """An XREADGROUP. Alone, BLOCK only where it cannot block (served or an error);
        inside a unit (where it never blocks) BLOCK anywhere, more often."""
        rng = self.rng
        group = self.group_for(first)
        keys = [first]
        for _ in range(rng.choices([0, 1, 2], [75, 20, 5])[0]):
            others = [k for k in STREAM_KEYS if k not in keys and group in self.k.groups.get(k, ())]
            if others and rng.random() < 0.9:
                keys.append(rng.choice(others))
            else:
                keys.append(rng.choice([k for k in STREAM_KEYS if k not in keys]))
        argv = [self.kw("XREADGROUP"), self.kw("GROUP"), group, self.consumer()]
        opts: list[list[str]] = []
        if rng.random() < 0.6:
            opts.append([self.kw("COUNT"), self.count_arg()])
        if rng.random() < (0.2 if in_unit else 0.08):
            opts.append([self.kw("NOACK")])
        ids = []
        for key in keys:
            r = rng.random()
            if r < 0.75:
                ids.append(">")
            elif r < 0.85:
                ids.append(rng.choice(["0", "0-0"]))
            elif r < 0.97:
                ids.append(self.known_id(key))
            else:
                ids.append(rng.choice(["$", self.bad_id(), "-", "+"]))
        history = any(i != ">" for i in ids)
        if in_unit:
            block = rng.random() < 0.2
        else:
            block = rng.random() < 0.06 and (history or self.read_would_serve(keys, group))
        if block:
            opts.append([self.kw("BLOCK"), str(rng.choice([0, 10, 1000]))])
        rng.shuffle(opts)
        for o in opts:
            argv += o
        argv += [self.kw("STREAMS"), *keys, *ids]
        if rng.random() < 0.01:
            argv = argv[:-1]  # unbalanced
        return Planned(argv)

    def xclaim_ids(self, key: str, group: str, from_pel: float = 0.0) -> list[str]:
        """IDs to claim; ``from_pel``: the chance to take them from the group's PEL."""
        rng = self.rng
        n = rng.choices([1, 2, 3, 5], [40, 30, 20, 10])[0]
        probed = self.pel(key, group) if rng.random() < from_pel else None
        if probed and probed[1]:
            pending = [i for i, _ in probed[1]]
            return rng.sample(pending, min(n, len(pending)))
        return [self.known_id(key) for _ in range(n)]

    def cmd_xclaim(self) -> None:
        self.send_planned(self.plan_xclaim())

    def plan_xclaim(self, key: str | None = None, unit: UnitPlan | None = None) -> Planned:
        """An XCLAIM (inside ``unit``: IDLE/TIME more often, and the unit's own deliveries
        are candidates of the idle check too)."""
        rng = self.rng
        key = key or self.some_key()
        group = self.group_for(key, pending=0.7 if unit is not None else 0.0)
        min_idle, guard = self.choose_min_idle(key, group, unit)
        argv = [self.kw("XCLAIM"), key, group, self.consumer(), min_idle]
        argv += self.xclaim_ids(key, group, from_pel=0.8 if unit is not None else 0.0)
        now = self.k.now_ms
        boost = 0.45 if unit is not None else 0.0  # a unit: TIME, IDLE, FORCE more often
        opts: list[list[str]] = []
        if rng.random() < 0.2 + boost:
            idle = rng.choice([0, rng.randint(1, 200), rng.randint(1000, 100_000), -5, 10**14])
            opts.append([self.kw("IDLE"), str(idle)])
        if rng.random() < 0.15 + boost:
            past = now - rng.randint(0, 100_000)
            negative = -rng.randint(2, 5000)
            at = rng.choice([past, now + 100_000, -1, negative, 0, 1000, now - 20])
            opts.append([self.kw("TIME"), str(at)])  # a future one: the server's now
        if rng.random() < 0.2:
            opts.append([self.kw("RETRYCOUNT"), str(rng.choice([0, 1, 2, 5, 7]))])
        if rng.random() < 0.2 + boost / 3:
            opts.append([self.kw("FORCE")])
        if rng.random() < 0.3:
            opts.append([self.kw("JUSTID")])
        if rng.random() < 0.12:
            ms, seq = self.k.last.get(key, (now, 0))
            opts.append(
                [self.kw("LASTID"), rng.choice([self.known_id(key), format_id(ms + 1, 0), "0-1"])]
            )
        rng.shuffle(opts)
        for o in opts:
            argv += o
        if rng.random() < 0.05:
            bad = rng.choice(
                [
                    ["FOO"],
                    ["IDLE", "x"],
                    ["TIME", "1.5"],
                    ["RETRYCOUNT"],
                    ["LASTID", self.bad_id()],
                    [self.bad_id()],
                ]
            )
            pos = rng.randint(5, len(argv))
            argv[pos:pos] = bad
        if rng.random() < 0.02:
            argv[4] = rng.choice(["x", "1.5", ""])
        return Planned(argv, guard=guard)

    def cmd_xautoclaim(self) -> None:
        self.send_planned(self.plan_xautoclaim())

    def plan_xautoclaim(self, key: str | None = None, unit: UnitPlan | None = None) -> Planned:
        rng = self.rng
        key = key or self.some_key()
        group = self.group_for(key)
        min_idle, guard = self.choose_min_idle(key, group, unit)
        r = rng.random()
        if r < 0.3:
            start = rng.choice(["0-0", "0", "-"])
        elif r < 0.6:
            start = self.k.cursors.get((key, group), "0-0")
        elif r < 0.9:
            start = self.known_id(key)
            if rng.random() < 0.2:
                start = "(" + start
        else:
            start = rng.choice([self.bad_id(), "+", "(18446744073709551615-18446744073709551615"])
        argv = [self.kw("XAUTOCLAIM"), key, group, self.consumer(), min_idle, start]
        opts: list[list[str]] = []
        if rng.random() < 0.7:
            opts.append([self.kw("COUNT"), str(rng.choice([1, 1, 2, 3, 5, 10, 25]))])
        if rng.random() < 0.3:
            opts.append([self.kw("JUSTID")])
        rng.shuffle(opts)
        for o in opts:
            argv += o
        if rng.random() < 0.04:
            argv += rng.choice([["COUNT", "0"], ["COUNT", "x"], ["FOO"], ["COUNT"]])
        return Planned(argv, guard=guard)

    def cmd_xack(self) -> None:
        self.send_planned(self.plan_xack())

    def plan_xack(self, key: str | None = None) -> Planned:
        rng = self.rng
        key = key or self.some_key()
        group = self.group_for(key)
        ids = [self.known_id(key) for _ in range(rng.choices([1, 2, 3, 6], [50, 25, 15, 10])[0])]
        if rng.random() < 0.04:
            ids.insert(rng.randint(0, len(ids)), self.bad_id())
        return Planned([self.kw("XACK"), key, group, *ids])

    def cmd_xdel(self) -> None:
        self.send_planned(self.plan_xdel())

    def plan_xdel(self, key: str | None = None) -> Planned:
        rng = self.rng
        key = key or self.some_key()
        ids = [self.known_id(key) for _ in range(rng.choices([1, 2, 3], [60, 30, 10])[0])]
        if rng.random() < 0.04:
            ids.insert(rng.randint(0, len(ids)), self.bad_id())
        return Planned([self.kw("XDEL"), key, *ids])

    def cmd_xtrim(self) -> None:
        key = self.some_key()
        self.send([self.kw("XTRIM"), key, *self.trim_args(key)])

    def cmd_xgroup_create(self, key: str | None = None) -> None:
        rng = self.rng
        key = key or self.some_key()
        group = rng.choice(GROUPS)
        r = rng.random()
        if r < 0.4:
            start = "$"
        elif r < 0.7:
            start = rng.choice(["0", "0-0"])
        elif r < 0.95:
            start = self.known_id(key)
        else:
            start = rng.choice([self.bad_id(), "-", "+"])
        argv = [self.kw("XGROUP"), self.kw("CREATE"), key, group, start]
        opts: list[list[str]] = []
        if rng.random() < 0.3:
            opts.append([self.kw("MKSTREAM")])
        if rng.random() < 0.15:
            opts.append([self.kw("ENTRIESREAD"), str(rng.choice([-1, 0, 1, 3, 10, 50, -3]))])
        rng.shuffle(opts)
        for o in opts:
            argv += o
        self.send(argv)

    def cmd_xgroup_setid(self) -> None:
        self.send_planned(self.plan_xgroup_setid())

    def plan_xgroup_setid(self, key: str | None = None) -> Planned:
        rng = self.rng
        key = key or self.some_key()
        group = self.group_for(key)
        r = rng.random()
        if r < 0.3:
            start = "$"
        elif r < 0.5:
            start = rng.choice(["0", "0-0"])
        elif r < 0.93:
            start = self.known_id(key)
        else:
            start = rng.choice([self.bad_id(), "-", "+"])
        argv = [self.kw("XGROUP"), self.kw("SETID"), key, group, start]
        if rng.random() < 0.45:
            argv += [self.kw("ENTRIESREAD"), str(rng.choice([-1, 0, 1, 2, 5, 10, 30, 100, -2]))]
        return Planned(argv)

    def cmd_xgroup_destroy(self) -> None:
        key = self.some_key()
        self.send([self.kw("XGROUP"), self.kw("DESTROY"), key, self.rng.choice(GROUPS)])

    def cmd_xgroup_createconsumer(self) -> None:
        self.send_planned(self.plan_xgroup_createconsumer())

    def plan_xgroup_createconsumer(self, key: str | None = None) -> Planned:
        key = key or self.some_key()
        group = self.group_for(key)
        return Planned([self.kw("XGROUP"), self.kw("CREATECONSUMER"), key, group, self.consumer()])

    def cmd_xgroup_delconsumer(self) -> None:
        key = self.some_key()
        group = self.group_for(key)
        self.send([self.kw("XGROUP"), self.kw("DELCONSUMER"), key, group, self.consumer()])

    def cmd_xsetid(self) -> None:
        rng = self.rng
        key = self.some_key()
        info = self.stream_info(key) or {}
        length = int(info.get("length", 0))
        added = int(info.get("entries-added", 0))
        last = parse_id(info.get("last-generated-id", "0-0"))
        top = info.get("last-entry")
        top_id = parse_id(top[0]) if top else (0, 0)
        r = rng.random()
        if r < 0.35:
            new = (last[0], last[1] + rng.randint(0, 3))
        elif r < 0.6:
            new = (max(last[0], self.k.now_ms) + rng.randint(1, 50), rng.randint(0, 3))
        elif r < 0.8:
            new = top_id if top else (max(0, last[0] - rng.randint(0, 3)), 0)  # may go backwards
        else:
            new = (max(0, top_id[0] - 1), 0)  # smaller than the top: an error if non-empty
        argv = [self.kw("XSETID"), key, format_id(*new)]
        if rng.random() < 0.4:
            argv += [
                self.kw("ENTRIESADDED"),
                str(
                    rng.choice([added, added + rng.randint(1, 10), length, max(0, length - 1), -1])
                ),
            ]
        if rng.random() < 0.35:
            argv += [
                self.kw("MAXDELETEDID"),
                rng.choice(
                    [format_id(*new), format_id(max(0, new[0] - 1), 0), "0-0", "99999999999999-0"]
                ),
            ]
        if rng.random() < 0.03:
            argv[2] = self.bad_id()
        self.send(argv)

    def cmd_del(self) -> None:
        rng = self.rng
        keys = rng.sample(STREAM_KEYS + [MISSING_KEY], rng.choice([1, 1, 2]))
        self.send([self.kw(rng.choice(["DEL", "UNLINK"])), *keys])

    def cmd_rename(self) -> None:
        rng = self.rng
        src, dst = rng.sample(STREAM_KEYS, 2)
        if rng.random() < 0.05:
            src = MISSING_KEY  # ERR no such key
        if rng.random() < 0.05:
            dst = src  # renaming onto itself
        if rng.random() < 0.04 and self.k.string_present:
            src = STRING_KEY  # a string replaces a stream (or moves to a free name)
        self.send([self.kw(rng.choice(["RENAME", "RENAMENX"])), src, dst])

    def cmd_rename_present(self) -> None:
        """A RENAME whose source exists: an XADD to it first creates it (or fails on a
        key of another type, which exists as well), so the RENAME succeeds."""
        src, dst = self.rng.sample(STREAM_KEYS, 2)
        self.send(["XADD", src, "*", "f", "v"], star_index=2)
        self.send([self.kw("RENAME"), src, dst])

    def cmd_flushdb(self) -> None:
        self.send([self.kw("FLUSHDB"), *self.rng.choice([[], ["ASYNC"], ["SYNC"]])])

    def cmd_readonly(self) -> None:
        rng = self.rng
        key = self.some_key()
        group = self.group_for(key)
        argv = rng.choice(
            [
                ["XLEN", key],
                ["XRANGE", key, "-", "+", "COUNT", "5"],
                ["XREVRANGE", key, "+", "-", "COUNT", "2"],
                ["XREAD", "COUNT", "2", "STREAMS", key, "0"],
                ["XPENDING", key, group],
                ["XPENDING", key, group, "-", "+", "10"],
                ["XPENDING", key, group, "IDLE", "10", "-", "+", "10", self.consumer()],
                ["XINFO", "STREAM", key],
                ["XINFO", "STREAM", key, "FULL"],
                ["XINFO", "GROUPS", key],
                ["XINFO", "CONSUMERS", key, group],
                ["EXISTS", key],
                ["TYPE", key],
                ["PING"],
            ]
        )
        self.send(argv)

    def cmd_string(self) -> None:
        rng = self.rng
        if rng.random() < 0.03:
            self.send([self.kw("SET"), rng.choice(STREAM_KEYS), "overwritten"])  # replaces a stream
        elif not self.k.string_present or rng.random() < 0.3:
            self.send([self.kw("SET"), STRING_KEY, str(rng.randint(0, 99))])
        else:
            self.send([self.kw("GET"), STRING_KEY])

    def refused_on_arrival(self, key: str) -> list[list[str]]:
        """Commands the server refuses before running them (arity, unknown command or
        subcommand): inside MULTI they abort the transaction (EXECABORT)."""
        return [
            ["XADD", key],
            ["XADD", key, "*"],
            ["XADD", key, "*", "f"],
            ["XREADGROUP", "GROUP", "g0"],
            ["XREADGROUP", "GROUP", "g0", "c0", "STREAMS", key],
            ["XREADGROUP", "STREAMS", key, ">"],
            ["XACK", key, "g0"],
            ["XCLAIM", key, "g0", "c0"],
            ["XAUTOCLAIM", key, "g0", "c0", "0"],
            ["XGROUP", "CREATE", key],
            ["XGROUP", "NOPE", key, "g0"],
            ["XGROUP", "DELCONSUMER", key, "g0"],
            ["XSETID", key],
            ["XTRIM", key],
            ["XDEL", key],
            ["XFOO", key],
            ["XINFO", "NOPE"],
        ]

    def refused_when_run(self, key: str) -> list[list[str]]:
        """Commands that run and fail (syntax, NOGROUP, no such key, and WRONGTYPE on the
        string key when it is one): inside MULTI, EXEC runs them and reports the error."""
        s = STRING_KEY
        return [
            ["XREADGROUP", "GROUP", "g0", "c0", "FOO", "STREAMS", key, ">"],
            ["XREADGROUP", "GROUP", "nogroup", "c0", "STREAMS", key, ">"],
            ["XCLAIM", key, "nogroup", "c0", "0", "1-1"],
            ["XAUTOCLAIM", key, "nogroup", "c0", "0", "0-0"],
            ["XGROUP", "CREATE", key, "g0", "$", "FOO"],
            ["XGROUP", "SETID", key, "nogroup", "0"],
            ["XGROUP", "SETID", key, "g0", "0", "ENTRIESREAD"],
            ["XGROUP", "CREATECONSUMER", key, "nogroup", "c9"],
            ["XGROUP", "CREATECONSUMER", MISSING_KEY, "g0", "c9"],
            ["XGROUP", "DESTROY", MISSING_KEY, "g0"],
            ["XSETID", MISSING_KEY, "1-1"],
            ["XSETID", key, "1-1", "FOO", "2"],
            ["XTRIM", key, "FOO", "1"],
            ["XADD", s, "*", "f", "v"],
            ["XREADGROUP", "GROUP", "g0", "c0", "STREAMS", s, ">"],
            ["XGROUP", "CREATE", s, "g0", "$", "MKSTREAM"],
            ["XCLAIM", s, "g0", "c0", "0", "1-1"],
            ["XAUTOCLAIM", s, "g0", "c0", "0", "0-0"],
            ["XACK", s, "g0", "1-1"],
            ["XDEL", s, "1-1"],
            ["XTRIM", s, "MAXLEN", "1"],
            ["XSETID", s, "1-1"],
        ]

    def plan_invalid(self, refused_on_arrival: float = 0.5) -> Planned:
        key = self.stream_key()
        if self.rng.random() < refused_on_arrival:
            argv = self.rng.choice(self.refused_on_arrival(key))
        else:
            argv = self.rng.choice(self.refused_when_run(key))
        star_index = 2 if argv[0] == "XADD" and argv[2:3] == ["*"] else None
        return Planned(argv, star_index)

    def cmd_invalid(self) -> None:
        self.send_planned(self.plan_invalid())

    # ------------------------------------------------------------------ execution units
    def cmd_unit(self, ending: str | None = None) -> None:
        """A MULTI/EXEC block or a script of 2-5 commands. ``ending``: ``EXEC``,
        ``DISCARD``, ``EXECABORT`` (a command refused when queued), ``EVAL`` or
        ``EVALSHA``; by default a random one (EXECABORT rarely)."""
        rng = self.rng
        if ending is None:
            if rng.random() < 0.4:
                ending = "EVALSHA" if rng.random() < 0.3 else "EVAL"
            else:
                ending = "DISCARD" if rng.random() < 0.08 else "EXEC"
        focus = self.stream_key()  # most commands of a unit work on one stream
        plan = UnitPlan(now=self.k.now_ms)
        builders = [
            (5, lambda key: self.plan_xadd(key, star=0.6)),
            (4, lambda key: self.plan_xreadgroup(key, in_unit=True)),
            (3.5, lambda key: self.plan_xclaim(key, plan)),
            (2.5, lambda key: self.plan_xautoclaim(key, plan)),
            (2, self.plan_xack),
            (2, self.plan_xdel),
            (1.5, self.plan_xgroup_setid),
            (1.5, self.plan_xgroup_createconsumer),
        ]
        weights = [w for w, _ in builders]
        n = rng.randint(2, 5)
        r = rng.random()
        # one command that fails when run (WRONGTYPE, NOGROUP, syntax), or rarely one the
        # server refuses when queued (MULTI: EXECABORT), at a random place
        invalid, invalid_at = None, -1
        if r < 0.2 or ending == "EXECABORT":
            refused = 1.0 if ending == "EXECABORT" else 0.2
            invalid, invalid_at = self.plan_invalid(refused_on_arrival=refused), rng.randint(0, n)
        for i in range(n + 1):
            if invalid is not None and i == invalid_at:
                plan.add(invalid)
            if i < n:
                key = focus if rng.random() < 0.75 else self.some_key()
                plan.add(rng.choices(builders, weights)[0][1](key))
        commands = [(p.argv, p.star_index) for p in plan.commands]
        if ending in ("EVAL", "EVALSHA"):
            unit = self.rec.run_script(commands, evalsha=ending == "EVALSHA")
        else:
            unit = self.rec.run_multi(commands, discard=ending == "DISCARD")
        self.k.now_ms = unit.records[-1].ts_after_ms
        for record in unit.records:
            self.learn(record)
        for planned, ran in zip(plan.commands, unit.inner, strict=True):
            if ran is not None:
                self.verify_idle(planned.guard, ran)


def shape_flushes(shape: str) -> bool:
    return shape != "long_streams"


def _pairs(flat: Any) -> dict[str, Any]:
    """A RESP2 flat ``[k1, v1, k2, v2, ...]`` map as a dict."""
    if not isinstance(flat, list):
        return {}
    return {flat[i]: flat[i + 1] for i in range(0, len(flat) - 1, 2)}


def run_workload(
    server: RedisServer,
    seed: int,
    n_commands: int,
    db: int = 0,
    counter: SeqCounter | None = None,
    *,
    allow_flushdb: bool = True,
    checkpoint_every: int | None = None,
    star_mode: str = "replace",
    shape: str = "mixed",
    max_attempts: int = 4,
    flush: bool = True,
) -> WorkloadResult:
    """Run one seed on ``db`` (emptied first, unlogged) and return the recorded commands.

    ``flush=False`` continues on what ``db`` holds (one attempt only: a retry would
    start from what the failed attempt left).

    With a shared ``counter`` the seqs continue an existing log (several seeds in
    several dbs form one events table in execution order). With ``checkpoint_every``
    the server's state of ``db`` is read (``truth.read_truth``) after every that
    many commands: ``result.checkpoints`` is ``[(seq, tables), ...]``.
    """
    from tests.redis_diff.truth import read_truth

    counter = counter or SeqCounter(1)
    start_seq = counter.value
    t0 = time.perf_counter()
    last_error: AmbiguousTimingError | None = None
    for attempt in range(1, (max_attempts if flush else 1) + 1):
        counter.value = start_seq
        client = server.client(db)
        try:
            if flush:
                client.execute_command("FLUSHDB")
            recorder = Recorder(client=client, db=db, counter=counter, star_mode=star_mode)
            workload = Workload(
                recorder,
                seed,
                n_commands,
                allow_flushdb=allow_flushdb,
                checkpoint_every=checkpoint_every,
                checkpoint=lambda: read_truth(server, [db]),
                shape=shape,
            )
            try:
                workload.run()
            except AmbiguousTimingError as exc:
                last_error = exc
                continue
            return WorkloadResult(
                seed=seed,
                db=db,
                records=recorder.records,
                attempts=attempt,
                elapsed_s=time.perf_counter() - t0,
                max_span_ms=recorder.max_span_ms,
                checkpoints=workload.checkpoints,
                units=recorder.units,
            )
        finally:
            client.close()
    raise AmbiguousTimingError(
        f"seed {seed}: {max_attempts} attempts hit an idle boundary: {last_error}"
    )
