"""Redis' CRC-64 (Jones polynomial, reflected, initial value 0, no final xor), which an
RDB file stores after its EOF opcode; large inputs checksummed side by side with numpy."""

from __future__ import annotations

from typing import Any

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
