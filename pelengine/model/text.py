"""The one text form of an argument's bytes (docs/input.md, "argv").

Redis is binary-safe; the events table and the output tables hold text. An argument
that is valid UTF-8 and holds no backslash followed by ``x`` is itself. Any other
argument is written escaped: every byte of 0x80 or more and every backslash as the four
characters ``\\xhh`` (lower-case hex), every other byte unchanged. The form is lossless:
in an escaped text every ``\\x`` begins an escape, and an unescaped one has none, so
:func:`raw_bytes` gives back the exact bytes of every text this module writes. The
conform stage does the same in Spark SQL for a binary ``argv`` (a string ``argv`` is
read as text already in this form), and the ingest commands write arguments this way,
so the same bytes give the same name on every path.
"""

from __future__ import annotations

import re

_ESCAPED = {b: f"\\x{b:02x}" for b in [*range(0x80, 0x100), 0x5C]}
_ESCAPE = re.compile(rb"\\x([0-9a-f]{2})")
# sdscatrepr's named escapes (any other byte outside 0x20..0x7e is \xhh)
_SDS_ESCAPES = {0x5C: "\\\\", 0x22: '\\"', 0x0A: "\\n", 0x0D: "\\r", 0x09: "\\t"}
_SDS_ESCAPES.update({0x07: "\\a", 0x08: "\\b"})


def readable(raw: bytes) -> str:
    """``raw`` as text: itself when it is UTF-8 without ``\\x``, else escaped."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        pass
    else:
        if "\\x" not in text:
            return text
    return "".join(_ESCAPED.get(b) or chr(b) for b in raw)


def raw_bytes(text: str) -> bytes:
    """The bytes ``text`` stands for: each ``\\xhh`` is the byte hh (the inverse of
    :func:`readable`)."""
    raw = text.encode("utf-8", "surrogateescape")
    if b"\\x" not in raw:
        return raw
    return _ESCAPE.sub(lambda m: bytes((int(m[1], 16),)), raw)


def byte_length(text: str) -> int:
    """``len(raw_bytes(text))``, without building the bytes."""
    raw = text.encode("utf-8", "surrogateescape")
    if b"\\x" not in raw:
        return len(raw)
    return len(raw) - 3 * len(_ESCAPE.findall(raw))


def sds_repr(raw: bytes) -> str:
    """``raw`` quoted as the server quotes a string (``sdscatrepr``: a MONITOR line's
    arguments, ``redis-cli``'s strings): in double quotes, with escapes for quotes,
    backslashes, control and non-ASCII bytes."""
    out = ['"']
    for byte in raw:
        if byte in _SDS_ESCAPES:
            out.append(_SDS_ESCAPES[byte])
        elif 0x20 <= byte <= 0x7E:
            out.append(chr(byte))
        else:
            out.append(f"\\x{byte:02x}")
    out.append('"')
    return "".join(out)
