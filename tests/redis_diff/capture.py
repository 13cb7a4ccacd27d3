"""Run commands against the real server and record them as rows of the events table.

Every command goes out in one pipelined round trip ``TIME; <command>; TIME`` on a
single connection, so nothing can run between the two ``TIME`` replies. The
``TIME`` before is the row's ``ts_ms`` (the server's clock when the command
started); the one after bounds how late the command's own clock reads could be.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

SOURCE = "test"


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

    def __post_init__(self) -> None:
        if self.client_name is None:
            info = self.client.execute_command("CLIENT", "INFO")
            for part in str(info).split():
                if part.startswith("addr="):
                    self.client_name = part[len("addr=") :]

    def run(self, argv: list[str], star_index: int | None = None, note: str = "") -> Record:
        """Execute ``argv``; with ``star_index`` (an XADD ``*``) record the generated ID."""
        sent = [str(a) for a in argv]
        pipe = self.client.pipeline(transaction=False)
        pipe.execute_command("TIME")
        pipe.execute_command(*sent)
        pipe.execute_command("TIME")
        before, reply, after = pipe.execute(raise_on_error=False)
        if isinstance(before, Exception) or isinstance(after, Exception):
            raise RuntimeError(f"TIME failed around {sent}: {before!r} {after!r}")
        error = None
        if isinstance(reply, redis.ConnectionError | redis.TimeoutError):
            raise reply
        if isinstance(reply, Exception):
            error = str(reply)
            reply = None
        recorded = list(sent)
        t_before, t_after = time_ms(before), time_ms(after)
        if star_index is not None and error is None and isinstance(reply, str):
            generated_ms = int(reply.split("-", 1)[0])
            # Keep '*' only where a replay from ts_ms must generate the same ID: the
            # clock did not tick during the command, or the ID came from last_id.
            unambiguous = t_before == t_after or generated_ms > t_after
            if self.star_mode == "replace" or not unambiguous:
                recorded[star_index] = reply  # the generated ID, as a capture that knows it
        record = Record(
            seq=self.counter.next(),
            db=self.db,
            client=self.client_name,
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
