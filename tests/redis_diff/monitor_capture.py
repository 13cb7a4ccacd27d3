"""MONITOR as the log: capture everything the server runs, align it with what the test sent.

``MonitorCapture`` opens a raw socket, sends ``MONITOR`` and writes every line
the server pushes (the ``+OK`` and the ``+<time> [db client] "cmd" ...`` simple
strings, exactly as received) to a file from a thread. ``stop()`` drains it: it
sends a marker ``ECHO`` on another connection and returns only once the
marker's line reached the file, so every command sent before is in it.

The events rows then come from that file through ``pelengine.ingest.monitor``
alone. ``align`` pairs each captured command with the test's own record of it
(same client address, same argv, in order) only to borrow what the *server
answered* (the judge of each command's outcome) and the ``TIME`` after it (for
checkpoints); the rows replayed are the capture's.

``run_blocking_phase`` adds what the random workload has little of: several
consumers blocked at once on the same stream, each on its own connection, with
``BLOCK 0``, long timeouts that a later ``XADD`` beats, and short timeouts that
expire first; the writes are ``XADD *``, some with ``MAXLEN ~``/``MINID ~``.
"""

from __future__ import annotations

import contextlib
import random
import socket
import threading
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pelengine.ingest.aof import read_aof
from pelengine.ingest.monitor import ParseStats, parse_file
from pelengine.ingest.pin import PinStats, UnitWindows, pin_star_ids
from pelengine.model import get_profile
from tests.redis_diff.capture import LUA_CLIENT, Record, Recorder, SeqCounter
from tests.redis_diff.harness import UNJUDGED
from tests.redis_diff.scenario import _BlockedCall, _wait_blocked
from tests.redis_diff.server import RedisServer


class MonitorCapture:
    """A MONITOR connection writing every line it receives to ``path``."""

    def __init__(self, server: RedisServer, path: Path) -> None:
        self.server = server
        self.path = path
        self._sock = socket.create_connection((server.host, server.port), timeout=10)
        self._sock.sendall(b"MONITOR\r\n")
        self._file = path.open("wb")
        self._buf = b""
        self._seen = threading.Condition()
        self._last_line = b""
        self._lines = 0
        self._stop = False
        self._error: BaseException | None = None
        self._sock.settimeout(0.2)
        self._thread = threading.Thread(target=self._pump, name="monitor-capture", daemon=True)
        self._thread.start()
        self._wait_for(lambda line: line.startswith(b"+OK"), "the +OK of MONITOR")

    def _pump(self) -> None:
        try:
            while not self._stop:
                try:
                    chunk = self._sock.recv(1 << 16)
                except TimeoutError:
                    continue
                if not chunk:
                    break
                self._file.write(chunk)
                self._buf += chunk
                *lines, self._buf = self._buf.split(b"\r\n")
                if lines:
                    with self._seen:
                        self._lines += len(lines)
                        self._last_line = lines[-1]
                        self._recent = lines
                        self._seen.notify_all()
        except BaseException as exc:  # surfaced by stop()
            self._error = exc
        finally:
            self._file.flush()

    def _wait_for(self, predicate: Any, what: str, timeout_s: float = 10.0) -> None:
        deadline = time.monotonic() + timeout_s
        with self._seen:
            while not any(predicate(line) for line in getattr(self, "_recent", [])):
                left = deadline - time.monotonic()
                if left <= 0 or self._error is not None:
                    raise TimeoutError(f"MONITOR capture: {what} never arrived ({self._error})")
                self._seen.wait(left)

    def stop(self) -> Path:
        """Drain (a marker ECHO must come through), close, and return the file's path."""
        marker = f"pelengine-monitor-drain-{uuid.uuid4().hex}"
        with self.server.client() as c:
            c.execute_command("ECHO", marker)
        self._wait_for(lambda line: marker.encode() in line, f"the drain marker {marker}")
        self._stop = True
        with contextlib.suppress(OSError):  # wakes the pump's recv at once (no 0.2 s timeout)
            self._sock.shutdown(socket.SHUT_RDWR)
        self._thread.join(5)
        self._sock.close()
        self._file.close()
        if self._error is not None:
            raise self._error
        return self.path


# ------------------------------------------------------------------------------ alignment


