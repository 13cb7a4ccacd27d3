"""The RDB reader (pelengine/ingest/rdb/) on hand-built files: every length and string
form, listpack element encodings, streams with groups, every other value type skipped
by its encoding, and clear errors for truncated or corrupt files. No server needed
(tests/redis_diff/test_rdb_live.py compares with real servers)."""

from __future__ import annotations

import os
import random
import struct

import pytest

from pelengine.ingest import rdb
from pelengine.ingest.rdb import (
    LzfError,
    RdbChecksumError,
    RdbFormatError,
    crc64,
    decode_listpack,
    decode_name,
    lzf_decompress,
    module_name,
    parse_rdb,
    read_rdb,
)
from pelengine.ingest.rdb import crc as crc_module
from pelengine.model.ids import StreamID

# --------------------------------------------------------------------------- an encoder


def enc_len(n: int, form: str | None = None) -> bytes:
    """A length in the smallest form, or the one named (6, 14, 32, 64)."""
    form = form or ("6" if n < 64 else "14" if n < 16384 else "32" if n < 2**32 else "64")
    if form == "6":
        return bytes([n])
    if form == "14":
        return bytes([0x40 | (n >> 8), n & 0xFF])
    if form == "32":
        return b"\x80" + n.to_bytes(4, "big")
    return b"\x81" + n.to_bytes(8, "big")


def enc_str(data: bytes | str) -> bytes:
    raw = data.encode() if isinstance(data, str) else data
    return enc_len(len(raw)) + raw


def enc_int_str(value: int, width: int) -> bytes:
    code = {1: 0, 2: 1, 4: 2}[width]
    return bytes([0xC0 | code]) + value.to_bytes(width, "little", signed=True)


def lzf_literals(data: bytes) -> bytes:
    """Valid LZF made of literal runs only (at most 32 bytes each)."""
    out = b""
    for i in range(0, len(data), 32):
        chunk = data[i : i + 32]
        out += bytes([len(chunk) - 1]) + chunk
    return out


def enc_lzf(compressed: bytes, plain_len: int) -> bytes:
    return b"\xc3" + enc_len(len(compressed)) + enc_len(plain_len) + compressed


def _backlen(n: int) -> bytes:
    if n <= 127:
        return bytes([n])
    digits = []
    while n:
        digits.append(n & 0x7F)
        n >>= 7
    digits.reverse()
    return bytes([digits[0]] + [d | 0x80 for d in digits[1:]])


def lp_element(value: int | bytes, form: str | None = None) -> bytes:
    if isinstance(value, int):
        form = form or (
            "u7"
            if 0 <= value <= 127
            else "i13"
            if -4096 <= value < 4096
            else "i16"
            if -(2**15) <= value < 2**15
            else "i24"
            if -(2**23) <= value < 2**23
            else "i32"
            if -(2**31) <= value < 2**31
            else "i64"
        )
        if form == "u7":
            body = bytes([value])
        elif form == "i13":
            v = value & 0x1FFF
            body = bytes([0xC0 | (v >> 8), v & 0xFF])
        else:
            width = {"i16": 2, "i24": 3, "i32": 4, "i64": 8}[form]
            marker = {"i16": 0xF1, "i24": 0xF2, "i32": 0xF3, "i64": 0xF4}[form]
            body = bytes([marker]) + value.to_bytes(width, "little", signed=True)
    else:
        n = len(value)
        if n < 64:
            body = bytes([0x80 | n]) + value
        elif n < 4096:
            body = bytes([0xE0 | (n >> 8), n & 0xFF]) + value
        else:
            body = b"\xf0" + n.to_bytes(4, "little") + value
    return body + _backlen(len(body))


def listpack(elements: list[int | bytes], count: int | None = None) -> bytes:
    body = b"".join(lp_element(e) for e in elements)
    total = 6 + len(body) + 1
    n = len(elements) if count is None else count
    return total.to_bytes(4, "little") + n.to_bytes(2, "little") + body + b"\xff"


def ziplist(count: int, payload: bytes = b"") -> bytes:
    """A ziplist-shaped blob: only its header and end byte are read."""
    total = 10 + len(payload) + 1
    return (
        total.to_bytes(4, "little")
        + (10).to_bytes(4, "little")
        + count.to_bytes(2, "little")
        + payload
        + b"\xff"
    )


