"""A Delta table's log read as plain files: what the commits of a range of versions did.

Each commit is one file ``_delta_log/<20-digit version>.json`` of newline-delimited JSON
actions (``add``, ``remove``, ``metaData``, ``protocol``, ``cdc``, ``commitInfo``...). Reading
them takes a few small file reads and no Spark job, whichever store wrote the table.

A data file is known by its path *and* its deletion vector: a DELETE or UPDATE on a table
with deletion vectors removes ``(file, dv1)`` and adds ``(file, dv2)``, and the rows gone
are those the new vector hides that the old did not. Paths are as the log writes them: a
URI relative to the table, URL-encoded (a space is ``%20``, a ``%`` in a partition value
``%2525``: Hive's escape, then the URI's), or an absolute URI.
"""

from __future__ import annotations

import json
import os
import re
import unicodedata
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit

LOG_DIR = "_delta_log"
CHANGE_FEED = "delta.enableChangeDataFeed"
_CHECKPOINT = re.compile(r"^(\d{20})\.checkpoint(?:\.\d+\.\d+|\.[0-9a-fA-F-]+)?\.(parquet|json)$")
_Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"


class LogUnreadableError(Exception):
    """The log cannot say what the versions did; the message says why."""


@dataclass(frozen=True)
class DataFile:
    """One data file of the table as an ``add`` or ``remove`` action names it."""

    path: str
    #: the deletion vector's unique id (storage type, path or inline bitmap, offset)
    deletion_vector: str | None = None
    partition_values: tuple[tuple[str, str | None], ...] = ()
    data_change: bool = True
    #: rows in the file (its statistics' numRecords), deleted ones included
    num_records: int | None = None
    #: rows its deletion vector hides
    deleted_rows: int = 0
    #: the deletion vector's own file, when it has one (relative to the table or absolute)
    vector_file: str | None = None

    @property
    def key(self) -> tuple[str, str | None]:
        """What the log's replay keys a file on: its (decoded) path and deletion vector."""
        return unquote(self.path), self.deletion_vector

    @property
    def rows(self) -> int | None:
        """The rows the file holds for readers (None: no statistics)."""
        return None if self.num_records is None else self.num_records - self.deleted_rows


@dataclass(frozen=True)
class TableState:
    """The table's ``metaData`` and ``protocol`` actions in effect at a version."""

    metadata: Mapping[str, Any] = field(default_factory=dict)
    protocol: Mapping[str, Any] = field(default_factory=dict)

    @property
    def configuration(self) -> dict[str, str]:
        return {str(k): str(v) for k, v in (self.metadata.get("configuration") or {}).items()}

    @property
    def change_feed(self) -> bool:
        return self.configuration.get(CHANGE_FEED, "").lower() == "true"

    @property
    def reader_features(self) -> frozenset[str]:
        return frozenset(self.protocol.get("readerFeatures") or ())

    @property
    def partition_columns(self) -> tuple[str, ...]:
        return tuple(self.metadata.get("partitionColumns") or ())

    @property
    def schema_string(self) -> str | None:
        text = self.metadata.get("schemaString")
        return str(text) if text else None

    @property
    def column_mapping(self) -> bool:
        return self.configuration.get("delta.columnMapping.mode", "none").lower() != "none"


@dataclass(frozen=True)
class LogChanges:
    """What versions ``since+1 .. until`` did: the data files the newer snapshot holds and
    the older did not (``added``) and the reverse (``removed``), keyed on path and deletion
    vector; whether any commit removed rows (a ``remove`` with ``dataChange``: DELETE,
    UPDATE, MERGE, overwrite; OPTIMIZE's rewrites have none); whether every file a commit
    added rows with is still in the newer snapshot (``appends_kept``); the versions whose
    commits the change data feed did not record (``feed_off``); the table's metadata and
    protocol at both ends (None: not found)."""

    since: int
    until: int
    added: tuple[DataFile, ...]
    removed: tuple[DataFile, ...]
    rows_removed: bool
    appends_kept: bool
    feed_off: tuple[int, ...]
    state_since: TableState | None
    state_until: TableState | None