@dataclass
class Aligned:
    """The capture's rows as judged records, and what the alignment saw."""

    records: list[Record]
    rows: list[dict[str, Any]]
    stats: ParseStats
    seq_of: dict[int, int]  # the test's record seq -> the capture's seq
    unmatched_test_records: list[Record] = field(default_factory=list)
    star_xadds: int = 0
    # XADD '*' whose ID ms is before the clock the replay gives it: the row's ts_ms, or
    # on 7.2+ inside a unit the unit's (its first command's line, a script's call line)
    star_ms_later: list[str] = field(default_factory=list)
    star_ms_later_seqs: list[int] = field(default_factory=list)
    # XADD '*' in a 7.2+ unit whose ID opened the millisecond AFTER the unit's clock line's
    # (a script's call line, a transaction's first command's line), not after its own
    # line: the unit's clock read led that line's stamp (see "A unit's clock after its
    # line")
    star_unit_clock_ahead: list[str] = field(default_factory=list)
    star_unit_clock_ahead_seqs: list[int] = field(default_factory=list)
    # XADD '*' judged by its own line whose ID opened the millisecond after that line's:
    # the command's clock read led the line's stamp into the next millisecond (Valkey
    # 9.1, see "A unit's clock after its line"). The parser, which sees milliseconds,
    # cannot flag these; the AOF pin finds them
    star_line_clock_ahead: list[str] = field(default_factory=list)
    star_line_clock_ahead_seqs: list[int] = field(default_factory=list)
    pins: PinStats | None = None  # with ids_from_aof
    # the most a capture line was stamped after the test sent its command (blocked reads
    # left out: their line waits for the write that serves them): see tolerance_ms
    late_ms: int = 0

    @property
    def star_off_clock_seqs(self) -> set[int]:
        """The rows whose reply shows an ID millisecond other than the clock the replay
        gives the row (before it, or a clock read after its line): the rows the AOF
        pinning must move (and the parser must flag, but for ``star_line_clock_ahead``)."""
        return (
            set(self.star_ms_later_seqs)
            | set(self.star_unit_clock_ahead_seqs)
            | set(self.star_line_clock_ahead_seqs)
        )

    @property
    def tolerance_ms(self) -> int:
        """How far the replay's times may be from the server's for this capture: the
        server ran each command between its sending and its line's stamp, so a time the
        replay takes from the line is late by at most ``late_ms`` (the same machine's
        clock; measured here, independently of the replay); never less than
        ``MONITOR_TOLERANCE_MS``."""
        return max(MONITOR_TOLERANCE_MS, self.late_ms)

    def explain(self, seqs: Iterable[int]) -> list[str]:
        """The capture's rows of these seqs with what the test knows of them (for failures)."""
        by_seq = {rec.seq: rec for rec in self.records}
        out = []
        for seq in sorted(seqs):
            rec = by_seq.get(seq)
            if rec is None:
                out.append(f"seq {seq}: no such row")
                continue
            out.append(
                f"seq {seq} client {rec.client} ts_ms {rec.ts_ms} argv {rec.argv[:4]} "
                f"reply {rec.reply!r} error {rec.error!r} note {rec.note}"
            )
        return out


def _match(events: list[dict[str, Any]], mine: list[Record]) -> list[tuple[int, int]]:
    """Greedy in-order pairs (event index, record index): a record the capture skips must
    be one the server refused before running it (arity, unknown command)."""
    pairs = []
    p = 0
    for i, row in enumerate(events):
        q = p
        while q < len(mine) and mine[q].sent != row["argv"] and mine[q].error is not None:
            q += 1
        if q < len(mine) and mine[q].sent == row["argv"]:
            pairs.append((i, q))
            p = q + 1
    return pairs


def _callers(clients: Iterable[str | None]) -> list[str | None]:
    """Each command's connection: its own client, and for a script's ``lua`` row the
    client of the script call before it (a script runs whole: nothing else runs between
    its call and its commands, in the test's records as in MONITOR)."""
    out: list[str | None] = []
    caller: str | None = None
    for client in clients:
        if client != LUA_CLIENT:
            caller = client
        out.append(caller)
    return out


