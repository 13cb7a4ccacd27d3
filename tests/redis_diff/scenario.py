"""Hand-written scenarios: short command lists run on the real server with the same capture.

A scenario is a list of steps:

* ``"XADD s 1-1 f v"`` or ``["XADD", "s", "1-1", "f", "v"]`` — a command on db 0;
* ``On(db, "...")`` — a command on another db (its own connection);
* ``lambda ctx: "..."`` — a command built from ``ctx.now`` (the server's clock,
  read just before the step) or ``ctx.last`` (the previous reply);
* ``Sleep(ms)`` — let idle times grow so idle checks are far from any boundary;
* ``Blocked("XREADGROUP ... BLOCK n ...")`` — sent on a second connection that
  stays blocked while the following steps run; ``AwaitBlocked()`` reads its reply;
* ``Expect(predicate, why)`` — a guard that the previous reply is what makes the
  scenario meaningful (e.g. "something was claimed"). It never states the expected
  state: the state is always read from the server.

After every step the server's state is read (``truth.read_truth``) so the
replay is compared step by step, not only at the end.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import redis

from tests.redis_diff.capture import Record, Recorder, SeqCounter, time_ms
from tests.redis_diff.server import RedisServer
from tests.redis_diff.truth import read_truth


@dataclass
class On:
    db: int
    argv: str | list[str]


@dataclass
class Sleep:
    ms: int


@dataclass
class Blocked:
    argv: str | list[str]
    db: int = 0


@dataclass
class AwaitBlocked:
    pass


@dataclass
class Expect:
    predicate: Callable[[Any], bool]
    why: str


@dataclass
class Ctx:
    now: int
    last: Any = None


Step = Any  # str | list[str] | On | Sleep | Blocked | AwaitBlocked | Expect | Callable


@dataclass
class Scenario:
    name: str
    steps: list[Step]


@dataclass
class ScenarioRun:
    records: list[Record]
    checkpoints: list[tuple[int, dict[str, list[dict[str, Any]]]]]
    dbs: list[int]
    truth: dict[str, list[dict[str, Any]]] = field(default_factory=dict)


def _argv(step: str | list[str]) -> list[str]:
    return step.split() if isinstance(step, str) else [str(a) for a in step]


def _dbs(steps: list[Step]) -> list[int]:
    dbs = {0}
    for step in steps:
        if isinstance(step, On | Blocked):
            dbs.add(step.db)
    return sorted(dbs)


class _BlockedCall:
    def __init__(self, client: redis.Redis, recorder: Recorder, argv: list[str]) -> None:
        self.client = client
        self.recorder = recorder
        self.argv = argv
        conn = client.connection
        assert conn is not None
        self.conn = conn
        conn.send_packed_command(conn.pack_commands([("TIME",), tuple(argv), ("TIME",)]))
        self.ts_ms = time_ms(conn.read_response())
        self.seq = recorder.counter.next()

    def finish(self) -> Record:
        try:
            reply, error = self.conn.read_response(), None
        except redis.ResponseError as exc:
            reply, error = None, str(exc)
        after = time_ms(self.conn.read_response())
        record = Record(
            seq=self.seq,
            db=self.recorder.db,
            client=self.recorder.client_name,
            sent=self.argv,
            argv=list(self.argv),
            reply=reply,
            error=error,
            ts_ms=self.ts_ms,
            ts_after_ms=after,
            note="blocked",
        )
        self.recorder.records.append(record)
        return record


def _wait_blocked(
    main: redis.Redis, blocked: _BlockedCall, expected: int = 1, timeout_s: float = 10.0
) -> None:
    """Return once the server holds the call blocked (or has already answered it).

    The call's own connection is looked up (``CLIENT LIST``, flag ``b``): counting
    blocked clients is not enough when a reader blocked earlier with a short timeout
    may time out meanwhile (``expected`` is kept for callers, unused).
    """
    addr = blocked.recorder.client_name
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if blocked.conn.can_read(timeout=0):
            return  # served at once (or failed)
        listing = main.execute_command("CLIENT", "LIST")
        text = listing.decode() if isinstance(listing, bytes) else str(listing)
        for line in text.splitlines():
            fields = dict(f.split("=", 1) for f in line.split(" ") if "=" in f)
            if fields.get("addr") == addr and "b" in fields.get("flags", ""):
                return
        time.sleep(0.001)
    raise TimeoutError(f"{blocked.argv} neither blocked nor answered")


def run_scenario(
    server: RedisServer,
    scenario: Scenario,
    star_mode: str = "keep",
    on_checkpoint: Callable[[int], None] | None = None,
) -> ScenarioRun:
    """Run the steps on ``server`` (expected empty) and read its state after each one.

    ``on_checkpoint(seq)`` is called right after each checkpoint's state was read
    (e.g. to note how far the server's AOF had got at that moment).
    """
    counter = SeqCounter(1)
    dbs = _dbs(scenario.steps)
    clients: dict[int, redis.Redis] = {}
    recorders: dict[int, Recorder] = {}
    side: list[redis.Redis] = []

    def recorder(db: int) -> Recorder:
        if db not in recorders:
            clients[db] = server.client(db)
            recorders[db] = Recorder(clients[db], db, counter, star_mode=star_mode)
        return recorders[db]

    run = ScenarioRun(records=[], checkpoints=[], dbs=dbs)
    ctx = Ctx(now=0)
    blocked: list[_BlockedCall] = []
    try:
        main = recorder(0)
        for step in scenario.steps:
            ctx.now = main.probe("PING")[0]
            record: Record | None = None
            if isinstance(step, Sleep):
                time.sleep(step.ms / 1000)
                continue
            if isinstance(step, Expect):
                if not step.predicate(ctx.last):
                    raise AssertionError(
                        f"scenario {scenario.name!r} is not doing what it should: {step.why} "
                        f"(reply was {ctx.last!r})"
                    )
                continue
            if isinstance(step, Blocked):
                client = server.client(step.db)
                side.append(client)
                rec = Recorder(client, step.db, counter, star_mode=star_mode)
                call = _BlockedCall(client, rec, _argv(step.argv))
                _wait_blocked(main.client, call, expected=len(blocked) + 1)
                blocked.append(call)
                continue
            if isinstance(step, AwaitBlocked):
                record = blocked.pop(0).finish()
                run.records.append(record)
            else:
                if callable(step) and not isinstance(step, str | list):
                    step = step(ctx)
                db, argv = (step.db, step.argv) if isinstance(step, On) else (0, step)
                argv = _argv(argv)
                star = None
                if argv and argv[0].upper() == "XADD":
                    star = next((i for i, a in enumerate(argv) if a == "*"), None)
                record = recorder(db).run(argv, star_index=star)
                run.records.append(record)
            ctx.last = record.error if record.error is not None else record.reply
            if not blocked:
                # the state after this command (not while a call is blocked: its seq
                # comes before commands that ran later, so it is compared once served)
                seq = max(r.seq for r in run.records)
                run.checkpoints.append((seq, read_truth(server, dbs)))
                if on_checkpoint is not None:
                    on_checkpoint(seq)
        for call in blocked:
            run.records.append(call.finish())
        run.records.sort(key=lambda r: r.seq)
        run.truth = read_truth(server, dbs)
        return run
    finally:
        for c in [*clients.values(), *side]:
            c.close()