def log_dir(table_dir: str) -> str:
    return os.path.join(table_dir, LOG_DIR)


def has_log(table_dir: str) -> bool:
    """Whether ``table_dir`` (a local directory) holds a Delta log this process can read."""
    return os.path.isdir(log_dir(table_dir)) and os.access(log_dir(table_dir), os.R_OK)


def commit_file(version: int) -> str:
    return f"{version:020d}.json"


def read_commit(table_dir: str, version: int) -> list[dict[str, Any]]:
    """The actions of commit ``version``; LogUnreadableError when its file is gone."""
    name = os.path.join(log_dir(table_dir), commit_file(version))
    try:
        with open(name, encoding="utf-8") as fh:
            text = fh.read()
    except FileNotFoundError:
        raise LogUnreadableError(
            f"the Delta log has no commit file for version {version} "
            f"({LOG_DIR}/{commit_file(version)}): log retention removed it (or the table "
            "keeps its commits elsewhere: a catalog-managed table)"
        ) from None
    try:
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    except ValueError as exc:
        raise LogUnreadableError(
            f"{LOG_DIR}/{commit_file(version)} is not JSON lines: {exc}"
        ) from exc


def _stats_rows(stats: Any) -> int | None:
    if not isinstance(stats, str) or not stats:
        return None
    try:
        value = json.loads(stats).get("numRecords")
    except (ValueError, AttributeError):
        return None
    return int(value) if isinstance(value, int) else None


def z85_decode(text: str) -> bytes:
    """Z85 (ZeroMQ's base-85), which deletion vectors name their files with."""
    if len(text) % 5:
        raise ValueError(f"a Z85 text has a multiple of 5 characters, not {len(text)}")
    out = bytearray()
    for i in range(0, len(text), 5):
        value = 0
        for char in text[i : i + 5]:
            value = value * 85 + _Z85.index(char)
        out += value.to_bytes(4, "big")
    return bytes(out)


def _vector_file(dv: Mapping[str, Any]) -> str | None:
    """The file a deletion vector is stored in (relative ``u``, absolute ``p``; None for an
    inline one)."""
    kind, where = dv.get("storageType"), str(dv.get("pathOrInlineDv") or "")
    if kind == "p":
        return where
    if kind != "u" or len(where) < 20:
        return None
    prefix, encoded = where[:-20], where[-20:]
    try:
        name = f"deletion_vector_{uuid.UUID(bytes=z85_decode(encoded))}.bin"
    except ValueError:
        return None
    return f"{prefix}/{name}" if prefix else name


def data_file(action: Mapping[str, Any]) -> DataFile:
    """The :class:`DataFile` an ``add`` or ``remove`` action names."""
    dv = action.get("deletionVector")
    dv_id, deleted, vector = None, 0, None
    if isinstance(dv, Mapping):
        offset = dv.get("offset")
        dv_id = f"{dv.get('storageType')}{dv.get('pathOrInlineDv')}" + (
            f"@{offset}" if offset is not None else ""
        )
        deleted = int(dv.get("cardinality") or 0)
        vector = _vector_file(dv)
    values = action.get("partitionValues") or {}
    return DataFile(
        path=str(action["path"]),
        deletion_vector=dv_id,
        partition_values=tuple(sorted((str(k), v) for k, v in values.items())),
        data_change=bool(action.get("dataChange", True)),
        num_records=_stats_rows(action.get("stats")),
        deleted_rows=deleted,
        vector_file=vector,
    )


def local_file(table_dir: str, path: str) -> str | None:
    """The local file a log path names (None: an absolute URI elsewhere than ``file:``)."""
    if "://" in path or path.startswith("file:"):
        parts = urlsplit(path)
        if parts.scheme != "file":
            return None
        return unquote(parts.path)
    return os.path.join(table_dir, unquote(path))


