"""The hand-written scenarios, proven for both kinds of real logs the server writes.

``test_scenarios.py`` replays each scenario from the test's OWN record of what it
sent. Here the log comes from the server instead, for both kinds of input (docs/input.md):

* **commands** (a MONITOR capture): while the scenario runs, a MONITOR connection
  captures it (``monitor_capture.MonitorCapture``); the rows come from that file
  alone (``pelengine.ingest.monitor`` through ``align``, which borrows only the
  server's replies to judge each command's outcome), the ``XADD *`` IDs are
  pinned from the same run's AOF (``pelengine.ingest.pin.pin_star_ids``: MONITOR
  stamps a line after the command ran, so ``ts_ms`` can be one ms late for the
  ID), and the replay is compared with the server after every step (the
  scenario's checkpoints mapped to capture seqs) and at the end, plus every
  command's outcome and ``ownership_changes`` against its reply.
* **effects** (an AOF): the server runs with ``appendonly yes``; its
  ``appendonlydir`` is read by ``pelengine.ingest.aof.read_aof`` and replayed
  through ``Replayer(profile)``. The end state is compared with a FRESH server that
  loaded a copy of the AOF (``loaded_truth``: consumers' seen/active times are not
  in an AOF). After every step, the AOF rows written so far (``appendfsync
  always``: a command's effects are in the file before its reply) are compared
  with the live server's state at that step, on what an AOF carries of a live
  run (``NEVER_CARRIED``, ``NOT_AFTER_HISTORY_READS``).

Every scenario runs on every kind of server (Redis 7.0, Valkey 8.1, Valkey 9.1;
the ``server_kind`` fixture), replayed with that server's profile. One run per
scenario and server serves both kinds of log: the AOF server is captured by
MONITOR at the same time. The run is a module-scoped fixture parametrized
(indirectly) by scenario, so pytest runs ``test_commands_kind[x]`` and
``test_effects_kind[x]`` back to back on the same run and drops it before the next
scenario.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from pelengine.ingest.aof import AofState, read_aof
from tests.native.twin import twin_snapshot_tables as snapshot_tables
from tests.redis_diff.aof_support import aof_dir, aof_server, loaded_truth
from tests.redis_diff.capture import Record
from tests.redis_diff.compare import compare_tables, format_mismatches
from tests.redis_diff.harness import check_model, pending_delivery_counts, save_failure
from tests.redis_diff.monitor_capture import (
    Aligned,
    MonitorCapture,
    align,
    remap_checkpoints,
    xadd_id_mismatches,
)
from tests.redis_diff.scenario import Scenario, ScenarioRun, run_scenario
from tests.redis_diff.server import RedisServer, ServerKind, stop_server
from tests.redis_diff.test_scenarios import SCENARIOS
from tests.redis_diff.truth import TABLES

pytestmark = pytest.mark.redis

# Scenarios left out of a kind, with the reason. Only a scenario that CANNOT say
# anything for a kind belongs here; a failing one is a finding, never an exclusion.
# None so far: every scenario has stream writes, so its AOF has something to say;
# where the live run did what an AOF does not carry (history reads propagate nothing)
# the state must still equal the loading server's, so those run too.
EXCLUDED: dict[str, dict[str, str]] = {"commands": {}, "effects": {}}

BY_NAME = {s.name: s for s in SCENARIOS}


@dataclass
class KindsRun:
    """One run of a scenario on an AOF server captured by MONITOR."""

    scenario: Scenario
    server: RedisServer  # stopped: what it was (kind, version, profile)
    run: ScenarioRun
    capture: Path
    aligned: Aligned
    aof_rows: list[dict[str, Any]]
    aof_notes: list[str]
    # (test seq, AOF rows written when the checkpoint was read, the live state then)
    aof_checkpoints: list[tuple[int, int, dict[str, list[dict[str, Any]]]]]
    loaded: dict[str, list[dict[str, Any]]]
    seconds: float
    timings: dict[str, float] = field(default_factory=dict)


def run_both_kinds(scenario: Scenario, kind: ServerKind, workdir: Path) -> KindsRun:
    """Run ``scenario`` once on a fresh AOF server of ``kind`` under MONITOR; collect both
    logs."""
    t0 = time.perf_counter()
    server = aof_server(kind)
    try:
        directory = aof_dir(server)
        state = AofState()
        written = 0
        marks: dict[int, int] = {}  # checkpoint seq -> AOF rows written by then

        def note_aof(seq: int) -> None:
            nonlocal state, written
            read = read_aof(directory, state)
            state = read.state
            written += len(read.rows)
            marks[seq] = written

        capture = MonitorCapture(server, workdir / "monitor.log")
        try:
            run = run_scenario(server, scenario, on_checkpoint=note_aof)
        finally:
            path = capture.stop()
        t_run = time.perf_counter() - t0
        read = read_aof(directory, ceiling_ms=int(time.time() * 1000))
        # the XADD '*' IDs of the capture from this same server's AOF (both logs are
        # the server's own; nothing comes from the test's record or the replies)
        aligned = align(path, run.records, ids_from_aof=directory, profile=server.profile)
        loaded = loaded_truth(server, run.dbs)
    finally:
        stop_server(server)
    return KindsRun(
        scenario=scenario,
        server=server,
        run=run,
        capture=path,
        aligned=aligned,
        aof_rows=read.rows,
        aof_notes=read.notes,
        aof_checkpoints=[(seq, marks[seq], tables) for seq, tables in run.checkpoints],
        loaded=loaded,
        seconds=time.perf_counter() - t0,
        timings={"run": t_run},
    )


@pytest.fixture(scope="module")
def kinds_run(
    request: pytest.FixtureRequest,
    server_kind: ServerKind,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[KindsRun]:
    scenario = BY_NAME[request.param]
    workdir = tmp_path_factory.mktemp(f"{server_kind.name}-{scenario.name}")
    yield run_both_kinds(scenario, server_kind, workdir)


def _names(kind: str) -> list[str]:
    return [s.name for s in SCENARIOS if s.name not in EXCLUDED[kind]]


# ------------------------------------------------------------------------ commands kind


@pytest.mark.parametrize("kinds_run", _names("commands"), indirect=True)
def test_commands_kind(kinds_run: KindsRun, tmp_path: Path) -> None:
    """The MONITOR capture of the scenario replays to the server's state at every step."""
    run, aligned = kinds_run.run, kinds_run.aligned
    name = kinds_run.scenario.name
    pins = aligned.pins
    assert pins is not None
    assert aligned.stats.bad == 0, aligned.stats.examples
    # a command MONITOR does not show must be one the server refused before running it
    shown_ok = [r.describe() for r in aligned.unmatched_test_records if r.error is None]
    assert not shown_ok, f"executed but not in the capture: {shown_ok[:5]}"
    # every '*' that added an entry has its ID in the AOF; the ones whose ID is not what
    # ts_ms gives are exactly those the replies show crossing a millisecond, or (Valkey
    # 9.1) in a unit whose clock read led its line (monitor_capture: "A unit's clock
    # after its line"); checked against the replies only, which feed nothing into the rows
    assert pins.unpinned == 0, pins.unpinned_examples
    # a row no sent command paired (a voided workload attempt's) has no reply to check
    # its pin against; the tables judge it
    judged = set(aligned.seq_of.values())
    differ = (set(pins.moved_seqs) & judged) ^ aligned.star_off_clock_seqs
    assert not differ, (pins.examples, aligned.explain(differ))
    checkpoints = remap_checkpoints(run.checkpoints, aligned.seq_of)
    server = kinds_run.server
    verdict = check_model(
        f"{name} [commands, {server.kind.name}]",
        aligned.records,
        run.truth,
        checkpoints,
        profile=server.profile,
        # a MONITOR line is stamped after its command ran: the capture's own measured
        # lateness, as every other MONITOR test judges its times (the default 2 ms once
        # failed here when a loaded machine stamped a line 4 ms after its XREADGROUP)
        tolerance_ms=aligned.tolerance_ms,
    )
    # every ID an executed XADD made, not only those still there at a checkpoint
    id_mismatches = xadd_id_mismatches(aligned.records, profile=server.profile)
    print(
        f"{verdict.summary()}; {len(checkpoints)} of {len(run.checkpoints)} checkpoints "
        f"mapped; times within {aligned.tolerance_ms} ms; "
        f"XADD IDs differing from the reply: {len(id_mismatches)}; "
        f"capture: {aligned.stats.describe()}; {pins.describe()}; "
        f"run {kinds_run.timings['run']:.2f}s, whole {kinds_run.seconds:.2f}s"
    )
    if not verdict.ok or id_mismatches:
        dumped = save_failure(
            tmp_path / f"{name}-commands.jsonl",
            aligned.records,
            verdict,
            {
                "scenario": name,
                "kind": "commands",
                **server.meta(),
                "capture": str(kinds_run.capture),
            },
        )
        rows = "\n".join("  " + r.describe() for r in aligned.records if r.note != "unjudged")
        pytest.fail(
            f"{verdict.report()}\nXADD IDs: {id_mismatches[:5]}\njudged capture rows:\n{rows}\n"
            f"log: {dumped}",
            pytrace=False,
        )


