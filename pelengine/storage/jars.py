"""Which Delta Lake a session gets, decided before its JVM starts.

delta-spark (Delta Lake on the JVM) is its jars on Spark's classpath plus its SQL extension and
catalog, all given when the JVM starts: `make install` fetches the jars once into
``jars/lib`` (``jars/fetch.py``), and :func:`session_conf` hands them to the session
builder as ``spark.jars``. Nothing is downloaded at session start: no Maven resolution
by Spark, whose Ivy cache parallel JVMs race on. Without them the embedded delta-rs store serves
(:mod:`pelengine.storage.embedded`).

The choice is the configuration's ``storage.store``: ``auto`` (delta-spark when its
jars are found, else the embedded store), ``delta-spark`` (its jars or an error; ``native``,
its older name, is read as ``delta-spark``) or
``embedded`` (never the jars). :func:`pelengine.storage.install_storage` then checks what
the running session really has and records the store and why in the session.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from pelengine.settings import DELTA_SPARK, DOWNLOAD_AT_START, SettingsError, store_name

#: the store, overriding the configuration's ``storage.store`` (auto, delta-spark, embedded)
STORE_ENV = "PELENGINE_STORE"
#: a folder holding delta-spark's jars (what ``jars/fetch.py`` writes), overriding the
#: configuration's ``storage.delta_jars`` and the checkout's ``jars/lib``
DELTA_JARS_ENV = "PELENGINE_DELTA_JARS"
DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
DELTA_CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"
CATALOG_CONF = "spark.sql.catalog.spark_catalog"
EXTENSIONS_CONF = "spark.sql.extensions"
#: Delta's own defaults are sized for clusters: its log snapshot is computed in 50
#: partitions, which on a few local cores costs seconds per table read
LOCAL_DELTA_CONF = {"spark.databricks.delta.snapshotPartitions": "2"}
FETCH_HINT = (
    "run `make install` (it fetches them with Maven into jars/lib), or name a folder "
    f"holding them in {DELTA_JARS_ENV} or storage.delta_jars"
)


class StoreChoiceError(ValueError):
    """The configured store cannot be had (delta-spark asked for, no jars found)."""


def checkout_jars() -> Path:
    """``jars/lib`` of the source checkout this package runs from (an editable install)."""
    return Path(__file__).resolve().parents[2] / "jars" / "lib"


def find_delta_jars(folder: str | None = None) -> tuple[list[str], str]:
    """(the jar paths, where they came from) of delta-spark: the folder named by
    ``PELENGINE_DELTA_JARS``, else ``folder`` (``storage.delta_jars``), else the
    checkout's ``jars/lib``; no jars when the chosen folder has no delta-spark jar."""
    env = os.environ.get(DELTA_JARS_ENV)
    if env:
        where, origin = Path(env), f"{DELTA_JARS_ENV}={env}"
    elif folder:
        where, origin = Path(folder), f"storage.delta_jars={folder}"
    else:
        where, origin = checkout_jars(), str(checkout_jars())
    jars = sorted(str(p) for p in where.glob("*.jar")) if where.is_dir() else []
    if not any(Path(j).name.startswith("delta-spark_") for j in jars):
        return [], origin
    return jars, origin


@dataclass(frozen=True)
class StoreChoice:
    """What a session builder adds before the JVM starts (``conf``), and why (``why``)."""

    conf: dict[str, str]
    why: str

    @property
    def delta_spark(self) -> bool:
        return bool(self.conf)


def store_asked(store: str = "auto") -> str:
    """The store asked for: ``PELENGINE_STORE`` when set, else ``store`` (the
    configuration's ``storage.store``); StoreChoiceError when it names no store."""
    try:
        return store_name(os.environ.get(STORE_ENV) or store)
    except SettingsError as exc:
        raise StoreChoiceError(exc.naming(lambda _: f"storage.store (or {STORE_ENV})")) from None


