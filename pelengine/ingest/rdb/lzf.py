"""LZF, the compression of RDB strings: a control byte below 32 copies the next
control+1 bytes; otherwise its top 3 bits (7 meaning "add the next byte") plus 2 are a
length to copy from earlier output, at a distance given by its low 5 bits, the next
byte, plus 1."""

from __future__ import annotations


class LzfError(Exception):
    """LZF data that does not expand to what it declares (the reader names where)."""


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
                raise LzfError(f"literal run of {run} bytes passes the end of the input")
            out += src[i : i + run]
            i += run
        else:  # a copy from earlier output
            length = ctrl >> 5
            if i >= n:
                raise LzfError("back reference cut short")
            if length == 7:
                length += src[i]
                i += 1
                if i >= n:
                    raise LzfError("back reference cut short")
            distance = ((ctrl & 0x1F) << 8) + src[i] + 1
            i += 1
            start = len(out) - distance
            if start < 0:
                raise LzfError(f"back reference {distance} bytes before the start of the output")
            length += 2
            if distance >= length:
                out += out[start : start + length]
            else:  # overlapping: the last `distance` bytes repeat
                pattern = out[start:]
                reps, rest = divmod(length, distance)
                out += pattern * reps + pattern[:rest]
        if len(out) > out_len:
            raise LzfError(f"expands past the declared {out_len} bytes")
    if len(out) != out_len:
        raise LzfError(f"expands to {len(out)} bytes, not the declared {out_len}")
    return bytes(out)
