"""The storage seam: the one package that knows paths and Delta Lake.

Job code reads with ``spark.read.format("delta").load(path)`` and writes with
``df.write.format("delta").mode(m).option(...).save(path)`` (or the helpers below). With
delta-spark on the classpath (Databricks; delta-spark's jars, which ``make install``
fetches and :mod:`pelengine.storage.jars` gives the sessions the project builds) those calls
go to it unchanged; otherwise :func:`install_storage` registers an embedded Python data
source named ``delta`` backed by delta-rs (:mod:`pelengine.storage.embedded`).

Its modules: :mod:`~pelengine.storage.choice` (which store a session has),
:mod:`~pelengine.storage.names` (paths, catalog tables, outputs), :mod:`~pelengine.storage.reads`,
:mod:`~pelengine.storage.writes`, :mod:`~pelengine.storage.versions` (versions, row counts),
:mod:`~pelengine.storage.changes` (what a range of versions did),
:mod:`~pelengine.storage.run_record` (the run report and ``_runs``),
:mod:`~pelengine.storage.errors`, :mod:`~pelengine.storage.paths` (the rule for local paths),
:mod:`~pelengine.storage.lease` (one writer per output), :mod:`~pelengine.storage.deltalog` (the
Delta log read as files), :mod:`~pelengine.storage.embedded` (the delta-rs data source) and
:mod:`~pelengine.storage.jars` (delta-spark's jars for the sessions the project builds). This
package re-exports their public names.
"""

from __future__ import annotations

from pelengine.storage import sessionless
from pelengine.storage.changes import (
    TableChanges,
    expected_rows,
    read_change_feed,
    read_changes,
    table_changes,
    table_changes_sessionless,
)
from pelengine.storage.choice import (
    CONNECT_NEEDS_DELTA_SPARK,
    DELTA_CONFS,
    DELTA_PACKAGE,
    DELTA_SOURCE_CLASS,
    DELTA_SPARK,
    DELTA_TABLE_FUNCTION,
    EMBEDDED,
    MODE_CONF,
    REASON_CONF,
    SessionFacts,
    choose_storage_mode,
    concurrent_writes,
    install_storage,
    is_remote_session,
    on_databricks,
    persist_where_allowed,
    probe_connect_delta,
    probe_jvm_delta,
    storage_mode,
    storage_reason,
)
from pelengine.storage.deltalog import DataFile, TableState
from pelengine.storage.errors import (
    CatalogNameError,
    ChangesUnknownError,
    ConcurrentWriteError,
    DeltaSparkRequiredError,
    OutputVersionError,
    StorageSetupError,
    StoreCannotWriteError,
    concurrent_write_error,
    delta_conflict,
)
from pelengine.storage.lease import RunInProgressError, run_lease
from pelengine.storage.names import (
    CATALOG_NEEDS_DELTA_SPARK,
    Output,
    Table,
    TableRef,
    as_output,
    check_input,
    check_output,
    quote_identifier,
    require_delta_spark,
    table_path,
    table_ref,
)
from pelengine.storage.paths import FILES_OPTION, local_path
from pelengine.storage.reads import read_snapshot, read_table, read_table_files
from pelengine.storage.run_record import (
    OUTPUT_VERSION,
    RUN_REPORT,
    RUNS_SCHEMA,
    RUNS_TABLE,
    check_output_version,
    newest_run,
    read_output_table,
    read_run_report,
    record_run,
    run_versions,
    write_run_report,
)
from pelengine.storage.versions import (
    commit_rows,
    table_exists,
    table_row_count,
    table_version,
    table_versions,
)
from pelengine.storage.writes import (
    TABLE_FORMAT,
    append_rows,
    check_embedded_writes,
    replace_rows,
    restore_table,
    write_table,
)

__all__ = [
    "CATALOG_NEEDS_DELTA_SPARK",
    "CONNECT_NEEDS_DELTA_SPARK",
    "CatalogNameError",
    "ChangesUnknownError",
    "ConcurrentWriteError",
    "DELTA_CONFS",
    "DELTA_PACKAGE",
    "DELTA_SOURCE_CLASS",
    "DELTA_TABLE_FUNCTION",
    "DataFile",
    "EMBEDDED",
    "FILES_OPTION",
    "MODE_CONF",
    "OUTPUT_VERSION",
    "OutputVersionError",
    "DELTA_SPARK",
    "DeltaSparkRequiredError",
    "Output",
    "REASON_CONF",
    "RUNS_SCHEMA",
    "RUNS_TABLE",
    "RUN_REPORT",
    "RunInProgressError",
    "SessionFacts",
    "StorageSetupError",
    "StoreCannotWriteError",
    "TABLE_FORMAT",
    "Table",
    "TableChanges",
    "TableRef",
    "TableState",
    "append_rows",
    "check_embedded_writes",
    "as_output",
    "check_output_version",
    "commit_rows",
    "check_input",
    "check_output",
    "choose_storage_mode",
    "concurrent_writes",
    "concurrent_write_error",
    "delta_conflict",
    "expected_rows",
    "install_storage",
    "is_remote_session",
    "local_path",
    "on_databricks",
    "persist_where_allowed",
    "probe_connect_delta",
    "probe_jvm_delta",
    "quote_identifier",
    "newest_run",
    "read_change_feed",
    "read_changes",
    "read_output_table",
    "read_run_report",
    "read_table",
    "read_snapshot",
    "read_table_files",
    "record_run",
    "replace_rows",
    "restore_table",
    "require_delta_spark",
    "run_lease",
    "run_versions",
    "sessionless",
    "storage_mode",
    "storage_reason",
    "table_changes",
    "table_changes_sessionless",
    "table_exists",
    "table_path",
    "table_ref",
    "table_row_count",
    "table_version",
    "table_versions",
    "write_run_report",
    "write_table",
]
