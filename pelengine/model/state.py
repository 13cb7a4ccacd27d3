"""The state Redis keeps per stream key, as plain classes.

A stream holds its live entry IDs (values are irrelevant to consumer groups),
its counters, and its consumer groups. A group holds its last delivered ID, its
``entries_read`` counter (-1 when Redis considers it invalid), the group PEL and
its consumers; each consumer indexes the same pending entries by owner.

Beyond what Redis keeps, a group also keeps one ``DeliveryRecord`` per entry ID
it ever delivered: the history behind the ``delivery_counts`` table (a replayer
that spills closed records keeps only those of pending entries, see
``Replayer``); and each pending entry its open ``PelVersion``: the current row of
``pel_history``. A group knows the ``seq`` of the command that created it: what
tells one incarnation of a group name from the next after a destroy or a delete.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from sortedcontainers import SortedDict, SortedList

from pelengine.model.ids import ZERO_ID, StreamID

INVALID_ENTRIES_READ = -1


class PelVersion(NamedTuple):
    """What a pending entry showed from one moment on: the open row of ``pel_history``.

    ``consumer``, ``delivery_time``, ``delivery_count`` and ``entry_exists`` are
    the entry's PEL-visible fields; ``from_seq``/``from_ms`` the command that set them.
    """

    consumer: str | None
    delivery_time: int
    delivery_count: int
    entry_exists: bool
    from_seq: int
    from_ms: int


class PendingEntry:
    """One entry of a group PEL: who holds it, since when, how often delivered.

    ``version`` is the entry's current ``pel_history`` version (None when the
    replay does not record history).
    """

    __slots__ = ("consumer", "delivery_time", "delivery_count", "version")

    def __init__(self, consumer: Consumer | None, delivery_time: int, delivery_count: int) -> None:
        self.consumer = consumer
        self.delivery_time = delivery_time
        self.delivery_count = delivery_count
        self.version: PelVersion | None = None


class Consumer:
    """A consumer of a group, with its own view of the pending entries it holds."""

    __slots__ = ("name", "seen_time", "active_time", "pel")

    def __init__(self, name: str, now: int) -> None:
        self.name = name
        self.seen_time = now
        self.active_time = -1
        self.pel: SortedDict = SortedDict()


@dataclass
class DeliveryRecord:
    """The life of one entry ID in one group: the row of ``delivery_counts``.

    With spilling (see ``Replayer``) it is one segment of that life: from a delivery
    of the entry while it was not pending (or from the start of a run, for an entry
    already pending: then without deliveries so far, ``first``/``last_delivery_ms``
    None) to the moment it left the PEL.

    ``changed_seq``/``changed_ms``: the seq and model time of the last command that
    changed the row (a delivery or claim, its leaving the PEL, a ``PELENGINE.LOAD``
    creating it, a ``RENAME`` moving its group); None when nothing changed it in this
    segment (an open record restarted between runs, untouched since).
    """

    delivery_count: int
    deliveries: int
    owners: set[str]
    first_delivery_ms: int | None
    last_delivery_ms: int | None
    status: str = "pending"
    closed_ms: int | None = None
    changed_seq: int | None = None
    changed_ms: int | None = None

    def changed(self, seq: int, now: int) -> None:
        """The command ``seq`` (at model time ``now``) changed this row."""
        self.changed_seq = seq
        self.changed_ms = now


class Group:
    """A consumer group: last delivered ID, read counter, PEL and consumers.

    ``moved_seq``/``moved_ms``: the seq and model time of the last ``RENAME`` that moved
    the group's key (None if none did): with spilling, the records that already left
    the model as segments changed their key then too.
    """

    __slots__ = (
        "name",
        "last_id",
        "entries_read",
        "pel",
        "consumers",
        "records",
        "created_seq",
        "moved_seq",
        "moved_ms",
    )

    def __init__(
        self, name: str, last_id: StreamID, entries_read: int, created_seq: int = 0
    ) -> None:
        self.name = name
        self.last_id = last_id
        self.entries_read = entries_read
        # the seq of the XGROUP CREATE that made this group (its incarnation)
        self.created_seq = created_seq
        self.pel: SortedDict = SortedDict()
        self.consumers: dict[str, Consumer] = {}
        self.records: dict[StreamID, DeliveryRecord] = {}
        # the last RENAME that moved this group's key (its seq and model time)
        self.moved_seq: int | None = None
        self.moved_ms: int | None = None


class Node:
    """One internal node (listpack) of a stream: Redis trims ``~`` only whole nodes.

    ``total`` counts live and deleted entries (with ``nbytes``, the listpack's
    size, it decides when the next entry opens a new node), ``live`` the
    entries still in the stream, ``last_id`` the last entry appended to it
    (deleted or not), ``fields`` the master entry's field names.

    ``runs``: empty while every entry appended to the node had a larger ID than the one
    before it (listpack order is ID order); once one had a smaller ID (``XSETID`` went
    below a deleted entry), the (first, last) ID of each ascending run of appended
    entries, deleted ones included, in listpack order. An exact ``MINID`` trim stops at
    the first entry at or above the threshold in listpack order, deleted or not
    (``commands._minid_cut``).
    """

    __slots__ = ("master_id", "total", "live", "last_id", "fields", "nbytes", "runs")

    def __init__(self, master_id: StreamID, fields: tuple[str, ...], nbytes: int) -> None:
        self.master_id = master_id
        self.total = 1
        self.live = 1
        self.last_id = master_id
        self.fields = fields
        self.nbytes = nbytes
        self.runs: list[tuple[StreamID, StreamID]] = []

    def appended(self, entry_id: StreamID) -> None:
        """``entry_id`` was appended after ``last_id``: the runs follow it."""
        if entry_id < self.last_id:
            if not self.runs:
                self.runs.append((self.master_id, self.last_id))
            self.runs.append((entry_id, entry_id))
        elif self.runs:
            self.runs[-1] = (self.runs[-1][0], entry_id)
        self.last_id = entry_id


class Stream:
    """A stream key: live entry IDs, generation counters, internal nodes and groups."""

    __slots__ = (
        "entries",
        "last_id",
        "entries_added",
        "max_deleted_entry_id",
        "first_id",
        "groups",
        "nodes",
    )

    def __init__(self) -> None:
        self.entries: SortedList = SortedList()
        self.last_id: StreamID = ZERO_ID
        self.entries_added = 0
        self.max_deleted_entry_id: StreamID = ZERO_ID
        # Redis' "recorded first entry id": updated on add/trim/XDEL, 0-0 when empty.
        self.first_id: StreamID = ZERO_ID
        self.groups: dict[str, Group] = {}
        self.nodes: list[Node] = []

    @property
    def length(self) -> int:
        return len(self.entries)


@dataclass
class OtherValue:
    """A key holding another data type; tracked only to answer WRONGTYPE and overwrites."""

    type_name: str


@dataclass
class Counters:
    """What the replay did, per outcome and per Redis error kind."""

    applied: int = 0
    ignored: int = 0
    failed: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    commands: dict[str, int] = field(default_factory=dict)
