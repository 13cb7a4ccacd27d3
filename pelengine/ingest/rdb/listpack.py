"""Decode a listpack, the container of a stream node's entries (and of small lists,
sets, sorted sets and hashes): every element, checked end to end (the package docstring
describes the encoding)."""

from __future__ import annotations

from pelengine.ingest.rdb.format import U32


def decode_listpack(blob: bytes, where: str = "listpack") -> list[int | bytes]:
    """Every element of a listpack: ``int`` for integer encodings, ``bytes`` for strings.

    Raises ``ValueError`` (with the byte within the listpack) if it is malformed.
    """
    size = len(blob)
    if size < 7:
        raise ValueError(f"{where}: {size} bytes, shorter than a listpack header and end")
    total = U32.unpack_from(blob, 0)[0]
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
            n = 5 + U32.unpack_from(blob, p + 1)[0]
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
