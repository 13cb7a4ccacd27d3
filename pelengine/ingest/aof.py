"""Read a Redis append-only file (AOF) into rows of the events table (an *effects log*).

Pure Python, no pyspark. Two layouts are read:

* a 7.x multi-part ``appendonlydir``: a manifest (``<name>.manifest``, lines
  ``file <name> seq <n> type b|i|h``) naming one base file and the incr files,
  read base first, then the incr files in manifest order (history files, type
  ``h``, are left out, as Redis leaves them out when it loads);
* a single legacy ``appendonly.aof``.

Every file is RESP (``*N\\r\\n$len\\r\\narg\\r\\n...``), with ``#TS:<unix seconds>``
annotation lines when ``aof-timestamp-enabled yes``; except that a file may start
with an RDB snapshot (``REDIS``/``VALKEY``: ``aof-use-rdb-preamble yes``, the
servers' default, writes the base file of every rewrite so, and a legacy
``appendonly.aof`` may carry one before its commands). The snapshot becomes the
``PELENGINE.LOAD`` rows of the state it holds (:mod:`pelengine.ingest.rdb.starting_state`:
the exact starting state of every stream, times and counters included), at the
snapshot's time (its ``ctime``), and the commands after it follow as usual.

Rows: ``seq`` follows file order across the manifest's files (``first_seq``,
``first_seq + 1``, ...), ``source`` is ``"aof"``, ``client`` is null (an AOF has
one writer). Every row carries its ``db`` explicitly: each file starts in db 0
(as the loading server's fake client does) and ``SELECT n`` switches the db of
the rows after it. ``SELECT`` rows are kept (with the db they select) so the
log reads as the file does; ``MULTI``/``EXEC`` rows are kept too (they bracket
the commands one propagated command became).

``ts_ms``: an AOF carries no clock of its own, so a row's time is the best
*lower bound* known when it was written, never decreasing along the log:

* a ``#TS:<s>`` annotation raises the clock to ``s * 1000`` (the second the
  following commands ran in);
* an absolute time in the row raises it to that time: an ``XCLAIM ... TIME <ms>``
  (Redis propagates every delivery and claim as an ``XCLAIM`` with the delivery
  time it set, which is never later than its own clock) and the ms part of an
  ``XADD`` ID (the generated ID of ``XADD *``), unless that is after
  ``ceiling_ms`` (the ingesting machine's clock: an ID from the future is an
  explicit ID, not a time).

The rows of one ``MULTI``/``EXEC`` unit (a delivering ``XREADGROUP``, an
``XAUTOCLAIM``, a script's effects, a client's transaction) all get the latest
of those times reached within the unit, its ``EXEC`` included: a 7.2+ server
gives every command of a unit one "now", and the server that loads the AOF has
a clock later than every time it recorded, so the unit's one time must not be
earlier than any absolute time in it.

Why no PEL field can change: in an effects log every delivery time arrives as
an absolute ``XCLAIM ... TIME``; the replay clamps a ``TIME`` only when it is
later than the command's "now" (the row's ``ts_ms``; on 7.2+ inside a unit,
the unit's first row's), and that is never earlier than any absolute time in
its row or its unit, so nothing is clamped; min-idle-times are 0 in
propagated claims (always satisfied); ``XADD`` IDs are explicit. ``ts_ms``
therefore only reaches what the AOF does not hold anyway (consumers' seen
times, ``closed_ms`` of the history tables) and the default ``as_of_ms``.

Damaged or unfinished tails: a last command cut short (a crash mid-write), or
a ``MULTI`` whose ``EXEC`` is not in the file yet, is reported and not
ingested — Redis itself discards both when it loads. Resuming later
(:class:`AofState`) starts exactly there, so a grown file yields only what is new.
A malformed byte anywhere else is an error (:class:`AofFormatError`).
"""

from __future__ import annotations

import gc
import hashlib
import json
import mmap
import os
import shlex
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from pelengine.ingest.rdb import RdbFormatError, parse_rdb
from pelengine.ingest.rdb.starting_state import load_rows, snapshot_time_ms
from pelengine.model.text import readable

