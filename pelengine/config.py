"""Typed configuration for the CLI: packaged defaults, overlaid by YAML files.

The defaults live inside the package (`pelengine/conf/defaults.yaml`, the only
copy), so an installed wheel needs no repo checkout.
Each `--conf FILE` is merged key by key on top, later files winning.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from pelengine.model import resolve_profile
from pelengine.settings import ENGINES
from pelengine.storage.jars import STORES

PACKAGED_DEFAULTS = "defaults.yaml"


class ConfigError(ValueError):
    """A configuration file is missing, unreadable or holds a bad value."""


@dataclass(frozen=True)
class GenerateConfig:
    """Sizes of a synthetic workload."""

    events: int = 20_000
    keys: int = 20
    seed: int = 7


@dataclass(frozen=True)
class ReportConfig:
    """Thresholds of `pelengine report` (each overridable by its CLI flag)."""

    poison_count: int = 5  # pending entries delivered at least this many times
    stuck_idle_ms: int = 300_000  # pending entries idle longer than this
    dead_inactive_ms: int = 3_600_000  # consumers owning entries, inactive longer than this
    lag_runs: int = 1  # growing lag: lag rose in each of the last N runs


@dataclass(frozen=True)
class ProgressConfig:
    """How long runs report progress."""

    heartbeat_s: int = 30  # a "still working" line after this long without one (0: never)


@dataclass(frozen=True)
class SparkConfig:
    """How the CLI builds its SparkSession."""

    app_name: str = "pelengine"
    master: str | None = None
    log_level: str | None = None
    conf: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class OutputConfig:
    """Catalog tables instead of paths: `<catalog>.<schema>.<table>` (needs native Delta)."""

    catalog: str | None = None
    schema: str | None = None


@dataclass(frozen=True)
class StorageConfig:
    """Which Delta Lake the sessions the CLI builds get (pelengine.storage.jars)."""

    store: str = "auto"  # auto, native (delta-spark's jars) or embedded (delta-rs)
    delta_jars: str | None = None  # folder of delta-spark's jars (default: jars/lib)


@dataclass(frozen=True)
class Config:
    """Everything the CLI reads from configuration."""

    profile: str = "7.0"
    # the server's stream-node-max-entries / -bytes (what '~' trimming can drop)
    node_max_entries: int = 100
    node_max_bytes: int = 4096
    # replay a stream with at least this many consumer groups as one task per group
    split_groups: int = 0
    # the replay engine: auto, native, python (pelengine.engine.native)
    engine: str = "auto"
    generate: GenerateConfig = field(default_factory=GenerateConfig)
    demo_dir: str = "demo"
    spark: SparkConfig = field(default_factory=SparkConfig)
    report: ReportConfig = field(default_factory=ReportConfig)
    progress: ProgressConfig = field(default_factory=ProgressConfig)
    output: OutputConfig = field(default_factory=OutputConfig)
    storage: StorageConfig = field(default_factory=StorageConfig)
    sources: tuple[str, ...] = ()


def merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """Deep-merge two mappings; values of `over` win, nested mappings merge."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


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
    """The defaults shipped inside the package."""
    text = resources.files("pelengine").joinpath("conf", PACKAGED_DEFAULTS).read_text("utf-8")
    return _read_yaml(text, f"pelengine/conf/{PACKAGED_DEFAULTS}")


def _section(raw: Mapping[str, Any], name: str, origin: str) -> Mapping[str, Any]:
    value = raw.get(name) or {}
    if not isinstance(value, Mapping):
        raise ConfigError(f"{origin}: '{name}' must be a mapping")
    return value


def _int(section: Mapping[str, Any], key: str, path: str, origin: str, minimum: int) -> int:
    value = section.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{origin}: '{path}' must be an integer >= {minimum}, got {value!r}")
    return value


def _opt_str(section: Mapping[str, Any], key: str, path: str, origin: str) -> str | None:
    value = section.get(key)
    if value is None or isinstance(value, str):
        return value
    raise ConfigError(f"{origin}: '{path}' must be a string, got {value!r}")


