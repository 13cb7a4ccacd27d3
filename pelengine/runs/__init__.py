"""Runs: the jobs that read tables, call the pipeline and write tables.

:mod:`~pelengine.runs.full` and :mod:`~pelengine.runs.incremental` reconstruct;
:mod:`~pelengine.runs.output` is the writer both share; the ingest runs
(:mod:`~pelengine.runs.ingest_aof`, :mod:`~pelengine.runs.ingest_monitor`,
:mod:`~pelengine.runs.ingest_rdb`) and :mod:`~pelengine.runs.generate` write events
tables, their rows packed by :mod:`~pelengine.runs.events`.
"""