SOURCE = "aof"
MANIFEST_SUFFIX = ".manifest"
BIGINT_MAX = (1 << 63) - 1
FINGERPRINT_BYTES = 4096


class AofFormatError(ValueError):
    """The file is not a readable AOF (the message names the file and offset)."""


class AofRewrittenError(AofFormatError):
    """The AOF was rewritten since the recorded state: its new base folds history."""


@dataclass(frozen=True)
class AofFile:
    """One file of the AOF, in load order."""

    name: str
    path: str
    kind: str  # "base", "incr" or "legacy"


@dataclass
class FileState:
    """How far one file was ingested, and what its ingested bytes looked like."""

    offset: int = 0
    db: int = 0  # the SELECTed db at ``offset``
    fingerprint: str = ""  # of the bytes before ``offset`` (see :func:`fingerprint`)


@dataclass
class AofState:
    """Where the previous ingest stopped: per file, plus the clock and the next seq."""

    base: str | None = None
    files: dict[str, FileState] = field(default_factory=dict)
    clock_ms: int = 0
    next_seq: int = 1

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> AofState:
        raw = json.loads(text)
        files = {k: FileState(**v) for k, v in raw.get("files", {}).items()}
        return cls(
            base=raw.get("base"),
            files=files,
            clock_ms=int(raw.get("clock_ms", 0)),
            next_seq=int(raw.get("next_seq", 1)),
        )


@dataclass
class FileReport:
    """What one read of one file found."""

    name: str
    start: int
    end: int  # offset after the last ingested command
    size: int
    commands: int
    annotations: int = 0
    skipped_tail: int = 0  # bytes after ``end`` not ingested
    note: str = ""
    snapshot_keys: int | None = None  # an RDB snapshot: how many keys it held


@dataclass
class AofRead:
    """The rows read, the state to resume from, and a report per file."""

    rows: list[dict[str, Any]]
    state: AofState
    files: list[FileReport]

    @property
    def notes(self) -> list[str]:
        return [f"{f.name}: {f.note}" for f in self.files if f.note]


# --------------------------------------------------------------------------- files


def parse_manifest(text: str) -> list[tuple[str, int, str]]:
    """``(file name, seq, type letter)`` per manifest line, in file order."""
    out = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        if raw.startswith("#"):
            continue
        line = raw.strip()
        if not line:
            raise AofFormatError(f"manifest line {lineno}: empty line")
        try:
            parts = shlex.split(line)
        except ValueError as exc:
            raise AofFormatError(f"manifest line {lineno}: {exc}: {line!r}") from None
        if len(parts) < 6 or len(parts) % 2:
            raise AofFormatError(f"manifest line {lineno}: invalid format: {line!r}")
        info = {parts[i].lower(): parts[i + 1] for i in range(0, len(parts), 2)}
        name, seq, kind = info.get("file"), info.get("seq"), info.get("type")
        if not name or not seq or not kind:
            raise AofFormatError(f"manifest line {lineno}: needs file, seq and type: {line!r}")
        if os.path.basename(name) != name:
            raise AofFormatError(f"manifest line {lineno}: file must be a bare name: {name!r}")
        out.append((name, int(seq), kind[0]))
    return out


def list_files(source: str) -> list[AofFile]:
    """The files of the AOF at ``source`` in load order.

    ``source`` is an ``appendonlydir`` (the directory holding the manifest), its
    manifest file, a Redis data directory holding ``appendonlydir``, or a single
    legacy AOF file.
    """
    if os.path.isdir(source):
        manifests = sorted(n for n in os.listdir(source) if n.endswith(MANIFEST_SUFFIX))
        if not manifests and os.path.isdir(os.path.join(source, "appendonlydir")):
            return list_files(os.path.join(source, "appendonlydir"))
        if len(manifests) != 1:
            raise AofFormatError(
                f"{source}: expected one *{MANIFEST_SUFFIX} file, found {manifests or 'none'}"
            )
        return list_files(os.path.join(source, manifests[0]))
    if not os.path.isfile(source):
        raise FileNotFoundError(f"{source}: no such AOF file or directory")
    if not source.endswith(MANIFEST_SUFFIX):
        return [AofFile(os.path.basename(source), source, "legacy")]
    directory = os.path.dirname(source)
    with open(source, encoding="utf-8") as fh:
        entries = parse_manifest(fh.read())
    bases = [e for e in entries if e[2] == "b"]
    incrs = [e for e in entries if e[2] == "i"]
    unknown = [e for e in entries if e[2] not in "bih"]
    if unknown or len(bases) > 1:
        raise AofFormatError(f"{source}: unknown file type or several base files: {entries}")
    seqs = [e[1] for e in incrs]
    if seqs != sorted(set(seqs)):
        raise AofFormatError(f"{source}: incr files out of sequence: {seqs}")
    files = [AofFile(n, os.path.join(directory, n), "base") for n, _, _ in bases]
    files += [AofFile(n, os.path.join(directory, n), "incr") for n, _, _ in incrs]
    return files


