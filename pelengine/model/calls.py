"""What the replayer, the command handlers and the snapshot share, so that none of them
imports another that imports it back.

* ``Profile``: the behaviour that differs between server versions;
* ``Call``: one command being applied; ``BlockedRead``: a client waiting in
  ``XREADGROUP ... BLOCK``;
* ``Model``: what a command handler (``pelengine.model.commands``) may ask of the
  replayer: the keyspace, the wait queue and the history recorder. The replayer
  (``pelengine.model.replay.Replayer``) is one; the handlers know it only as this;
* ``Columns``: the rows of one output table, kept column by column. The model appends
  every history row to one (no dict per row): a consumer takes the lists as they are
  (the Spark replay makes Arrow arrays of them), or as rows (``Columns.rows``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import KW_ONLY, dataclass
from typing import Any, Protocol

from pelengine.model.ids import StreamID
from pelengine.model.state import Consumer, Group, OtherValue, PendingEntry, Stream

Row = dict[str, Any]


@dataclass(frozen=True)
class Profile:
    """Behaviour that differs between server versions (see docs/redis-semantics.md).

    The switches are keyword-only: a profile names each one it sets."""

    name: str
    _: KW_ONLY
    active_time: bool
    eager_consumers: bool
    xsetid_checks_max_deleted: bool
    unit_time_snapshot: bool
    # the entries_read/lag estimates of Valkey 8.1.1+ (see commands.range_has_tombstones)
    strict_lag: bool = False
    # a script's XREADGROUP may name BLOCK (it never blocks); 7.0 and 7.2 refuse it
    script_block: bool = True


@dataclass
class Call:
    """One command being applied: its arguments and its moment."""

    seq: int
    now: int
    db: int
    client: str | None
    argv: list[str]
    command: str
    result: Any = None
    touched_stream: bool = False
    # the command whose request this is: differs from ``seq`` for a blocked read
    # served during a later command
    request_seq: int | None = None


@dataclass
class BlockedRead:
    """A client waiting in ``XREADGROUP ... BLOCK`` for one of its keys."""

    seq: int
    client: str | None
    db: int
    argv: list[str]
    keys: list[str]
    group: str
    consumer: str
    count: int
    noack: bool
    deadline: int | None  # ms; None for BLOCK 0 (forever)


class Model(Protocol):
    """What a command handler may use of the replayer (see ``Replayer`` for each)."""

    profile: Profile
    node_max_entries: int
    node_max_bytes: int
    record_changes: bool

    def lookup_any(self, db: int, key: str) -> Stream | OtherValue | None: ...

    def lookup_stream(self, db: int, key: str) -> Stream | None: ...

    def create_stream(self, db: int, key: str) -> Stream: ...

    def set_other(self, db: int, key: str, type_name: str) -> None: ...

    def delete_key(self, call: Call, db: int, key: str) -> None: ...

    def move_key(self, call: Call, db: int, src: str, dst: str) -> None: ...

    def flush(self, call: Call, db: int | None) -> None: ...

    def in_transaction(self, client: str | None) -> bool: ...

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
    ) -> None: ...

    def signal(self, db: int, key: str) -> None: ...

    def close_group(self, call: Call, db: int, key: str, group: Group, status: str) -> None: ...

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
    ) -> None: ...

    def loaded(
        self, call: Call, key: str, group: Group, entry_id: StreamID, nack: PendingEntry
    ) -> None: ...

    def entries_changed(
        self, call: Call, key: str, stream: Stream, ids: list[StreamID]
    ) -> None: ...


class Columns:
    """Rows of one output table, column by column: ``names`` and one list per name.

    ``append`` takes one row's values in the order of ``names``. A replay that hands
    its rows on takes the lists (``take``) and starts afresh.
    """

    __slots__ = ("names", "lists")

    def __init__(self, names: Sequence[str]) -> None:
        self.names: tuple[str, ...] = tuple(names)
        self.lists: list[list[Any]] = [[] for _ in self.names]

    def append(self, *values: Any) -> None:
        """One row: its values in the order of ``names`` (one per name: ``take`` checks)."""
        for column, value in zip(self.lists, values):  # noqa: B905 - the hot path
            column.append(value)

    def __len__(self) -> int:
        return len(self.lists[0]) if self.lists else 0

    def take(self) -> Columns:
        """What was appended so far (this sink starts empty again)."""
        lengths = {len(column) for column in self.lists}
        if len(lengths) > 1:
            raise ValueError(f"rows of columns {self.names} were appended with missing values")
        taken = Columns(())
        taken.names, taken.lists = self.names, self.lists
        self.lists = [[] for _ in self.names]
        return taken

    def extend(self, other: Columns) -> None:
        """Append every row of ``other`` (which has the same names)."""
        if other.names != self.names:
            raise ValueError(f"columns {other.names} appended to columns {self.names}")
        for column, more in zip(self.lists, other.lists, strict=True):
            column.extend(more)

    def column(self, name: str) -> list[Any]:
        return self.lists[self.names.index(name)]

    def subset(self, positions: Sequence[int]) -> Columns:
        """The rows at ``positions`` (in that order), as new columns."""
        chosen = Columns(())
        chosen.names = self.names
        chosen.lists = [[column[i] for i in positions] for column in self.lists]
        return chosen

    def rows(self) -> list[Row]:
        """The rows as dicts (name -> value, in the order of ``names``)."""
        names = self.names
        return [dict(zip(names, values, strict=True)) for values in zip(*self.lists, strict=True)]

    @classmethod
    def from_rows(cls, names: Sequence[str], rows: Iterable[Row]) -> Columns:
        """Rows given as dicts (a name a row lacks: None)."""
        sink = cls(names)
        for row in rows:
            sink.append(*(row.get(name) for name in sink.names))
        return sink