def intset(values: list[int]) -> bytes:
    return struct.pack("<II", 2, len(values)) + b"".join(
        v.to_bytes(2, "little", signed=True) for v in values
    )


def ms_time(value: int) -> bytes:
    return value.to_bytes(8, "little", signed=True)


def raw_id(ms: int, seq: int) -> bytes:
    return ms.to_bytes(8, "big") + seq.to_bytes(8, "big")


def rdb_file(body: bytes, magic: bytes = b"REDIS0011", checksum: bool | int = True) -> bytes:
    data = magic + body + b"\xff"
    if magic[:5] == b"REDIS" and int(magic[5:]) < 5:
        return data
    if checksum is True:
        value = crc64(data)
    elif checksum is False:
        value = 0
    else:
        value = checksum
    return data + value.to_bytes(8, "little")


def aux(name: str, value: bytes) -> bytes:
    return b"\xfa" + enc_str(name) + value


def key(type_code: int, name: bytes | str, value: bytes) -> bytes:
    return bytes([type_code]) + enc_str(name) + value


# a stream node: master 5-3 with fields (f, g); entries
#   5-3 same fields (1, b"x"), 5-4 deleted same fields, 6-0 own fields (h: big value),
#   7-1 same fields with a negative... seq delta -2 from the master seq 3
def stream_node() -> tuple[bytes, bytes]:
    els: list[int | bytes] = [3, 1, 2, b"f", b"g", 0]
    els += [2, 0, 0, 1, b"x", 5]  # 5-3 same fields
    els += [3, 0, 1, 2, b"y", 5]  # 5-4 deleted (1 | 2)
    els += [0, 1, -3, 1, b"h", b"v" * 70, 6]  # 6-0: own fields, 1 pair
    els += [2, 2, -2, -5, 123456789012, 5]  # 7-1 same fields, int values
    return raw_id(5, 3), listpack(els)


def stream_value(rdb_type: int, groups: bytes | None = None) -> bytes:
    node_key, lp = stream_node()
    out = enc_len(1) + enc_str(node_key) + enc_str(lp)
    out += enc_len(3) + enc_len(7) + enc_len(1)  # length 3 live, last id 7-1
    if rdb_type >= 19:
        out += enc_len(5) + enc_len(3)  # first id
        out += enc_len(5) + enc_len(4)  # max deleted
        out += enc_len(4)  # entries added
    if groups is None:
        groups = enc_len(1) + group(rdb_type)
    return out + groups


def group(rdb_type: int, name: bytes = b"grp", entries_read: int | None = 2) -> bytes:
    out = enc_str(name) + enc_len(6) + enc_len(0)  # last delivered 6-0
    if rdb_type >= 19:
        out += enc_len((1 << 64) - 1 if entries_read is None else entries_read)
    # group PEL: 5-3 (delivered at 1000, 2 times), 5-4 (deleted since), 6-0
    out += enc_len(3)
    out += raw_id(5, 3) + ms_time(1000) + enc_len(2)
    out += raw_id(5, 4) + ms_time(1001) + enc_len(1)
    out += raw_id(6, 0) + ms_time(1002) + enc_len(300)
    out += enc_len(2)
    out += enc_str("alice") + ms_time(2000)
    if rdb_type >= 21:
        out += ms_time(1999)
    out += enc_len(2) + raw_id(5, 3) + raw_id(6, 0)
    out += enc_str("bob") + ms_time(3000)
    if rdb_type >= 21:
        out += ms_time(-1)
    out += enc_len(1) + raw_id(5, 4)
    return out


def one_stream_file(rdb_type: int = 21, magic: bytes = b"REDIS0011") -> bytes:
    body = aux("redis-ver", enc_str("7.2.4")) + b"\xfe" + enc_len(0)
    body += key(rdb_type, "s", stream_value(rdb_type))
    return rdb_file(body, magic)


# --------------------------------------------------------------------------- primitives


def test_crc64_matches_redis_check_value() -> None:
    assert crc64(b"123456789") == 0xE9C6D914C4B8D9CA
    assert crc64(b"") == 0
    assert crc64(b"6789", crc64(b"12345")) == crc64(b"123456789")


