"""The command line: parsing, usage errors (exit 2), failures (exit 1), the exit wrapper,
and the configuration it loads. Only the last test needs Spark."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from pelengine import cli
from pelengine.commands.args import generate_sizes
from pelengine.settings import (
    ConfigError,
    Settings,
    SettingsError,
    load_config,
    packaged_defaults,
)

REPO = Path(__file__).resolve().parents[2]
SENTINEL_SPARK: Any = object()  # stands in for a session: commands below never touch it


def run_cli(argv: list[str], **kwargs: Any) -> int:
    return cli.run(argv, spark=SENTINEL_SPARK, progress=lambda _: None, **kwargs)


# ---- parsing -------------------------------------------------------------------------


def test_reconstruct_arguments() -> None:
    args = cli.build_parser().parse_args(
        [
            "reconstruct",
            "--events",
            "e",
            "--out",
            "o",
            "--redis-version",
            "7.4",
            "--as-of-ms",
            "1700000000000",
            "--as-of-seq",
            "12",
            "--txn-app-id",
            "nightly",
            "--txn-version",
            "3",
            "--conf",
            "a.yaml",
            "--conf",
            "b.yaml",
        ]
    )
    assert (args.command, args.events, args.out, args.redis_version) == (
        "reconstruct",
        "e",
        "o",
        "7.4",
    )
    assert (args.as_of_ms, args.as_of_seq) == (1_700_000_000_000, 12)
    assert (args.txn_app_id, args.txn_version) == ("nightly", 3)
    assert args.conf == ["a.yaml", "b.yaml"]


def test_generate_and_demo_arguments_default_to_conf() -> None:
    args = cli.build_parser().parse_args(["generate", "--out", "x"])
    assert (args.events, args.keys, args.seed, args.no_faults) == (None, None, None, False)
    sizes = generate_sizes(args, load_config())
    assert (sizes.events, sizes.keys, sizes.seed) == (20_000, 20, 7)
    args = cli.build_parser().parse_args(["demo", "--events", "10", "--seed", "3"])
    sizes = generate_sizes(args, load_config())
    assert (sizes.events, sizes.keys, sizes.seed) == (10, 20, 3)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "required: COMMAND"),
        (["frobnicate"], "invalid choice"),
        (["reconstruct", "--out", "o"], "--events"),
        (["reconstruct", "--events", ".", "--out", "o", "--redis-version", "6.2"], "6.2"),
        (["reconstruct", "--events", ".", "--out", "o", "--as-of-ms", "-1"], "--as-of-ms"),
        (["reconstruct", "--events", ".", "--out", "o", "--as-of-seq", "x"], "--as-of-seq"),
        (["reconstruct", "--events", ".", "--out", "o", "--txn-version", "1"], "--txn-app-id"),
        (["reconstruct", "--events", ".", "--out", "o", "--txn-app-id", "a"], "--txn-version"),
        (["reconstruct", "--events", "/no/such/events", "--out", "o"], "/no/such/events"),
        (["summary", "--out", "/no/such/out"], "--out /no/such/out"),
        (["pel-as-of", "--out", "."], "one of the arguments --as-of-seq --as-of-ms"),
        (["pel-as-of", "--out", ".", "--as-of-seq", "1", "--as-of-ms", "2"], "not allowed"),
        (["pel-as-of", "--out", ".", "--as-of-seq", "1", "--limit", "0"], "--limit"),
        (["pel-as-of", "--out", "/no/such/out", "--as-of-seq", "1"], "--out /no/such/out"),
        (["pel-as-of", "--out", ".", "--as-of-ms", "1"], "no pel_history table there"),
        (["generate", "--out", "o", "--keys", "0"], "--keys"),
        (["reconstruct", "--events", "e", "--out", "o", "--redis-version", "6.2.14"], "valkey-9.1"),
        (["reconstruct", "--events", "e", "--out", "o", "--redis-version", "8.0.2"], "--redis-ver"),
        (["ingest-monitor", "f", "--events", "e", "--redis-version", "7.4.2"], "--redis-version"),
        (["generate", "--out", "o", "--conf", "/no/such.yaml"], "/no/such.yaml"),
    ],
)
def test_usage_errors_exit_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_cli(argv) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert message in err and "usage:" in err


def test_bad_conf_values_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("generate:\n  events: lots\n")
    assert run_cli(["generate", "--out", "o", "--conf", str(bad)]) == cli.EXIT_USAGE
    assert "generate.events" in capsys.readouterr().err
    broken = tmp_path / "broken.yaml"
    broken.write_text("spark: [unclosed\n")
    assert run_cli(["generate", "--out", "o", "--conf", str(broken)]) == cli.EXIT_USAGE
    assert "broken.yaml" in capsys.readouterr().err


def test_help_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(["--help"]) == 0
    assert "reconstruct" in capsys.readouterr().out
    assert run_cli(["reconstruct", "--help"]) == 0
    assert "--as-of-seq" in capsys.readouterr().out


# ---- calling the library -------------------------------------------------------------


def test_reconstruct_passes_its_settings(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import pelengine.runs.full as full
    import pelengine.runs.output as output

    seen: dict[str, Any] = {}

    def fake_run(spark: Any, events: str, out: str, settings: Any, progress: Any) -> dict:
        seen.update(spark=spark, events=events, out=out, settings=settings)
        return {"events": {"read": 5}}

    monkeypatch.setattr(full, "run_reconstruct", fake_run)
    monkeypatch.setattr(output, "format_report", lambda report: "REPORT")
    code = run_cli(
        ["reconstruct", "--events", str(tmp_path), "--out", "o", "--as-of-seq", "9"]
        + ["--txn-app-id", "app", "--txn-version", "4"]
    )
    assert code == cli.EXIT_OK
    got = seen["settings"]
    assert seen["spark"] is SENTINEL_SPARK and seen["events"] == str(tmp_path)
    assert (got.profile, got.as_of_seq, got.as_of_ms) == ("7.0", 9, None)
    assert (got.txn_app_id, got.txn_version) == ("app", 4)
    assert (got.node_max_entries, got.node_max_bytes) == (100, 4096)  # Redis' defaults
    assert "REPORT" in capsys.readouterr().out
    nodes = ["--stream-node-max-entries", "0", "--stream-node-max-bytes", "512"]
    assert run_cli(["reconstruct", "--events", str(tmp_path), "--out", "o", *nodes]) == 0
    assert (seen["settings"].node_max_entries, seen["settings"].node_max_bytes) == (0, 512)
    version = ["--redis-version", "valkey-9.1.2"]
    assert run_cli(["reconstruct", "--events", str(tmp_path), "--out", "o", *version]) == 0
    assert seen["settings"].profile == "valkey-9.1.2"  # resolved where it is used, once
    capsys.readouterr()
    assert run_cli(["reconstruct", "--events", str(tmp_path), "--out", "o", "--json"]) == 0
    assert '"read": 5' in capsys.readouterr().out


def test_demo_runs_with_the_configured_settings(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`demo` replays with the configuration's reconstruct section, as `reconstruct` does:
    node sizes, split_groups and engine from --conf, the profile from --redis-version."""
    import pelengine.read.summary as summary
    import pelengine.runs.full as full
    import pelengine.runs.generate as generate
    import pelengine.runs.output as output

    seen: dict[str, Any] = {}

    def fake_run(spark: Any, events: str, out: str, settings: Any, progress: Any) -> dict:
        seen["settings"] = settings
        return {}

    monkeypatch.setattr(generate, "write_generated_events", lambda *a, **k: 0)
    monkeypatch.setattr(full, "run_reconstruct", fake_run)
    monkeypatch.setattr(output, "format_report", lambda report: "REPORT")
    monkeypatch.setattr(summary, "summarize", lambda spark, out: "SUMMARY")
    conf = tmp_path / "c.yaml"
    conf.write_text(
        "reconstruct:\n  stream_node_max_entries: 7\n  stream_node_max_bytes: 512\n"
        "  split_groups: 2\n  engine: python\n"
    )
    argv = ["demo", "--dir", str(tmp_path / "demo"), "--conf", str(conf)]
    assert run_cli([*argv, "--redis-version", "7.4"]) == cli.EXIT_OK
    got = seen["settings"]
    assert (got.node_max_entries, got.node_max_bytes, got.split_groups) == (7, 512, 2)
    assert (got.engine, got.profile) == ("python", "7.4")
    assert "SUMMARY" in capsys.readouterr().out


