"""Choosing what a step acts on: a key (hot keys more often), a group, a live worker,
a group with pending entries to claim from."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from pelengine.synth.world import Group, Key, Worker, World

T = TypeVar("T")


class Choice(World):
    """The picks of the steps (every one drawn from the workload's one random stream)."""

    def pick(self, seq: Sequence[T]) -> T:
        return seq[int(self.rnd() * len(seq))]

    def pick_key(self) -> Key:
        return self.key_table[int(self.rnd() * len(self.key_table))]

    def pick_existing_key(self) -> Key | None:
        """A key that exists now, any of them equally (None when none does)."""
        live = [k for k in self.keys if k.exists]
        return self.pick(live) if live else None

    def pick_group(self) -> Group | None:
        rnd = self.rnd
        k = self.key_table[int(rnd() * len(self.key_table))]
        if k.groups:
            groups = list(k.groups.values())
            return groups[int(rnd() * len(groups))]
        if self.pairs:
            return self.pick(self.pairs)
        return None

    def alive_worker(self, group_name: str, exclude: str | None = None) -> Worker | None:
        pool = self.pools[group_name]
        for _ in range(4):
            w = self.pick(pool)
            if w.alive and w.name != exclude:
                return w
        for w in pool:
            if w.alive and w.name != exclude:
                return w
        return None

    def claim_target(self) -> tuple[Group, Worker] | None:
        """A group with pending entries and a live worker of it to take some over."""
        g = self.pick_group()
        if g is None or not g.pel:
            return None
        claimer = self.alive_worker(g.name)
        return None if claimer is None else (g, claimer)
