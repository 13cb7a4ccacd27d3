"""The configuration: one typed object, validated once, and a run's settings derived from it.

Values come from one place: the packaged defaults, ``pelengine/conf/defaults.yaml`` (it
ships inside the package), with each ``--conf FILE`` merged over them key by key, later
files winning. :func:`load_config` turns the merged mapping into one frozen
:class:`Config` whose sections are the YAML's: ``reconstruct`` (a :class:`Settings`),
``generate``, ``demo``, ``report`` (:class:`Thresholds`), ``progress``, ``output``,
``storage`` and ``spark``.

* Each configurable field is declared once, with its YAML key, by :func:`conf_field`, and
  its default is the packaged YAML's value: a key missing from the file fails at import,
  a key in the file no field reads fails at import too, so the two cannot drift.
* A value's rules live in its dataclass (``__post_init__``) and nowhere else. They raise
  :class:`SettingsError`, whose message the caller words with its own names:
  ``'reconstruct.engine'`` from a file, ``--engine`` from the command line, ``engine``
  from library code.
* A run's :class:`Settings` is the configuration's ``reconstruct`` section with the
  command line's options over it (:func:`overridden`): every command that replays
  derives its settings that way (``pelengine.commands.args.run_settings``).

In a file, a null or an empty string means "not given": the default, or unset (None)
for a key that may be unset (``spark.master``, ``output.catalog``, ...).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import Field, dataclass, field, fields, replace
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import yaml

from pelengine.model import Profile, resolve_profile

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

PACKAGED_DEFAULTS = "defaults.yaml"

#: the replay engines a run may ask for (pelengine.engine.native resolves them)
ENGINES = ("auto", "native", "python")
#: the runners a reconstruction may run on: Spark (the job), or local (one process, no JVM:
#: pelengine.runs.local)
RUNNERS = ("spark", "local")
#: the Delta Lake a session may be given (pelengine.storage.jars): delta-spark (Delta Lake
#: on the JVM: delta-spark's jars), the embedded delta-rs store, or auto
DELTA_SPARK = "delta-spark"
EMBEDDED = "embedded"
STORES = ("auto", DELTA_SPARK, EMBEDDED)
#: older names of the stores, accepted and read as the store they name ("native" was
#: delta-spark's name until the Rust engine took the word)
STORE_ALIASES = {"native": DELTA_SPARK}


class ConfigError(ValueError):
    """A configuration file is missing, unreadable or holds a bad value."""


class SettingsError(ValueError):
    """A value breaks its rules. ``template`` names the fields in braces (``{engine}``):
    :meth:`naming` words the message with the caller's names for them."""

    def __init__(self, template: str) -> None:
        self.template = template
        super().__init__(self.naming(str))

    def naming(self, name: Callable[[str], str]) -> str:
        """The message, each field called ``name(field)``."""
        return self.template.format_map(_Names(name))


class _Names(dict[str, str]):
    def __init__(self, name: Callable[[str], str]) -> None:
        super().__init__()
        self.name = name

    def __missing__(self, key: str) -> str:
        return self.name(key)


def _shown(value: Any) -> str:
    """``value`` for a SettingsError template (braces kept as text)."""
    return repr(value).replace("{", "{{").replace("}", "}}")


def _at_least(obj: object, *, optional: bool = False, **minimums: int) -> None:
    """Each named field of ``obj`` is an integer >= its minimum (or None when ``optional``)."""
    for name, low in minimums.items():
        value = getattr(obj, name)
        if optional and value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise SettingsError(f"{{{name}}} must be an integer >= {low}, got {_shown(value)}")


def store_name(store: str) -> str:
    """The store ``store`` names (an alias read as its store); SettingsError naming
    ``{store}`` when it names none."""
    store = STORE_ALIASES.get(store, store)
    if store not in STORES:
        aliases = "".join(f" ({old}: {new})" for old, new in STORE_ALIASES.items())
        raise SettingsError(
            f"{{store}}: {_shown(store)} is not one of {', '.join(STORES)}{aliases}"
        )
    return store


# ---- the packaged defaults ------------------------------------------------------------------


def _read_yaml(text: str, origin: str) -> dict[str, Any]:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{origin}: not valid YAML: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{origin}: top level must be a mapping, got {type(data).__name__}")
    return data