# --------------------------------------------------------------------------- metadata


def _checkpoints(table_dir: str) -> dict[int, list[str]]:
    found: dict[int, list[str]] = {}
    for name in os.listdir(log_dir(table_dir)):
        match = _CHECKPOINT.match(name)
        if match:
            found.setdefault(int(match.group(1)), []).append(name)
    return found


def _checkpoint_actions(table_dir: str, names: list[str]) -> list[dict[str, Any]]:
    """The metaData and protocol actions of a checkpoint (classic, multi-part or v2)."""
    actions: list[dict[str, Any]] = []
    for name in names:
        path = os.path.join(log_dir(table_dir), name)
        if name.endswith(".json"):
            with open(path, encoding="utf-8") as fh:
                actions += [json.loads(line) for line in fh if line.strip()]
            continue
        import pyarrow.parquet as pq

        schema = pq.read_schema(path)
        columns = [c for c in ("metaData", "protocol") if c in schema.names]
        for row in pq.read_table(path, columns=columns).to_pylist():
            for key in columns:
                value = row.get(key)
                if value is not None:
                    if isinstance(value.get("configuration"), list):  # a map read by pyarrow
                        value = {**value, "configuration": dict(value["configuration"])}
                    actions.append({key: value})
    return actions


def state_at(table_dir: str, version: int) -> TableState | None:
    """The metadata and protocol in effect at ``version``: from its checksum file
    (``<version>.crc``, which delta-spark writes), else the commits back to the latest
    checkpoint and that checkpoint; None when they cannot be found."""
    try:
        with open(os.path.join(log_dir(table_dir), f"{version:020d}.crc"), encoding="utf-8") as fh:
            checksum = json.load(fh)
        if checksum.get("metadata") and checksum.get("protocol"):
            return TableState(checksum["metadata"], checksum["protocol"])
    except (OSError, ValueError, AttributeError):
        pass
    metadata: Mapping[str, Any] | None = None
    protocol: Mapping[str, Any] | None = None

    def take(actions: list[dict[str, Any]]) -> None:
        nonlocal metadata, protocol
        for action in actions:
            if metadata is None and isinstance(action.get("metaData"), Mapping):
                metadata = action["metaData"]
            if protocol is None and isinstance(action.get("protocol"), Mapping):
                protocol = action["protocol"]

    try:
        checkpoints = {v: n for v, n in _checkpoints(table_dir).items() if v <= version}
        floor = max(checkpoints) if checkpoints else -1
        for v in range(version, floor, -1):
            take(read_commit(table_dir, v))  # (one commit's actions, in any order)
            if metadata is not None and protocol is not None:
                return TableState(metadata, protocol)
        if floor >= 0:
            take(_checkpoint_actions(table_dir, checkpoints[floor]))
    except (OSError, ValueError, LogUnreadableError):
        return None
    if metadata is None or protocol is None:
        return None
    return TableState(metadata, protocol)


# --------------------------------------------------------------------------- changes