# ------------------------------------------------------------------------- effects kind

# What an AOF does not carry from the live run, so the per-step comparison with the LIVE
# server leaves it out (the end is compared in full with a server that loaded the AOF,
# which is the truth of an effects log):
# * consumers' seen/active times: the loading server sets them to its load time (Redis
#   7.0 and Valkey 8.1/9.1 alike; Valkey's active time too, where the AOF claims);
# * on Redis 7.0, groups' entries_read (and the lag derived from it): XREADGROUP
#   propagates its deliveries as XCLAIM ... LASTID, which moves last_delivered_id, not
#   entries_read (Valkey adds XGROUP SETID ... ENTRIESREAD to every '>' read it
#   propagates, so its AOF carries them: ``ENTRIES_READ_CARRIED``);
# * what a history read (XREADGROUP with an ID, not '>') did: it bumps delivery counts
#   and times and can create a consumer, and propagates nothing. From the first one on,
#   the delivery columns, the consumers and ownership are left to the end comparison;
# * with eager consumer creation (profile 7.4: Valkey 8.1/9.1), a consumer that an
#   XREADGROUP, XCLAIM or XAUTOCLAIM created while delivering or claiming nothing: the
#   command propagates nothing, so the consumer is live only until a propagated command
#   names it (``without_unpropagated_consumers``).
NEVER_CARRIED = {"ownership": ("seen_time_ms", "active_time_ms"), "groups": ("entries_read", "lag")}
ENTRIES_READ_CARRIED = frozenset({"valkey"})  # the products whose AOF carries entries_read
NOT_AFTER_HISTORY_READS = {"pel": ("delivery_time_ms", "delivery_count"), "groups": ("consumers",)}


