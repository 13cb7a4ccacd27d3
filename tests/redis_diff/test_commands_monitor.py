"""A MONITOR capture is a command log the engine can replay: proven against the real servers.

Each seed runs the seeded random workload (every command of the contract, valid
and invalid, ``XADD *``, ``MAXLEN ~``/``MINID ~``) and then a blocking phase
(several consumers blocked at once on one stream, each on its own connection:
``BLOCK 0``, timeouts a write beats, timeouts that expire first; served by later
``XADD *``) while a MONITOR connection captures everything the server runs. The server
runs with ``appendonly yes``. The events rows come from the capture file
(``pelengine.ingest.monitor``), with the IDs of ``XADD *`` taken from the same
server's AOF (``pelengine.ingest.pin``, as ``ingest-monitor --ids-from-aof``
does; MONITOR stamps a line after the command ran, so ``ts_ms`` alone is one
millisecond late for about 1 ``XADD *`` in 250), and are replayed through
``Replayer(server.profile)`` on every kind of server (Redis 7.0, Valkey 8.1,
Valkey 9.1); every table is compared with the server mid-run (checkpoints) and at
the end, and every command's outcome and ``ownership_changes`` with the server's
reply to it.

Knobs (every server): ``PELENGINE_MONITOR_SEEDS=301,302`` or a count N (seeds 301..),
``PELENGINE_MONITOR_COMMANDS``; the defaults are per server (``SEEDS_PER_KIND``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tests.redis_diff.aof_support import aof_dir, aof_server
from tests.redis_diff.capture import Record
from tests.redis_diff.harness import STREAM_WRITES, UNJUDGED, check_model, save_failure
from tests.redis_diff.monitor_capture import (
    MonitorCapture,
    align,
    remap_checkpoints,
    run_blocking_phase,
    xadd_id_mismatches,
)
from tests.redis_diff.server import (
    RedisServer,
    ServerKind,
    env_seeds,
    kind_cases,
    stop_server,
)
from tests.redis_diff.truth import read_truth
from tests.redis_diff.workload import run_workload

pytestmark = pytest.mark.redis

# seeds from 301 per server (counts chosen for the suite's time budget, README)
SEEDS_PER_KIND = {"redis-7.0": 5, "valkey-8.1": 5, "valkey-9.1": 5}
COMMANDS_PER_SEED = int(os.environ.get("PELENGINE_MONITOR_COMMANDS", "3000"))
CHECKPOINT_EVERY = 200


def cases(kind: ServerKind) -> list[tuple[int]]:
    default = list(range(301, 301 + SEEDS_PER_KIND[kind.name]))
    return [(s,) for s in env_seeds("PELENGINE_MONITOR_SEEDS", default, count_from=301)]


@pytest.fixture
def aof_redis(server_kind: ServerKind) -> Any:
    """A server of its own that appends every write to an AOF (fresh per seed)."""
    server = aof_server(server_kind)
    try:
        yield server
    finally:
        stop_server(server)


@pytest.mark.parametrize(
    ("server_kind", "seed"), kind_cases(cases, lambda s: f"seed_{s}"), indirect=["server_kind"]
)
def test_monitor_capture_replays_to_the_server_state(
    aof_redis: RedisServer, seed: int, tmp_path: Path
) -> None:
    server = aof_redis
    db = seed % 16
    capture = MonitorCapture(server, tmp_path / "monitor.log")
    try:
        result = run_workload(
            server,
            seed,
            COMMANDS_PER_SEED,
            db=db,
            checkpoint_every=CHECKPOINT_EVERY,
            star_mode="keep",
        )
        blocking = run_blocking_phase(server, seed, db)
    finally:
        path = capture.stop()
    truth = read_truth(server, [db])
    sent: list[Record] = result.records + blocking
    aligned = align(path, sent, ids_from_aof=aof_dir(server), profile=server.profile)
    pins = aligned.pins
    assert pins is not None

    assert aligned.stats.bad == 0, aligned.stats.examples
    # a command MONITOR does not show must be one the server refused before running it
    shown_ok = [r.describe() for r in aligned.unmatched_test_records if r.error is None]
    assert not shown_ok, f"executed but not in the capture: {shown_ok[:5]}"
    assert len(sent) - len(aligned.unmatched_test_records) == len(aligned.seq_of)
    b0 = [r for r in truth["streams"] if r["key"] == "b0"]
    assert b0 and b0[0]["length"] < b0[0]["entries_added"], "'~' trimming dropped nothing"
    blocked = [r for r in blocking if r.note == "blocked"]
    served = [r for r in blocked if r.reply is not None]
    assert served and len(served) < len(blocked), "the phase must serve and time out readers"

    # MONITOR stamps a line after the command ran; an XADD '*' reads the clock during it.
    # Where a millisecond ended in between (about 1 in 250 here) the ID's ms is less than
    # ts_ms (by 1, once by 3 after a stall). Valkey 9.1's command clock also runs a
    # microsecond or two ahead of its MONITOR stamps, so a unit whose call line came
    # right after its clock read (a script's, about 1 in 5000) can have IDs one ms AFTER
    # the clock the replay gives the unit (monitor_capture: "A unit's clock after its
    # line"), and, rarer, a command its own line's ms plus one. The parser flags every row
    # where a unit's or a crossing can happen (not the one-microsecond lead of a command
    # over its own line), and the AOF pins the
    # IDs: every '*' that added an entry must be found in it, and the rows whose ID moved
    # must be exactly those the server's replies show off the replay's clock (the
    # replies only check the pinning; they feed nothing).
    off_clock = aligned.star_off_clock_seqs
    unflagged = sorted(
        off_clock - set(aligned.stats.star_uncertain) - set(aligned.star_line_clock_ahead_seqs)
    )
    assert not unflagged, f"ms boundary crossings the parser did not flag: {unflagged}"
    assert pins.unpinned == 0, pins.unpinned_examples
    # a row no sent command paired (a voided workload attempt's) has no reply to check
    # its pin against; the tables judge it
    judged = set(aligned.seq_of.values())
    differ = (set(pins.moved_seqs) & judged) ^ off_clock
    assert not differ, (pins.examples, aligned.explain(differ))
    verdict = check_model(
        f"{server.kind.name} monitor seed {seed} (db {db})",
        aligned.records,
        truth,
        remap_checkpoints(result.checkpoints, aligned.seq_of),
        profile=server.profile,
        tolerance_ms=aligned.tolerance_ms,
    )
    id_mismatches = xadd_id_mismatches(aligned.records, profile=server.profile)
    unjudged = sum(
        1 for r in aligned.records if r.note == UNJUDGED and r.argv[0].upper() in STREAM_WRITES
    )
    print(
        f"{verdict.summary()}; XADD IDs differing from the reply: {len(id_mismatches)}; "
        f"capture: {aligned.stats.describe()}, workload attempts {result.attempts}, "
        f"{unjudged} stream writes not sent by the judged run, "
        f"{len(aligned.seq_of)} of {len(sent)} sent commands shown "
        f"({len(aligned.unmatched_test_records)} refused before running), "
        f"{len(blocked)} blocked reads ({len(served)} served), "
        f"XADD '*' {aligned.star_xadds} (flagged uncertain by the parser "
        f"{len(aligned.stats.star_uncertain)}, capture ms after the ID's ms "
        f"{len(aligned.star_ms_later)}, a unit's clock ms after its line's "
        f"{len(aligned.star_unit_clock_ahead)}, a command's clock ms after its own line's "
        f"{len(aligned.star_line_clock_ahead)}); {pins.describe()}; lines stamped up to "
        f"{aligned.late_ms} ms after sending (tolerance {aligned.tolerance_ms} ms)"
    )
    for line in aligned.star_ms_later[:5]:
        print("  XADD '*' across a ms boundary:", line)
    for line in aligned.star_line_clock_ahead[:5]:
        print("  XADD '*' whose clock led its own line:", line)
    for line in aligned.star_unit_clock_ahead[:5]:
        print("  XADD '*' in a unit whose clock led its line:", line)
    for line in id_mismatches[:5]:
        print("  XADD ID differs:", line)
    if not verdict.ok or id_mismatches:
        dumped = save_failure(
            tmp_path / f"monitor-seed-{seed}.jsonl",
            aligned.records,
            verdict,
            {"seed": seed, "db": db, **server.meta(), "capture": str(path)},
        )
        pytest.fail(
            f"{verdict.report()}\nXADD IDs: {id_mismatches[:5]}\n"
            f"XADD '*' across a ms boundary: {aligned.star_ms_later[:5]}\n"
            f"log and full report: {dumped}",
            pytrace=False,
        )
