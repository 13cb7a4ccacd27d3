"""Pin the IDs of a MONITOR capture's ``XADD *`` rows from the same server's AOF.

Why: Redis 7.0 stamps a MONITOR line *after* the command ran, while ``XADD *``
takes its ID from the clock *during* it. When a millisecond ends in between
(seen here for about 1 ``XADD *`` in 250), the ID's millisecond is below the
line's ``ts_ms`` and a replay that derives the ID from ``ts_ms`` makes a
different one; every later reference to it, the stream's last ID and the PEL
then differ. The capture alone cannot settle it. An effects log of the same
server (its AOF, or a replication stream written as one) holds the ID the
server generated, so the input contract's rule applies (docs/input.md): where the log knows the
generated ID, it goes into ``argv`` instead of ``*``.

How: the capture's rows are replayed through the pure model (so each stream's
last ID is exact at every row). For an ``XADD ... *`` the server's clock read
lies between the previous line's millisecond and this line's (commands run one
at a time, each after the line of the one before was stamped), so its ID is one
of a few candidates: ``m-0`` for a millisecond ``m`` above the stream's last ID,
or the last ID's successor. The smallest candidate the AOF shows for that key
(in that db) is the ID: every candidate is above the stream's last ID, so no
earlier entry can be it, and later entries are greater than the true ID. The
``*`` is replaced by it (also where it equals what ``ts_ms`` gives: the row then
says what the server did). A candidate-free row (the AOF does not cover that
moment, the command failed) keeps its ``*`` and is counted.

The replay starts from the rows before the capture (``start``: the events table
it is appended to, e.g. a snapshot's ``PELENGINE.LOAD`` rows), so streams that
existed before it have their last IDs; a ``NOMKSTREAM`` write or a write in the
same millisecond as the stream's last entry then gets its true candidates.

The AOF's IDs are counted per key name, and each entry the replay adds uses its ID
up: a key deleted and recreated within a millisecond (DEL, UNLINK, FLUSHDB, a
RENAME away) cannot offer its older incarnation's ID to the new one's ``*`` (seen
live: an XADD right after a DEL pinned to the ID of the entry the DEL removed).

The window runs one millisecond past the row's own line (``CLOCK_LEAD_MS``): a server
whose command clock runs ahead of its MONITOR stamps (Valkey 9.1's, by a microsecond or
two: its ``ustime`` extrapolates the last ``gettimeofday`` by the TSC, while MONITOR stamps
each line with ``gettimeofday`` itself) can read the next millisecond for an ``XADD *``
and still stamp its line, right after, in this one (seen live for about 1 ``XADD *`` in
10,000 to 20,000 outside scripts and transactions). The smallest candidate the AOF shows
is still the ID: the one more millisecond only adds candidates above all the others.

Limits: streams that existed before the capture but are not in ``start`` (a
capture of a server whose state was never ingested) pin only rows whose
candidates do not depend on the earlier last ID.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from pelengine.ingest.aof import xadd_id_position
from pelengine.ingest.monitor import UnitWindows
from pelengine.model import Replayer
from pelengine.model.ids import ParseError, StreamID, parse_id
from pelengine.model.state import Stream

MAX_EXAMPLES = 5
#: how far past its own line's millisecond a row's clock read may lie (module docstring)
CLOCK_LEAD_MS = 1


@dataclass
class PinStats:
    """What pinning did to the ``XADD *`` rows of a capture."""

    star_rows: int = 0  # XADD rows with '*' that added an entry in the replay
    pinned: int = 0  # '*' replaced by the AOF's ID
    moved: int = 0  # ... of which the ID differs from the one ts_ms gives
    unpinned: int = 0  # applied '*' rows no AOF ID fits (kept '*')
    aof_ids: int = 0  # XADD IDs the AOF holds
    moved_seqs: list[int] = field(default_factory=list)
    examples: list[str] = field(default_factory=list)  # rows whose ID moved
    unpinned_examples: list[str] = field(default_factory=list)

    def describe(self) -> str:
        return (
            f"{self.pinned} of {self.star_rows} XADD '*' IDs pinned from the AOF "
            f"({self.moved} differ from the ID ts_ms gives), {self.unpinned} not found in it"
        )


def aof_xadd_ids(
    aof_rows: Iterable[dict[str, Any]],
) -> dict[tuple[int, str], Counter[StreamID]]:
    """The IDs every ``XADD`` of an effects log wrote, per (db, key), each with how many
    times it was written (a key recreated can be given the same ID again)."""
    out: dict[tuple[int, str], Counter[StreamID]] = {}
    for row in aof_rows:
        argv = row["argv"]
        if len(argv) < 3 or argv[0].upper() != "XADD":
            continue
        pos = xadd_id_position(argv)
        if pos >= len(argv):
            continue
        try:
            entry_id, _ = parse_id(argv[pos], strict=True)
        except ParseError:
            continue
        out.setdefault((row.get("db") or 0, argv[1]), Counter())[entry_id] += 1
    return out


def _candidates(last: StreamID, lo_ms: int, hi_ms: int) -> list[StreamID]:
    """The IDs ``XADD *`` makes with a clock read in ``[lo_ms, hi_ms]``, ascending."""
    out = []
    if lo_ms <= last.ms:
        out.append(StreamID(last.ms, last.seq + 1))
    for m in range(max(lo_ms, last.ms + 1), hi_ms + 1):
        out.append(StreamID(m, 0))
    return out


def pin_star_ids(
    rows: list[dict[str, Any]],
    aof_rows: Iterable[dict[str, Any]],
    *,
    profile: str = "7.0",
    start: Iterable[dict[str, Any]] = (),
) -> PinStats:
    """Replace the ``*`` of every ``XADD`` row in ``rows`` (a capture, in ``seq`` order)
    by the ID the AOF shows the server generated; rows are changed in place.
    ``start``: the events rows before the capture, in ``seq`` order (the state it
    continues)."""
    ids = aof_xadd_ids(aof_rows)
    stats = PinStats(aof_ids=sum(v.total() for v in ids.values()))
    # only the streams' IDs matter here: closed delivery records are spilled and dropped
    replayer = Replayer(profile, record_changes=False, spill_closed_records=True)

    def last_of(db: int, key: str) -> tuple[Any, StreamID | None]:
        """The value at ``key`` and, for a stream, its last ID (read before a row)."""
        value = replayer.lookup_any(db, key)
        return value, (value.last_id if isinstance(value, Stream) else None)

    def use_up(db: int, key: str, before: tuple[Any, StreamID | None]) -> None:
        """The ID of the entry an XADD row just added is no longer the AOF's to offer."""
        after = replayer.lookup_any(db, key)
        if not isinstance(after, Stream):
            return
        if after is before[0] and after.last_id == before[1]:
            return  # nothing added (an error, a NOMKSTREAM on no stream)
        left = ids.get((db, key))
        if left is not None and left[after.last_id] > 0:
            left[after.last_id] -= 1

    for row in start:
        db = row.get("db") or 0
        argv = row["argv"]
        xadd = len(argv) > 2 and argv[0].upper() == "XADD"
        before = last_of(db, argv[1]) if xadd else (None, None)
        replayer.apply(row["seq"], row["ts_ms"], argv, db, row["client"])
        if xadd:
            use_up(db, argv[1], before)
        replayer.drain_delivery_segments()
        replayer.drain_group_incarnations()
    # the clock read lies in the 7.0 window or the 7.2+ one: looking in both is safe
    # (the smallest AOF ID above the stream's last one is the ID), whatever the server
    per_command, per_unit = UnitWindows(snapshot=False), UnitWindows(snapshot=True)
    snapshot = replayer.profile.unit_time_snapshot
    for row in rows:
        replayer.drain_delivery_segments()
        replayer.drain_group_incarnations()
        argv = row["argv"]
        ts_ms = row["ts_ms"]
        db = row.get("db") or 0
        client = row.get("client")
        command_window = per_command.clock_window(argv, ts_ms, client)
        unit_window = per_unit.clock_window(argv, ts_ms, client)
        lo_ms = min(command_window[0], unit_window[0])
        # the "now" the replay gives the row (7.2+: its unit's)
        now_ms = (unit_window if snapshot else command_window)[1]
        star_at = None
        xadd = len(argv) > 2 and argv[0].upper() == "XADD"
        if xadd:
            pos = xadd_id_position(argv)
            if pos < len(argv) and argv[pos] == "*":
                star_at = pos
        if star_at is None:
            before = last_of(db, argv[1]) if xadd else (None, None)
            replayer.apply(row["seq"], ts_ms, argv, db, row.get("client"))
            if xadd:
                use_up(db, argv[1], before)
            continue
        key = argv[1]
        current = replayer.lookup_any(db, key)
        last = current.last_id if isinstance(current, Stream) else StreamID(0, 0)
        known = ids.get((db, key), Counter())
        window = _candidates(last, lo_ms, ts_ms + CLOCK_LEAD_MS)
        found = next((c for c in window if known[c] > 0), None)
        pinned = argv
        if found is not None:
            pinned = [*argv[:star_at], str(found), *argv[star_at + 1 :]]
        outcome = replayer.apply(row["seq"], ts_ms, pinned, db, row.get("client"))
        if outcome.kind != "applied" and found is not None:
            # the AOF's ID does not fit here (a failed command has no effect): keep '*'
            found = None
            outcome = replayer.apply(row["seq"], ts_ms, argv, db, row.get("client"))
        after = replayer.lookup_any(db, key)
        added = isinstance(after, Stream) and (after is not current or after.last_id != last)
        if added:
            use_up(db, key, (current, last if isinstance(current, Stream) else None))
        if outcome.kind != "applied" or not added:  # an error, or NOMKSTREAM on no stream
            continue
        stats.star_rows += 1
        if found is None:
            stats.unpinned += 1
            if len(stats.unpinned_examples) < MAX_EXAMPLES:
                stats.unpinned_examples.append(f"seq {row['seq']}: {' '.join(argv)}")
            continue
        row["argv"] = pinned
        stats.pinned += 1
        derived = _candidates(last, now_ms, now_ms)[0]  # what the replay makes of '*'

        if found != derived:
            stats.moved += 1
            stats.moved_seqs.append(row["seq"])
            if len(stats.examples) < MAX_EXAMPLES:
                stats.examples.append(
                    f"seq {row['seq']} {key!r}: {found} (ts_ms {ts_ms} gives {derived})"
                )
    return stats
