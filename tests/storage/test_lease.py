"""The run lease: one writer per output root (pelengine.storage.lease)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

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


def test_a_dead_holder_is_taken_over(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    _held_by(tmp_path, pid=int(done.stdout))  # same host, process gone (a SIGKILLed run)
    with run_lease(str(tmp_path), "reconstruct") as mine:
        assert mine is not None
        assert json.loads((tmp_path / LEASE).read_text())["run_id"] == mine["run_id"]


def test_an_old_lease_is_taken_over(tmp_path: Path) -> None:
    _held_by(tmp_path, host="elsewhere", renewed_at=time.time() - STALE_AFTER_S - 1)
    with run_lease(str(tmp_path), "reconstruct"):
        pass


def test_a_lease_cut_short_is_taken_over(tmp_path: Path) -> None:
    (tmp_path / LEASE).write_text('{"run_id": "x", "pi')
    with run_lease(str(tmp_path), "reconstruct"):
        pass


def test_no_root_no_lease() -> None:
    with run_lease(None, "reconstruct") as mine:
        assert mine is None
