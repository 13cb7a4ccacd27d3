"""What the reader gives: the file, its keys, its streams with their nodes, entries,
groups, consumers and pending entries; the errors it raises."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from pelengine.model.ids import StreamID


class RdbFormatError(ValueError):
    """The file is not a readable RDB snapshot (the message names the file and offset)."""


class RdbChecksumError(RdbFormatError):
    """The CRC-64 stored after EOF does not match the file's bytes."""


class RdbEntry(NamedTuple):
    """One entry of a stream's listpacks (a deleted one too: XDEL only flags it).

    (A named tuple, as :class:`RdbPendingEntry`: a stream can hold millions.)
    """

    id: StreamID
    deleted: bool
    fields: tuple[tuple[bytes, bytes], ...] = ()  # (field, value); () if values not kept


@dataclass
class RdbNode:
    """One listpack of a stream (a node of its radix tree)."""

    master_id: StreamID
    master_fields: tuple[bytes, ...]
    live: int  # the master entry's counts
    deleted: int
    lp_bytes: int  # the listpack's size (stream-node-max-bytes applies to it)
    entries: list[RdbEntry]


class RdbPendingEntry(NamedTuple):
    """One entry of a group's PEL, with the consumer whose PEL holds it."""

    id: StreamID
    consumer: str
    delivery_time_ms: int
    delivery_count: int


@dataclass
class RdbConsumer:
    name: str
    seen_time_ms: int
    # None where the format has no active time (types 15 and 19) or the server
    # stored -1 (never active)
    active_time_ms: int | None
    pending: list[StreamID]  # in ID order


@dataclass
class RdbGroup:
    name: str
    last_delivered_id: StreamID
    entries_read: int | None  # None: not in the format (type 15), or unknown (-1)
    pel: list[RdbPendingEntry]  # in ID order
    consumers: list[RdbConsumer]  # in name order (the server's)


@dataclass
class RdbStream:
    db: int
    key: str
    rdb_type: int
    length: int
    last_id: StreamID
    first_id: StreamID | None  # None: not in the format (type 15)
    max_deleted_entry_id: StreamID | None  # likewise
    entries_added: int | None  # likewise
    nodes: list[RdbNode]
    groups: list[RdbGroup]
    expire_ms: int | None = None

    @property
    def entries(self) -> list[RdbEntry]:
        """Every entry of every node, deleted ones included, in ID order."""
        return [e for node in self.nodes for e in node.entries]

    @property
    def live_ids(self) -> list[StreamID]:
        return [e.id for node in self.nodes for e in node.entries if not e.deleted]


@dataclass(slots=True)
class RdbKey:
    """A key of any type: what a command on it would meet (WRONGTYPE, expiry)."""

    db: int
    key: str
    type: str  # the TYPE reply: string, list, set, zset, hash, stream
    rdb_type: int
    encoding: str  # the RDB type's name, e.g. "HASH_LISTPACK"
    expire_ms: int | None
    offset: int  # where its type byte is
    lru_idle: int | None = None
    lfu_freq: int | None = None


@dataclass
class RdbFile:
    path: str
    magic: str  # "REDIS" or "VALKEY"
    version: int
    size: int
    aux: dict[str, bytes] = field(default_factory=dict)
    keys: dict[tuple[int, str], RdbKey] = field(default_factory=dict)
    streams: dict[tuple[int, str], RdbStream] = field(default_factory=dict)
    resize_hints: dict[int, tuple[int, int]] = field(default_factory=dict)
    functions: list[bytes] = field(default_factory=list)  # FUNCTION2 library sources
    module_aux: list[str] = field(default_factory=list)  # module names with AUX data
    empty_keys: list[tuple[int, str]] = field(default_factory=list)  # dropped, as on load
    lzf_strings: int = 0  # LZF-compressed strings met (read or stepped over)
    checksum: int | None = None  # as stored; 0: saved without one; None: version < 5
    checksum_verified: bool = False
    end_offset: int = 0  # after the checksum (an AOF tail may follow in a legacy AOF)

    def aux_text(self, name: str) -> str | None:
        value = self.aux.get(name)
        return None if value is None else decode_name(value)

    @property
    def dbs(self) -> list[int]:
        return sorted({db for db, _ in self.keys})


def decode_name(raw: bytes) -> str:
    """Lossless text of a name: UTF-8, invalid bytes as lone surrogates (package docstring)."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("utf-8", "surrogateescape")
