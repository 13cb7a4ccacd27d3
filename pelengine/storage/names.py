"""Where tables are: a path, or a table known by name to the session's catalog
(:class:`Table`, delta-spark only); a run's :class:`Output` and where each of its tables
lives; input and output refused before any work when their catalog or schema is not
there."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pelengine.storage.choice import DELTA_CONFS, DELTA_SPARK, storage_mode
from pelengine.storage.errors import CatalogNameError, DeltaSparkRequiredError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclass(frozen=True)
class Table:
    """A table known by name to the session's catalog: ``name`` is its quoted multi-part
    identifier (``catalog.schema.table`` or ``schema.table``); ``location`` makes it an
    external table stored there, else it is managed (the catalog picks the storage)."""

    name: str
    location: str | None = None

    def __str__(self) -> str:
        return self.name


#: A table: a path (str) or a :class:`Table` known by name (needs delta-spark).
TableRef = str | Table


_IDENTIFIER = r"(?:[A-Za-z_][A-Za-z0-9_-]*|`(?:[^`]|``)+`)"
_THREE_PART = re.compile(rf"^{_IDENTIFIER}\.{_IDENTIFIER}\.{_IDENTIFIER}$")


def quote_identifier(part: str) -> str:
    """``part`` as one backquoted SQL identifier (backquotes doubled)."""
    return "`" + part.replace("`", "``") + "`"


def _split_name(name: str) -> list[str]:
    parts = re.findall(rf"{_IDENTIFIER}", name)
    return [p[1:-1].replace("``", "`") if p.startswith("`") else p for p in parts]


def table_ref(text: str) -> TableRef:
    """An input table as given on the command line: ``catalog.schema.table`` (exactly three
    dot-separated names, no ``/``) is a catalog table, anything else a path."""
    if "/" not in text and "\\" not in text and _THREE_PART.match(text):
        return Table(".".join(quote_identifier(p) for p in _split_name(text)))
    return text


@dataclass(frozen=True)
class Output:
    """Where a run writes its tables.

    * ``root`` only: each table is the Delta table at ``<root>/<table>`` (paths; works with
      the embedded delta-rs source and with delta-spark);
    * ``schema`` (and optionally ``catalog``): each table is written by name as
      ``<catalog>.<schema>.<table>`` (``saveAsTable``, needs delta-spark), managed, or
      external at ``<root>/<table>`` when ``root`` is given too.

    The run report (``_run_report.json``) goes under ``root`` when there is one.
    """

    root: str | None = None
    catalog: str | None = None
    schema: str | None = None

    def __post_init__(self) -> None:
        if self.catalog and not self.schema:
            raise ValueError("a catalog needs a schema: give --schema (or output.schema)")
        if not self.root and not self.schema:
            raise ValueError("no output: give --out PATH, or --schema S for catalog tables")

    @property
    def by_name(self) -> bool:
        """Whether the tables are written and read by name (catalog tables)."""
        return bool(self.schema)

    def table(self, name: str) -> TableRef:
        """Where the output table ``name`` is."""
        path = os.path.join(self.root, name) if self.root else None
        if not self.by_name:
            assert path is not None
            return path
        assert self.schema is not None
        parts = [p for p in (self.catalog, self.schema, name) if p]
        return Table(".".join(quote_identifier(p) for p in parts), path)

    def describe(self) -> dict[str, Any]:
        """For the run report: ``path`` (the root), plus ``catalog``/``schema`` by name."""
        out: dict[str, Any] = {"path": self.root}
        if self.by_name:
            out.update(catalog=self.catalog, schema=self.schema)
        return out

    def __str__(self) -> str:
        if not self.by_name:
            return str(self.root)
        where = ".".join(p for p in (self.catalog, self.schema) if p)
        return f"{where} (external tables under {self.root})" if self.root else where


def as_output(out: str | Output) -> Output:
    """An :class:`Output` for a root path or an output already described."""
    return out if isinstance(out, Output) else Output(root=out)


def table_path(root: str | Output, name: str) -> TableRef:
    """Where the table ``name`` of an output lives: ``<root>/<name>`` for a root path, the
    catalog table for an :class:`Output` written by name."""
    return as_output(root).table(name)


CATALOG_NEEDS_DELTA_SPARK = (
    "catalog tables ({what}) need delta-spark, and this session has the embedded "
    "delta-rs store, which reads and writes paths only. Either run where Delta Lake is "
    "installed (Databricks; locally `make install` fetches its jars into jars/lib; "
    "spark-submit --jars $(cat jars/lib/classpath) "
    + DELTA_CONFS
    + "), or write paths: drop --catalog/--schema (and output.catalog/"
    "output.schema), give --out PATH, and register the tables later where Delta Lake is "
    "available (CREATE TABLE <name> USING delta LOCATION '<PATH>/<table>')."
)


def require_delta_spark(spark: SparkSession, what: str) -> None:
    if storage_mode(spark) != DELTA_SPARK:
        raise DeltaSparkRequiredError(CATALOG_NEEDS_DELTA_SPARK.format(what=what))


def _missing_namespace(spark: SparkSession, catalog: str | None, schema: str) -> str | None:
    """Why the session cannot write or read tables in ``[catalog.]schema`` (one clause), or
    None when the schema exists."""
    from pyspark.errors import AnalysisException

    name = ".".join(quote_identifier(p) for p in (catalog, schema) if p)
    try:
        if spark.catalog.databaseExists(name):
            return None
    except AnalysisException:
        pass
    if catalog:
        try:
            catalogs = sorted(c.name for c in spark.catalog.listCatalogs())
        except Exception:
            catalogs = []
        if catalogs and catalog not in catalogs:
            return (
                f"this session has no catalog {catalog} (it has {', '.join(catalogs)}): name "
                f"one it has, or run where {catalog} exists (on Databricks a Unity Catalog "
                f"catalog, elsewhere one configured with spark.sql.catalog.{catalog})"
            )
    return (
        f"there is no schema {name}, and pelengine does not create schemas: create it first "
        f"(CREATE SCHEMA {name}, with the LOCATION or MANAGED LOCATION its managed tables "
        "should use), or name an existing one"
    )


def check_output(spark: SparkSession, out: str | Output) -> Output:
    """The :class:`Output` of ``out``, refused before any work when it names catalog tables
    and the session has no delta-spark, or no such schema (:class:`CatalogNameError`:
    a run does not create the schema, as ``saveAsTable`` does not)."""
    output = as_output(out)
    if output.by_name:
        require_delta_spark(spark, f"output {output}")
        assert output.schema is not None
        missing = _missing_namespace(spark, output.catalog, output.schema)
        if missing is not None:
            raise CatalogNameError(f"output {output}: {missing}")
    return output


def check_input(spark: SparkSession, ref: TableRef) -> None:
    """Refuse, before any work, an input table by name without delta-spark, or in a
    catalog or schema the session does not have."""
    if isinstance(ref, Table):
        require_delta_spark(spark, f"--events {ref}")
        parts = _split_name(ref.name)
        if len(parts) == 3:
            missing = _missing_namespace(spark, parts[0], parts[1])
            if missing is not None:
                raise CatalogNameError(f"--events {'.'.join(parts)}: {missing}")
