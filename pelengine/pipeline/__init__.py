"""The pipeline: events DataFrame in, output DataFrames out, no storage inside.

The stages, each a module, in the order data flows through them:

* :mod:`~pelengine.pipeline.conform`   - cast to the input contract, reject what is not a
  command (once), give rows their db, cut at ``--as-of-*``;
* :mod:`~pelengine.pipeline.units`     - the MULTI/EXEC or script unit of every command;
* :mod:`~pelengine.pipeline.route`     - the stream families every command reaches;
* :mod:`~pelengine.pipeline.replay`    - one shuffle, one sort, the engine's replay per partition;
* :mod:`~pelengine.pipeline.assemble`  - the output tables from the replay output.

:func:`pelengine.pipeline.reconstruct` strings them together; the runs
(:mod:`pelengine.runs`) read the events and write what it returns.
"""
