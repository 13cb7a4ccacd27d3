"""Sizes of Redis' listpack encoding, so the model packs stream nodes as Redis does.

A stream stores its entries in listpacks ("nodes") of at most
``stream-node-max-entries`` entries and ``stream-node-max-bytes`` bytes, and
approximate trimming (``MAXLEN ~``/``MINID ~``) only drops whole nodes. Only the
byte *sizes* matter here: an element is its encoding (a small integer, or a
length-prefixed string) followed by a back-length of 1 to 5 bytes.
"""

from __future__ import annotations

from collections.abc import Sequence

from pelengine.model.ids import parse_ll
from pelengine.model.text import byte_length as text_byte_length

HEADER_AND_END = 6 + 1  # total bytes (u32) + element count (u16), and the end marker
FLAG_SAMEFIELDS = 2


def _backlen(size: int) -> int:
    if size <= 127:
        return 1
    if size < 16383:
        return 2
    if size < 2097151:
        return 3
    if size < 268435455:
        return 4
    return 5


def int_element(value: int) -> int:
    """Bytes of an integer element, back-length included."""
    if 0 <= value <= 127:
        size = 1
    elif -4096 <= value <= 4095:
        size = 2
    elif -32768 <= value <= 32767:
        size = 3
    elif -8388608 <= value <= 8388607:
        size = 4
    elif -2147483648 <= value <= 2147483647:
        size = 5
    else:
        size = 9
    return size + _backlen(size)


def byte_length(text: str) -> int:
    """Bytes of the argument ``text`` stands for (its ``\\xhh`` escapes are one byte
    each: :mod:`pelengine.model.text`)."""
    return text_byte_length(text)


def str_element(text: str) -> int:
    """Bytes of a string element: strings that read as integers are stored as integers."""
    as_int = parse_ll(text)
    if as_int is not None:
        return int_element(as_int)
    n = byte_length(text)
    size = 1 + n if n < 64 else 2 + n if n < 4096 else 5 + n
    return size + _backlen(size)


def new_node_bytes(fields: Sequence[str]) -> int:
    """An empty node's listpack: header, master entry (count 0, deleted 0, fields, 0)."""
    return (
        HEADER_AND_END
        + int_element(0)
        + int_element(0)
        + int_element(len(fields))
        + sum(str_element(f) for f in fields)
        + int_element(0)
    )


def entry_bytes(
    ms_delta: int, seq_delta: int, fields: Sequence[str], values: Sequence[str], same: bool
) -> int:
    """One entry: flags, ID deltas from the master ID, [field count, fields], values, count."""
    n = len(values)
    size = int_element(FLAG_SAMEFIELDS if same else 0)
    size += int_element(ms_delta) + int_element(seq_delta)
    pieces = n + 3
    if not same:
        size += int_element(n) + sum(str_element(f) for f in fields)
        pieces += n + 1
    size += sum(str_element(v) for v in values)
    return size + int_element(pieces)


def counter_delta(old: int, new: int) -> int:
    """Bytes gained when a node's live or deleted counter changes from ``old`` to ``new``."""
    return int_element(new) - int_element(old)