def first_history_read(records: list[Record]) -> int | None:
    """The seq of the first XREADGROUP of the scenario that the server ran and that reads
    history (an ID, not '>'). This only chooses what is compared: nothing of the test's
    record goes into the rows."""
    for rec in sorted(records, key=lambda r: r.seq):
        upper = [a.upper() for a in rec.argv]
        if upper[0] != "XREADGROUP" or "STREAMS" not in upper or rec.error is not None:
            continue
        rest = rec.argv[upper.index("STREAMS") + 1 :]
        if any(a != ">" for a in rest[len(rest) // 2 :]):
            return rec.seq
    return None


def carried(
    tables: dict[str, list[dict[str, Any]]], after_history_read: bool, product: str = "redis"
) -> tuple[dict[str, list[dict[str, Any]]], tuple[str, ...]]:
    """The live state reduced to what the AOF of a ``product`` server carries, and the
    tables to compare."""
    drop = {t: set(NEVER_CARRIED.get(t, ())) for t in TABLES}
    if product in ENTRIES_READ_CARRIED:
        drop["groups"] -= {"entries_read", "lag"}
    names = TABLES
    if after_history_read:
        for t, cols in NOT_AFTER_HISTORY_READS.items():
            drop[t] |= set(cols)
        names = tuple(t for t in TABLES if t != "ownership")
    out = {t: [{k: v for k, v in r.items() if k not in drop[t]} for r in tables[t]] for t in names}
    return out, names


def without_unpropagated_consumers(
    expected: dict[str, list[dict[str, Any]]], got: dict[str, list[dict[str, Any]]]
) -> dict[str, list[dict[str, Any]]]:
    """``expected`` without the live consumers that own nothing and that the AOF never
    named (the replay has no such consumer); each group's ``consumers`` counts the rest."""
    if "ownership" not in expected:
        return expected  # consumers are not compared (after a history read)

    def consumer(r: dict[str, Any]) -> tuple[Any, ...]:
        return (r["db"], r["key"], r["group"], r["consumer"])

    replayed = {consumer(r) for r in got["ownership"]}
    kept = [r for r in expected["ownership"] if r["pending"] or consumer(r) in replayed]
    counts = Counter(consumer(r)[:3] for r in kept)
    groups = [
        {**g, "consumers": counts[(g["db"], g["key"], g["group"])]} for g in expected["groups"]
    ]
    return {**expected, "ownership": kept, "groups": groups}


def _snapshot(replayer: Any, rows: list[dict[str, Any]], upto: int) -> dict[str, list[Any]]:
    last = rows[upto - 1] if upto else {"ts_ms": 0, "seq": 0}
    return snapshot_tables(replayer, as_of_ms=last["ts_ms"], as_of_seq=last["seq"])


@pytest.mark.parametrize("kinds_run", _names("effects"), indirect=True)
def test_effects_kind(kinds_run: KindsRun) -> None:
    """The AOF of the scenario replays to the state of a server that loaded it; and
    after every step, its rows so far to the live server's state (what the AOF carries)."""
    from pelengine.model import get_profile
    from tests.native.twin import TwinReplayer as Replayer

    name = kinds_run.scenario.name
    rows = kinds_run.aof_rows
    assert not kinds_run.aof_notes, kinds_run.aof_notes  # a clean AOF: nothing cut off
    assert [r["seq"] for r in rows] == list(range(1, len(rows) + 1))
    history_from = first_history_read(kinds_run.run.records)
    profile = kinds_run.server.profile
    replayer = Replayer(profile)
    eager_consumers = get_profile(profile).eager_consumers
    applied = 0
    failures: list[str] = []
    for step, (seq, upto, live) in enumerate(kinds_run.aof_checkpoints):
        for r in rows[applied:upto]:
            replayer.apply(r["seq"], r["ts_ms"], r["argv"], r["db"], r["client"])
        applied = upto
        after_history = history_from is not None and seq >= history_from
        expected, names = carried(live, after_history, kinds_run.server.kind.product)
        got = _snapshot(replayer, rows, upto)
        if eager_consumers:
            expected = without_unpropagated_consumers(expected, got)
        problems = compare_tables(expected, got, names)
        if not after_history:
            problems += pending_delivery_counts(expected, got)
        if problems:
            failures.append(
                f"after step {step + 1} (test seq {seq}; AOF rows 1..{upto}), vs the live "
                "server:\n" + format_mismatches(problems, 20)
            )
            break
    for r in rows[applied:]:
        replayer.apply(r["seq"], r["ts_ms"], r["argv"], r["db"], r["client"])
    got = _snapshot(replayer, rows, len(rows))
    final = compare_tables(kinds_run.loaded, got, TABLES) + pending_delivery_counts(
        kinds_run.loaded, got
    )
    if final:
        failures.append(
            "at the end, vs the server that loaded the AOF:\n" + format_mismatches(final, 20)
        )
    partial = "" if history_from is None else " (fewer columns from its first history read)"
    print(
        f"{name} [effects, {kinds_run.server.describe()}]: {len(rows)} AOF rows; "
        f"{len(kinds_run.aof_checkpoints)} steps "
        f"compared with the live server{partial}; the end with the loading server "
        f"({sum(len(kinds_run.loaded[t]) for t in TABLES)} rows): "
        f"{'MISMATCHES' if failures else 'no mismatch'}"
    )
    if failures:
        log = "\n".join(f"  seq={r['seq']} db={r['db']} ts={r['ts_ms']} {r['argv']}" for r in rows)
        pytest.fail("\n".join(failures) + f"\nAOF rows:\n{log}", pytrace=False)


def test_exclusions_name_real_scenarios() -> None:
    for kind, excluded in EXCLUDED.items():
        unknown = sorted(set(excluded) - set(BY_NAME))
        assert not unknown, f"{kind}: excluded scenarios that do not exist: {unknown}"
        for scenario, why in excluded.items():
            print(f"{kind}: {scenario} not run: {why}")
