"""Every hand-written model scenario (tests/model/test_scenarios.py: each command's
syntax, effects and side effects, per profile) replayed through both engines, held equal
step by step (outcomes) and at the end (history rows, state tables, counters)."""

from __future__ import annotations

import pytest

from pelengine.model.replay import PROFILES
from tests.model.test_scenarios import SHARED, VERSIONED
from tests.native.twin import TwinReplayer

ALL = [(s, p) for s in SHARED for p in sorted(PROFILES)] + [(s, s.profile) for s in VERSIONED]


@pytest.mark.parametrize("spill", [False, True])
def test_scenarios_equal(spill: bool) -> None:
    for scenario, profile in ALL:
        twin = TwinReplayer(profile, spill_closed_records=spill)
        try:
            for seq, step in enumerate(scenario.steps, start=1):
                twin.apply(seq, step.ts, step.argv, db=step.db, client=step.client)
            twin.drain("end")
            twin.snapshot(scenario.steps[-1].ts + 10, len(scenario.steps))
        except AssertionError as exc:
            raise AssertionError(f"scenario {scenario.name} ({profile}): {exc}") from None
