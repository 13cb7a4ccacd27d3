"""Start and stop a throwaway Debian ``redis-server`` for the differential tests.

The real server is the judge of every test in this package, so it must be the
real binary: when ``redis-server`` is missing the fixture fails (CI installs it
through ``.ci/run``); it never skips.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import redis

REDIS_SERVER_ENV = "PELENGINE_REDIS_SERVER"
DEFAULT_BINARY = "redis-server"
DATABASES = 32


class RedisServerMissingError(RuntimeError):
    """``redis-server`` is not installed (or not executable)."""


def find_binary() -> str:
    """Path of the server binary: ``$PELENGINE_REDIS_SERVER`` or ``redis-server`` on PATH."""
    configured = os.environ.get(REDIS_SERVER_ENV)
    candidates = [configured] if configured else [DEFAULT_BINARY, "/usr/bin/redis-server"]
    for candidate in candidates:
        path = shutil.which(candidate) if candidate else None
        if path:
            return path
    raise RedisServerMissingError(
        "redis-server is not installed: the differential tests need the real server "
        "(Debian package `redis-server`, installed by .ci/run; or point "
        f"${REDIS_SERVER_ENV} at a binary). Looked for: {', '.join(c for c in candidates if c)}"
    )


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
    """A running ``redis-server`` child process on 127.0.0.1."""

    host: str
    port: int
    pid: int
    workdir: str
    version: str
    process: subprocess.Popen[bytes] = field(repr=False)

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


def start_server(
    binary: str | None = None,
    timeout_s: float = 10.0,
    extra_args: list[str] | tuple[str, ...] = (),
    workdir: str | None = None,
) -> RedisServer:
    """Start a server with no persistence on a free port and wait until it answers PING.

    ``extra_args`` are appended to the command line (a later option wins, e.g.
    ``--appendonly yes``); ``workdir`` runs the server in an existing directory
    (e.g. holding an ``appendonlydir`` to load), which is removed when it stops.
    """
    binary = binary or find_binary()
    last_error: Exception | None = None
    given_workdir = workdir
    for _attempt in range(5):  # the free port can be taken by someone else in between
        workdir = given_workdir or tempfile.mkdtemp(prefix="pelengine-redis-")
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
                last_error = RuntimeError(f"redis-server exited with {process.returncode}")
                break
            if not _accepts("127.0.0.1", port):
                # not listening yet: a plain socket fails at once, where redis-py's
                # client would retry with backoff (about a second per refused start)
                time.sleep(0.005)
                continue
            try:
                with raw_client("127.0.0.1", port, socket_timeout=1) as c:
                    if c.execute_command("PING") == "PONG":
                        info = c.execute_command("INFO", "server")
                        version = ""
                        for line in info.splitlines():
                            if line.startswith("redis_version:"):
                                version = line.split(":", 1)[1].strip()
                        return RedisServer(
                            host="127.0.0.1",
                            port=port,
                            pid=process.pid,
                            workdir=workdir,
                            version=version,
                            process=process,
                        )
            except (redis.ConnectionError, redis.TimeoutError, OSError) as exc:
                last_error = exc
            time.sleep(0.005)
        else:
            last_error = TimeoutError(f"redis-server on port {port} did not answer PING")
        _stop_process(process)
        if given_workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    raise RuntimeError(f"could not start redis-server ({binary}): {last_error}")


def _stop_process(process: subprocess.Popen[bytes], grace_s: float = 5.0) -> None:
    if process.poll() is None:
        process.terminate()  # SIGTERM to this PID only
        try:
            process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=grace_s)


def stop_server(server: RedisServer) -> None:
    _stop_process(server.process)
    shutil.rmtree(server.workdir, ignore_errors=True)


class running_server:  # noqa: N801  (used like a function: ``with running_server() as srv``)
    """Context manager: ``with running_server() as srv: srv.client(db).execute_command(...)``."""

    def __init__(self, binary: str | None = None) -> None:
        self._binary = binary
        self._server: RedisServer | None = None

    def __enter__(self) -> RedisServer:
        self._server = start_server(self._binary)
        return self._server

    def __exit__(self, *exc: object) -> None:
        if self._server is not None:
            stop_server(self._server)
            self._server = None


# The tests replay with the model's "7.0" profile, so the judge must be a 7.0 server.
EXPECTED_VERSION_PREFIX = "7.0."


def _server_or_fail() -> Iterator[RedisServer]:
    try:
        binary = find_binary()
    except RedisServerMissingError as exc:
        pytest.fail(str(exc), pytrace=False)
    with running_server(binary) as srv:
        if not srv.version.startswith(EXPECTED_VERSION_PREFIX):
            pytest.fail(
                f"{binary} is redis {srv.version}; the differential tests judge the 7.0 "
                f"profile and need a {EXPECTED_VERSION_PREFIX}x server",
                pytrace=False,
            )
        yield srv


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """One server for the session; tests that need an empty server use ``clean_redis``."""
    yield from _server_or_fail()


@pytest.fixture
def clean_redis(redis_server: RedisServer) -> RedisServer:
    """The session server, FLUSHALLed before the test (the flush is not part of any log)."""
    redis_server.flushall()
    return redis_server


@pytest.fixture
def fresh_redis_server() -> Iterator[RedisServer]:
    """A server of its own for one test (~20 ms to start)."""
    yield from _server_or_fail()
