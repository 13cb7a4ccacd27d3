"""The subcommands of the command line (:mod:`pelengine.cli` runs them).

``parser``: the grammar, one function per subcommand; ``args``: the checks before any
Spark work and the values a command derives from its options over the configuration;
``reconstruct`` (reconstruct, generate, demo), ``read`` (summary, pel-as-of, sql, pending,
report) and ``ingest`` (ingest-monitor, ingest-aof, ingest-rdb): the commands' bodies.
"""
