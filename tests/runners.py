"""The local runner held to the Spark runner on a log a test has already judged: the
tests that replay a live server's log through the job (tests/redis_diff) also replay it
through ``reconstruct_local`` and require the same rows, so the servers judge both."""

from __future__ import annotations

from typing import Any

from pelengine.local.reconstruct import reconstruct_local
from pelengine.settings import Settings
from tests.frames import assert_same_rows


def assert_local_runner_agrees(result: Any, events: Any, settings: Settings) -> None:
    """``reconstruct_local`` of ``events`` (the DataFrame the job replayed) gives the rows
    of every table of ``result`` (the job's ``ReconstructResult``), the same rejected rows
    and the same counts."""
    local = reconstruct_local(events.toArrow(), settings)
    for name, table in result.tables.items():
        assert_same_rows(local.tables[name], table.toArrow(), what=f"local runner: {name}")
    assert_same_rows(
        local.rejected.select(result.rejected.columns),
        result.rejected.toArrow(),
        what="local runner: rejected_events",
    )
    for key in ("as_of_ms", "as_of_seq", "starting_state", "notes"):
        assert local.report.get(key) == result.report.get(key), f"local runner: {key}"
    assert local.report["events"] == result.report["events"], "local runner: events"
