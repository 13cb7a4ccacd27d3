"""Run commands against the real server and record them as rows of the events table.

Every command goes out in one pipelined round trip ``TIME; <command>; TIME`` on a
single connection, so nothing can run between the two ``TIME`` replies. The
``TIME`` before is the row's ``ts_ms`` (the server's clock when the command
started); the one after bounds how late the command's own clock reads could be.

Execution units go out the same way, as ONE round trip: ``TIME; MULTI; cmd...;
EXEC (or DISCARD); TIME`` or ``TIME; EVAL/EVALSHA; TIME``. Their rows are what a
MONITOR capture shows (the events contract for units):

* a transaction: ``MULTI``, then each queued command EXEC ran, then ``EXEC``; all
  with the connection's client. A ``DISCARD``ed unit ran nothing: ``MULTI``,
  ``DISCARD``. A command the server refused when it was queued (arity, unknown
  command: the unit then ends in ``EXECABORT``) is a row with its error, as a
  refused single command is; the commands queued around it never ran and are not
  rows.
* a script: the ``EVAL``/``EVALSHA`` row, then one row per command the script
  called, client ``lua`` (MONITOR's ``[db lua]``). The script calls every command
  through ``redis.pcall`` and returns all their results, so each row has its own
  reply or error.

Every row of a unit has ``ts_ms`` = the ``TIME`` before the unit and
``ts_after_ms`` = the ``TIME`` after it (a 7.2+ server reads its clock once, in
between; 7.0 reads it on every command, all in between too).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

SOURCE = "test"
# the client MONITOR names for the commands a script runs (``[0 lua]``)
LUA_CLIENT = "lua"


def time_ms(reply: Any) -> int:
    """Unix ms from a ``TIME`` reply ``[seconds, microseconds]``."""
    sec, usec = reply
    return int(sec) * 1000 + int(usec) // 1000


def parse_id(text: str) -> tuple[int, int]:
    ms, _, seq = text.partition("-")
    return int(ms), int(seq or 0)


def format_id(ms: int, seq: int) -> str:
    return f"{ms}-{seq}"


@dataclass
class Record:
    """One command as sent, as recorded, and what the server answered."""

    seq: int
    db: int
    client: str | None
    sent: list[str]
    argv: list[str]
    reply: Any
    error: str | None
    ts_ms: int
    ts_after_ms: int
    note: str = ""

    def row(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "ts_ms": self.ts_ms,
            "argv": list(self.argv),
            "db": self.db,
            "client": self.client,
            "source": SOURCE,
        }

    def describe(self) -> str:
        outcome = f"ERR {self.error}" if self.error is not None else f"-> {_short(self.reply)}"
        sent = "" if self.sent == self.argv else f" (sent {self.sent})"
        span = self.ts_after_ms - self.ts_ms
        return (
            f"seq={self.seq} db={self.db} ts={self.ts_ms}(+{span}) {self.argv}{sent} {outcome}"
            + (f" [{self.note}]" if self.note else "")
        )


def _short(value: Any, limit: int = 160) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclass
class Unit:
    """One execution unit as sent, and the rows it became.

    ``kind``: ``multi`` or ``script``; ``end``: ``EXEC``/``DISCARD`` or
    ``EVAL``/``EVALSHA``. ``inner[i]`` is the row of ``commands[i]`` (``None`` where
    the command never ran: a discarded or aborted transaction).
    """

    kind: str
    end: str
    commands: list[list[str]]
    records: list[Record]
    inner: list[Record | None]
    aborted: bool = False  # EXECABORT: a command was refused when it was queued

    def describe(self) -> str:
        head = f"{self.kind} unit ({self.end}{', aborted' if self.aborted else ''})"
        return "\n".join([head, *("  " + r.describe() for r in self.records)])


def key_positions(argv: Sequence[str]) -> list[int]:
    """Where the keys of a stream command are (what a script passes as ``KEYS``)."""
    name = argv[0].upper() if argv else ""
    if name == "XGROUP":
        return [2] if len(argv) > 2 else []
    if name in ("XREADGROUP", "XREAD"):
        upper = [a.upper() for a in argv]
        if "STREAMS" not in upper:
            return []
        first = upper.index("STREAMS") + 1
        return list(range(first, first + (len(argv) - first) // 2))
    return [1] if len(argv) > 1 else []


def _lua_string(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def lua_script(commands: Sequence[Sequence[str]], keys: Sequence[str]) -> str:
    """A script calling each command through ``redis.pcall`` (keys as ``KEYS[i]``) and
    returning every result, errors included, in order."""
    lines = ["local r = {}"]
    for i, argv in enumerate(commands, 1):
        positions = set(key_positions(argv))
        args = [
            f"KEYS[{keys.index(a) + 1}]" if j in positions and a in keys else _lua_string(a)
            for j, a in enumerate(argv)
        ]
        lines.append(f"r[{i}] = redis.pcall({', '.join(args)})")
    lines.append("return r")
    return "\n".join(lines)


def _plain(reply: Any, nested: bool = False) -> Any:
    """A reply with the errors nested in it as text (EXEC/EVAL rows: each command has
    its own row); an error reply itself stays one."""
    if isinstance(reply, Exception) and nested:
        return f"(error) {reply}"
    if isinstance(reply, list):
        return [_plain(r, nested=True) for r in reply]
    return reply


class SeqCounter:
    def __init__(self, start: int = 1) -> None:
        self.value = start - 1

    def next(self) -> int:
        self.value += 1
        return self.value


@dataclass
class Recorder:
    """Sends commands on one connection (``db``) and keeps the recorded rows.

    ``seq`` is shared between recorders through ``SeqCounter`` so several dbs can be
    interleaved into one events table in execution order.
    """

    client: redis.Redis
    db: int
    counter: SeqCounter
    client_name: str | None = None
    records: list[Record] = field(default_factory=list)
    max_span_ms: int = 0
    # "replace": an XADD '*' is logged with the generated ID (a capture that knows it);
    # "keep": logged as '*' whenever ts_ms determines the ID (the engine must generate it).
    star_mode: str = "replace"
    units: list[Unit] = field(default_factory=list)
    _loaded: set[str] = field(default_factory=set)  # scripts loaded for EVALSHA

    def __post_init__(self) -> None:
        if self.client_name is None:
            info = self.client.execute_command("CLIENT", "INFO")
            for part in str(info).split():
                if part.startswith("addr="):
                    self.client_name = part[len("addr=") :]

    def run(self, argv: list[str], star_index: int | None = None, note: str = "") -> Record:
        """Execute ``argv``; with ``star_index`` (an XADD ``*``) record the generated ID."""
        sent = [str(a) for a in argv]
        t_before, (reply,), t_after = self._round_trip([sent])
        return self._record(sent, reply, t_before, t_after, star_index=star_index, note=note)

    def run_multi(
        self, commands: Sequence[tuple[list[str], int | None]], discard: bool = False
    ) -> Unit:
        """``MULTI``, the commands (``(argv, star_index)``), ``EXEC`` or ``DISCARD``: one unit."""
        sent = [[str(a) for a in argv] for argv, _ in commands]
        end = "DISCARD" if discard else "EXEC"
        t0, replies, t1 = self._round_trip([["MULTI"], *sent, [end]])
        multi, queued, closing = replies[0], replies[1:-1], replies[-1]
        if isinstance(multi, Exception):
            raise RuntimeError(f"MULTI failed: {multi!r}")
        refused = [isinstance(q, Exception) for q in queued]
        ran = not discard and not any(refused)
        if ran and not isinstance(closing, list):
            raise RuntimeError(f"EXEC of {sent} answered {closing!r}")
        records = [self._record(["MULTI"], multi, t0, t1, note="multi")]
        inner: list[Record | None] = []
        for j, argv in enumerate(sent):
            if ran or refused[j]:  # EXEC's reply j, or the error that refused it when queued
                got = closing[j] if ran else queued[j]
                records.append(
                    self._record(argv, got, t0, t1, star_index=commands[j][1], note="multi")
                )
                inner.append(records[-1])
            else:
                inner.append(None)
        records.append(self._record([end], _plain(closing), t0, t1, note="multi"))
        unit = Unit("multi", end, sent, records, inner, aborted=not discard and not ran)
        self.units.append(unit)
        return unit

    def run_script(
        self, commands: Sequence[tuple[list[str], int | None]], evalsha: bool = False
    ) -> Unit:
        """A script calling the commands (``(argv, star_index)``) through ``redis.pcall``,
        sent as ``EVAL`` or (loaded first, unlogged) ``EVALSHA``: one unit."""
        sent = [[str(a) for a in argv] for argv, _ in commands]
        keys: list[str] = []
        for argv in sent:
            keys += [argv[j] for j in key_positions(argv) if argv[j] not in keys]
        script = lua_script(sent, keys)
        if evalsha:
            sha = hashlib.sha1(script.encode()).hexdigest()
            if sha not in self._loaded:
                loaded = self.client.execute_command("SCRIPT", "LOAD", script)
                assert loaded == sha, (loaded, sha)
                self._loaded.add(sha)
            call = ["EVALSHA", sha, str(len(keys)), *keys]
        else:
            call = ["EVAL", script, str(len(keys)), *keys]
        t0, (reply,), t1 = self._round_trip([call])
        if not isinstance(reply, list) or len(reply) != len(sent):
            raise RuntimeError(f"script of {sent} answered {reply!r}")
        records = [self._record(call, _plain(reply), t0, t1, note="script")]
        for j, argv in enumerate(sent):
            star_index = commands[j][1]
            records.append(
                self._record(
                    argv, reply[j], t0, t1, star_index=star_index, note="script", client=LUA_CLIENT
                )
            )
        unit = Unit("script", call[0], sent, records, list(records[1:]))
        self.units.append(unit)
        return unit

    def _round_trip(self, commands: list[list[str]]) -> tuple[int, list[Any], int]:
        """``TIME; commands...; TIME``, one pipelined round trip: (ms before, replies, ms after)."""
        pipe = self.client.pipeline(transaction=False)
        pipe.execute_command("TIME")
        for argv in commands:
            pipe.execute_command(*argv)
        pipe.execute_command("TIME")
        before, *replies, after = pipe.execute(raise_on_error=False)
        if isinstance(before, Exception) or isinstance(after, Exception):
            raise RuntimeError(f"TIME failed around {commands}: {before!r} {after!r}")
        for reply in replies:
            if isinstance(reply, redis.ConnectionError | redis.TimeoutError):
                raise reply
        return time_ms(before), replies, time_ms(after)

    def _record(
        self,
        sent: list[str],
        reply: Any,
        t_before: int,
        t_after: int,
        *,
        star_index: int | None = None,
        note: str = "",
        client: str | None = None,
    ) -> Record:
        """The row of one command that ran between the TIMEs ``t_before`` and ``t_after``."""
        error = None
        if isinstance(reply, Exception):
            error = str(reply)
            if isinstance(reply, redis.exceptions.ExecAbortError):
                error = f"EXECABORT {error}"  # the code redis-py took off
            reply = None
        recorded = list(sent)
        if star_index is not None and error is None and isinstance(reply, str):
            generated_ms = int(reply.split("-", 1)[0])
            # Keep '*' only where a replay from ts_ms must generate the same ID: the
            # clock did not tick meanwhile, or the ID came from the stream's last ID.
            unambiguous = t_before == t_after or generated_ms > t_after
            if self.star_mode == "replace" or not unambiguous:
                recorded[star_index] = reply  # the generated ID, as a capture that knows it
        record = Record(
            seq=self.counter.next(),
            db=self.db,
            client=client or self.client_name,
            sent=sent,
            argv=recorded,
            reply=reply,
            error=error,
            ts_ms=t_before,
            ts_after_ms=t_after,
            note=note,
        )
        self.max_span_ms = max(self.max_span_ms, record.ts_after_ms - record.ts_ms)
        self.records.append(record)
        return record

    def probe(self, *argv: str) -> tuple[int, Any]:
        """A read-only look at the server that is NOT part of the log: (server ms, reply)."""
        pipe = self.client.pipeline(transaction=False)
        pipe.execute_command("TIME")
        pipe.execute_command(*argv)
        now, reply = pipe.execute(raise_on_error=False)
        if isinstance(reply, Exception):
            reply = None
        return time_ms(now), reply

    def rows(self) -> list[dict[str, Any]]:
        return [r.row() for r in self.records]


def dump_records(
    records: list[Record], path: str | Path, extra: dict[str, Any] | None = None
) -> Path:
    """Write the recorded rows (plus what the server answered) as JSON lines for reproduction."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as fh:
        if extra:
            fh.write(json.dumps({"meta": extra}, default=str) + "\n")
        for r in records:
            row = r.row()
            row.update(
                sent=r.sent, reply=r.reply, error=r.error, ts_after_ms=r.ts_after_ms, note=r.note
            )
            fh.write(json.dumps(row, default=str) + "\n")
    return path