def packaged_defaults() -> dict[str, Any]:
    """The defaults shipped inside the package (``pelengine/conf/defaults.yaml``)."""
    text = resources.files("pelengine").joinpath("conf", PACKAGED_DEFAULTS).read_text("utf-8")
    return _read_yaml(text, f"pelengine/conf/{PACKAGED_DEFAULTS}")


_DEFAULTS = packaged_defaults()


def conf_field(section: str, key: str) -> Any:
    """A field the configuration sets: ``key`` of ``section`` in the YAML, whose default
    is the packaged defaults' value."""
    value = _DEFAULTS[section][key]
    meta = {"section": section, "key": key}
    if isinstance(value, dict):
        return field(default_factory=lambda: dict(value), metadata=meta)
    return field(default=value, metadata=meta)


# ---- the sections ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Settings:
    """What to reconstruct and how: the configuration's ``reconstruct`` section, and what
    one run's command line adds (see the CLI's ``reconstruct`` for each option). Built once
    at the entry point and passed down; the runs, the pipeline stages and the engine's UDF
    factory read it and nothing else.

    ``profile`` is kept as given (the run report shows it); :attr:`model_profile` is the
    resolved :class:`~pelengine.model.replay.Profile` and :attr:`profile_reason` says
    how the version was mapped to it."""

    # the server whose behaviour the replay follows: a version or a profile name
    profile: str = conf_field("reconstruct", "profile")
    as_of_ms: int | None = None
    as_of_seq: int | None = None
    txn_app_id: str | None = None
    txn_version: int | None = None
    partitions: int | None = None
    # the server's stream-node-max-entries / stream-node-max-bytes ('~' trimming)
    node_max_entries: int = conf_field("reconstruct", "stream_node_max_entries")
    node_max_bytes: int = conf_field("reconstruct", "stream_node_max_bytes")
    # replay a family with at least this many consumer groups as one task per group
    # (0: never; see pelengine.pipeline.route.split_by_group)
    split_groups: int = conf_field("reconstruct", "split_groups")
    # incremental runs: keep each family's model as state (see pelengine.runs.incremental)
    incremental: bool = False
    # the replay engine: auto (native when importable), native, python (see
    # pelengine.engine.native; resolved once per run by the pipeline)
    engine: str = conf_field("reconstruct", "engine")
    # where the run runs: spark (the job: a Spark session) or local (one process, no JVM,
    # delta-rs in and out; full runs of paths: see pelengine.runs.local)
    runner: str = conf_field("reconstruct", "runner")
    # delta-spark: the tables nights merge into get deletion vectors (see
    # pelengine.storage.write_table)
    deletion_vectors: bool = conf_field("reconstruct", "deletion_vectors")

    def __post_init__(self) -> None:
        try:
            resolved = resolve_profile(self.profile)
        except ValueError as exc:  # names the known versions
            text = str(exc).replace("{", "{{").replace("}", "}}")
            raise SettingsError("{profile}: " + text) from None
        object.__setattr__(self, "_resolved", resolved)
        _at_least(self, node_max_entries=0, node_max_bytes=0, split_groups=0)
        _at_least(self, optional=True, as_of_ms=0, as_of_seq=0, txn_version=0, partitions=1)
        if not isinstance(self.deletion_vectors, bool):
            raise SettingsError(
                f"{{deletion_vectors}} must be true or false, got {_shown(self.deletion_vectors)}"
            )
        if self.engine not in ENGINES:
            raise SettingsError(
                f"{{engine}}: {_shown(self.engine)} is not one of {', '.join(ENGINES)}"
            )
        if self.runner not in RUNNERS:
            raise SettingsError(
                f"{{runner}}: {_shown(self.runner)} is not one of {', '.join(RUNNERS)}"
            )
        if self.incremental and (self.as_of_ms is not None or self.as_of_seq is not None):
            raise SettingsError("{incremental} cannot be combined with {as_of_ms}/{as_of_seq}")

    def moment(self, max_seq: int | None, max_ts: int | None) -> tuple[int | None, int | None]:
        """The run's snapshot moment (as_of_ms, as_of_seq): the one asked for, else the
        newest of the rows replayed (``max_seq``, ``max_ts``); never past the last seq."""
        as_of_ms = self.as_of_ms if self.as_of_ms is not None else max_ts
        as_of_seq = self.as_of_seq if self.as_of_seq is not None else max_seq
        if self.as_of_seq is not None and max_seq is not None:
            as_of_seq = min(self.as_of_seq, max_seq)
        return as_of_ms, as_of_seq

    @property
    def model_profile(self) -> Profile:
        """The model profile the replay follows."""
        profile: Profile = self._resolved[0]  # type: ignore[attr-defined]
        return profile

    @property
    def profile_name(self) -> str:
        """The profile's name ("7.0", "7.4", "valkey-8.1", ...)."""
        return self.model_profile.name

    @property
    def profile_reason(self) -> str:
        """How the given version maps to the profile."""
        reason: str = self._resolved[1]  # type: ignore[attr-defined]
        return reason


