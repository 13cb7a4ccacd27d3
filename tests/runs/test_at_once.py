"""``runs.output.at_once``: a run's table writes, several at once where the store allows.

No Spark: the store's allowance (``storage.concurrent_writes``) is set by the test, and
the steps are plain functions that record what ran, in which thread, and overlapping
what."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from pelengine import storage
from pelengine.runs.output import at_once


class WriteFailedError(Exception):
    pass


def _allow(monkeypatch: pytest.MonkeyPatch, n: int) -> None:
    monkeypatch.setattr(storage, "concurrent_writes", lambda spark: n)


def test_one_at_a_time_runs_in_order_in_this_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    _allow(monkeypatch, 1)
    seen: list[tuple[int, str]] = []
    at_once(None, [lambda i=i: seen.append((i, threading.current_thread().name)) for i in range(5)])  # type: ignore[arg-type,misc]
    here = threading.current_thread().name
    assert seen == [(i, here) for i in range(5)]


def test_several_at_once_overlap_and_all_run(monkeypatch: pytest.MonkeyPatch) -> None:
    _allow(monkeypatch, 3)
    running, most = 0, 0
    lock = threading.Lock()
    done: list[int] = []

    def step(i: int) -> None:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        time.sleep(0.05)
        with lock:
            running -= 1
            done.append(i)

    at_once(None, [lambda i=i: step(i) for i in range(7)])  # type: ignore[arg-type,misc]
    assert sorted(done) == list(range(7))
    assert most == 3, most  # never more than the store allows, and it does overlap


def test_a_failure_stops_what_has_not_started_and_is_raised(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _allow(monkeypatch, 2)
    started: list[int] = []
    finished: list[int] = []
    gate = threading.Event()

    def step(i: int) -> None:
        started.append(i)
        if i == 1:
            raise WriteFailedError("table 1")
        if i == 0:
            gate.wait(5)  # still running when 1 fails: it finishes, it is not abandoned
        else:
            time.sleep(0.05)  # a write takes time: the failure is seen before all started
        finished.append(i)

    def release_later() -> None:
        time.sleep(0.2)
        gate.set()

    threading.Thread(target=release_later).start()
    with pytest.raises(WriteFailedError, match="table 1"):
        at_once(None, [lambda i=i: step(i) for i in range(6)])  # type: ignore[arg-type,misc]
    assert 0 in finished, "a step running when another failed was left unfinished"
    assert len(started) < 6, f"every step started after a failure: {started}"


def test_the_first_failure_in_step_order_is_the_one_raised(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _allow(monkeypatch, 2)

    def step(i: int) -> None:
        time.sleep(0.1 if i == 0 else 0.0)  # step 0 fails last
        raise WriteFailedError(f"table {i}")

    with pytest.raises(WriteFailedError, match="table 0"):
        at_once(None, [lambda i=i: step(i) for i in range(2)])  # type: ignore[arg-type,misc]


def test_the_store_decides(monkeypatch: pytest.MonkeyPatch) -> None:
    """delta-spark writes several at once; the embedded store one (its data source is
    registered from the thread that installed it)."""
    from pelengine.storage import choice

    modes: dict[str, Any] = {}
    monkeypatch.setattr(choice, "storage_mode", lambda spark: modes["mode"])
    modes["mode"] = storage.DELTA_SPARK
    assert choice.concurrent_writes(None) == choice.DELTA_SPARK_WRITERS > 1  # type: ignore[arg-type]
    modes["mode"] = storage.EMBEDDED
    assert choice.concurrent_writes(None) == 1  # type: ignore[arg-type]
