"""The reader: walks an RDB file opcode by opcode (the package docstring describes the
format) and gives an :class:`~pelengine.ingest.rdb.results.RdbFile`."""

from __future__ import annotations

import mmap
import os
import struct
from typing import Any, cast

from pelengine.ingest.rdb.crc import crc64
from pelengine.ingest.rdb.format import (
    BE_ID,
    COMMON_TYPES,
    I32,
    I64,
    INVALID_ENTRIES_READ,
    OP_AUX,
    OP_EOF,
    OP_EXPIRETIME,
    OP_EXPIRETIME_MS,
    OP_FREQ,
    OP_FUNCTION2,
    OP_IDLE,
    OP_MODULE_AUX,
    OP_RESIZEDB,
    OP_SELECTDB,
    OP_SLOT_INFO,
    OPCODE_NAMES,
    REDIS_TYPES,
    STREAM_FLAG_DELETED,
    STREAM_FLAG_SAMEFIELDS,
    U32,
    U64,
    VALKEY_TYPES,
    module_name,
)
from pelengine.ingest.rdb.listpack import decode_listpack
from pelengine.ingest.rdb.lzf import LzfError, lzf_decompress
from pelengine.ingest.rdb.results import (
    RdbChecksumError,
    RdbConsumer,
    RdbEntry,
    RdbFile,
    RdbFormatError,
    RdbGroup,
    RdbKey,
    RdbNode,
    RdbPendingEntry,
    RdbStream,
    decode_name,
)
from pelengine.model.ids import StreamID

# the blobs that start with their size and hold an element count, by value type: (what
# the blob is, its smallest size, where its count is)
_COUNTED_BLOBS = {
    **dict.fromkeys((16, 17, 20), ("listpack", 7, 4)),
    **dict.fromkeys((10, 12, 13), ("ziplist", 11, 8)),
}


def _as_bytes(element: int | bytes) -> bytes:
    """A listpack element as the server replies it: an integer as its decimal text."""
    return element if type(element) is bytes else str(element).encode()


def _is_count(element: int | bytes) -> bool:
    return type(element) is int and element >= 0


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
        return int(I64.unpack_from(self.data, self.need(8, what))[0])

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
            except LzfError as exc:
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
                expire = int(I32.unpack_from(self.data, self.need(4, "EXPIRETIME"))[0]) * 1000
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
        counted = _COUNTED_BLOBS.get(t)
        if counted is not None:  # its size (u32), ..., an element count (u16), ..., 0xFF
            kind, smallest, count_at = counted
            if (
                size < smallest
                or U32.unpack_from(data, start)[0] != size
                or data[start + size - 1] != 0xFF
            ):
                raise self.error(f"malformed {kind} in {what}", at)
            return data[start + count_at] == 0 and data[start + count_at + 1] == 0
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
            master = StreamID(*BE_ID.unpack(node_key))
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
            db, key, t, length, last_id, first_id, max_deleted, entries_added, nodes, groups
        )

    def _id(self, what: str) -> StreamID:
        return StreamID(self.length(what), self.length(what))

    def _raw_id(self, what: str) -> StreamID:
        return StreamID(*BE_ID.unpack_from(self.data, self.need(16, what)))

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
