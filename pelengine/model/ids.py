"""Stream IDs and the number parsers Redis applies to command arguments.

A stream ID is a pair of unsigned 64-bit integers ``(ms, seq)`` ordered as a
tuple. Parsing follows the server's rules exactly, including its quirks:
``-``/``+`` as the extreme IDs where allowed, a missing sequence part, the
``ms-*`` form for XADD, and the fallback to ``strtoull`` (which tolerates
leading blanks, a sign and leading zeros) when the strict integer parse fails.
"""

from __future__ import annotations

import re
from typing import NamedTuple

U64_MAX = (1 << 64) - 1
I64_MAX = (1 << 63) - 1
I64_MIN = -(1 << 63)


class StreamID(NamedTuple):
    """A stream entry ID: milliseconds part and sequence part."""

    ms: int
    seq: int

    def __str__(self) -> str:
        return f"{self.ms}-{self.seq}"


ZERO_ID = StreamID(0, 0)
MAX_ID = StreamID(U64_MAX, U64_MAX)

_STRICT_LL = re.compile(r"-?[1-9][0-9]*|0")
_SPACES = " \t\n\v\f\r"


class ParseError(ValueError):
    """An argument Redis would refuse; ``kind`` is the error kind counted in the run report."""

    def __init__(self, kind: str, message: str = "") -> None:
        super().__init__(message or kind)
        self.kind = kind


def parse_ll(text: str) -> int | None:
    """Redis' strict signed 64-bit parse (``string2ll``); None when it refuses the text."""
    if len(text) > 20 or not _STRICT_LL.fullmatch(text):
        return None
    value = int(text)
    if value < I64_MIN or value > I64_MAX:
        return None
    return value


def _strtoull(text: str) -> int | None:
    """C ``strtoull`` on the whole string, as Redis uses it after ``string2ll`` fails."""
    i = 0
    while i < len(text) and text[i] in _SPACES:
        i += 1
    negative = False
    if i < len(text) and text[i] in "+-":
        negative = text[i] == "-"
        i += 1
    digits = text[i:]
    if not digits or not digits.isascii() or not digits.isdigit():
        return None
    value = int(digits)
    if value > U64_MAX:
        return None
    if negative:
        value = (-value) & U64_MAX
    return value


def parse_ull(text: str) -> int | None:
    """Redis' ``string2ull``: strict parse first, then ``strtoull``'s tolerance."""
    strict = parse_ll(text)
    if strict is not None:
        return strict if strict >= 0 else None
    if not text:
        return None
    return _strtoull(text)


def parse_id(
    text: str,
    *,
    missing_seq: int = 0,
    strict: bool = False,
    allow_seq_star: bool = False,
) -> tuple[StreamID, bool]:
    """Parse a stream ID argument.

    Returns the ID and whether the sequence part was given (False only for the
    ``ms-*`` form, accepted when ``allow_seq_star``). ``strict`` refuses the
    bare ``-`` and ``+``. Raises ParseError(kind="invalid_id").
    """
    if len(text) > 127:
        raise ParseError("invalid_id")
    if text == "-":
        if strict:
            raise ParseError("invalid_id")
        return ZERO_ID, True
    if text == "+":
        if strict:
            raise ParseError("invalid_id")
        return MAX_ID, True
    head, dash, tail = text.partition("-")
    ms = parse_ull(head)
    if ms is None:
        raise ParseError("invalid_id")
    if not dash:
        return StreamID(ms, missing_seq), True
    if allow_seq_star and tail == "*":
        return StreamID(ms, 0), False
    seq = parse_ull(tail)
    if seq is None:
        raise ParseError("invalid_id")
    return StreamID(ms, seq), True


def parse_strict_id(text: str, missing_seq: int = 0) -> StreamID:
    """Parse an ID where ``-`` and ``+`` are not allowed."""
    return parse_id(text, missing_seq=missing_seq, strict=True)[0]


def incr_id(value: StreamID) -> StreamID | None:
    """The next ID, or None when ``value`` is the largest possible ID."""
    if value.seq == U64_MAX:
        if value.ms == U64_MAX:
            return None
        return StreamID(value.ms + 1, 0)
    return StreamID(value.ms, value.seq + 1)


def format_id(value: StreamID | None) -> str | None:
    """``"ms-seq"`` as Redis prints it, or None."""
    return None if value is None else f"{value.ms}-{value.seq}"


def to_signed(value: int) -> int:
    """An unsigned 64-bit value as C's int64 would read it (two's complement)."""
    return value - (1 << 64) if value > I64_MAX else value


def to_bigint(value: int) -> int | None:
    """An ID part for a BIGINT column: None when it does not fit (ms or seq >= 2^63).

    The ``id`` string is always exact; a null ``id_ms``/``id_seq`` never sorts
    an ID into the wrong place, a wrapped negative value would.
    """
    return value if value <= I64_MAX else None


def id_parts(entry_id: StreamID) -> tuple[str, int | None, int | None]:
    """An entry ID the three ways the tables carry it: "ms-seq" (``id``), and its parts
    for BIGINT columns (``id_ms``, ``id_seq``, see ``to_bigint``)."""
    ms, seq = entry_id
    return (
        f"{ms}-{seq}",
        ms if ms <= I64_MAX else None,
        seq if seq <= I64_MAX else None,
    )
