"""The workload: every step weighted, the clock advanced between steps, the rare
events at their planned places; :func:`generate_events` yields its rows."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pelengine.synth.faults import Faults
from pelengine.synth.world import Row


class Workload(Faults):
    """The synthetic workload: the simulation's state, its steps, its schedule."""

    def __init__(self, n_events: int, n_keys: int, seed: int, start_ms: int, faults: bool) -> None:
        super().__init__(n_events, n_keys, seed, start_ms)
        self._build_tables()
        self.build_schedule(faults)

    def _build_tables(self) -> None:
        weights: list[tuple[Any, int]] = [
            (self.step_xadd, 300),
            (self.step_read, 260),
            (self.step_ack, 240),
            (self.step_claim, 35),
            (self.step_autoclaim, 25),
            (self.step_xdel, 15),
            (self.step_xtrim, 10),
            (self.step_setid, 4),
            (self.step_createconsumer, 3),
            (self.step_delconsumer, 3),
            (self.step_other, 30),
        ]
        table: list[Any] = []
        for fn, w in weights:
            table.extend([fn] * w)
        self.step_table = table
        dts: list[int] = []
        dts += [0, 1, 1, 2, 2, 3] * 100
        dts += list(range(4, 11)) * 43
        dts += list(range(11, 101, 1))
        dts += [200, 300, 500, 800, 1200, 1500, 2000, 2500, 3000, 5000]
        self.dt_table = dts

    def run(self, n_steps: int) -> None:
        """Run `n_steps` steps: advance the clock, emit one step's rows (usually one)."""
        rnd = self.rnd
        dts = self.dt_table
        n_dts = len(dts)
        table = self.step_table
        n_table = len(table)
        plan = self.plan
        missing = self.missing
        xadd = self.step_xadd
        for _ in range(n_steps):
            self.now += dts[int(rnd() * n_dts)]
            if plan and self.emitted >= plan[-1][0] and self.rare(plan.pop()[1]):
                continue
            if missing and rnd() < 0.15:
                self.step_group_create()
            elif not table[int(rnd() * n_table)]():
                xadd()


def generate_events(
    n_events: int,
    n_keys: int,
    seed: int,
    start_ms: int = 1_700_000_000_000,
    *,
    faults: bool = True,
) -> Iterator[Row]:
    """Yield `n_events` rows of a deterministic synthetic workload (see module doc).

    `faults=False` leaves out invalid commands and bad rows (for a clean log).
    """
    if n_events < 0:
        raise ValueError(f"n_events must be >= 0, got {n_events}")
    if n_keys < 1:
        raise ValueError(f"n_keys must be >= 1, got {n_keys}")
    w = Workload(n_events, n_keys, seed, start_ms, faults)
    out = w.out
    while w.emitted < n_events:
        w.run(256)  # in batches: yielding from a one-row list per step costs more
        if w.emitted >= n_events:
            del out[len(out) - (w.emitted - n_events) :]
        yield from out
        out.clear()
