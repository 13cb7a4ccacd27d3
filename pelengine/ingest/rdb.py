"""Read a Redis or Valkey RDB snapshot: every stream with its consumer groups in full,
and the name, type and expiry of every other key.

Pure Python, no pyspark (numpy only to checksum large files faster). The files
read are a ``dump.rdb`` (``SAVE``/``BGSAVE``) and the RDB base file of an AOF
directory (``appendonly.aof.N.base.rdb``, written when ``aof-use-rdb-preamble
yes``, the default). What the servers of this project write:

============  ==========  =============================  ======================
server        header      stream type                    consumers' times
============  ==========  =============================  ======================
Redis 7.0     REDIS0010   19 (STREAM_LISTPACKS_2)        seen time only
Valkey 8.1    REDIS0011   21 (STREAM_LISTPACKS_3)        seen and active time
Valkey 9.1    VALKEY080   21 (STREAM_LISTPACKS_3)        seen and active time
============  ==========  =============================  ======================

(Redis 7.2 writes ``REDIS0011`` and Redis 7.4 ``REDIS0012``, both with type 21;
type 15, the stream of Redis 5 and 6, is read too.)

The format, as this module reads it
-----------------------------------

*Header*: 9 ASCII bytes, ``REDIS`` and a 4-digit version, or (Valkey 9 and later)
``VALKEY`` and a 3-digit version (80 for Valkey 9.0/9.1). Type codes 22 and up mean
different things after the two magics: after ``REDIS`` they are Redis 7.4's hashes
with field expiry (22 to 25), after ``VALKEY`` 22 is Valkey 9's hash with field
expiry. Everything else is shared.

*Body*: a sequence of one-byte opcodes, each followed by its operands, until the
``EOF`` opcode (255):

* ``AUX`` (250): two strings, a name and a value (``redis-ver``, ``ctime``, ...);
* ``SELECTDB`` (254): a length, the db of the keys that follow;
* ``RESIZEDB`` (251): two lengths, size hints of the db's keys and expires;
* ``SLOT_INFO`` (244, cluster mode): three lengths (slot, keys, expires);
* ``EXPIRETIME_MS`` (252): 8 bytes, little-endian signed ms, for the next key;
  ``EXPIRETIME`` (253): the same in 4-byte seconds (very old files);
* ``IDLE`` (248): a length, the next key's LRU idle seconds; ``FREQ`` (249): one
  byte, its LFU counter;
* ``FUNCTION2`` (245): one string, the source of a function library;
* ``MODULE_AUX`` (247): a module's data outside the keyspace: module id, a "when"
  given as opcode 2 and a length, then self-describing items (opcode 1/2: a
  length, 3: a 4-byte float, 4: an 8-byte double, 5: a string) until opcode 0;
* a *value type* (0 to 25, below): a key (a string) and its value.

Not read (an error naming them): 246, the function format of Redis 7.0's release
candidates; Valkey's 243 (a cluster node's slot imports in progress) and 242
(replication only); type codes past these (Redis 8's, Valkey 9.2's 23).

After ``EOF`` (from version 5 on) come 8 bytes: the CRC-64 (Jones polynomial,
reflected, initial value 0) of every byte before them, little-endian; zero when
the server was configured with ``rdbchecksum no``. Nothing after them is read
(``RdbFile.end_offset`` says where they end).

*Lengths*: the top two bits of the first byte choose the form: ``00`` the other 6
bits; ``01`` 14 bits (those 6 bits, then the next byte); ``10`` with the rest of the
byte 0 or 1: a 32-bit or 64-bit big-endian number follows; ``11``: not a length,
the rest of the byte says how the *string* that this byte starts is encoded.

*Strings*: a length then that many bytes; or (``11`` form) an integer stored in 1, 2
or 4 little-endian signed bytes (the string is its decimal text); or LZF: the
compressed length, the uncompressed length, then the compressed bytes. (LZF: a
control byte below 32 copies the next control+1 bytes; otherwise its top 3 bits
(7 meaning "add the next byte") plus 2 are a length to copy from earlier output,
at a distance given by its low 5 bits, the next byte, plus 1.)

*Values* (the kinds each type code holds; every one is walked by its encoding):

* 0 string: one string;
* lists: 1 (strings), 10 (one ziplist), 14 (quicklist: ziplists), 18 (quicklist 2:
  per node a container length, 1 plain element or 2 a listpack, and a string);
* sets: 2 (strings), 11 (intset), 20 (listpack);
* sorted sets: 3 (member, score as text with a one-byte length; 253/254/255 are
  nan/+inf/-inf), 5 (member, 8-byte binary double), 12 (ziplist), 17 (listpack);
* hashes: 4 (field, value pairs), 9 (zipmap), 13 (ziplist), 16 (listpack); Redis
  7.4: 24 (8-byte minimum expiry, then per field a TTL length relative to it, field,
  value), 22 (no minimum, absolute TTLs: the release-candidate form), 25 (8-byte
  minimum expiry and a listpack of field, value, TTL), 23 (that listpack alone);
  Valkey 9: 22 (per field: field, value, 8-byte expiry ms, -1 for none);
* 6 and 7, module values: refused (:class:`RdbFormatError` naming the module).

These values are walked, not decoded: each string is stepped over (an LZF one by
its compressed length, unexpanded), the header and end byte of an uncompressed
ziplist, listpack or intset are checked and its element count read (an empty
container is dropped, as the server drops it when it loads), and the checksum
vouches for the rest.

*Streams* (15, 19, 21): the number of nodes; per node its master ID (a 16-byte
string: ms and seq, big-endian) and a listpack; then the length (live entries),
the last ID (two lengths); 19 and 21 add the first ID, the max deleted entry ID
and entries-added (five lengths); then the groups: per group its name, last
delivered ID (two lengths), 19 and 21 add entries-read (a length, 2^64-1 meaning
unknown); the group PEL: a count, per entry a raw 16-byte ID, the delivery time
(8 bytes, little-endian ms) and the delivery count (a length); the consumers: a
count, per consumer its name, seen time (8 bytes), 21 adds the active time (8
bytes, -1 if never active), and its PEL: a count and raw 16-byte IDs, each of
which must be in the group PEL.

*Listpacks*: 4 bytes total size, 2 bytes element count (65535: unknown), the
elements, and a 0xFF terminator. An element is an encoding byte (``0xxxxxxx`` a
7-bit unsigned integer; ``10xxxxxx`` a string of up to 63 bytes; ``110xxxxx`` and
one byte a 13-bit signed integer; ``1110xxxx`` and one byte a string of up to 4095
bytes; 0xF0 and a 4-byte length a longer string; 0xF1/F2/F3/F4 a 16/24/32/64-bit
little-endian signed integer), its data, then its own size (encoding and data) in
1 to 5 bytes of 7 bits, read from the right, for walking backwards.

*A stream node's listpack*: the master entry (live count, deleted count, the
number of master fields, those field names, a 0), then per entry (deleted ones
included): flags (1 deleted, 2 same fields as the master entry), the ID's ms and
seq as differences from the master ID, then either the values of the master
fields, or a field count and field/value pairs; and last the number of elements
the entry used (for walking backwards), checked here.

Names and values
----------------

Keys, group names and consumer names are ``str``: UTF-8 decoded with
``errors="surrogateescape"``. A valid UTF-8 name reads as itself; each byte of an
invalid sequence becomes a lone surrogate (U+DC80 to U+DCFF), so
``name.encode("utf-8", "surrogateescape")`` gives back the exact bytes (the
convention of :mod:`pelengine.model.listpack`). Stream field names and values,
aux values and function sources stay ``bytes`` (an integer-encoded element is its
decimal text, as the server replies it).

Errors: a truncated file, a corrupt byte, an opcode or type this reader does not
know (or a module value, which cannot be read without its module) raise
:class:`RdbFormatError` naming the file and the byte offset; a checksum that does
not match raises :class:`RdbChecksumError`. Nothing is guessed.
"""

