"""Parse Redis ``MONITOR`` output into rows of the events table (a *command log*).

A MONITOR line, as the server writes it (``replicationFeedMonitors``)::

    1700000000.123456 [0 127.0.0.1:53012] "XADD" "s" "*" "f" "v"

* ``seconds.micros`` — the server's clock when the line was fed to monitors,
  which is right *after* the command ran. ``ts_ms`` is that time floored to the
  millisecond. A command's own clock reads (an ``XADD *`` ID, a delivery time)
  happen a few microseconds earlier, so when a millisecond ends between the two,
  ``ts_ms`` is one millisecond later than the command's "now" (see docs/ingest.md).
* ``[db client]`` — the logical db and the client: ``ip:port``, ``[ipv6]:port``, ``unix:/path``,
  or ``lua`` for commands a script ran (``[0 lua]``).
* the arguments, each double-quoted with ``sdscatrepr`` escapes: ``\\"``,
  ``\\\\``, ``\\n``, ``\\r``, ``\\t``, ``\\a``, ``\\b`` and ``\\xHH`` (any other byte
  that is not printable ASCII). An argument's bytes that are UTF-8 become those
  characters; in one that is not, every byte of 0x80 or more is the four characters
  ``\\xhh`` (:func:`pelengine.model.text.readable`, docs/input.md).

``redis-cli MONITOR`` adds nothing, but a raw RESP capture keeps the leading
``+`` of the simple-string reply and the first line is the ``OK`` (``+OK``) that
acknowledges MONITOR itself; both are handled. ``MULTI``/``EXEC`` appear as
commands of their own (the queued commands appear when ``EXEC`` runs them,
before the ``EXEC`` line). A blocking ``XREADGROUP`` appears once, when it is
called; being served or timing out prints nothing. Administrative commands
(``CONFIG``, ``DEBUG``, ...) never appear.

Lines that are not commands are counted and the first few kept as examples;
they never stop the parse. ``seq`` is the command's position in the capture
(1, 2, ... after ``start_seq``), ``source`` is ``"monitor"``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, TextIO

from pelengine.model.text import readable
from pelengine.model.units import LUA_CLIENT, SCRIPT_CALLS

SOURCE = "monitor"
MAX_EXAMPLES = 5
# how far below the line's millisecond the first row of a capture may look (it has
# no line before it to bound its clock read)
FIRST_ROW_WINDOW_MS = 1000

# the client ends at the first "] " (an IPv6 peer is "[::1]:6379")
_HEAD = re.compile(r"\+?(\d+)\.(\d{1,6}) \[(\d+) (.+?)\](?: |$)")
_SIMPLE_ESCAPES = {"n": "\n", "r": "\r", "t": "\t", "a": "\a", "b": "\b", '"': '"', "\\": "\\"}
_HEX = frozenset("0123456789abcdefABCDEF")


class MonitorParseError(ValueError):
    """A line that is not a MONITOR command line (the message says why)."""


@dataclass
class MonitorCommand:
    """One parsed command line."""

    ts_us: int
    db: int
    client: str
    argv: list[str]

    @property
    def ts_ms(self) -> int:
        return self.ts_us // 1000


@dataclass
class ParseStats:
    """What a parse saw: commands, acknowledgements, and lines that are not commands."""

    lines: int = 0
    commands: int = 0
    acks: int = 0
    blank: int = 0
    bad: int = 0
    examples: list[tuple[int, str, str]] = field(default_factory=list)  # (line no, text, why)
    # seqs of ``XADD ... *`` rows whose ID millisecond the capture cannot pin down: the
    # line before the command (or, 7.2+, before its execution unit) is from an earlier
    # millisecond (or there is none), so the ms may have ticked between the clock read
    # and the line's timestamp (``UnitWindows``)
    star_uncertain: list[int] = field(default_factory=list)

    def note_bad(self, lineno: int, text: str, why: str) -> None:
        self.bad += 1
        if len(self.examples) < MAX_EXAMPLES:
            self.examples.append((lineno, text if len(text) <= 200 else text[:197] + "...", why))

    def describe(self) -> str:
        out = f"{self.commands} commands from {self.lines} lines"
        if self.acks:
            out += f", {self.acks} OK line(s)"
        if self.bad:
            out += f", {self.bad} line(s) that are not commands (skipped)"
        if self.star_uncertain:
            out += (
                f", {len(self.star_uncertain)} XADD '*' row(s) right after a millisecond"
                " boundary (their ID's ms may be one less than ts_ms)"
            )
        return out


def _unquote(text: str, pos: int) -> tuple[str, int]:
    """The argument starting at ``text[pos] == '"'``: (value, position after it).
    ``\\xHH`` escapes are bytes: the argument's bytes become text as every path makes
    them (:func:`pelengine.model.text.readable`)."""
    out: list[str] = []
    raw: bytearray | None = None  # the bytes so far, once an argument has a \xHH escape
    i = pos + 1
    n = len(text)
    while i < n:
        ch = text[i]
        if ch == "\\" and i + 1 < n:
            nxt = text[i + 1]
            if nxt == "x" and i + 3 < n and text[i + 2] in _HEX and text[i + 3] in _HEX:
                if raw is None:
                    raw = bytearray("".join(out).encode("utf-8"))
                raw.append(int(text[i + 2 : i + 4], 16))
                i += 4
                continue
            if nxt in _SIMPLE_ESCAPES:
                if raw is None:
                    out.append(_SIMPLE_ESCAPES[nxt])
                else:
                    raw += _SIMPLE_ESCAPES[nxt].encode("utf-8")
                i += 2
                continue
            raise MonitorParseError(f"unknown escape \\{nxt} at column {i + 1}")
        if ch == '"':
            if raw is None:
                value = "".join(out)
                return (value if "\\x" not in value else readable(value.encode())), i + 1
            return readable(bytes(raw)), i + 1
        if raw is None:
            out.append(ch)
        else:
            raw += ch.encode("utf-8")
        i += 1
    raise MonitorParseError("unterminated quoted argument")


def parse_line(line: str) -> MonitorCommand:
    """Parse one MONITOR command line (without its line ending); raise MonitorParseError."""
    m = _HEAD.match(line)
    if m is None:
        raise MonitorParseError("no 'seconds.micros [db client]' prefix")
    sec, frac, db, client = m.groups()
    ts_us = int(sec) * 1_000_000 + int(frac.ljust(6, "0"))
    argv: list[str] = []
    pos = m.end()
    n = len(line)
    while pos < n:
        if line[pos] != '"':
            raise MonitorParseError(f"expected '\"' at column {pos + 1}")
        value, pos = _unquote(line, pos)
        argv.append(value)
        if pos < n:
            if line[pos] != " ":
                raise MonitorParseError(f"expected a space at column {pos + 1}")
            pos += 1
            if pos == n:
                raise MonitorParseError("trailing space")
    if not argv:
        raise MonitorParseError("no command")
    return MonitorCommand(ts_us=ts_us, db=int(db), client=client, argv=argv)


def _strip_eol(raw: str) -> str:
    return raw.rstrip("\r\n")


def iter_commands(
    lines: Iterable[str], stats: ParseStats | None = None
) -> Iterator[MonitorCommand]:
    """Commands of a capture in line order; other lines are counted in ``stats``."""
    stats = stats if stats is not None else ParseStats()
    for lineno, raw in enumerate(lines, start=1):
        stats.lines += 1
        line = _strip_eol(raw)
        if not line.strip():
            stats.blank += 1
            continue
        if line.strip() in ("OK", "+OK"):
            stats.acks += 1
            continue
        try:
            cmd = parse_line(line)
        except MonitorParseError as exc:
            stats.note_bad(lineno, line, str(exc))
            continue
        stats.commands += 1
        yield cmd


class UnitWindows:
    """Where a command's clock read lies, between which capture lines (ms, inclusive).

    A line is stamped after its command ran and commands run one at a time, so a
    command read its clock between the line before it and its own line. 7.2+ reads
    the clock once per execution unit, before the unit's first command: for every
    command of a ``MULTI``/``EXEC`` unit the window is the one of the unit's first
    queued command (MONITOR shows them when ``EXEC`` runs them); for a script's
    commands (client ``lua``, after their ``EVAL``/``FCALL`` line, which MONITOR
    feeds once the script's clock was read) it is the window of the script's line.
    The same units as the replay's (``Replayer._place``).
    """

    def __init__(self, snapshot: bool) -> None:
        self.snapshot = snapshot
        self.prev_ms: int | None = None
        self.units: dict[str | None, tuple[int, int] | None] = {}
        self.script: tuple[int, int] | None = None

    def clock_window(self, argv: list[str], ts_ms: int, client: str | None) -> tuple[int, int]:
        """The window of this row's command (rows in capture order, each once)."""
        prev, self.prev_ms = self.prev_ms, ts_ms
        window = (min(prev, ts_ms) if prev is not None else ts_ms - FIRST_ROW_WINDOW_MS, ts_ms)
        if not self.snapshot:
            return window
        if client == LUA_CLIENT:
            return self.script or window
        name = argv[0].upper() if argv else ""
        if name == "MULTI":
            self.units[client] = None
        elif name in ("EXEC", "DISCARD"):
            self.units.pop(client, None)
        elif client in self.units:
            window = self.units[client] or window
            self.units[client] = window
        self.script = window if name in SCRIPT_CALLS else None
        return window


def iter_rows(
    lines: Iterable[str], start_seq: int = 1, stats: ParseStats | None = None
) -> Iterator[dict[str, Any]]:
    """Events rows (``seq, ts_ms, argv, db, client, source``); ``seq`` counts from ``start_seq``."""
    stats = stats if stats is not None else ParseStats()
    # where each command read its clock: 7.0 (at the command) or 7.2+ (at its unit)
    per_command, per_unit = UnitWindows(snapshot=False), UnitWindows(snapshot=True)
    for seq, cmd in enumerate(iter_commands(lines, stats), start=start_seq):
        ts_ms = cmd.ts_ms
        lo = min(
            per_command.clock_window(cmd.argv, ts_ms, cmd.client)[0],
            per_unit.clock_window(cmd.argv, ts_ms, cmd.client)[0],
        )
        if lo < ts_ms and cmd.argv[0].upper() == "XADD" and "*" in cmd.argv[2:]:
            stats.star_uncertain.append(seq)
        yield {
            "seq": seq,
            "ts_ms": ts_ms,
            "argv": cmd.argv,
            "db": cmd.db,
            "client": cmd.client,
            "source": SOURCE,
        }


def open_capture(path: str) -> TextIO:
    """Open a capture file (MONITOR output is ASCII; a stray byte becomes U+FFFD)."""
    return open(path, encoding="utf-8", errors="replace", newline="")


def parse_file(path: str, start_seq: int = 1) -> tuple[list[dict[str, Any]], ParseStats]:
    """All rows of a capture file and the parse statistics."""
    stats = ParseStats()
    with open_capture(path) as fh:
        rows = list(iter_rows(fh, start_seq, stats))
    return rows, stats