def read_changes(table_dir: str, since: int, until: int) -> LogChanges:
    """What the commits ``since+1 .. until`` of the table at the local ``table_dir`` did
    (:class:`LogChanges`); LogUnreadableError, saying why, when the log cannot tell: a commit
    file of the range is gone (log retention)."""
    if since >= until:
        raise LogUnreadableError(f"no versions after {since} up to {until}")
    if not has_log(table_dir):
        raise LogUnreadableError(f"no Delta log at {log_dir(table_dir)}")
    state = state_at(table_dir, since)
    state_since = state
    net: dict[tuple[str, str | None], int] = {}
    files: dict[tuple[str, str | None], DataFile] = {}
    appended: set[tuple[str, str | None]] = set()
    rows_removed = False
    feed_off: list[int] = []
    feed_on = state.change_feed if state is not None else False
    for version in range(since + 1, until + 1):
        metadata, protocol = None, None
        for action in read_commit(table_dir, version):
            if isinstance(action.get("add"), Mapping):
                file = data_file(action["add"])
                net[file.key] = net.get(file.key, 0) + 1
                files[file.key] = file
                if file.data_change:
                    appended.add(file.key)
            elif isinstance(action.get("remove"), Mapping):
                file = data_file(action["remove"])
                net[file.key] = net.get(file.key, 0) - 1
                files.setdefault(file.key, file)
                rows_removed = rows_removed or file.data_change
            elif isinstance(action.get("metaData"), Mapping):
                metadata = action["metaData"]
            elif isinstance(action.get("protocol"), Mapping):
                protocol = action["protocol"]
        if metadata is not None or protocol is not None:
            if state is None:
                state = (
                    TableState(metadata, protocol)
                    if metadata is not None and protocol is not None
                    else None
                )
            else:
                state = TableState(
                    metadata if metadata is not None else state.metadata,
                    protocol if protocol is not None else state.protocol,
                )
        # a commit is in the feed when it was on before the commit and after it
        feed_after = state.change_feed if state is not None else False
        if not (feed_on and feed_after):
            feed_off.append(version)
        feed_on = feed_after
    order = sorted(net, key=lambda k: (k[0], k[1] or ""))
    added = tuple(files[k] for k in order if net[k] > 0)
    removed = tuple(files[k] for k in order if net[k] < 0)
    return LogChanges(
        since=since,
        until=until,
        added=added,
        removed=removed,
        rows_removed=rows_removed,
        appends_kept=all(net.get(k, 0) > 0 for k in appended),
        feed_off=tuple(feed_off),
        state_since=state_since,
        state_until=state,
    )


def gone_files(table_dir: str, files: tuple[DataFile, ...]) -> list[str]:
    """The data files (and deletion vector files) of ``files`` no longer on disk: vacuumed."""
    gone = []
    for file in files:
        for path in (file.path, file.vector_file):
            if path is None:
                continue
            local = local_file(table_dir, path)
            if local is not None and not os.path.exists(local):
                gone.append(path)
    return gone


def spans(versions: tuple[int, ...]) -> str:
    """``1..3, 5`` for versions 1, 2, 3, 5."""
    out: list[str] = []
    for v in versions:
        if out and out[-1].split("..")[-1] == str(v - 1):
            out[-1] = f"{out[-1].split('..')[0]}..{v}"
        else:
            out.append(str(v))
    return ", ".join(out)


# --------------------------------------------------------------------------- URIs

# what java.net.URI's multi-argument constructors leave unquoted in a path (Hadoop's Path
# builds its URI with one, and Spark's _metadata.file_path is that URI's string): letters,
# digits, unreserved marks, punctuation, '/' and '@'; other characters are %-escaped as
# UTF-8, '%' always; non-ASCII characters stay unless they are controls or spaces
_URI_SAFE = frozenset(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-!.~'()*,;:$&+=/@"
)


def _quote_char(char: str) -> str:
    if char in _URI_SAFE:
        return char
    if ord(char) > 127 and unicodedata.category(char) not in ("Cc", "Zs", "Zl", "Zp"):
        return char
    return "".join(f"%{b:02X}" for b in char.encode("utf-8"))


def hadoop_uri(path: str) -> str:
    """The URI string Hadoop's ``new Path(path).toUri().toString()`` gives for a path as
    ``Path.toString`` or ``inputFiles()`` writes it (not escaped): ``file:/a b/%`` ->
    ``file:/a%20b/%25``. What Spark's ``_metadata.file_path`` holds."""
    match = re.match(r"^([A-Za-z][A-Za-z0-9+.-]*):(//[^/]*)?(.*)$", path)
    if match is None:
        return "".join(_quote_char(c) for c in path)
    scheme, authority, rest = match.group(1), match.group(2) or "", match.group(3)
    return f"{scheme}:{authority}" + "".join(_quote_char(c) for c in rest)