@dataclass(frozen=True)
class GenerateConfig:
    """Sizes of a synthetic workload (``pelengine generate`` / ``demo``)."""

    events: int = conf_field("generate", "events")
    keys: int = conf_field("generate", "keys")
    seed: int = conf_field("generate", "seed")

    def __post_init__(self) -> None:
        _at_least(self, events=0, keys=1, seed=0)


@dataclass(frozen=True)
class DemoConfig:
    """Where ``pelengine demo`` works."""

    dir: str = conf_field("demo", "dir")


@dataclass(frozen=True)
class Thresholds:
    """What ``pelengine report`` counts as a problem (each overridable by its CLI flag)."""

    poison_count: int = conf_field("report", "poison_count")
    stuck_idle_ms: int = conf_field("report", "stuck_idle_ms")
    dead_inactive_ms: int = conf_field("report", "dead_inactive_ms")
    lag_runs: int = conf_field("report", "lag_runs")

    def __post_init__(self) -> None:
        _at_least(self, poison_count=1, stuck_idle_ms=0, dead_inactive_ms=0, lag_runs=1)


@dataclass(frozen=True)
class ProgressConfig:
    """How long runs report progress."""

    heartbeat_s: int = conf_field("progress", "heartbeat_s")

    def __post_init__(self) -> None:
        _at_least(self, heartbeat_s=0)


@dataclass(frozen=True)
class OutputConfig:
    """Catalog tables instead of paths: ``<catalog>.<schema>.<table>`` (needs delta-spark)."""

    catalog: str | None = conf_field("output", "catalog")
    schema: str | None = conf_field("output", "schema")

    def __post_init__(self) -> None:
        if self.catalog and not self.schema:
            raise SettingsError("{catalog} needs {schema}")


@dataclass(frozen=True)
class StorageConfig:
    """Which Delta Lake the sessions the CLI builds get (pelengine.storage.jars)."""

    store: str = conf_field("storage", "store")
    delta_jars: str | None = conf_field("storage", "delta_jars")

    def __post_init__(self) -> None:
        object.__setattr__(self, "store", store_name(self.store))


@dataclass(frozen=True)
class SparkConfig:
    """How the CLI builds its SparkSession. ``conf``'s values are kept as Spark reads them
    (text; booleans as true/false); a key set to null is left out."""

    app_name: str = conf_field("spark", "app_name")
    master: str | None = conf_field("spark", "master")
    log_level: str | None = conf_field("spark", "log_level")
    conf: Mapping[str, str] = conf_field("spark", "conf")

    def __post_init__(self) -> None:
        if not isinstance(self.conf, Mapping):
            raise SettingsError(f"{{conf}} must be a mapping, got {_shown(self.conf)}")
        text = {str(k): _conf_value(v) for k, v in self.conf.items() if v is not None}
        if DOWNLOAD_AT_START in text:
            raise SettingsError(
                f"{{conf}} sets {DOWNLOAD_AT_START}, which downloads jars each time a session "
                "starts: parallel JVMs race on its cache and every run needs the network. "
                "Fetch them once instead (`make jars` puts delta-spark's in jars/lib, which "
                "pelengine's sessions get as spark.jars) and list any other jar by its local "
                "path in spark.jars"
            )
        object.__setattr__(self, "conf", text)


#: the Spark conf that resolves Maven coordinates and downloads them when a session starts
DOWNLOAD_AT_START = "spark.jars.packages"


def _conf_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


#: the sections of a configuration file, each read into its dataclass
SECTIONS: dict[str, type[Any]] = {
    "reconstruct": Settings,
    "generate": GenerateConfig,
    "demo": DemoConfig,
    "report": Thresholds,
    "progress": ProgressConfig,
    "output": OutputConfig,
    "storage": StorageConfig,
    "spark": SparkConfig,
}