def _conf_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def from_mapping(raw: Mapping[str, Any], origin: str = "config") -> Config:
    """Validate a merged raw mapping into a `Config` (errors name the key)."""
    rec = _section(raw, "reconstruct", origin)
    profile = str(rec.get("profile", "7.0"))
    try:
        resolve_profile(profile)
    except ValueError as exc:
        raise ConfigError(f"{origin}: 'reconstruct.profile': {exc}") from None
    node_max_entries = _int(
        rec, "stream_node_max_entries", "reconstruct.stream_node_max_entries", origin, 0
    )
    node_max_bytes = _int(
        rec, "stream_node_max_bytes", "reconstruct.stream_node_max_bytes", origin, 0
    )
    split_groups = _int(
        {"split_groups": 0, **rec}, "split_groups", "reconstruct.split_groups", origin, 0
    )
    engine = _opt_str({"engine": "auto", **rec}, "engine", "reconstruct.engine", origin) or "auto"
    if engine not in ENGINES:
        raise ConfigError(
            f"{origin}: 'reconstruct.engine': {engine!r} is not one of {', '.join(ENGINES)}"
        )
    gen = _section(raw, "generate", origin)
    generate = GenerateConfig(
        events=_int(gen, "events", "generate.events", origin, 0),
        keys=_int(gen, "keys", "generate.keys", origin, 1),
        seed=_int(gen, "seed", "generate.seed", origin, 0),
    )
    demo = _section(raw, "demo", origin)
    demo_dir = _opt_str(demo, "dir", "demo.dir", origin) or "demo"
    sp = _section(raw, "spark", origin)
    conf = _section(sp, "conf", origin)
    spark = SparkConfig(
        app_name=_opt_str(sp, "app_name", "spark.app_name", origin) or "pelengine",
        master=_opt_str(sp, "master", "spark.master", origin),
        log_level=_opt_str(sp, "log_level", "spark.log_level", origin),
        conf={str(k): _conf_value(v) for k, v in conf.items() if v is not None},
    )
    rep = _section(raw, "report", origin)
    report = ReportConfig(
        poison_count=_int(rep, "poison_count", "report.poison_count", origin, 1),
        stuck_idle_ms=_int(rep, "stuck_idle_ms", "report.stuck_idle_ms", origin, 0),
        dead_inactive_ms=_int(rep, "dead_inactive_ms", "report.dead_inactive_ms", origin, 0),
        lag_runs=_int(rep, "lag_runs", "report.lag_runs", origin, 1),
    )
    prog = _section(raw, "progress", origin)
    progress = ProgressConfig(
        heartbeat_s=_int(prog, "heartbeat_s", "progress.heartbeat_s", origin, 0)
    )
    out = _section(raw, "output", origin)
    output = OutputConfig(
        catalog=_opt_str(out, "catalog", "output.catalog", origin) or None,
        schema=_opt_str(out, "schema", "output.schema", origin) or None,
    )
    if output.catalog and not output.schema:
        raise ConfigError(f"{origin}: 'output.catalog' needs 'output.schema'")
    sto = _section(raw, "storage", origin)
    store = _opt_str(sto, "store", "storage.store", origin) or "auto"
    if store not in STORES:
        raise ConfigError(f"{origin}: 'storage.store': {store!r} is not one of {', '.join(STORES)}")
    storage = StorageConfig(
        store=store, delta_jars=_opt_str(sto, "delta_jars", "storage.delta_jars", origin) or None
    )
    return Config(
        profile=profile,
        node_max_entries=node_max_entries,
        node_max_bytes=node_max_bytes,
        split_groups=split_groups,
        engine=engine,
        generate=generate,
        demo_dir=demo_dir,
        spark=spark,
        report=report,
        progress=progress,
        output=output,
        storage=storage,
    )


def load_config(paths: Sequence[str | Path] = ()) -> Config:
    """Packaged defaults, then each file of `paths` merged on top in order."""
    raw = packaged_defaults()
    for p in paths:
        path = Path(p)
        try:
            text = path.read_text("utf-8")
        except OSError as exc:
            raise ConfigError(f"--conf {path}: cannot read: {exc.strerror or exc}") from exc
        raw = merge(raw, _read_yaml(text, f"--conf {path}"))
    origin = "--conf " + ", ".join(str(p) for p in paths) if paths else "defaults"
    return replace(from_mapping(raw, origin), sources=tuple(str(p) for p in paths))
