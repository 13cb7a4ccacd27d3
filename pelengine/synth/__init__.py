"""Deterministic synthetic Redis Streams workload, as rows of the events table.

Pure Python on purpose (no Spark, no pandas): the rows are plain dicts with the
columns of the events contract (`seq`, `ts_ms`, `argv`, `db`, `client`, `source`).

The workload is what a small fleet of services would send: producers `XADD`
with the IDs Redis would generate from `ts_ms` (some keys trim with exact
`MAXLEN`/`MINID`), consumer groups created with `MKSTREAM`/`$`/`0`, workers
reading with `XREADGROUP` (sometimes several streams, `NOACK`, `BLOCK` or a
history read), acking most of what they get, crashing now and then, and other
workers taking the leftovers with `XCLAIM`/`XAUTOCLAIM`; plus admin commands
(`XDEL`, `XTRIM`, `XGROUP ...`, `XSETID`, `DEL`), read-only and non-stream
commands, and rare faults.

A light simulation tracks entries, group positions and pending entries so that
acks and claims target IDs that are really pending. It follows the Redis 7.0
rules for what it tracks, but it is not the engine's model and does not claim to
be exact: the engine (and a real Redis) are the judges of the resulting state.

Faults are rare and easy to spot by `source`:

* `gen:invalid` - a command Redis rejects (wrong arity, bad ID, unknown group,
  ID not above the stream top, existing group, ...); the simulation ignores it.
* `gen:bad` - not a command at all: `argv` null or empty.
* `gen:dup` - a row reusing the `seq` of the row just before it. Both rows of
  such a pair are read-only commands, so the state does not depend on which of
  them an engine keeps.
"""

from __future__ import annotations

from pelengine.synth.workload import Workload, generate_events
from pelengine.synth.world import SOURCE, SOURCE_BAD, SOURCE_DUP, SOURCE_INVALID

__all__ = ["SOURCE", "SOURCE_BAD", "SOURCE_DUP", "SOURCE_INVALID", "Workload", "generate_events"]