def test_crc64_numpy_lanes_equal_the_byte_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(crc_module, "_CRC_LANES", 64)
    monkeypatch.setattr(crc_module, "_CRC_LANE_BYTES", 128)
    monkeypatch.setattr(crc_module, "_CRC_NUMPY_MIN", 1000)
    data = random.Random(3).randbytes(64 * 128 * 3 + 777)
    assert crc64(data) == crc_module._crc_bytes(0, data)
    assert crc64(data, end=20000) == crc_module._crc_bytes(0, data[:20000])
    assert crc64(data, crc=12345) == crc_module._crc_bytes(12345, data)


def test_lzf_literals_and_overlapping_back_reference() -> None:
    assert lzf_decompress(lzf_literals(b"hello world"), 11) == b"hello world"
    # "abc", then 9 bytes copied from 3 back (overlapping: the pattern repeats);
    # length 9 is 7 + 2 with the "7: add the next byte" form (extra byte 0)
    assert lzf_decompress(b"\x02abc\xe0\x00\x02", 12) == b"abcabcabcabc"
    # short form: 3 + 2 = 5 bytes from 5 back
    assert lzf_decompress(b"\x04hello\x60\x04", 10) == b"hellohello"
    with pytest.raises(LzfError, match="before the start"):
        lzf_decompress(b"\x00a\x20\x05", 4)
    with pytest.raises(LzfError, match="not the declared"):
        lzf_decompress(lzf_literals(b"abc"), 4)
    with pytest.raises(LzfError, match="passes the end"):
        lzf_decompress(b"\x05ab", 6)


@pytest.mark.parametrize(
    ("value", "form"),
    [(5, "6"), (63, "6"), (64, "14"), (300, "14"), (16383, "14"), (70000, "32"), (2**40, "64")],
)
def test_length_forms(value: int, form: str) -> None:
    body = b"\xfe" + enc_len(0) + b"\xfb" + enc_len(value, form) + enc_len(1, "32")
    f = parse_rdb(rdb_file(body))
    assert f.resize_hints == {0: (value, 1)}


def test_string_forms_plain_int_and_lzf() -> None:
    long_text = b"x" * 100  # 14-bit length
    longer = bytes(range(256)) * 80  # 20480 bytes: 32-bit length
    compressed = lzf_literals(b"compressible " * 10)
    body = (
        aux("i8", enc_int_str(-5, 1))
        + aux("i16", enc_int_str(1000, 2))
        + aux("i32", enc_int_str(-100000, 4))
        + aux("long", enc_str(long_text))
        + aux("longer", enc_str(longer))
        + aux("lzf", enc_lzf(compressed, 130))
        + aux("lzf-backref", enc_lzf(b"\x02abc\xe0\x00\x02", 12))
        + aux("empty", enc_str(b""))
    )
    f = parse_rdb(rdb_file(body))
    assert f.aux == {
        "i8": b"-5",
        "i16": b"1000",
        "i32": b"-100000",
        "long": long_text,
        "longer": longer,
        "lzf": b"compressible " * 10,
        "lzf-backref": b"abcabcabcabc",
        "empty": b"",
    }
    assert f.checksum_verified and f.end_offset == f.size


def test_listpack_every_element_encoding() -> None:
    values: list[int | bytes] = [
        0,
        127,
        -1,
        4095,
        -4096,
        -30000,
        8_000_000,
        -2_000_000_000,
        2**62,
        -(2**63),
        b"",
        b"short",
        b"m" * 100,  # 12-bit length, 2-byte back-length
        b"L" * 5000,  # 32-bit length
        b"H" * 20000,  # 3-byte back-length
    ]
    assert decode_listpack(listpack(values)) == values
    assert decode_listpack(listpack([1, 2], count=65535)) == [1, 2]  # count unknown


