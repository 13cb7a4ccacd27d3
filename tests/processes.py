"""Processes the tests start in a session of their own (a Spark Connect server, a
standalone master and worker, spark-submit): a free port, which of a group still live,
stopping a whole group, and the tail of a log for a failure's message; the build of the
pure wheel (`make dist`'s pip command); and a CLI run killed at a step it reports."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def group_alive(pgid: int) -> list[int]:
    """Live (not zombie) processes of process group ``pgid`` (Linux /proc)."""
    alive = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) "
        if int(fields[2]) == pgid and fields[0] != "Z":
            alive.append(int(entry))
    return alive


def stop_group(proc: subprocess.Popen[bytes], grace_s: float = 15.0) -> None:
    """SIGTERM the process group ``proc`` leads (started in a new session: its pid is the
    group id), then SIGKILL what is left; returns when no process of the group is alive
    (the JVM and its Python workers included)."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            proc.poll()  # reap the leader
            if not group_alive(proc.pid):
                break
            time.sleep(0.2)
        if not group_alive(proc.pid):
            break
    proc.wait(timeout=10)


def tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return f"({path} unreadable)"


def start_wheel_build(tmp_path: Path) -> tuple[subprocess.Popen[bytes], Path]:
    """Start `make dist`'s pip command on a copy of the sources (so no build/ lands in the
    repo); returns the process and the directory the wheel goes to."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, src / name)
    shutil.copytree(
        REPO / "pelengine", src / "pelengine", ignore=shutil.ignore_patterns("__pycache__")
    )
    dist = tmp_path / "dist"
    command = [
        sys.executable,
        *("-m", "pip", "wheel", "--quiet", "--disable-pip-version-check", "--no-deps"),
        *("--wheel-dir", str(dist), str(src)),
    ]
    return subprocess.Popen(command, stdin=subprocess.DEVNULL, cwd=tmp_path), dist


def killed_at(
    argv: list[str], marker: str, env: dict[str, str] | None = None
) -> tuple[int, list[str]]:
    """Run ``argv`` (in ``env``, else this process's environment with PYSPARK_PYTHON set
    to this interpreter); SIGKILL it as soon as a ``pelengine:`` progress line contains
    ``marker``. Returns its exit code (``-SIGKILL`` when killed) and the stderr lines it
    wrote until then."""
    if env is None:
        env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    proc = subprocess.Popen(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env
    )
    seen: list[str] = []
    assert proc.stderr is not None
    for line in proc.stderr:
        seen.append(line.rstrip())
        if line.startswith("pelengine:") and marker in line:
            os.kill(proc.pid, signal.SIGKILL)
            break
    proc.stderr.close()
    return proc.wait(timeout=120), seen