@dataclass(frozen=True)
class Config:
    """Everything the CLI reads from configuration, one section a field (``Config()``: the
    packaged defaults); ``sources``: the ``--conf`` files merged, in order."""

    reconstruct: Settings = field(default_factory=Settings)
    generate: GenerateConfig = field(default_factory=GenerateConfig)
    demo: DemoConfig = field(default_factory=DemoConfig)
    report: Thresholds = field(default_factory=Thresholds)
    progress: ProgressConfig = field(default_factory=ProgressConfig)
    output: OutputConfig = field(default_factory=OutputConfig)
    storage: StorageConfig = field(default_factory=StorageConfig)
    spark: SparkConfig = field(default_factory=SparkConfig)
    sources: tuple[str, ...] = ()


def conf_fields(section: type[DataclassInstance]) -> dict[str, Field[Any]]:
    """The fields of ``section`` a configuration file sets, by their YAML key."""
    return {f.metadata["key"]: f for f in fields(section) if "key" in f.metadata}


def _check_packaged() -> None:
    """Every key of the packaged defaults is read by a field of its section, and every
    field reads its own section."""
    for name, cls in SECTIONS.items():
        strays = [f.name for f in conf_fields(cls).values() if f.metadata["section"] != name]
        if strays:
            raise ConfigError(f"{cls.__name__}: {strays} read another section than '{name}'")
    for name, section in _DEFAULTS.items():
        known = conf_fields(SECTIONS[name]) if name in SECTIONS else {}
        unread = sorted(set(section) - set(known))
        if name not in SECTIONS or unread:
            raise ConfigError(
                f"pelengine/conf/{PACKAGED_DEFAULTS}: '{name}' {unread or ''} is read by no "
                "field of pelengine.settings (declare it with conf_field)"
            )


_check_packaged()


# ---- reading files --------------------------------------------------------------------------


def merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """Deep-merge two mappings; values of `over` win, nested mappings merge."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


_UNSET = object()


def _file_value(value: Any, f: Field[Any], where: str) -> Any:
    """A file's value for field ``f``: text where text is expected (a YAML number, such as
    ``profile: 7.0``, read as its text), null or "" as not given (``_UNSET``: the default;
    None where the field may be unset, no keys for a mapping); the field's own rules check
    the rest."""
    if value is None or value == "":
        if "None" in str(f.type):
            return None
        return {} if str(f.type).startswith("Mapping") else _UNSET
    if str(f.type).startswith("str"):
        if isinstance(value, int | float) and not isinstance(value, bool):
            return str(value)
        if not isinstance(value, str):
            raise ConfigError(f"{where} must be a string, got {value!r}")
    return value


def _read_section(name: str, raw: Mapping[str, Any], origin: str) -> Any:
    section = SECTIONS[name]
    given = raw.get(name) or {}
    if not isinstance(given, Mapping):
        raise ConfigError(f"{origin}: '{name}' must be a mapping")
    keys = conf_fields(section)
    values = {}
    for key, f in keys.items():
        if key in given:
            value = _file_value(given[key], f, f"{origin}: '{name}.{key}'")
            if value is not _UNSET:
                values[f.name] = value
    try:
        return section(**values)
    except SettingsError as exc:
        by_field = {f.name: key for key, f in keys.items()}
        raise ConfigError(
            f"{origin}: " + exc.naming(lambda n: f"'{name}.{by_field.get(n, n)}'")
        ) from None


def from_mapping(raw: Mapping[str, Any], origin: str = "config") -> Config:
    """Validate a merged raw mapping into a :class:`Config` (errors name the key)."""
    return Config(**{name: _read_section(name, raw, origin) for name in SECTIONS})


def load_config(paths: Sequence[str | Path] = ()) -> Config:
    """Packaged defaults, then each file of `paths` merged on top in order."""
    raw = _DEFAULTS
    for p in paths:
        path = Path(p)
        try:
            text = path.read_text("utf-8")
        except OSError as exc:
            raise ConfigError(f"--conf {path}: cannot read: {exc.strerror or exc}") from exc
        raw = merge(raw, _read_yaml(text, f"--conf {path}"))
    origin = "--conf " + ", ".join(str(p) for p in paths) if paths else "defaults"
    return replace(from_mapping(raw, origin), sources=tuple(str(p) for p in paths))


# ---- a run's values -------------------------------------------------------------------------

Section = TypeVar("Section", bound="DataclassInstance")


def overridden(section: Section, **given: Any) -> Section:
    """``section`` with each value of ``given`` that is not None in its place: the command
    line's options over the configuration. SettingsError when a value breaks a rule."""
    return replace(section, **{k: v for k, v in given.items() if v is not None})