def fingerprint(data: bytes | memoryview | mmap.mmap, offset: int) -> str:
    """A digest of the first and last ``FINGERPRINT_BYTES`` before ``offset``: enough to
    tell that a file is not the one ingested before (rewritten, replaced, truncated)."""
    head = bytes(data[: min(offset, FINGERPRINT_BYTES)])
    tail = bytes(data[max(0, offset - FINGERPRINT_BYTES) : offset])
    return hashlib.sha256(str(offset).encode() + b"|" + head + b"|" + tail).hexdigest()


# --------------------------------------------------------------------------- times


def _int_or_none(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


def absolute_time(argv: list[str], ceiling_ms: int | None) -> int | None:
    """The latest absolute time (ms) the command itself carries, if any."""
    name = argv[0].upper()
    if name == "XCLAIM":
        best = None
        for i in range(5, len(argv) - 1):
            if argv[i].upper() == "TIME":
                value = _int_or_none(argv[i + 1])
                if value is not None and 0 < value <= BIGINT_MAX:
                    best = value if best is None else max(best, value)
        return best
    if name == "XADD":
        i, _ = _trim_options(argv)
        if i >= len(argv):
            return None
        ms = _int_or_none(argv[i].partition("-")[0])
        if ms is None or ms <= 0 or ms > BIGINT_MAX:
            return None
        if ceiling_ms is not None and ms > ceiling_ms:
            return None
        return ms
    return None


def drop_trim_limit(argv: list[str]) -> list[str]:
    """``argv`` without the ``LIMIT n`` of an ``XADD``/``XTRIM`` trim.

    Redis propagates an approximate trim as the exact one it did (``~`` becomes
    ``=``, the threshold the effective one) but keeps a ``LIMIT`` the client gave;
    a server loading the AOF (or a replica) ignores ``LIMIT`` altogether, while a
    normal client gets a syntax error for ``LIMIT`` without ``~``. The replay
    treats rows as normal clients' commands, so the AOF row is written the way the
    loading server reads it: without ``LIMIT``. (Only a hand-written AOF can hold
    ``~`` with ``LIMIT``; the loading server trims it without a limit.)
    """
    name = argv[0].upper()
    if name not in ("XADD", "XTRIM") or len(argv) < 4:
        return argv
    _, limit_at = _trim_options(argv)
    return argv if limit_at is None else argv[:limit_at] + argv[limit_at + 2 :]


def xadd_id_position(argv: list[str]) -> int:
    """Where an ``XADD``'s ID argument is (after the key and the trim options)."""
    return _trim_options(argv)[0]


def _trim_options(argv: list[str]) -> tuple[int, int | None]:
    """Walk the NOMKSTREAM / MAXLEN|MINID [=|~] n / LIMIT n options after the key.

    Returns where they end (an XADD's ID position) and where a complete
    ``LIMIT n`` starts, if there is one.
    """
    i = 2
    limit_at: int | None = None
    while i < len(argv):
        word = argv[i].upper()
        if word == "NOMKSTREAM":
            i += 1
        elif word in ("MAXLEN", "MINID"):
            i += 1
            if i < len(argv) and argv[i] in ("=", "~"):
                i += 1
            i += 1
        elif word == "LIMIT":
            if i + 1 < len(argv) and limit_at is None:
                limit_at = i
            i += 2
        else:
            break
    return i, limit_at


# --------------------------------------------------------------------------- parsing


_decode = readable  # an argument's text (pelengine.model.text)


def iter_commands(
    data: bytes | memoryview | mmap.mmap, start: int, name: str = "<aof>"
) -> Iterator[tuple[int, list[str] | None, int | None]]:
    """``(end offset, argv, None)`` per command and ``(end offset, None, seconds)`` per
    ``#TS:`` annotation (other ``#`` lines give ``seconds`` None), from ``start``.

    Stops quietly at the end of the data or where it ends mid-command (the caller
    compares the last end offset with the size). A byte that cannot start a command
    raises :class:`AofFormatError`.
    """
    # latin-1 maps each byte to one character: offsets and lengths stay byte counts,
    # and str slicing/int() are the fast path (UTF-8 is decoded per argument below)
    base = start
    buf = bytes(data[start:]).decode("latin-1")
    size = len(buf)
    pos = 0
    find = buf.find
    while pos < size:
        lead = buf[pos]
        if lead == "#":  # an annotation line
            eol = find("\r\n", pos)
            if eol < 0:
                return
            line = buf[pos + 1 : eol]
            seconds = _int_or_none(line[3:]) if line[:3] == "TS:" else None
            pos = eol + 2
            yield base + pos, None, seconds if seconds is not None else -1
            continue
        if lead != "*":
            raise AofFormatError(
                f"{name}: offset {base + pos}: expected '*' (a command) or '#' (an annotation), "
                f"found {buf[pos : pos + 16]!r}"
            )
        eol = find("\r\n", pos)
        if eol < 0:
            return
        try:
            argc = int(buf[pos + 1 : eol])
        except ValueError:
            argc = 0
        if argc < 1:
            raise AofFormatError(
                f"{name}: offset {base + pos}: bad argument count {buf[pos:eol]!r}"
            )
        p = eol + 2
        argv: list[str] = []
        append = argv.append
        for _ in range(argc):
            if buf[p : p + 1] != "$":
                if p >= size:
                    return
                raise AofFormatError(
                    f"{name}: offset {base + p}: expected '$', found {buf[p : p + 16]!r}"
                )
            eol = find("\r\n", p)
            if eol < 0:
                return
            try:
                length = int(buf[p + 1 : eol])
            except ValueError:
                length = -1
            if length < 0:
                raise AofFormatError(f"{name}: offset {base + p}: bad length {buf[p:eol]!r}")
            begin = eol + 2
            end = begin + length
            if end + 2 > size:
                return
            if buf[end : end + 2] != "\r\n":
                raise AofFormatError(f"{name}: offset {base + end}: argument not followed by CRLF")
            arg = buf[begin:end]
            append(arg if arg.isascii() and "\\x" not in arg else _decode(arg.encode("latin-1")))
            p = end + 2
        pos = p
        yield base + pos, argv, None


def read_aof(
    source: str,
    state: AofState | None = None,
    *,
    first_seq: int | None = None,
    ceiling_ms: int | None = None,
) -> AofRead:
    """Read what is new in the AOF at ``source`` since ``state`` (None: everything).

    Returns the rows (events contract), the state to pass next time, and a
    report per file. ``first_seq`` overrides ``state.next_seq``.
    """
    state = state or AofState()
    files = list_files(source)
    base = next((f.name for f in files if f.kind in ("base", "legacy")), None)
    if state.files and state.base is not None and base != state.base:
        raise AofRewrittenError(
            f"{source}: the AOF was rewritten since the last ingest (base file {base!r}, "
            f"was {state.base!r}): the new base folds history already ingested. Ingest into "
            "a new events table, or disable automatic rewrites (auto-aof-rewrite-percentage 0)"
        )
    new = AofState(
        base=base,
        files={k: FileState(**asdict(v)) for k, v in state.files.items()},
        clock_ms=state.clock_ms,
        next_seq=state.next_seq if first_seq is None else first_seq,
    )
    known = {f.name for f in files}
    gone = sorted(set(state.files) - known)
    if gone:
        raise AofRewrittenError(
            f"{source}: file(s) ingested before are no longer in the AOF: {gone}"
        )
    rows: list[dict[str, Any]] = []
    reports = []
    # millions of small lists and dicts, none of them cyclic: the cyclic collector
    # would only rescan the growing heap again and again (about 2x the time)
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        for f in files:
            fs = new.files.setdefault(f.name, FileState())
            with open(f.path, "rb") as fh:
                # mapped: a resumed read touches only the fingerprint windows and the new bytes
                size = os.fstat(fh.fileno()).st_size
                data: bytes | mmap.mmap = (
                    mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
                )
                try:
                    reports.append(_read_file(f, data, fs, new, rows, ceiling_ms))
                finally:
                    if isinstance(data, mmap.mmap):
                        data.close()
    finally:
        if was_enabled:
            gc.enable()
    return AofRead(rows=rows, state=new, files=reports)


def _read_file(
    f: AofFile,
    data: bytes | mmap.mmap,
    fs: FileState,
    state: AofState,
    rows: list[dict[str, Any]],
    ceiling_ms: int | None,
) -> FileReport:
    size = len(data)
    if fs.offset and (size < fs.offset or fingerprint(data, fs.offset) != fs.fingerprint):
        raise AofRewrittenError(
            f"{f.path}: its first {fs.offset} bytes differ from the ones ingested before "
            "(the file was replaced, truncated or rewritten)"
        )
    report = FileReport(f.name, fs.offset, fs.offset, size, 0)
    db = fs.db
    clock = state.clock_ms
    seq = state.next_seq
    start = fs.offset
    if not start and bytes(data[:6]) in (b"REDIS0", b"VALKEY"):
        # an RDB snapshot (aof-use-rdb-preamble yes): the state it holds, as load rows
        try:
            rdb = parse_rdb(data, f.path)
        except RdbFormatError as exc:
            raise AofFormatError(str(exc)) from None
        clock = max(clock, snapshot_time_ms(rdb))
        loaded = load_rows(rdb, first_seq=seq, ts_ms=clock)
        for row in loaded:
            row["source"] = SOURCE
        rows.extend(loaded)
        seq += len(loaded)
        report.commands += len(loaded)
        report.snapshot_keys = len(rdb.keys)
        start = rdb.end_offset
    # commands of an open MULTI wait here until their EXEC is read
    unit: list[dict[str, Any]] | None = None
    committed_end = start
    committed_db, committed_clock, committed_seq = db, clock, seq
    for end, argv, seconds in iter_commands(data, start, f.path):
        if argv is None:
            report.annotations += 1
            if seconds is not None and seconds > 0:
                clock = max(clock, seconds * 1000)
            if unit is None:
                committed_end, committed_clock = end, clock
            continue
        name = argv[0].upper()
        if name in ("XADD", "XTRIM"):
            argv = drop_trim_limit(argv)
        t = absolute_time(argv, ceiling_ms)
        if t is not None:
            clock = max(clock, t)
        if name == "SELECT" and len(argv) == 2:
            selected = _int_or_none(argv[1])
            if selected is not None and selected >= 0:
                db = selected
        row = {
            "seq": seq,
            "ts_ms": clock,
            "argv": argv,
            "db": db,
            "client": None,
            "source": SOURCE,
        }
        seq += 1
        if name == "MULTI" and unit is None:
            unit = [row]
            continue
        if unit is not None:
            unit.append(row)
            if name not in ("EXEC", "DISCARD"):
                continue
            for unit_row in unit:  # one unit, one clock: the latest time it carries
                unit_row["ts_ms"] = clock
            rows.extend(unit)
            report.commands += len(unit)
            unit = None
        else:
            rows.append(row)
            report.commands += 1
        committed_end, committed_db, committed_clock, committed_seq = end, db, clock, seq
    report.end = committed_end
    report.skipped_tail = size - committed_end
    if report.skipped_tail:
        what = "an unfinished MULTI (no EXEC yet)" if unit is not None else "a cut-off command"
        report.note = (
            f"{report.skipped_tail} bytes at offset {committed_end} not ingested: {what} "
            "(skipped, as Redis discards it on load; a later ingest reads it once complete)"
        )
    fs.offset = committed_end
    fs.db = committed_db
    fs.fingerprint = fingerprint(data, committed_end) if committed_end else ""
    state.clock_ms = committed_clock
    state.next_seq = committed_seq
    return report
