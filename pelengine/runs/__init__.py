"""Runs: the jobs that read tables, call the pipeline and write tables.

:mod:`~pelengine.runs.full` and :mod:`~pelengine.runs.incremental` reconstruct;
:mod:`~pelengine.runs.output` is the writer both share; the ingest and generate runs
write events tables.
"""