def test_failure_exits_1_and_names_the_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def boom(*_: Any) -> int:
        raise FileNotFoundError("demo/events: gone")

    monkeypatch.setitem(cli.COMMANDS, "generate", boom)
    assert run_cli(["generate", "--out", "o"]) == cli.EXIT_FAILED
    err = capsys.readouterr().err
    assert "generate failed: FileNotFoundError: demo/events: gone" in err


def test_main_with_argv_returns() -> None:
    assert cli.main(["reconstruct", "--events", "/no/such/events", "--out", "o"]) == 2


# ---- the exit wrapper ------------------------------------------------------------------


def _python(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


@pytest.mark.parametrize("code", [0, 1, 2])
def test_exit_process_keeps_code_and_output_despite_crashing_shutdown(code: int) -> None:
    # an atexit hook that aborts stands in for delta-rs crashing at interpreter exit
    proc = _python(
        f"""
        import atexit, os, sys
        atexit.register(os.abort)
        from pelengine.cli import exit_process
        sys.stdout.write("result without newline")
        sys.stderr.write("progress without newline")
        exit_process({code})
        """
    )
    assert proc.returncode == code
    assert proc.stdout == "result without newline"
    assert proc.stderr == "progress without newline"


def test_console_entry_usage_error_exit_code() -> None:
    proc = _python(
        "import sys; from pelengine.cli import main; main()",
        "reconstruct",
        "--events",
        "/no/such/events",
        "--out",
        "o",
    )
    assert proc.returncode == 2
    assert "--events /no/such/events: no such path" in proc.stderr


def test_spark_submit_job_forwards_to_reconstruct() -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, str(REPO / "jobs" / "reconstruct.py"), "--out", "o"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 2
    assert "pelengine reconstruct" in proc.stderr and "--events" in proc.stderr


# ---- configuration -------------------------------------------------------------------


def test_defaults_have_one_copy() -> None:
    assert not (REPO / "conf" / "defaults.yaml").exists()
    assert packaged_defaults()["reconstruct"]["split_groups"] == 0


def test_defaults_and_overlays(tmp_path: Path) -> None:
    conf = load_config()
    assert conf.reconstruct.profile == "7.0"
    assert (conf.generate.events, conf.generate.keys, conf.generate.seed) == (20_000, 20, 7)
    assert conf.spark.master == "local[2]"
    assert conf.spark.conf["spark.sql.shuffle.partitions"] == "2"
    assert conf.spark.conf["spark.sql.session.timeZone"] == "UTC"
    assert conf.spark.conf["spark.ui.enabled"] == "false"
    assert "spark.driver.memory" in conf.spark.conf
    local = load_config([REPO / "conf" / "local.yaml"])
    assert local.sources == (str(REPO / "conf" / "local.yaml"),)
    over = tmp_path / "over.yaml"
    over.write_text(
        "reconstruct: {profile: '7.4', stream_node_max_entries: 7}\ngenerate: {seed: 99}\n"
        "spark: {master: null, conf: {spark.sql.shuffle.partitions: 8}}\n"
    )
    merged = load_config([over])
    assert merged.reconstruct.profile == "7.4" and merged.generate.seed == 99
    assert (merged.reconstruct.node_max_entries, merged.reconstruct.node_max_bytes) == (7, 4096)
    assert merged.generate.events == 20_000  # untouched keys keep their defaults
    assert merged.spark.master is None
    assert merged.spark.conf["spark.sql.shuffle.partitions"] == "8"
    assert merged.spark.conf["spark.sql.session.timeZone"] == "UTC"


def test_config_errors_name_the_key(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("reconstruct: {profile: '6.0'}\n")
    with pytest.raises(ConfigError, match=r"reconstruct\.profile"):
        load_config([bad])
    bad.write_text("reconstruct: {stream_node_max_bytes: -1}\n")
    with pytest.raises(ConfigError, match=r"reconstruct\.stream_node_max_bytes"):
        load_config([bad])
    bad.write_text("- a list\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_config([bad])


def test_each_value_is_checked_once_and_named_where_it_came_from(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The rule lives in the dataclass; the file names the key, the CLI the option."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("reconstruct: {engine: turbo}\n")
    with pytest.raises(ConfigError, match=r"'reconstruct\.engine': 'turbo' is not one of auto"):
        load_config([bad])
    with pytest.raises(SettingsError, match=r"^engine: 'turbo' is not one of auto"):
        Settings(engine="turbo")
    events = str(tmp_path)
    assert run_cli(["reconstruct", "--events", events, "--out", "o", "--engine", "x"]) == 2
    assert "error: --engine: 'x' is not one of auto, native, python" in capsys.readouterr().err
    asked = ["--incremental", "--as-of-seq", "3"]
    assert run_cli(["reconstruct", "--events", events, "--out", "o", *asked]) == 2
    err = capsys.readouterr().err
    assert "error: --incremental cannot be combined with --as-of-ms/--as-of-seq" in err
    nodes = ["--stream-node-max-bytes", "-1"]
    assert run_cli(["reconstruct", "--events", events, "--out", "o", *nodes]) == 2
    assert (
        "error: --stream-node-max-bytes must be an integer >= 0, got -1" in capsys.readouterr().err
    )
    assert run_cli(["demo", "--keys", "0"]) == 2
    assert "error: --keys must be an integer >= 1, got 0" in capsys.readouterr().err


def test_null_or_empty_in_a_file_means_not_given(tmp_path: Path) -> None:
    over = tmp_path / "over.yaml"
    over.write_text(
        "reconstruct: {engine: null, split_groups: 3, profile: 7.4}\ndemo: {dir: ''}\n"
        "spark: {master: null, log_level: '', conf: {spark.ui.enabled: null}}\n"
    )
    conf = load_config([over])
    assert (conf.reconstruct.engine, conf.reconstruct.split_groups) == ("auto", 3)
    assert conf.reconstruct.profile == "7.4"  # a YAML number read as its text
    assert conf.demo.dir == "demo"
    assert (conf.spark.master, conf.spark.log_level) == (None, None)
    assert "spark.ui.enabled" not in conf.spark.conf
    over.write_text("spark: {conf: null}\n")
    assert load_config([over]).spark.conf == {}


def test_a_download_at_session_start_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """spark.jars.packages would resolve and download jars each time a session starts
    (parallel JVMs race on its cache; a run needs the network): refused before any Spark,
    naming the key and the install step; local jars in spark.jars stay allowed."""
    over = tmp_path / "over.yaml"
    over.write_text("spark: {conf: {spark.jars.packages: 'io.delta:delta-spark_2.13:4.0.0'}}\n")
    with pytest.raises(ConfigError, match=r"'spark\.conf' sets spark\.jars\.packages.*make jars"):
        load_config([over])
    events = str(tmp_path / "events")
    argv = ["reconstruct", "--events", events, "--out", "o", "--conf", str(over)]
    assert run_cli(argv) == 2
    err = capsys.readouterr().err
    assert "spark.jars.packages, which downloads jars each time a session starts" in err
    assert not (tmp_path / "events").exists()
    over.write_text("spark: {conf: {spark.jars: /opt/jars/extra.jar}}\n")
    assert load_config([over]).spark.conf["spark.jars"] == "/opt/jars/extra.jar"


def test_the_packaged_file_and_the_fields_cannot_drift(monkeypatch: pytest.MonkeyPatch) -> None:
    """A key of defaults.yaml no field reads fails (at import: here, called again)."""
    from pelengine import settings

    settings._check_packaged()  # the shipped file: every key read
    assert settings.conf_fields(Settings)["stream_node_max_entries"].name == "node_max_entries"
    shipped = settings._DEFAULTS
    extra = {**shipped, "reconstruct": {**shipped["reconstruct"], "x": 1}}
    monkeypatch.setattr(settings, "_DEFAULTS", extra)
    with pytest.raises(ConfigError, match=r"'reconstruct' \['x'\] is read by no field"):
        settings._check_packaged()
    monkeypatch.setattr(settings, "_DEFAULTS", {**shipped, "colour": {}})
    with pytest.raises(ConfigError, match="'colour'"):
        settings._check_packaged()
    with pytest.raises(KeyError, match="no_such_key"):
        settings.conf_field("reconstruct", "no_such_key")
    monkeypatch.setattr(settings, "_DEFAULTS", shipped)
    monkeypatch.setitem(settings.SECTIONS, "demo", settings.GenerateConfig)
    with pytest.raises(ConfigError, match="read another section than 'demo'"):
        settings._check_packaged()


# ---- end to end (Spark) -------------------------------------------------------------


@pytest.mark.spark
def test_generate_command_writes_events_table(spark: Any, tmp_path: Path) -> None:
    from pelengine.storage import read_table

    out = str(tmp_path / "events")
    quiet: Any = lambda _: None  # noqa: E731
    assert (
        cli.run(
            ["generate", "--out", out, "--events", "1500", "--keys", "4"],
            spark=spark,
            progress=quiet,
        )
        == 0
    )
    df = read_table(spark, out)
    assert df.count() == 1500
    assert [f.name for f in df.schema.fields][:6] == [
        "seq",
        "ts_ms",
        "argv",
        "db",
        "client",
        "source",
    ]