# A unit's clock after its line (Valkey 9.1). A server's command clock may run ahead of
# its MONITOR stamps by a microsecond or two: Valkey 9.1's ustime() (the clock call()
# reads into the unit's time snapshot, which XADD '*' uses) is the wall time of a
# gettimeofday() read up to ~1 ms earlier plus the TSC time since (in its binary, ustime
# extrapolates by getMonotonicUs while under 1000 us have passed; INFO says
# "monotonic_clock:X86 TSC"), while replicationFeedMonitors stamps each line with
# gettimeofday() itself. Live, a TIME reply (that snapshot) was after its own line's
# stamp for 12-20% of 40000 TIMEs, by 1 us (2 us under a CPU load); never on Valkey 8.1
# (whose ustime is gettimeofday) or Redis 7.0. The lead matters where a line comes
# within it after the clock read: a script's EVAL/EVALSHA/FCALL line, which evalCommand
# writes as its first act, right after call() read the unit's clock. About 1 script in
# 5000 (1 transaction in 12000: its first queued command's line comes after that command
# ran) read its unit's clock in the millisecond after the one its line shows, so its
# XADD '*' IDs are one ms after the clock the replay gives the unit. The AOF pin finds
# them (its window runs to the row's own line, stamped after the XADD ran) and moves
# them; the parser flags them (the unit began in an earlier ms than the row's line).
# ``align`` lists them apart (``star_unit_clock_ahead``). A row judged by its own line
# can have its ID one ms after that line too (about 1 XADD '*' in 10,000 to 20,000 in a
# dense pipeline): its command read the clock a microsecond or two before the line was
# stamped, and the lead carried the read into the next ms. The pin's window runs one ms
# past the row's line for it (``pin.CLOCK_LEAD_MS``); ``align`` lists these as
# ``star_line_clock_ahead``, which the parser cannot flag (it sees milliseconds).


def align(
    capture: Path,
    sent: Iterable[Record],
    ids_from_aof: str | None = None,
    profile: str = "7.0",
) -> Aligned:
    """Parse the capture and pair its commands with the test's records of them.

    Each capture row becomes a ``Record`` with the capture's seq/ts_ms/argv/db/client;
    the reply/error/note/ts_after_ms come from the test's record of the same
    command when there is one; the others (probes, TIME, truth reads, the FLUSHDB
    and any voided attempt of ``run_workload``) are ``UNJUDGED``: their effect is
    judged by the tables only.
    A test record that is not in the capture must be one the server refused before
    running it (arity, unknown command): MONITOR never shows those.

    The test's records name a connection by ``CLIENT INFO``; a redis-py pipeline may
    run on another pooled connection, so each recorder's commands are matched to the
    captured client that shows most of them. The commands a script ran (client
    ``lua``, shared by every connection and by voided attempts) count as commands of
    the connection that called the script. A unit's rows need nothing more: MONITOR
    shows ``MULTI`` when it is sent, each queued command as ``EXEC`` runs it, then
    ``EXEC``; a script's ``EVAL`` first, then its commands: the order they were sent.

    With ``ids_from_aof`` (the server's appendonlydir) the rows get their ``XADD *``
    IDs from the AOF (``pelengine.ingest.pin``), as ``ingest-monitor --ids-from-aof``
    does, after the pairing (which compares what was sent); ``profile``: the server's
    (7.2+ reads the clock once per unit: the window where a unit's ID may lie).
    """
    rows, stats = parse_file(str(capture))
    groups: dict[str | None, list[Record]] = {}
    ordered = sorted(sent, key=lambda r: r.seq)
    for rec, caller in zip(ordered, _callers(r.client for r in ordered), strict=True):
        groups.setdefault(caller, []).append(rec)
    events: dict[str | None, list[int]] = {}
    for i, caller in enumerate(_callers(row["client"] for row in rows)):
        events.setdefault(caller, []).append(i)
    pairs: dict[int, Record] = {}
    taken: set[str | None] = set()
    out = Aligned(records=[], rows=rows, stats=stats, seq_of={})
    for name, mine in sorted(groups.items(), key=lambda g: -len(g[1])):
        best: tuple[int, int, str | None, list[tuple[int, int]]] | None = None
        for client, idx in events.items():
            if client in taken:
                continue
            got = _match([rows[i] for i in idx], mine)
            score = (len(got), client == name)
            if best is None or score > best[:2]:
                best = (score[0], score[1], client, got)
        matched: set[int] = set()
        if best is not None and best[0]:
            taken.add(best[2])
            idx = events[best[2]]
            for i, q in best[3]:
                pairs[idx[i]] = mine[q]
                matched.add(q)
        out.unmatched_test_records += [r for q, r in enumerate(mine) if q not in matched]
    if ids_from_aof is not None:
        out.pins = pin_star_ids(rows, read_aof(ids_from_aof).rows, profile=profile)
    windows = UnitWindows(get_profile(profile).unit_time_snapshot)
    for i, row in enumerate(rows):
        match = pairs.get(i)
        _lo, clock_ms = windows.clock_window(row["argv"], row["ts_ms"], row["client"])
        rec = Record(
            seq=row["seq"],
            db=row["db"],
            client=row["client"],
            sent=list(row["argv"]),
            argv=list(row["argv"]),
            reply=match.reply if match else None,
            error=match.error if match else None,
            ts_ms=row["ts_ms"],
            ts_after_ms=max(row["ts_ms"], match.ts_after_ms) if match else row["ts_ms"],
            note=match.note if match else UNJUDGED,
        )
        out.records.append(rec)
        if match is not None:
            out.seq_of[match.seq] = rec.seq
            if "BLOCK" not in map(str.upper, match.sent):
                out.late_ms = max(out.late_ms, row["ts_ms"] - match.ts_ms)
            argv = match.sent
            if argv[0].upper() == "XADD" and "*" in argv[2:] and isinstance(match.reply, str):
                out.star_xadds += 1
                id_ms, id_seq = (int(part) for part in match.reply.split("-", 1))
                where = f"{match.describe()} || capture seq {rec.seq} ts_ms {rec.ts_ms}" + (
                    f", the unit's {clock_ms}" if clock_ms != rec.ts_ms else ""
                )
                if id_ms < clock_ms:
                    out.star_ms_later.append(where)
                    out.star_ms_later_seqs.append(rec.seq)
                elif id_ms == clock_ms + 1 and id_seq == 0:
                    # a clock read that led its line's stamp (see "A unit's clock after its
                    # line"): a unit's (its clock is an earlier line's) or, past the row's
                    # own line, the command's. Only an ID that opened its millisecond: one
                    # after an entry of that same ms (a later XADD of the unit) is that
                    # entry's successor, which the replay makes too once that entry's ID
                    # is pinned
                    if id_ms <= rec.ts_ms:
                        out.star_unit_clock_ahead.append(where)
                        out.star_unit_clock_ahead_seqs.append(rec.seq)
                    else:
                        out.star_line_clock_ahead.append(where)
                        out.star_line_clock_ahead_seqs.append(rec.seq)
    return out