from __future__ import annotations

import mmap
import os
import struct
from dataclasses import dataclass, field
from typing import Any, NamedTuple, cast

from pelengine.model.ids import StreamID

U64 = (1 << 64) - 1
INVALID_ENTRIES_READ = U64  # a group's entries-read the server does not know (-1)

# opcodes
OP_SLOT_IMPORT = 243  # Valkey 9 cluster: slot import state (not read)
OP_SLOT_INFO = 244
OP_FUNCTION2 = 245
OP_FUNCTION_PRE_GA = 246
OP_MODULE_AUX = 247
OP_IDLE = 248
OP_FREQ = 249
OP_AUX = 250
OP_RESIZEDB = 251
OP_EXPIRETIME_MS = 252
OP_EXPIRETIME = 253
OP_SELECTDB = 254
OP_EOF = 255

OPCODE_NAMES = {
    242: "UPDATE (Valkey forkless save)",
    OP_SLOT_IMPORT: "SLOT_IMPORT (Valkey cluster slot migration)",
    OP_FUNCTION_PRE_GA: "FUNCTION (Redis 7.0 release candidates)",
}

# value types shared by every server: code -> (TYPE reply, RDB type name)
COMMON_TYPES: dict[int, tuple[str, str]] = {
    0: ("string", "STRING"),
    1: ("list", "LIST"),
    2: ("set", "SET"),
    3: ("zset", "ZSET"),
    4: ("hash", "HASH"),
    5: ("zset", "ZSET_2"),
    6: ("module", "MODULE_PRE_GA"),
    7: ("module", "MODULE_2"),
    9: ("hash", "HASH_ZIPMAP"),
    10: ("list", "LIST_ZIPLIST"),
    11: ("set", "SET_INTSET"),
    12: ("zset", "ZSET_ZIPLIST"),
    13: ("hash", "HASH_ZIPLIST"),
    14: ("list", "LIST_QUICKLIST"),
    15: ("stream", "STREAM_LISTPACKS"),
    16: ("hash", "HASH_LISTPACK"),
    17: ("zset", "ZSET_LISTPACK"),
    18: ("list", "LIST_QUICKLIST_2"),
    19: ("stream", "STREAM_LISTPACKS_2"),
    20: ("set", "SET_LISTPACK"),
    21: ("stream", "STREAM_LISTPACKS_3"),
}
# after the REDIS magic (Redis 7.4, RDB 12): hashes with field expiry
REDIS_TYPES: dict[int, tuple[str, str]] = {
    **COMMON_TYPES,
    22: ("hash", "HASH_METADATA_PRE_GA"),
    23: ("hash", "HASH_LISTPACK_EX_PRE_GA"),
    24: ("hash", "HASH_METADATA"),
    25: ("hash", "HASH_LISTPACK_EX"),
}
# after the VALKEY magic (Valkey 9, RDB 80)
VALKEY_TYPES: dict[int, tuple[str, str]] = {**COMMON_TYPES, 22: ("hash", "HASH_2")}

