"""Processes the tests start in a session of their own (a Spark Connect server, a
standalone master and worker, spark-submit): a free port, which of a group still live,
stopping a whole group, and the tail of a log for a failure's message."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path


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
