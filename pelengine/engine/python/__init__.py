"""The Python engine: the replay and the router over the pure Python model.

It has the native engine's interface (``pelengine_native``, Rust): ``FamilyReplay``, one
family's replay (``feed(batch)`` for each input batch in ``seq`` order, then
``finish()``, each giving ``(table, pyarrow.RecordBatch)`` pairs), and ``Router``
(``route(batch)``: the batch with the routing columns). The functions Spark runs
(:mod:`pelengine.engine.udf`) pick an engine and run one loop over either.

* :mod:`.family`: ``FamilyReplay``, and the outcome counters it ends with;
* :mod:`.router`: ``Router``;
* :mod:`.state`: a family's saved model in and out of the replay's columns, and the
  digest of every row a family received;
* :mod:`.arrow`: input columns as Python values, output rows as Arrow batches;
* :mod:`.worker_gc`: the garbage collector of the Python worker that runs the model.
"""

from pelengine.engine.python.family import FamilyReplay
from pelengine.engine.python.router import Router

__all__ = ["FamilyReplay", "Router"]
