"""The garbage collector of a Python worker that runs the Python model.

The model allocates few objects that hold others (its history rows are columns of plain
values, read and written column by column), so a worker collects rarely
(``tune_worker_gc``); what a finished replay leaves (each consumer and its pending
entries reference each other) is freed by a collection only, so the replays count it
and a full collection runs before the next one once it is large (``finishing``,
``collect_finished``).
"""

from __future__ import annotations

import gc

# The automatic collections of a Python worker once ``tune_worker_gc`` ran (Python's
# default: 700, 10, 10): the youngest generation is collected after this many net
# allocations of objects that can hold others, a full collection follows 10 x 10 of them.
WORKER_GC_THRESHOLDS = (50_000, 10, 10)
# A full collection before the next replay once the replays finished since the last
# one left this many consumers and pending entries (see ``tune_worker_gc``).
GC_AFTER_FINISHED = 200_000
_worker_gc_tuned = False
_finished_cycles = 0


def tune_worker_gc() -> None:
    """Once per Python worker process: collect, freeze what survives (the interpreter,
    Spark's worker, the libraries: never garbage) so that no later collection scans it
    again (the daemon's ``gc.collect()`` after every task included), and make the
    automatic collections rarer (``WORKER_GC_THRESHOLDS``): the replay allocates few
    objects that hold others (its history rows are columns of plain values, read and
    written column by column).

    What a finished replay leaves is freed by a collection only (each consumer and its
    pending entries reference each other); rarer automatic collections would let it
    pile up over the families of a task, so the replays count it and a full collection
    runs before the next one once it reaches ``GC_AFTER_FINISHED``
    (``finishing``, ``collect_finished``)."""
    global _worker_gc_tuned
    if _worker_gc_tuned:
        return
    _worker_gc_tuned = True
    gc.collect()
    gc.freeze()
    gc.set_threshold(*WORKER_GC_THRESHOLDS)


def collect_finished() -> None:
    """Before a replay: a full collection once the replays finished since the last one
    left ``GC_AFTER_FINISHED`` consumers and pending entries (tuned workers only)."""
    global _finished_cycles
    if _worker_gc_tuned and _finished_cycles >= GC_AFTER_FINISHED:
        _finished_cycles = 0
        gc.collect()


def finishing(left: int) -> None:
    """A replay ends and its model, with ``left`` consumers and pending entries, with it."""
    global _finished_cycles
    _finished_cycles += left


def in_spark_worker() -> bool:
    """Whether this runs in a Spark task (not in the driver, nor in a test calling a
    function directly)."""
    try:
        from pyspark import TaskContext
    except ImportError:  # pragma: no cover - pyspark is there wherever Spark runs this
        return False
    return TaskContext.get() is not None


def tune_in_spark_worker() -> None:
    """``tune_worker_gc`` when this runs in a Spark task."""
    if in_spark_worker():
        tune_worker_gc()