@pytest.mark.parametrize(
    ("blob", "message"),
    [
        (listpack([1, 2], count=3), "header counts 3"),
        (listpack([b"abc"])[:-1] + b"\x00", "no 0xFF terminator"),
        (b"\x0a\x00\x00\x00\x01\x00\xf5\x01\x00\xff", "unknown encoding byte 0xf5"),
        (b"\x09\x00\x00\x00\x01\x00\x05\x02\xff", "back-length does not match"),
        (b"\x08\x00\x00\x00\x01\x00\x05\xff", "passes the end"),
        (b"\x07\x00\x00\x00\x00\x00", "6 bytes, shorter than a listpack"),
    ],
)
def test_listpack_corruption(blob: bytes, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        decode_listpack(blob)


def test_names_decode_losslessly() -> None:
    assert decode_name(b"caf\xc3\xa9") == "café"
    raw = b"bad\xff\xfe-\xed\xa0\x80"
    name = decode_name(raw)
    assert name.encode("utf-8", "surrogateescape") == raw
    body = b"\xfe" + enc_len(0) + key(0, raw, enc_str("v"))
    f = parse_rdb(rdb_file(body))
    assert list(f.keys) == [(0, name)]


def test_module_name_from_id() -> None:
    # "mytype123" with encoding version 5 in the low 10 bits
    charset = rdb.MODULE_NAME_CHARSET
    value = 0
    for ch in "mytype123":
        value = (value << 6) | charset.index(ch)
    assert module_name((value << 10) | 5) == "mytype123"


# --------------------------------------------------------------------------- streams


def _check_stream(f: rdb.RdbFile, rdb_type: int) -> None:
    s = f.streams[(0, "s")]
    assert f.keys[(0, "s")].type == "stream"
    assert s.rdb_type == rdb_type
    assert s.length == 3
    assert s.last_id == StreamID(7, 1)
    [node] = s.nodes
    assert node.master_id == StreamID(5, 3)
    assert node.master_fields == (b"f", b"g")
    assert (node.live, node.deleted) == (3, 1)
    assert [(e.id, e.deleted) for e in s.entries] == [
        (StreamID(5, 3), False),
        (StreamID(5, 4), True),
        (StreamID(6, 0), False),
        (StreamID(7, 1), False),
    ]
    assert s.entries[0].fields == ((b"f", b"1"), (b"g", b"x"))
    assert s.entries[2].fields == ((b"h", b"v" * 70),)
    assert s.entries[3].fields == ((b"f", b"-5"), (b"g", b"123456789012"))
    assert s.live_ids == [StreamID(5, 3), StreamID(6, 0), StreamID(7, 1)]
    [g] = s.groups
    assert g.name == "grp"
    assert g.last_delivered_id == StreamID(6, 0)
    assert [(p.id, p.consumer, p.delivery_time_ms, p.delivery_count) for p in g.pel] == [
        (StreamID(5, 3), "alice", 1000, 2),
        (StreamID(5, 4), "bob", 1001, 1),
        (StreamID(6, 0), "alice", 1002, 300),
    ]
    alice, bob = g.consumers
    assert (alice.name, alice.seen_time_ms, alice.pending) == (
        "alice",
        2000,
        [StreamID(5, 3), StreamID(6, 0)],
    )
    assert (bob.name, bob.seen_time_ms, bob.pending) == ("bob", 3000, [StreamID(5, 4)])
    if rdb_type >= 19:
        assert s.first_id == StreamID(5, 3)
        assert s.max_deleted_entry_id == StreamID(5, 4)
        assert s.entries_added == 4
        assert g.entries_read == 2
    else:
        assert s.first_id is s.max_deleted_entry_id is s.entries_added is g.entries_read is None
    if rdb_type >= 21:
        assert (alice.active_time_ms, bob.active_time_ms) == (1999, None)
    else:
        assert alice.active_time_ms is bob.active_time_ms is None


@pytest.mark.parametrize("rdb_type", [15, 19, 21])
def test_stream_with_groups(rdb_type: int) -> None:
    _check_stream(parse_rdb(one_stream_file(rdb_type)), rdb_type)


def test_stream_values_can_be_left_out() -> None:
    f = parse_rdb(one_stream_file(), keep_values=False)
    assert all(e.fields == () for e in f.streams[(0, "s")].entries)
    assert len(f.streams[(0, "s")].entries) == 4


def test_stream_listpack_compressed_with_lzf() -> None:
    node_key, lp = stream_node()
    value = enc_len(1) + enc_str(node_key) + enc_lzf(lzf_literals(lp), len(lp))
    value += enc_len(3) + enc_len(7) + enc_len(1) + enc_len(5) + enc_len(3)
    value += enc_len(5) + enc_len(4) + enc_len(4) + enc_len(1) + group(21)
    f = parse_rdb(rdb_file(b"\xfe\x00" + key(21, "s", value)))
    _check_stream(f, 21)


def test_group_entries_read_unknown_and_empty_stream() -> None:
    value = enc_len(0) + enc_len(0) + enc_len(9) + enc_len(9)  # no nodes, last id 9-9
    value += enc_len(0) * 2 + enc_len(9) + enc_len(9) + enc_len(12)
    value += enc_len(1) + enc_str("g") + enc_len(9) + enc_len(9) + enc_len((1 << 64) - 1)
    value += enc_len(0) + enc_len(0)  # no PEL, no consumers
    f = parse_rdb(rdb_file(b"\xfe\x00" + key(21, "empty", value)))
    s = f.streams[(0, "empty")]
    assert (s.length, s.nodes, s.last_id, s.entries_added) == (0, [], StreamID(9, 9), 12)
    assert s.groups[0].entries_read is None and s.groups[0].consumers == []


def _stream_error(value: bytes, message: str) -> None:
    with pytest.raises(RdbFormatError, match=message):
        parse_rdb(rdb_file(b"\xfe\x00" + key(21, "s", value)))


def test_stream_inconsistencies_are_errors() -> None:
    node_key, lp = stream_node()
    head = enc_len(1) + enc_str(node_key) + enc_str(lp)
    meta = enc_len(7) + enc_len(1) + enc_len(5) + enc_len(3) + enc_len(5) + enc_len(4)
    meta += enc_len(4)
    _stream_error(head + enc_len(4) + meta + enc_len(0), "length 4, but the nodes hold 3")
    _stream_error(enc_len(1) + enc_str(b"short") + enc_str(lp), "master ID of 5 bytes, not 16")
    # a consumer's pending ID missing from the group PEL
    bad_group = enc_str("g") + enc_len(0) + enc_len(0) + enc_len(0) + enc_len(0)
    bad_group += enc_len(1) + enc_str("c") + ms_time(1) + ms_time(1)
    bad_group += enc_len(1) + raw_id(1, 1)
    _stream_error(head + enc_len(3) + meta + enc_len(1) + bad_group, "not in the group PEL")
    # a group PEL entry nobody owns
    orphan = enc_str("g") + enc_len(0) + enc_len(0) + enc_len(0)
    orphan += enc_len(1) + raw_id(5, 3) + ms_time(1) + enc_len(1) + enc_len(0)
    _stream_error(head + enc_len(3) + meta + enc_len(1) + orphan, "belongs to no consumer")
    # two groups of one name
    _stream_error(head + enc_len(3) + meta + enc_len(2) + group(21) + group(21), "appears twice")
    # the lp-count of an entry is wrong
    els: list[int | bytes] = [1, 0, 1, b"f", 0, 2, 0, 0, b"x", 9]
    wrong = enc_len(1) + enc_str(raw_id(1, 1)) + enc_str(listpack(els))
    _stream_error(wrong + enc_len(1) + meta, "says it has 9 elements, it has 4")
    # the master entry's deleted count is wrong
    els = [1, 1, 1, b"f", 0, 2, 0, 0, b"x", 4]
    wrong = enc_len(1) + enc_str(raw_id(1, 1)) + enc_str(listpack(els))
    _stream_error(wrong + enc_len(1) + meta, "listpack ends inside entry 1")
    # a listpack that is not one
    wrong = enc_len(1) + enc_str(raw_id(1, 1)) + enc_str(b"\x07\x00\x00\x00\x00\x00\x00")
    _stream_error(wrong + enc_len(0) + meta, "corrupt listpack.*no 0xFF terminator")
    # IDs going backwards across nodes
    two = enc_len(2) + enc_str(node_key) + enc_str(lp) + enc_str(node_key) + enc_str(lp)
    _stream_error(two + enc_len(6) + meta, "IDs out of order")


# --------------------------------------------------------------------------- other types


def every_other_type() -> list[tuple[int, str, str, bytes]]:
    """(type code, key, TYPE reply, value bytes) for every non-stream encoding."""
    hash_lp = listpack([b"a", 1, b"b", b"two"])
    return [
        (0, "str", "string", enc_str("hello")),
        (0, "str-int", "string", enc_int_str(123456, 4)),
        (0, "str-lzf", "string", enc_lzf(lzf_literals(b"z" * 50), 50)),
        (1, "list", "list", enc_len(2) + enc_str("a") + enc_int_str(7, 1)),
        (10, "list-zl", "list", enc_str(ziplist(2, b"xxxx"))),
        (14, "list-ql", "list", enc_len(2) + enc_str(ziplist(1, b"x")) + enc_str(ziplist(3))),
        (
            18,
            "list-ql2",
            "list",
            enc_len(2) + enc_len(2) + enc_str(listpack([b"a", 1])) + enc_len(1) + enc_str("P"),
        ),
        (2, "set", "set", enc_len(2) + enc_str("a") + enc_str("b")),
        (11, "set-is", "set", enc_str(intset([1, 2, 3]))),
        (20, "set-lp", "set", enc_str(listpack([b"a", b"b"]))),
        (
            3,
            "zset-v1",
            "zset",
            enc_len(4)
            + enc_str("a")
            + b"\x031.5"
            + enc_str("b")
            + b"\xfd"
            + enc_str("c")
            + b"\xfe"
            + enc_str("d")
            + b"\xff",
        ),
        (
            5,
            "zset2",
            "zset",
            enc_len(2)
            + enc_str("a")
            + struct.pack("<d", 1.5)
            + enc_str("b")
            + struct.pack("<d", -2.0),
        ),
        (12, "zset-zl", "zset", enc_str(ziplist(2, b"yy"))),
        (17, "zset-lp", "zset", enc_str(listpack([b"m", b"1.5"]))),
        (4, "hash", "hash", enc_len(1) + enc_str("f") + enc_str("v")),
        (9, "hash-zm", "hash", enc_str(b"\x01\x01f\x01\x00v\xff")),
        (13, "hash-zl", "hash", enc_str(ziplist(2, b"fv"))),
        (16, "hash-lp", "hash", enc_str(hash_lp)),
    ]


def other_types_body(extra: bytes = b"") -> bytes:
    body = aux("redis-ver", enc_str("7.4.1")) + aux("redis-bits", enc_int_str(64, 1))
    body += b"\xf5" + enc_str("#!lua name=lib\nredis.register_function('f', function() end)")
    # a module's AUX data: id, when (opcode 2, value 2), items, EOF
    body += b"\xf7" + enc_len(12345 << 10, "64") + enc_len(2) + enc_len(2)
    body += enc_len(1) + enc_len(7) + enc_len(2) + enc_len(8)  # signed and unsigned ints
    body += enc_len(3) + struct.pack("<f", 1.0) + enc_len(4) + struct.pack("<d", 2.0)
    body += enc_len(5) + enc_str("module bytes") + enc_len(0)
    body += b"\xfe" + enc_len(0) + b"\xfb" + enc_len(30) + enc_len(2)
    body += b"\xf4" + enc_len(100) + enc_len(3) + enc_len(1)  # SLOT_INFO
    for i, (code, name, _, value) in enumerate(every_other_type()):
        if i == 0:
            body += b"\xfc" + ms_time(1_900_000_000_000)  # EXPIRETIME_MS
        if i == 1:
            body += b"\xfd" + struct.pack("<i", 1_900_000_000)  # EXPIRETIME (seconds)
        if i == 2:
            body += b"\xf8" + enc_len(1000)  # IDLE
        if i == 3:
            body += b"\xf9" + b"\x05"  # FREQ
        body += key(code, name, value)
    body += b"\xfe" + enc_len(3) + key(21, "s", stream_value(21))
    return body + extra


def test_every_other_type_is_skipped_by_its_encoding() -> None:
    f = parse_rdb(rdb_file(other_types_body()))
    expected = {(0, name): kind for _, name, kind, _ in every_other_type()}
    expected[(3, "s")] = "stream"
    assert {k: v.type for k, v in f.keys.items()} == expected
    assert f.keys[(0, "str")].expire_ms == 1_900_000_000_000
    assert f.keys[(0, "str-int")].expire_ms == 1_900_000_000_000
    assert f.keys[(0, "str-lzf")].lru_idle == 1000
    assert f.keys[(0, "list")].lfu_freq == 5
    assert f.keys[(0, "list")].expire_ms is None  # an expiry belongs to one key only
    assert f.keys[(0, "hash-lp")].encoding == "HASH_LISTPACK"
    assert f.functions[0].startswith(b"#!lua")
    assert f.module_aux == [module_name(12345 << 10)]
    assert f.resize_hints == {0: (30, 2)}
    assert f.aux["redis-bits"] == b"64"
    assert f.dbs == [0, 3]
    # the stream after them all is read in full: every value before it was skipped exactly
    s = f.streams[(3, "s")]
    assert len(s.entries) == 4 and s.groups[0].consumers[0].name == "alice"


def test_redis_74_hashes_with_field_expiry() -> None:
    lp = listpack([b"f", b"v", 0, b"g", b"w", 1_900_000_000_000])
    body = b"\xfe\x00"
    body += key(
        22, "h-meta-rc", enc_len(1) + enc_len(1_900_000_000_000) + enc_str("f") + enc_str("v")
    )
    body += key(23, "h-lpex-rc", enc_str(lp))
    body += key(
        24,
        "h-meta",
        ms_time(1_900_000_000_000)
        + enc_len(2)
        + enc_len(0)
        + enc_str("f")
        + enc_str("v")
        + enc_len(5)
        + enc_str("g")
        + enc_str("w"),
    )
    body += key(25, "h-lpex", ms_time(1_900_000_000_000) + enc_str(lp))
    body += key(21, "s", stream_value(21))
    f = parse_rdb(rdb_file(body, b"REDIS0012"))
    assert {k: (v.type, v.encoding) for k, v in f.keys.items()} == {
        (0, "h-meta-rc"): ("hash", "HASH_METADATA_PRE_GA"),
        (0, "h-lpex-rc"): ("hash", "HASH_LISTPACK_EX_PRE_GA"),
        (0, "h-meta"): ("hash", "HASH_METADATA"),
        (0, "h-lpex"): ("hash", "HASH_LISTPACK_EX"),
        (0, "s"): ("stream", "STREAM_LISTPACKS_3"),
    }


def test_valkey_9_header_and_hash_with_field_expiry() -> None:
    value = enc_len(2) + enc_str("a") + enc_str("1") + ms_time(1_900_000_000_000)
    value += enc_str("b") + enc_str("2") + ms_time(-1)
    body = b"\xfe\x00" + key(22, "hx", value) + key(21, "s", stream_value(21))
    f = parse_rdb(rdb_file(body, b"VALKEY080"))
    assert (f.magic, f.version) == ("VALKEY", 80)
    assert f.keys[(0, "hx")].encoding == "HASH_2"
    _check_stream(f, 21)


def test_empty_containers_are_dropped_as_on_load() -> None:
    body = b"\xfe\x00" + key(1, "l", enc_len(0)) + key(16, "h", enc_str(listpack([])))
    body += key(11, "is", enc_str(intset([]))) + key(0, "s", enc_str(""))
    f = parse_rdb(rdb_file(body))
    assert sorted(f.empty_keys) == [(0, "h"), (0, "is"), (0, "l")]
    assert list(f.keys) == [(0, "s")]  # an empty string is a key


def test_old_versions_have_no_checksum() -> None:
    body = b"\xfe\x00" + key(0, "k", enc_str("v"))
    f = parse_rdb(rdb_file(body, b"REDIS0004"))
    assert f.checksum is None and not f.checksum_verified and f.end_offset == f.size


def test_zero_checksum_is_not_verified_and_trailing_bytes_are_left() -> None:
    data = rdb_file(b"\xfe\x00" + key(0, "k", enc_str("v")), checksum=False)
    f = parse_rdb(data + b"*2\r\n$4\r\nPING\r\n")
    assert f.checksum == 0 and not f.checksum_verified
    assert f.end_offset == len(data)


def test_read_rdb_from_a_file(tmp_path: os.PathLike[str]) -> None:
    path = os.path.join(tmp_path, "dump.rdb")
    with open(path, "wb") as fh:
        fh.write(one_stream_file())
    f = read_rdb(path)
    assert f.path == path and f.checksum_verified
    _check_stream(f, 21)
    empty = os.path.join(tmp_path, "empty.rdb")
    open(empty, "wb").close()
    with pytest.raises(RdbFormatError, match="empty file"):
        read_rdb(empty)


# --------------------------------------------------------------------------- errors


def test_checksum_mismatch() -> None:
    data = bytearray(one_stream_file())
    data[-1] ^= 0x01
    with pytest.raises(RdbChecksumError, match=r"<rdb>: offset \d+: checksum mismatch"):
        parse_rdb(bytes(data))
    # a flipped byte inside a value: the file parses, the checksum does not match
    data = bytearray(one_stream_file())
    where = bytes(data).index(b"alice")
    data[where] = ord("A")
    with pytest.raises(RdbChecksumError):
        parse_rdb(bytes(data))
    assert (
        parse_rdb(bytes(data), verify_checksum=False).streams[(0, "s")].groups[0].consumers[0].name
        == "Alice"
    )


def test_every_truncation_is_a_clear_error() -> None:
    data = rdb_file(other_types_body())
    for cut in range(len(data)):
        with pytest.raises(RdbFormatError, match=r"^cut: offset \d+: "):
            parse_rdb(data[:cut], "cut")


def test_corrupt_bytes_never_escape_as_other_errors() -> None:
    """Each byte replaced by a few values: the reader either reads the file (a value
    byte changed) or raises RdbFormatError; never IndexError, struct.error, ..."""
    data = rdb_file(other_types_body(), checksum=False)
    rng = random.Random(7)
    for pos in range(9, len(data) - 8):
        for value in {0x00, 0xFF, 0x80, 0xC3, rng.randrange(256)}:
            mutated = data[:pos] + bytes([value]) + data[pos + 1 :]
            try:
                parse_rdb(mutated, "m")
            except RdbFormatError as exc:
                assert str(exc).startswith("m: offset ")


@pytest.mark.parametrize(
    ("body", "magic", "message"),
    [
        (b"\xfe\x00" + bytes([6]) + enc_str("k"), b"REDIS0011", "pre-release module value"),
        (
            b"\xfe\x00" + key(7, "k", enc_len((7 << 10) | 1, "64")),
            b"REDIS0011",
            "key 'k' \\(db 0\\) holds a value of module type 'AAAAAAAAH'",
        ),
        (b"\xfe\x00" + key(23, "k", b""), b"VALKEY080", "unknown opcode or value type 23"),
        (b"\xfe\x00" + key(26, "k", b""), b"REDIS0012", "unknown opcode or value type 26"),
        (b"\x08", b"REDIS0011", "unknown opcode or value type 8"),
        (b"\xf3\x00", b"VALKEY080", "opcode 243 \\(SLOT_IMPORT"),
        (b"\xf6\x00", b"REDIS0010", "opcode 246 \\(FUNCTION"),
        (b"\xfe\x00" + key(0, "k", b"\xc5"), b"REDIS0011", "unknown string encoding 5"),
        (b"\xfe\xc0", b"REDIS0011", "expected a length for SELECTDB"),
        (b"\xfe\x00" + key(0, "k", b"\x82"), b"REDIS0011", "bad length byte 0x82"),
        (
            aux("k", enc_lzf(b"\x00a\x20\x05", 4)),
            b"REDIS0011",
            "corrupt LZF string.*before the start",
        ),
        (
            b"\xfe\x00" + key(0, "k", enc_str("a")) + key(1, "k", enc_len(0)),
            b"REDIS0011",
            "key 'k' appears twice in db 0",
        ),
        (
            b"\xfe\x00" + key(16, "h", enc_str(b"\x08\x00\x00\x00\x00\x00\x00\x00")),
            b"REDIS0011",
            "malformed listpack",
        ),
        (
            b"\xfe\x00" + key(18, "l", enc_len(1) + enc_len(3) + enc_str("x")),
            b"REDIS0011",
            "quicklist node container 3",
        ),
        (
            b"\xf7" + enc_len(1 << 10) + enc_len(1),
            b"REDIS0011",
            "'when' opcode 1, not 2",
        ),
    ],
)
def test_unsupported_or_corrupt_input(body: bytes, magic: bytes, message: str) -> None:
    with pytest.raises(RdbFormatError, match=rf"^<rdb>: offset \d+: .*{message}"):
        parse_rdb(rdb_file(body, magic))


def test_bad_header() -> None:
    with pytest.raises(RdbFormatError, match="offset 0: not an RDB file"):
        parse_rdb(b"*1\r\n$4\r\nPING\r\n")
    with pytest.raises(RdbFormatError, match="offset 0: file ends inside the header"):
        parse_rdb(b"REDIS")
    with pytest.raises(
        RdbFormatError, match="offset 0: RDB version 8 does not exist after the VALKEY"
    ):
        parse_rdb(b"VALKEY0080" + b"\xff")


def test_error_offsets_point_at_the_bad_byte() -> None:
    body = b"\xfe\x00" + key(0, "k", enc_str("v")) + b"\x08"
    data = rdb_file(body)
    with pytest.raises(RdbFormatError) as info:
        parse_rdb(data, "dump.rdb")
    assert str(info.value).startswith(f"dump.rdb: offset {9 + len(body) - 1}: ")
