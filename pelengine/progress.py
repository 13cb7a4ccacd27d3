"""Progress lines of long runs: time-stamped, plus a throttled heartbeat.

:class:`ProgressReporter` wraps the line sink the CLI prints to (stderr). Each line
gets the time since the run started; while no line came for ``heartbeat_s`` seconds
(a replay or a table write can take minutes), a background thread prints one
"still ..." line naming the last step and, where Spark can tell, its running stages
and their tasks — at most one such line per ``heartbeat_s``, so logs stay short.

The Spark side (:func:`spark_status`) reads the classic ``SparkContext``'s status
tracker. Spark Connect sessions have no ``SparkContext``: there it reads the execution
progress the server streams with each running query (a progress handler registered on
the session); where neither exists the heartbeat still prints, without stage details.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

Sink = Callable[[str], None]
# what the pipeline and the runs report their steps to
Progress = Callable[[str], None]
Status = Callable[[], "str | None"]


def quiet(_: str) -> None:
    """A progress sink that prints nothing."""
    return None


class Laps:
    """A run's stage timings: each call ``laps(stage, detail)`` records the seconds since
    the previous one (or since it was made) under ``stage`` in ``timings`` and says so in
    one progress line."""

    def __init__(self, progress: Progress) -> None:
        self.timings: dict[str, float] = {}
        self._progress = progress
        self._clock = time.monotonic()

    def __call__(self, stage: str, detail: str = "") -> None:
        now = time.monotonic()
        self.timings[stage] = round(now - self._clock, 3)
        self._clock = now
        took = f"{stage} done in {self.timings[stage]:.1f} s"
        self._progress(took + (f": {detail}" if detail else ""))


def spark_jobs_so_far(spark: SparkSession) -> int | None:
    """How many Spark jobs the session's ``SparkContext`` has started (its next job id):
    over a run, the jobs the run cost (one action can be several jobs: a stage per
    shuffle under adaptive execution, Delta's own). None where there is no
    ``SparkContext`` (Spark Connect)."""
    try:
        return int(spark.sparkContext._jsc.sc().dagScheduler().nextJobId())
    except Exception:
        return None


@dataclass(frozen=True)
class SparkCounters:
    """Where a session's counters stood when a run began: its next job id
    (:func:`spark_jobs_so_far`) and its newest SQL execution (:func:`spark_queries_so_far`);
    None where the session cannot tell."""

    jobs: int | None
    query: int | None


def spark_counters(spark: SparkSession) -> SparkCounters:
    """The session's :class:`SparkCounters` now."""
    return SparkCounters(spark_jobs_so_far(spark), spark_queries_so_far(spark))


def spark_queries_so_far(spark: SparkSession) -> int | None:
    """The id of the session's newest SQL execution (-1: none yet), to count the Spark
    actions of a run with :func:`spark_actions_since`. None where the session keeps no
    SQL status (Spark Connect)."""
    try:
        store = spark._jsparkSession.sharedState().statusStore()
        n = int(store.executionsCount())
        return int(store.executionsList(n - 1, 1).head().executionId()) if n else -1
    except Exception:
        return None


def spark_actions_since(spark: SparkSession, since: int) -> int | None:
    """The Spark actions since the SQL execution ``since`` (:func:`spark_queries_so_far`):
    the top-level SQL executions, each a collect, count or write of the run or a query
    Delta ran for it outside another one (the queries an action runs inside it, Delta's
    commit work among them, are part of that action). None where it cannot tell."""
    try:
        store = spark._jsparkSession.sharedState().statusStore()
        n = int(store.executionsCount())
        newest = store.executionsList(max(0, n - 1000), 1000).reverseIterator()
        actions = 0
        while newest.hasNext():
            execution = newest.next()
            if execution.executionId() <= since:
                break
            actions += execution.rootExecutionId() == execution.executionId()
        return actions
    except Exception:
        return None


def format_duration(seconds: float) -> str:
    """``4.2s``, ``3m05s``, ``1h02m``."""
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def spark_status(spark: SparkSession) -> Status | None:
    """A function describing the running Spark stages: from the ``SparkContext``'s status
    tracker, on Spark Connect from the progress the server reports
    (:func:`connect_status`); None when the session offers neither."""
    try:
        tracker = spark.sparkContext.statusTracker()
    except Exception:  # Spark Connect: no SparkContext / JVM
        return connect_status(spark)

    def status() -> str | None:
        try:
            parts = []
            for stage_id in sorted(tracker.getActiveStageIds())[:3]:
                info = tracker.getStageInfo(stage_id)
                if info is None:
                    continue
                parts.append(
                    f"stage {stage_id}: {info.numCompletedTasks}/{info.numTasks} tasks done"
                    f", {info.numActiveTasks} running"
                )
            return "spark " + "; ".join(parts) if parts else None
        except Exception:
            return None

    return status


def connect_status(spark: SparkSession) -> Status | None:
    """Spark Connect: a function describing the stages of the queries running now, from the
    execution progress the server streams back with each (a progress handler registered on
    the session; the last report per query is kept until it is done). None when the session
    cannot take a handler."""
    try:
        from pyspark.sql.connect.shell.progress import ProgressHandler
    except Exception:  # no Spark Connect client installed
        return None

    class Latest(ProgressHandler):
        def __init__(self) -> None:
            self.lock = threading.Lock()
            self.running: dict[str, tuple[list[Any], int]] = {}

        def __call__(
            self,
            stages: Iterable[Any] | None,
            inflight_tasks: int,
            operation_id: str | None,
            done: bool,
        ) -> None:
            with self.lock:
                if done:
                    self.running.pop(operation_id or "", None)
                else:
                    self.running[operation_id or ""] = (list(stages or ()), inflight_tasks)

        def status(self) -> str | None:
            with self.lock:
                running = list(self.running.values())
            parts = []
            for stages, inflight in running:
                active = [s for s in stages if not s.done][:3]
                parts += [
                    f"stage {s.stage_id}: {s.num_completed_tasks}/{s.num_tasks} tasks done"
                    for s in active
                ]
                if active:
                    parts[-1] += f", {inflight} running"
            return "spark " + "; ".join(parts[:3]) if parts else None

    handler = Latest()
    try:
        spark.registerProgressHandler(handler)
    except Exception:  # not a Connect session, or one without progress reports
        return None
    return handler.status


class ProgressReporter:
    """A progress callback (``reporter("message")``) with elapsed times and a heartbeat.

    Use as a context manager around the work: the heartbeat thread runs inside it.
    ``heartbeat_s`` 0 turns the heartbeat off.
    """

    def __init__(
        self,
        sink: Sink,
        *,
        heartbeat_s: float = 30.0,
        status: Status | None = None,
        clock: Callable[[], float] = time.monotonic,
        poll_s: float | None = None,
    ) -> None:
        self._sink = sink
        self._heartbeat_s = heartbeat_s
        self._status = status
        self._clock = clock
        self._poll_s = poll_s if poll_s is not None else min(max(heartbeat_s / 10, 0.05), 5.0)
        self._started = clock()
        self._last_line = self._started
        self._step = "starting"
        self._step_started = self._started
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def set_status(self, status: Status | None) -> None:
        """Where the heartbeat reads stage details from (e.g. once Spark is up)."""
        self._status = status

    def _emit(self, message: str) -> None:
        elapsed = self._clock() - self._started
        self._sink(f"[{format_duration(elapsed):>6}] {message}")

    def __call__(self, message: str) -> None:
        with self._lock:
            now = self._clock()
            self._last_line = now
            self._step = message
            self._step_started = now
            self._emit(message)

    def beat(self) -> bool:
        """Print a heartbeat line if none came for ``heartbeat_s``; whether it printed."""
        if self._heartbeat_s <= 0 or self._clock() - self._last_line < self._heartbeat_s:
            return False
        # Spark's status is read outside the lock: progress lines never wait on it
        detail = self._status() if self._status is not None else None
        with self._lock:
            now = self._clock()
            if now - self._last_line < self._heartbeat_s:
                return False  # a progress line came meanwhile
            since = format_duration(now - self._step_started)
            line = f"... still at '{self._step}' ({since})"
            self._emit(line + (f"; {detail}" if detail else ""))
            self._last_line = now
            return True

    def _run(self) -> None:
        while not self._stop.wait(self._poll_s):
            try:
                self.beat()
            except Exception:  # a heartbeat must never break the run
                return

    def __enter__(self) -> ProgressReporter:
        if self._heartbeat_s > 0 and self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(
                target=self._run, name="pelengine-heartbeat", daemon=True
            )
            self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