STREAM_FLAG_DELETED = 1
STREAM_FLAG_SAMEFIELDS = 2
MODULE_NAME_CHARSET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"

_I64 = struct.Struct("<q")
_I32 = struct.Struct("<i")
_U32 = struct.Struct("<I")
_BE_ID = struct.Struct(">QQ")


class RdbFormatError(ValueError):
    """The file is not a readable RDB snapshot (the message names the file and offset)."""


class RdbChecksumError(RdbFormatError):
    """The CRC-64 stored after EOF does not match the file's bytes."""


# --------------------------------------------------------------------------- results


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


# --------------------------------------------------------------------------- helpers


def decode_name(raw: bytes) -> str:
    """Lossless text of a name: UTF-8, invalid bytes as lone surrogates (module docstring)."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("utf-8", "surrogateescape")


def module_name(module_id: int) -> str:
    """The 9-character name a module type id carries (its top 54 bits, 6 bits a letter)."""
    value = module_id >> 10
    chars = []
    for _ in range(9):
        chars.append(MODULE_NAME_CHARSET[value & 63])
        value >>= 6
    return "".join(reversed(chars))


def _as_bytes(element: int | bytes) -> bytes:
    """A listpack element as the server replies it: an integer as its decimal text."""
    return element if type(element) is bytes else str(element).encode()


def _is_count(element: int | bytes) -> bool:
    return type(element) is int and element >= 0


class _LzfError(Exception):
    pass


def lzf_decompress(src: bytes, out_len: int) -> bytes:
    """Decompress LZF data that must expand to exactly ``out_len`` bytes."""
    out = bytearray()
    i = 0
    n = len(src)
    while i < n:
        ctrl = src[i]
        i += 1
        if ctrl < 32:  # a literal run
            run = ctrl + 1
            if i + run > n:
                raise _LzfError(f"literal run of {run} bytes passes the end of the input")
            out += src[i : i + run]
            i += run
        else:  # a copy from earlier output
            length = ctrl >> 5
            if i >= n:
                raise _LzfError("back reference cut short")
            if length == 7:
                length += src[i]
                i += 1
                if i >= n:
                    raise _LzfError("back reference cut short")
            distance = ((ctrl & 0x1F) << 8) + src[i] + 1
            i += 1
            start = len(out) - distance
            if start < 0:
                raise _LzfError(f"back reference {distance} bytes before the start of the output")
            length += 2
            if distance >= length:
                out += out[start : start + length]
            else:  # overlapping: the last `distance` bytes repeat
                pattern = out[start:]
                reps, rest = divmod(length, distance)
                out += pattern * reps + pattern[:rest]
        if len(out) > out_len:
            raise _LzfError(f"expands past the declared {out_len} bytes")
    if len(out) != out_len:
        raise _LzfError(f"expands to {len(out)} bytes, not the declared {out_len}")
    return bytes(out)


# --------------------------------------------------------------------------- CRC-64

_CRC_POLY = 0x95AC9329AC4BC9B5  # Jones' polynomial 0xad93d23594c935a9, bit-reversed


def _crc_table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ _CRC_POLY if crc & 1 else crc >> 1
        table.append(crc)
    return table


_CRC_TABLE = _crc_table()
_CRC_LANES = 4096  # bytes checksummed side by side by numpy
_CRC_LANE_BYTES = 2048  # per lane per block: 8 MiB blocks
_CRC_NUMPY_MIN = 1 << 18


def _crc_bytes(crc: int, data: Any) -> int:
    table = _CRC_TABLE
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc


def _apply(cols: list[int], value: int) -> int:
    out = 0
    i = 0
    while value:
        if value & 1:
            out ^= cols[i]
        value >>= 1
        i += 1
    return out


def _shift_tables(nbytes: int) -> list[list[int]]:
    """Byte-wise tables of the linear map "run the CRC over ``nbytes`` zero bytes".

    With an initial value of 0 and no final xor the CRC is linear over GF(2):
    ``crc(a + b) == shift(crc(a), len(b)) ^ crc(b)``, which lets blocks be
    checksummed separately and combined.
    """
    result = [1 << i for i in range(64)]
    base = [_CRC_TABLE[(1 << i) & 0xFF] ^ ((1 << i) >> 8) for i in range(64)]
    while nbytes:
        if nbytes & 1:
            result = [_apply(base, c) for c in result]
        base = [_apply(base, c) for c in base]
        nbytes >>= 1
    return [[_apply(result, b << (8 * k)) for b in range(256)] for k in range(8)]


def _shift(tables: list[list[int]], crc: int) -> int:
    return (
        tables[0][crc & 0xFF]
        ^ tables[1][(crc >> 8) & 0xFF]
        ^ tables[2][(crc >> 16) & 0xFF]
        ^ tables[3][(crc >> 24) & 0xFF]
        ^ tables[4][(crc >> 32) & 0xFF]
        ^ tables[5][(crc >> 40) & 0xFF]
        ^ tables[6][(crc >> 48) & 0xFF]
        ^ tables[7][crc >> 56]
    )


_SHIFT_CACHE: dict[int, list[list[int]]] = {}


def _shift_cached(nbytes: int) -> list[list[int]]:
    tables = _SHIFT_CACHE.get(nbytes)
    if tables is None:
        tables = _SHIFT_CACHE[nbytes] = _shift_tables(nbytes)
    return tables


def crc64(data: Any, crc: int = 0, end: int | None = None) -> int:
    """Redis' CRC-64 of ``data[:end]`` (bytes, bytearray, memoryview or mmap), continuing
    ``crc``.

    Large inputs are checksummed in 8 MiB blocks of 4096 lanes run side by side with
    numpy, then combined (see :func:`_shift_tables`); the result is the same.
    """
    n = len(data) if end is None else end
    if n < _CRC_NUMPY_MIN:
        return _crc_bytes(crc, data[:n])
    import numpy as np

    table = np.array(_CRC_TABLE, dtype=np.uint64)
    lane_tables = _shift_cached(_CRC_LANE_BYTES)
    block = _CRC_LANES * _CRC_LANE_BYTES
    block_tables = _shift_cached(block)
    eight = np.uint64(8)
    low = np.uint64(0xFF)
    pos = 0
    while n - pos >= block:
        # a copy of the block, lane-major (bytes[pos:...] copies; no buffer stays exported)
        raw = np.frombuffer(bytes(data[pos : pos + block]), dtype=np.uint8)
        rows = np.ascontiguousarray(raw.reshape(_CRC_LANES, _CRC_LANE_BYTES).T)
        state = np.zeros(_CRC_LANES, dtype=np.uint64)
        for row in rows:
            state = table[(state ^ row) & low] ^ (state >> eight)
        combined = 0
        for lane in state.tolist():
            combined = _shift(lane_tables, combined) ^ lane
        crc = _shift(block_tables, crc) ^ combined
        pos += block
    return _crc_bytes(crc, data[pos:n])


# --------------------------------------------------------------------------- listpacks


def decode_listpack(blob: bytes, where: str = "listpack") -> list[int | bytes]:
    """Every element of a listpack: ``int`` for integer encodings, ``bytes`` for strings.

    Raises ``ValueError`` (with the byte within the listpack) if it is malformed.
    """
    size = len(blob)
    if size < 7:
        raise ValueError(f"{where}: {size} bytes, shorter than a listpack header and end")
    total = _U32.unpack_from(blob, 0)[0]
    if total != size:
        raise ValueError(f"{where}: header says {total} bytes, the string holds {size}")
    if blob[-1] != 0xFF:
        raise ValueError(f"{where}: byte {size - 1}: no 0xFF terminator")
    count = blob[4] | (blob[5] << 8)
    out: list[int | bytes] = []
    append = out.append
    p = 6
    end = size - 1
    from_bytes = int.from_bytes
    while p < end:
        b = blob[p]
        if b < 0x80:
            append(b)
            n = 1
        elif b < 0xC0:
            n = 1 + (b & 0x3F)
            append(blob[p + 1 : p + n])
        elif b < 0xE0:
            v = ((b & 0x1F) << 8) | blob[p + 1]
            append(v - 8192 if v >= 4096 else v)
            n = 2
        elif b < 0xF0:
            n = 2 + (((b & 0x0F) << 8) | blob[p + 1])
            append(blob[p + 2 : p + n])
        elif b == 0xF0:
            if p + 5 > end:
                raise ValueError(f"{where}: byte {p}: string length cut short")
            n = 5 + _U32.unpack_from(blob, p + 1)[0]
            append(blob[p + 5 : p + n])
        elif 0xF1 <= b <= 0xF4:
            width = (2, 3, 4, 8)[b - 0xF1]
            n = 1 + width
            append(from_bytes(blob[p + 1 : p + n], "little", signed=True))
        else:
            what = "an early terminator" if b == 0xFF else f"unknown encoding byte 0x{b:02x}"
            raise ValueError(f"{where}: byte {p}: {what}")
        back = (
            1 if n <= 127 else 2 if n < 16383 else 3 if n < 2097151 else 4 if n < 268435455 else 5
        )
        if p + n + back > end:
            raise ValueError(f"{where}: byte {p}: element of {n} bytes passes the end")
        # the back-length: the element's size, 7 bits a byte, the first byte highest
        if back == 1:
            if blob[p + n] != n:
                raise ValueError(f"{where}: byte {p + n}: back-length does not match the element")
            p += n + 1
            continue
        stored = 0
        for k in range(back):
            byte = blob[p + n + k]
            if (byte & 0x80) != (0 if k == 0 else 0x80):
                stored = -1
                break
            stored = (stored << 7) | (byte & 0x7F)
        if stored != n:
            raise ValueError(f"{where}: byte {p + n}: back-length does not match the element")
        p += n + back
    if count != 65535 and count != len(out):
        raise ValueError(f"{where}: header counts {count} elements, found {len(out)}")
    return out


# --------------------------------------------------------------------------- reader


class _Reader:
    def __init__(self, data: Any, name: str, keep_values: bool) -> None:
        self.data = data
        self.size = len(data)
        self.name = name
        self.pos = 0
        self.keep_values = keep_values
        self.types = COMMON_TYPES
        self.lzf = 0

    # ----------------------------------------------------------- primitives

    def error(self, message: str, offset: int | None = None) -> RdbFormatError:
        at = self.pos if offset is None else offset
        return RdbFormatError(f"{self.name}: offset {at}: {message}")

    def need(self, n: int, what: str) -> int:
        start = self.pos
        if start + n > self.size:
            raise self.error(
                f"file ends inside {what} (needs {n} bytes, {self.size - start} left; truncated?)"
            )
        self.pos = start + n
        return start

    def u8(self, what: str) -> int:
        return int(self.data[self.need(1, what)])

    def take(self, n: int, what: str) -> bytes:
        start = self.need(n, what)
        return bytes(self.data[start : start + n])

    def millis(self, what: str) -> int:
        return int(_I64.unpack_from(self.data, self.need(8, what))[0])

    def length_or_encoding(self, what: str) -> tuple[int, bool]:
        """``(value, is_encoding)``: a length, or (``11`` form) a string encoding."""
        at = self.pos
        if at < self.size:  # the one-byte forms, first
            first = self.data[at]
            if first < 0x40:
                self.pos = at + 1
                return first, False
            if first >= 0xC0:
                self.pos = at + 1
                return first & 0x3F, True
        first = self.u8(what)
        kind = first >> 6
        if kind == 0:
            return first & 0x3F, False
        if kind == 1:
            return ((first & 0x3F) << 8) | self.u8(what), False
        if kind == 3:
            return first & 0x3F, True
        if first == 0x80:
            return int.from_bytes(self.take(4, what), "big"), False
        if first == 0x81:
            return int.from_bytes(self.take(8, what), "big"), False
        raise self.error(f"bad length byte 0x{first:02x} in {what}", at)

    def length(self, what: str) -> int:
        at = self.pos
        value, encoded = self.length_or_encoding(what)
        if encoded:
            raise self.error(f"expected a length for {what}, found a string encoding", at)
        return value

    def string(self, what: str) -> bytes:
        at = self.pos
        value, encoded = self.length_or_encoding(what)
        if not encoded:
            return self.take(value, what)
        if value in (0, 1, 2):  # an integer in 1, 2 or 4 bytes
            raw = self.take((1, 2, 4)[value], what)
            return str(int.from_bytes(raw, "little", signed=True)).encode()
        if value == 3:
            self.lzf += 1
            clen = self.length(f"{what} (compressed length)")
            ulen = self.length(f"{what} (uncompressed length)")
            start = self.need(clen, f"{what} (LZF data)")
            try:
                return lzf_decompress(bytes(self.data[start : start + clen]), ulen)
            except _LzfError as exc:
                raise self.error(f"corrupt LZF string in {what}: {exc}", at) from None
        raise self.error(f"unknown string encoding {value} in {what}", at)

    def skip_string(self, what: str) -> tuple[int, int] | None:
        """Move past a string; ``(start, length)`` of a plain one (None otherwise)."""
        at = self.pos
        value, encoded = self.length_or_encoding(what)
        if not encoded:
            return self.need(value, what), value
        if value in (0, 1, 2):
            self.need((1, 2, 4)[value], what)
        elif value == 3:
            self.lzf += 1
            clen = self.length(f"{what} (compressed length)")
            self.length(f"{what} (uncompressed length)")
            self.need(clen, f"{what} (LZF data)")
        else:
            raise self.error(f"unknown string encoding {value} in {what}", at)
        return None

    def name_string(self, what: str) -> str:
        return decode_name(self.string(what))

    # ----------------------------------------------------------- file

    def read(self, verify_checksum: bool) -> RdbFile:
        header = self.take(9, "the header")
        if header[:5] == b"REDIS" and header[5:].isdigit():
            magic, version, self.types = "REDIS", int(header[5:]), REDIS_TYPES
        elif header[:6] == b"VALKEY" and header[6:].isdigit():
            magic, version, self.types = "VALKEY", int(header[6:]), VALKEY_TYPES
        else:
            raise self.error(
                f"not an RDB file: starts with {header!r}, not REDIS<4 digits> or VALKEY<3 digits>",
                0,
            )
        if version < 1 or (magic == "VALKEY" and version < 80):
            raise self.error(
                f"RDB version {version} does not exist after the {magic} magic"
                + (" (Valkey's start at 80)" if magic == "VALKEY" else ""),
                0,
            )
        out = RdbFile(path=self.name, magic=magic, version=version, size=self.size)
        db = 0
        expire: int | None = None
        idle: int | None = None
        freq: int | None = None
        while True:
            at = self.pos
            op = self.u8("an opcode (no EOF opcode before the end)")
            if op == OP_EOF:
                break
            if op == OP_SELECTDB:
                db = self.length("SELECTDB")
            elif op == OP_RESIZEDB:
                out.resize_hints[db] = (self.length("RESIZEDB"), self.length("RESIZEDB"))
            elif op == OP_EXPIRETIME_MS:
                expire = self.millis("EXPIRETIME_MS")
            elif op == OP_EXPIRETIME:
                expire = int(_I32.unpack_from(self.data, self.need(4, "EXPIRETIME"))[0]) * 1000
            elif op == OP_IDLE:
                idle = self.length("IDLE")
            elif op == OP_FREQ:
                freq = self.u8("FREQ")
            elif op == OP_AUX:
                name = self.name_string("an AUX field name")
                out.aux[name] = self.string(f"AUX field {name!r}")
            elif op == OP_MODULE_AUX:
                out.module_aux.append(self.module_aux(at))
            elif op == OP_FUNCTION2:
                out.functions.append(self.string("a FUNCTION2 library"))
            elif op == OP_SLOT_INFO:
                for _ in range(3):
                    self.length("SLOT_INFO")
            elif op in self.types:
                self.key_value(out, op, at, db, expire, idle, freq)
                expire = idle = freq = None
            else:
                what = OPCODE_NAMES.get(op)
                raise self.error(
                    f"opcode {op} ({what}) is not supported"
                    if what
                    else f"unknown opcode or value type {op} in a {magic} RDB version {version}",
                    at,
                )
        eof_end = self.pos
        if version >= 5:
            out.checksum = int.from_bytes(self.take(8, "the checksum after EOF"), "little")
            if verify_checksum and out.checksum:
                actual = crc64(self.data, end=eof_end)
                if actual != out.checksum:
                    raise RdbChecksumError(
                        f"{self.name}: offset {eof_end}: checksum mismatch: the file stores "
                        f"{out.checksum:016x}, its bytes give {actual:016x} (corrupt file)"
                    )
                out.checksum_verified = True
        out.end_offset = self.pos
        out.lzf_strings = self.lzf
        return out

    def module_aux(self, at: int) -> str:
        module_id = self.length("MODULE_AUX module id")
        name = module_name(module_id)
        when_op = self.length(f"MODULE_AUX of module {name!r}")
        if when_op != 2:
            raise self.error(f"MODULE_AUX of module {name!r}: 'when' opcode {when_op}, not 2", at)
        self.length(f"MODULE_AUX of module {name!r}")
        self.skip_module_items(name)
        return name

    def skip_module_items(self, name: str) -> None:
        what = f"module {name!r} data"
        while True:
            at = self.pos
            op = self.length(what)
            if op == 0:
                return
            if op in (1, 2):
                self.length(what)
            elif op == 3:
                self.need(4, what)
            elif op == 4:
                self.need(8, what)
            elif op == 5:
                self.skip_string(what)
            else:
                raise self.error(f"unknown item opcode {op} in {what}", at)

    # ----------------------------------------------------------- keys

    def key_value(
        self,
        out: RdbFile,
        rdb_type: int,
        at: int,
        db: int,
        expire: int | None,
        idle: int | None,
        freq: int | None,
    ) -> None:
        kind, type_name = self.types[rdb_type]
        key = self.name_string(f"the key of a {type_name} value")
        what = f"{type_name} value of key {key!r} (db {db})"
        if kind == "module":
            if rdb_type == 7:
                module_id = self.length(what)
                raise self.error(
                    f"key {key!r} (db {db}) holds a value of module type "
                    f"{module_name(module_id)!r}: module values cannot be read",
                    at,
                )
            raise self.error(f"key {key!r} (db {db}): pre-release module value (type 6)", at)
        if (db, key) in out.keys:
            raise self.error(f"key {key!r} appears twice in db {db}", at)
        if kind == "stream":
            stream = self.stream(rdb_type, db, key, what)
            stream.expire_ms = expire
            out.streams[(db, key)] = stream
            empty = False
        else:
            empty = self.skip_value(rdb_type, what)
        if empty:  # the server drops an empty key when it loads the file
            out.empty_keys.append((db, key))
            return
        out.keys[(db, key)] = RdbKey(db, key, kind, rdb_type, type_name, expire, at, idle, freq)

    def skip_value(self, t: int, what: str) -> bool:
        """Move past a non-stream value; True if it is empty (the server drops it)."""
        if t == 0:
            self.skip_string(what)
            return False
        if t in (1, 2):  # list, set: strings
            n = self.length(what)
            for _ in range(n):
                self.skip_string(what)
            return n == 0
        if t == 3:  # zset: member, score as text
            n = self.length(what)
            for _ in range(n):
                self.skip_string(what)
                size = self.u8(what)
                if size < 253:
                    self.need(size, what)
            return n == 0
        if t == 5:  # zset: member, binary double
            n = self.length(what)
            for _ in range(n):
                self.skip_string(what)
                self.need(8, what)
            return n == 0
        if t == 4:
            n = self.length(what)
            for _ in range(2 * n):
                self.skip_string(what)
            return n == 0
        if t in (9, 10, 11, 12, 13, 16, 17, 20):
            return self.skip_blob(t, what)
        if t in (14, 18):  # quicklists
            n = self.length(what)
            empty = True
            for _ in range(n):
                container = 2
                if t == 18:
                    at = self.pos
                    container = self.length(what)
                    if container not in (1, 2):
                        raise self.error(f"quicklist node container {container} in {what}", at)
                if container == 1:
                    self.skip_string(what)
                    empty = False
                elif not self.skip_blob(10 if t == 14 else 16, what):
                    empty = False
            return empty
        if t == 22 and self.types is VALKEY_TYPES:  # Valkey 9: field, value, expiry
            n = self.length(what)
            for _ in range(n):
                self.skip_string(what)
                self.skip_string(what)
                self.need(8, what)
            return n == 0
        if t in (22, 24):  # Redis 7.4: [min expiry], then TTL, field, value
            if t == 24:
                self.need(8, what)
            n = self.length(what)
            for _ in range(n):
                self.length(what)
                self.skip_string(what)
                self.skip_string(what)
            return n == 0
        if t in (23, 25):  # Redis 7.4: [min expiry], listpack of field, value, TTL
            if t == 25:
                self.need(8, what)
            return self.skip_blob(16, what)
        raise self.error(f"no reader for value type {t} in {what}")  # pragma: no cover

    def skip_blob(self, t: int, what: str) -> bool:
        """Move past a ziplist/listpack/intset/zipmap string; True if it holds nothing.

        An uncompressed blob's header is checked (its size, its end byte) and its
        element count read; a compressed one is longer than any empty container.
        """
        at = self.pos
        plain = self.skip_string(what)
        if plain is None:
            return False
        start, size = plain
        data = self.data
        if t in (16, 17, 20):  # listpack
            if (
                size < 7
                or _U32.unpack_from(data, start)[0] != size
                or data[start + size - 1] != 0xFF
            ):
                raise self.error(f"malformed listpack in {what}", at)
            return data[start + 4] == 0 and data[start + 5] == 0
        if t in (10, 12, 13):  # ziplist
            if (
                size < 11
                or _U32.unpack_from(data, start)[0] != size
                or data[start + size - 1] != 0xFF
            ):
                raise self.error(f"malformed ziplist in {what}", at)
            return data[start + 8] == 0 and data[start + 9] == 0
        if t == 11:  # intset
            if size < 8:
                raise self.error(f"malformed intset in {what}", at)
            width, count = struct.unpack_from("<II", data, start)
            if width not in (2, 4, 8) or 8 + width * count != size:
                raise self.error(f"malformed intset in {what}", at)
            return count == 0
        # zipmap (9): a count byte (254: unknown), then entries
        if size < 2 or data[start + size - 1] != 0xFF:
            raise self.error(f"malformed zipmap in {what}", at)
        return data[start] == 0

    # ----------------------------------------------------------- streams

    def stream(self, t: int, db: int, key: str, what: str) -> RdbStream:
        v2 = t >= 19
        nodes: list[RdbNode] = []
        count = self.length(f"{what}: node count")
        previous: StreamID | None = None
        for _ in range(count):
            at = self.pos
            node_key = self.string(f"{what}: node master ID")
            if len(node_key) != 16:
                raise self.error(f"{what}: node master ID of {len(node_key)} bytes, not 16", at)
            master = StreamID(*_BE_ID.unpack(node_key))
            lp_at = self.pos
            blob = self.string(f"{what}: node listpack")
            node = self.stream_node(master, blob, f"{what}, node {master}", lp_at)
            for entry in node.entries:
                if previous is not None and entry.id <= previous:
                    raise self.error(
                        f"{what}: entry {entry.id} is not after {previous} (IDs out of order)",
                        lp_at,
                    )
                previous = entry.id
            nodes.append(node)
        at = self.pos
        length = self.length(f"{what}: length")
        live = sum(n.live for n in nodes)
        if length != live:
            raise self.error(f"{what}: length {length}, but the nodes hold {live} live entries", at)
        last_id = self._id(f"{what}: last ID")
        first_id = max_deleted = entries_added = None
        if v2:
            first_id = self._id(f"{what}: first ID")
            max_deleted = self._id(f"{what}: max deleted entry ID")
            entries_added = self.length(f"{what}: entries added")
        groups: list[RdbGroup] = []
        names: set[str] = set()
        for _ in range(self.length(f"{what}: group count")):
            at = self.pos
            group = self.group(t, f"{what}, group", at)
            if group.name in names:
                raise self.error(f"{what}: group {group.name!r} appears twice", at)
            names.add(group.name)
            groups.append(group)
        return RdbStream(
            db=db,
            key=key,
            rdb_type=t,
            length=length,
            last_id=last_id,
            first_id=first_id,
            max_deleted_entry_id=max_deleted,
            entries_added=entries_added,
            nodes=nodes,
            groups=groups,
        )

    def _id(self, what: str) -> StreamID:
        return StreamID(self.length(what), self.length(what))

    def _raw_id(self, what: str) -> StreamID:
        return StreamID(*_BE_ID.unpack_from(self.data, self.need(16, what)))

    def stream_node(self, master: StreamID, blob: bytes, where: str, at: int) -> RdbNode:
        try:
            # int | bytes: the walk below checks kinds as it goes (TypeError)
            els = cast(list[Any], decode_listpack(blob, where))
        except ValueError as exc:
            raise self.error(f"corrupt listpack: {exc}", at) from None
        keep = self.keep_values
        master_ms, master_seq = master
        entries: list[RdbEntry] = []
        append = entries.append
        entry_no = -1  # the master entry
        # the layout is walked by index; an element of the wrong kind (a string where a
        # number belongs) raises TypeError, a listpack too short IndexError: both below
        try:
            live, deleted, nfields = els[0], els[1], els[2]
            if not (_is_count(live) and _is_count(deleted) and _is_count(nfields)):
                raise TypeError
            master_fields = tuple(map(_as_bytes, els[3 : 3 + nfields]))
            i = 3 + nfields
            if els[i] != 0:
                raise self.error(f"{where}: master entry not terminated by 0", at)
            i += 1
            seen_deleted = 0
            pairs: tuple[tuple[bytes, bytes], ...] = ()
            for entry_no in range(live + deleted):
                flags, ms_delta, seq_delta = els[i], els[i + 1], els[i + 2]
                same = flags & STREAM_FLAG_SAMEFIELDS  # values of the master fields only
                if same:
                    j = i + 3 + nfields
                else:  # a field count, then field/value pairs
                    count = els[i + 3]
                    if not _is_count(count):
                        raise TypeError
                    j = i + 4 + 2 * count
                # the element count the entry ends with (for walking backwards)
                if els[j] != j - i or type(els[j]) is not int:
                    raise self.error(
                        f"{where}: entry {entry_no} says it has {els[j]!r} elements, "
                        f"it has {j - i}",
                        at,
                    )
                if keep:  # an integer element is its decimal text
                    flat = [e if e.__class__ is bytes else b"%d" % e for e in els[i + 3 : j]]
                    if same:
                        pairs = tuple(zip(master_fields, flat, strict=True))
                    else:
                        pairs = tuple(zip(flat[1::2], flat[2::2], strict=True))
                i = j + 1
                is_deleted = bool(flags & STREAM_FLAG_DELETED)
                seen_deleted += is_deleted
                entry_id = StreamID((master_ms + ms_delta) & U64, (master_seq + seq_delta) & U64)
                append(RdbEntry(entry_id, is_deleted, pairs))
        except IndexError:
            what = "the master entry" if entry_no < 0 else f"entry {entry_no}"
            raise self.error(f"{where}: listpack ends inside {what}", at) from None
        except TypeError:
            what = "the master entry" if entry_no < 0 else f"entry {entry_no}"
            raise self.error(f"{where}: a string where a number belongs in {what}", at) from None
        if i != len(els):
            raise self.error(f"{where}: {len(els) - i} elements after the last entry", at)
        if seen_deleted != deleted:
            raise self.error(
                f"{where}: master entry counts {deleted} deleted entries, found {seen_deleted}",
                at,
            )
        return RdbNode(master, master_fields, live, deleted, len(blob), entries)

    def group(self, t: int, what: str, at: int) -> RdbGroup:
        name = self.name_string(f"{what} name")
        what = f"{what} {name!r}"
        last = self._id(f"{what}: last delivered ID")
        entries_read: int | None = None
        if t >= 19:
            raw = self.length(f"{what}: entries read")
            entries_read = None if raw == INVALID_ENTRIES_READ else raw
        times: dict[StreamID, tuple[int, int]] = {}
        for _ in range(self.length(f"{what}: PEL size")):
            pel_at = self.pos
            entry_id = self._raw_id(f"{what}: PEL entry ID")
            delivered = self.millis(f"{what}: PEL delivery time")
            count = self.length(f"{what}: PEL delivery count")
            if entry_id in times:
                raise self.error(f"{what}: PEL holds {entry_id} twice", pel_at)
            times[entry_id] = (delivered, count)
        owner: dict[StreamID, str] = {}
        consumers: list[RdbConsumer] = []
        seen_names: set[str] = set()
        for _ in range(self.length(f"{what}: consumer count")):
            c_at = self.pos
            cname = self.name_string(f"{what}: consumer name")
            if cname in seen_names:
                raise self.error(f"{what}: consumer {cname!r} appears twice", c_at)
            seen_names.add(cname)
            cwhat = f"{what}, consumer {cname!r}"
            seen = self.millis(f"{cwhat}: seen time")
            active: int | None = None
            if t >= 21:
                active = self.millis(f"{cwhat}: active time")
                if active == -1:
                    active = None
            pending: list[StreamID] = []
            for _ in range(self.length(f"{cwhat}: PEL size")):
                p_at = self.pos
                entry_id = self._raw_id(f"{cwhat}: PEL entry ID")
                if entry_id not in times:
                    raise self.error(f"{cwhat}: pending {entry_id} is not in the group PEL", p_at)
                if entry_id in owner:
                    raise self.error(
                        f"{cwhat}: pending {entry_id} already belongs to {owner[entry_id]!r}", p_at
                    )
                owner[entry_id] = cname
                pending.append(entry_id)
            consumers.append(RdbConsumer(cname, seen, active, pending))
        orphans = [i for i in times if i not in owner]
        if orphans:
            raise self.error(f"{what}: pending {orphans[0]} belongs to no consumer", at)
        pel = [
            RdbPendingEntry(entry_id, owner[entry_id], delivered, count)
            for entry_id, (delivered, count) in times.items()
        ]
        return RdbGroup(name, last, entries_read, pel, consumers)


# --------------------------------------------------------------------------- API


def parse_rdb(
    data: bytes | bytearray | memoryview | mmap.mmap,
    name: str = "<rdb>",
    *,
    verify_checksum: bool = True,
    keep_values: bool = True,
) -> RdbFile:
    """Read an RDB snapshot held in memory (``name`` is used in errors and ``RdbFile.path``).

    ``verify_checksum``: check the stored CRC-64 when it is not zero (a mismatch
    raises :class:`RdbChecksumError`). ``keep_values=False`` leaves stream entries'
    ``fields`` empty (IDs and deleted flags only), for big streams.
    """
    return _Reader(data, name, keep_values).read(verify_checksum)


def read_rdb(
    path: str | os.PathLike[str], *, verify_checksum: bool = True, keep_values: bool = True
) -> RdbFile:
    """Read the RDB file at ``path``: a ``dump.rdb`` or an AOF's ``*.base.rdb``."""
    name = os.fspath(path)
    with open(name, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        if not size:
            raise RdbFormatError(f"{name}: offset 0: empty file, not an RDB snapshot")
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as data:
            return parse_rdb(data, name, verify_checksum=verify_checksum, keep_values=keep_values)
