"""One writer per output: the run lease (``<root>/_run_lease.json``).

A run takes the lease before it writes anything and gives it back when it ends. A
second run on the same output (two nights started by mistake, a retry racing the
original) finds the lease held and fails at once, naming the holder, so tables from
two runs are never interleaved. A lease left by a run that died (SIGKILL, a lost
node) is taken over: its process is gone (same host), or it has not been renewed
for :data:`STALE_AFTER_S` seconds (the holder renews it every :data:`RENEW_EVERY_S`).

On a local root the lease is created with ``O_CREAT | O_EXCL``, which the filesystem
makes atomic. On an object store it is checked then written: two runs started within
the same second can both pass; the docs say so (docs/nightly.md).
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any

from pelengine.storage.paths import local_path

LEASE = "_run_lease.json"
RENEW_EVERY_S = 20.0
STALE_AFTER_S = 120.0


class RunInProgressError(RuntimeError):
    """Another run holds the output's lease."""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def is_stale(holder: dict[str, Any], now: float, host: str) -> bool:
    """Whether a lease ``holder`` wrote can be taken over: its process is gone (same
    host) or it was not renewed for :data:`STALE_AFTER_S` seconds."""
    renewed = holder.get("renewed_at")
    if not isinstance(renewed, (int, float)) or now - renewed > STALE_AFTER_S:
        return True
    pid = holder.get("pid")
    return holder.get("host") == host and isinstance(pid, int) and not _alive(pid)


def describe(holder: dict[str, Any]) -> str:
    started = holder.get("started_at")
    when = (
        time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started))
        if isinstance(started, (int, float))
        else "?"
    )
    return (
        f"run {holder.get('run_id', '?')} ({holder.get('command', '?')}, pid "
        f"{holder.get('pid', '?')} on {holder.get('host', '?')}, started {when})"
    )


class _Local:
    def __init__(self, directory: str) -> None:
        os.makedirs(directory, exist_ok=True)
        self.path = os.path.join(directory, LEASE)

    def create(self, text: str) -> bool:
        try:
            fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        return True

    def read(self) -> str | None:
        try:
            with open(self.path, encoding="utf-8") as fh:
                return fh.read()
        except FileNotFoundError:
            return None

    def replace(self, text: str) -> None:
        aside = f"{self.path}.{os.getpid()}.tmp"
        with open(aside, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(aside, self.path)

    def remove(self) -> None:
        with suppress(FileNotFoundError):
            os.remove(self.path)


class _Remote:
    def __init__(self, root: str) -> None:
        import pyarrow.fs as pa_fs

        self.fs, base = pa_fs.FileSystem.from_uri(root)
        self.path = f"{base.rstrip('/')}/{LEASE}"

    def create(self, text: str) -> bool:
        if self.read() is not None:
            return False
        self.replace(text)
        return True

    def read(self) -> str | None:
        try:
            with self.fs.open_input_stream(self.path) as stream:
                return bytes(stream.read()).decode("utf-8")
        except (FileNotFoundError, OSError):
            return None

    def replace(self, text: str) -> None:
        with self.fs.open_output_stream(self.path) as stream:
            stream.write(text.encode("utf-8"))

    def remove(self) -> None:
        with suppress(FileNotFoundError, OSError):
            self.fs.delete_file(self.path)


@contextmanager
def run_lease(root: str | None, command: str) -> Iterator[dict[str, Any] | None]:
    """Hold the lease of the output root ``root`` for the ``with`` body (None: an output
    without a root, catalog tables only: nothing to hold). Raises
    :class:`RunInProgressError` naming the holder when another live run has it."""
    if not root:
        yield None
        return
    local = local_path(root)
    store: _Local | _Remote = _Local(local) if local is not None else _Remote(root)
    host = socket.gethostname()
    now = time.time()
    mine = {
        "run_id": uuid.uuid4().hex[:12],
        "command": command,
        "pid": os.getpid(),
        "host": host,
        "started_at": now,
        "renewed_at": now,
    }
    for _ in range(3):
        if store.create(json.dumps(mine)):
            break
        text = store.read()
        if text is None:
            continue  # released in between: try again
        try:
            holder = json.loads(text)
        except ValueError:
            holder = {}  # a lease cut short by a crash while being written
        if not isinstance(holder, dict):
            holder = {}
        if not is_stale(holder, time.time(), host):
            raise RunInProgressError(
                f"another {describe(holder)} is writing {root}; this run stops before "
                f"writing anything. If that run is dead, it is taken over once its lease "
                f"({LEASE}) is {int(STALE_AFTER_S)} s old."
            )
        store.remove()  # a dead run's lease: take it over
    else:
        raise RunInProgressError(f"could not take the lease of {root} ({LEASE})")
    stop = threading.Event()

    def renew() -> None:
        while not stop.wait(RENEW_EVERY_S):
            mine["renewed_at"] = time.time()
            with suppress(OSError):
                store.replace(json.dumps(mine))

    renewer = threading.Thread(target=renew, name="pelengine-lease", daemon=True)
    renewer.start()
    try:
        yield mine
    finally:
        stop.set()
        renewer.join(timeout=5)
        text = store.read()
        try:
            still_mine = text is not None and json.loads(text).get("run_id") == mine["run_id"]
        except (ValueError, AttributeError):
            still_mine = False
        if still_mine:
            store.remove()