# ------------------------------------------------------------------------- blocked readers


# How far the times of a replayed MONITOR capture may be from the server's. A line is
# stamped after its command ran; a 7.2+ unit read its clock before its first command,
# whose line is the unit's time in the capture: on a loaded machine (2 cores, Spark and
# other tests beside) a stall between the two was seen to reach 3 ms. The unit clock
# itself is proven exactly by test_unit_clock.py (units of ~10 ms, IDs to the
# millisecond) and by the model and AOF tests (2 ms). A capture whose lines were stamped
# later than that after their commands were sent (make test's load once stalled one by
# 11 ms) widens its own tolerance to what it measured (``Aligned.tolerance_ms``).
MONITOR_TOLERANCE_MS = 5

BLOCK_KEYS = ("b0", "b1")
BLOCK_GROUPS = ("bg0", "bg1")


def run_blocking_phase(
    server: RedisServer, seed: int, db: int, rounds: int = 4, counter: SeqCounter | None = None
) -> list[Record]:
    """Rounds of 2-4 readers blocked at once (each on its own connection), then XADD '*'s.

    Every round: the groups are caught up (plain reads), the readers block
    (``BLOCK 0``, ``BLOCK 5000`` that a write beats, ``BLOCK 60`` that expires
    250 ms before any write), then ``XADD *`` (some with ``MAXLEN ~``/``MINID ~``,
    some two in one unit: ``MULTI``/``EXEC`` in even rounds, a script in odd ones)
    until every reader that did not time out was served. Returns every record.
    """
    rng = random.Random(seed * 7919 + 17)
    counter = counter or SeqCounter(1_000_000)
    main_client = server.client(db)
    main = Recorder(main_client, db, counter, star_mode="keep")
    side: list[Any] = []
    records: list[Record] = []
    try:
        ids: list[str] = []
        # a few internal nodes' worth of entries, so '~' trimming has whole nodes to drop
        for i in range(rng.randint(150, 260)):
            rec = main.run(["XADD", "b0", "*", "f", f"p{i}"], star_index=2)
            if isinstance(rec.reply, str):
                ids.append(rec.reply)
        for key in BLOCK_KEYS:
            for group in BLOCK_GROUPS:
                main.run(["XGROUP", "CREATE", key, group, "$", "MKSTREAM"])
        added = 0
        for _round in range(rounds):
            for key in BLOCK_KEYS:
                for group in BLOCK_GROUPS:
                    main.run(
                        ["XREADGROUP", "GROUP", group, "catchup", "COUNT", "1000"]
                        + ["STREAMS", key, ">"]
                    )
            calls: list[tuple[_BlockedCall, int]] = []
            for i in range(rng.randint(2, 4)):
                group = rng.choice(BLOCK_GROUPS)
                keys = ["b0"] if rng.random() < 0.7 else ["b0", "b1"]
                timeout = rng.choice([0, 0, 5000, 60])
                if i < 2:  # every round has a BLOCK 0 and a timeout (one beaten, one not)
                    timeout = (0, 60 if _round % 2 else 5000)[i]
                argv = ["XREADGROUP", "GROUP", group, f"bc{rng.randint(0, 3)}"]
                if rng.random() < 0.5:
                    argv += ["COUNT", str(rng.choice([1, 2, 10]))]
                argv += ["BLOCK", str(timeout), "STREAMS", *keys, *([">"] * len(keys))]
                client = server.client(db)
                side.append(client)
                reader = Recorder(client, db, counter, star_mode="keep")
                call = _BlockedCall(client, reader, argv)
                _wait_blocked(main_client, call, expected=len(calls) + 1)
                calls.append((call, timeout))
            if any(t == 60 for _, t in calls):
                time.sleep(0.25)  # the short timeouts expire well before any write
                for call, t in calls:
                    if t == 60:
                        assert call.conn.can_read(timeout=1.0), f"{call.argv} did not time out"
            waiting = [(c, t) for c, t in calls if t != 60]
            for attempt in range(60):
                if not waiting:
                    break
                key = "b0" if attempt == 0 or rng.random() < 0.8 else "b1"
                argv = ["XADD", key]
                r = rng.random()
                if attempt == 0:  # every round trims b0 approximately, one way or the other
                    r = 0.0 if _round % 2 == 0 else 0.2
                if r < 0.15:
                    argv += ["MAXLEN", "~", str(rng.choice([5, 60, 120, 200]))]
                elif r < 0.3 and ids:
                    argv += ["MINID", "~", ids[-rng.randint(1, min(len(ids), 120))]]
                argv += ["*", "f", f"v{rng.randint(0, 99)}"]
                if attempt == 1 or rng.random() < 0.2:
                    # a unit of two writes (every round has one): the readers it unblocks
                    # are served once it ended, with both entries (a reader without COUNT)
                    second = [key, "*", "f", f"w{rng.randint(0, 99)}"]
                    unit = [(argv, argv.index("*")), (["XADD", *second], 2)]
                    sent = main.run_multi(unit) if _round % 2 == 0 else main.run_script(unit)
                    replies = [r.reply for r in sent.inner if r is not None]
                else:
                    replies = [main.run(argv, star_index=argv.index("*")).reply]
                ids += [reply for reply in replies if isinstance(reply, str)]
                added += 1
                time.sleep(rng.uniform(0.0, 0.004))
                still = []
                for call, t in waiting:
                    if call.conn.can_read(timeout=0.002):
                        continue
                    still.append((call, t))
                waiting = still
            assert not waiting, f"readers never served: {[c.argv for c, _ in waiting]}"
            for call, _t in calls:
                records.append(call.finish())
        records += main.records
        return records
    finally:
        for c in [main_client, *side]:
            c.close()


