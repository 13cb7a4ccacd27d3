"""The one text form of an argument's bytes (docs/input.md, "argv").

Redis is binary-safe; the events table and the output tables hold text. An argument
that is valid UTF-8 is itself. One that is not has every byte of 0x80 or more written
as the four characters ``\\xhh`` (lower-case hex) and every other byte unchanged. The
conform stage does the same in Spark SQL for a binary ``argv``, and the ingest
commands write arguments this way, so the same bytes give the same name on every path.
"""

from __future__ import annotations

_HIGH = {b: f"\\x{b:02x}" for b in range(0x80, 0x100)}


def readable(raw: bytes) -> str:
    """``raw`` as text: itself when it is UTF-8, else its bytes >= 0x80 as ``\\xhh``."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return "".join(_HIGH.get(b) or chr(b) for b in raw)
