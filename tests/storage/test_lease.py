"""The run lease: one writer per output root (pelengine.storage.lease)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from pelengine.storage.lease import LEASE, STALE_AFTER_S, RunInProgressError, run_lease


def _held_by(root: Path, **fields: object) -> None:
    now = time.time()
    holder = {
        "run_id": "other",
        "command": "reconstruct",
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started_at": now,
        "renewed_at": now,
        **fields,
    }
    root.mkdir(parents=True, exist_ok=True)
    (root / LEASE).write_text(json.dumps(holder))


def test_a_second_run_fails_naming_the_first(tmp_path: Path) -> None:
    with run_lease(str(tmp_path), "reconstruct") as mine:
        assert mine is not None
        with pytest.raises(RunInProgressError) as caught, run_lease(str(tmp_path), "reconstruct"):
            pass
        text = str(caught.value)
        assert f"run {mine['run_id']}" in text and f"pid {os.getpid()}" in text
        assert str(tmp_path) in text
    assert not (tmp_path / LEASE).exists()  # given back
    with run_lease(str(tmp_path), "reconstruct"):
        pass


def test_a_live_holder_on_another_host_is_respected(tmp_path: Path) -> None:
    _held_by(tmp_path, host="elsewhere", pid=1)
    with (
        pytest.raises(RunInProgressError, match="run other .* on elsewhere"),
        run_lease(str(tmp_path), "reconstruct"),
    ):
        pass
    assert json.loads((tmp_path / LEASE).read_text())["run_id"] == "other"


def _takes_over(root: Path, old: dict[str, Any] | None) -> None:
    """Take the lease of ``root`` (held by ``old``, a dead run's record, or by a record
    cut short when None) and check what the takeover leaves: this run's record, whole,
    in the lease; every other run refused, naming this one; the lease given back."""
    before = time.time()
    with run_lease(str(root), "incremental") as mine:
        record = json.loads((root / LEASE).read_text())
        assert set(record) == {"run_id", "command", "pid", "host", "started_at", "renewed_at"}
        assert record["command"] == "incremental"
        assert record["pid"] == os.getpid() and record["host"] == socket.gethostname()
        assert before <= record["started_at"] == record["renewed_at"] <= time.time()
        assert isinstance(record["run_id"], str) and len(record["run_id"]) == 12
        if old is not None:
            assert record["run_id"] != old["run_id"]
        assert mine == record  # what the run holds is what the lease says
        for command in ("reconstruct", "incremental"):  # the old holder's command too
            with pytest.raises(RunInProgressError) as refused, run_lease(str(root), command):
                pass
            assert f"another run {record['run_id']} (incremental, pid {os.getpid()} on " in str(
                refused.value
            )
        assert json.loads((root / LEASE).read_text()) == record  # the refusals left it
    assert not (root / LEASE).exists()


def test_a_dead_holder_is_taken_over(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    _held_by(tmp_path, pid=int(done.stdout))  # same host, process gone (a SIGKILLed run)
    _takes_over(tmp_path, json.loads((tmp_path / LEASE).read_text()))


def test_an_old_lease_is_taken_over(tmp_path: Path) -> None:
    _held_by(tmp_path, host="elsewhere", renewed_at=time.time() - STALE_AFTER_S - 1)
    _takes_over(tmp_path, json.loads((tmp_path / LEASE).read_text()))


def test_a_lease_cut_short_is_taken_over(tmp_path: Path) -> None:
    (tmp_path / LEASE).write_text('{"run_id": "x", "pi')
    _takes_over(tmp_path, None)


def test_a_holder_taken_over_does_not_give_back_the_new_lease(tmp_path: Path) -> None:
    """A run whose lease went stale while it lived (renewals stopped for longer than
    STALE_AFTER_S) and was taken over: when it ends it leaves the new holder's lease."""
    with run_lease(str(tmp_path), "reconstruct") as first:
        assert first is not None
        stale = {**first, "renewed_at": time.time() - STALE_AFTER_S - 1}
        (tmp_path / LEASE).write_text(json.dumps(stale))
        second = run_lease(str(tmp_path), "incremental")
        mine = second.__enter__()
        assert mine is not None and mine["run_id"] != first["run_id"]
    try:
        record = json.loads((tmp_path / LEASE).read_text())
        assert record["run_id"] == mine["run_id"] and record["command"] == "incremental"
    finally:
        second.__exit__(None, None, None)
    assert not (tmp_path / LEASE).exists()


def test_no_root_no_lease() -> None:
    with run_lease(None, "reconstruct") as mine:
        assert mine is None