def xadd_id_mismatches(records: list[Record], profile: str = "7.0") -> list[str]:
    """Replay ``records`` and compare the ID every executed ``XADD`` made with the reply.

    The tables only show IDs that are still there at a checkpoint; this sees every one.
    """
    from tests.native.twin import TwinReplayer

    replayer = TwinReplayer(profile=profile)
    out = []
    for rec in records:
        replayer.apply(seq=rec.seq, ts_ms=rec.ts_ms, argv=rec.argv, db=rec.db, client=rec.client)
        if rec.argv[0].upper() == "XADD" and rec.error is None and isinstance(rec.reply, str):
            stream = replayer.keys.get((rec.db, rec.argv[1]))
            got = str(getattr(stream, "last_id", None))
            if got != rec.reply:
                out.append(f"{rec.describe()} || model ID {got}")
    return out


def remap_checkpoints(
    checkpoints: list[tuple[int, Any]], seq_of: dict[int, int]
) -> list[tuple[int, Any]]:
    """A checkpoint read after the test's record ``s`` sits after the capture row of the
    last record up to ``s`` that the capture shows (the rows between are the probes and
    truth reads of the test, none of which writes)."""
    shown = sorted(seq_of)
    out = []
    for s, tables in checkpoints:
        before = [t for t in shown if t <= s]
        if before:
            out.append((seq_of[before[-1]], tables))
    return out
