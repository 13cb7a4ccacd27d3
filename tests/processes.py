"""Child processes the crash tests kill: a CLI run stopped at a step it reports."""

from __future__ import annotations

import os
import signal
import subprocess
import sys


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
