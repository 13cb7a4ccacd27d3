"""Two writers of one table, made deterministic: this run's write is held in its one task
(a UDF waits) after its Delta transaction began, while another writer commits to the same
table (tests/storage/test_catalog_tables.py, test_merges.py)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def hold(started: str, go: str) -> bool:
    """In a Python worker: say this task runs, then wait for ``go``."""
    import os
    import time

    open(started, "w").close()
    deadline = time.monotonic() + 300
    while not os.path.exists(go) and time.monotonic() < deadline:
        time.sleep(0.05)
    return True


def held_udf(started: str, go: str) -> Any:
    """A boolean UDF (nondeterministic, so that a filter on it stays in the write's task)
    that holds its task (:func:`hold`)."""
    from pyspark.sql import functions as F

    return F.udf(lambda _: hold(started, go), "boolean").asNondeterministic()


def wait_for(path: Path, given_up: Path, timeout_s: float = 300) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if given_up.exists():
            raise RuntimeError(f"this run's write ended before {path} appeared")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} never appeared")
        time.sleep(0.05)


@contextmanager
def other_writer(started: str, go: str, write: Callable[[], None]) -> Iterator[list[BaseException]]:
    """Run ``write`` (the other writer's commit) in a thread once the held task has
    started, then let that task go; yields the exceptions ``write`` raised (to assert
    none). On exit the held task is let go in any case and the thread joined."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            wait_for(Path(started), Path(go))
            write()
        except BaseException as exc:
            errors.append(exc)
        finally:
            Path(go).touch()

    thread = threading.Thread(target=run)
    thread.start()
    try:
        yield errors
    finally:
        Path(go).touch()
        thread.join()