def session_conf(
    store: str = "auto", folder: str | None = None, extensions: str | None = None
) -> StoreChoice:
    """The Spark confs of the ``store`` asked for (``PELENGINE_STORE`` wins over it): with
    delta-spark, ``spark.jars``, the Delta SQL extension (after ``extensions`` already
    configured) and catalog."""
    store = store_asked(store)
    if store == "embedded":
        return StoreChoice({}, "the embedded store was asked for")
    jars, origin = find_delta_jars(folder)
    if not jars:
        if store == DELTA_SPARK:
            raise StoreChoiceError(
                f"storage.store is delta-spark but no delta-spark jars were found in {origin}: "
                + FETCH_HINT
            )
        return StoreChoice({}, f"no delta-spark jars in {origin} ({FETCH_HINT})")
    ext = [e.strip() for e in (extensions or "").split(",") if e.strip()]
    if DELTA_EXTENSION not in ext:
        ext.append(DELTA_EXTENSION)
    conf = {
        "spark.jars": ",".join(jars),
        EXTENSIONS_CONF: ",".join(ext),
        CATALOG_CONF: DELTA_CATALOG,
        **LOCAL_DELTA_CONF,
    }
    return StoreChoice(conf, f"delta-spark's jars from {origin}")


#: what a session launch reads besides pelengine's configuration that can ask Spark to
#: resolve and download Maven coordinates when the JVM starts
SUBMIT_ARGS_ENV = "PYSPARK_SUBMIT_ARGS"


def download_at_start_refusal(packages: str, where: str) -> str:
    """The one sentence refusing a session whose ``where`` asks for ``packages``
    (``spark.jars.packages`` / ``--packages``)."""
    return (
        f"{where} asks for {DOWNLOAD_AT_START} ({packages.strip()}), which downloads jars "
        "each time a session starts: parallel JVMs race on its cache and every run needs "
        "the network. Fetch them once instead (`make jars` puts delta-spark's in "
        "jars/lib) and give jars by their local paths: spark.jars, or spark-submit --jars "
        "$(cat jars/lib/classpath)"
    )


def download_at_launch(environ: dict[str, str] | None = None) -> str | None:
    """Why a session the project is about to launch would download jars at start (the
    refusal's sentence), None when it would not: ``--packages`` in
    ``PYSPARK_SUBMIT_ARGS``, or ``spark.jars.packages`` in the ``spark-defaults.conf``
    the launcher reads (``SPARK_CONF_DIR``, else ``SPARK_HOME/conf``). pelengine's own
    configuration refuses the key already (``settings.SparkConfig``)."""
    env = os.environ if environ is None else environ
    args = env.get(SUBMIT_ARGS_ENV, "").split()
    for i, arg in enumerate(args):
        if arg == "--packages" or arg.startswith("--packages="):
            value = arg.partition("=")[2] or (args[i + 1] if i + 1 < len(args) else "")
            return download_at_start_refusal(value, f"{SUBMIT_ARGS_ENV} (--packages)")
        if (
            arg == "--conf"
            and i + 1 < len(args)
            and args[i + 1].startswith(DOWNLOAD_AT_START + "=")
        ):
            value = args[i + 1].partition("=")[2]
            return download_at_start_refusal(value, f"{SUBMIT_ARGS_ENV} (--conf)")
    folder = env.get("SPARK_CONF_DIR") or (
        str(Path(env["SPARK_HOME"]) / "conf") if env.get("SPARK_HOME") else None
    )
    if folder:
        defaults = Path(folder) / "spark-defaults.conf"
        if defaults.is_file():
            for line in defaults.read_text(errors="replace").splitlines():
                key, _, value = line.strip().partition(" ")
                if "=" in key and not value:  # key=value is read too
                    key, _, value = key.partition("=")
                if key == DOWNLOAD_AT_START and value.strip():
                    return download_at_start_refusal(value, str(defaults))
    return None
