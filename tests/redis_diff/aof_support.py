"""Helpers of the AOF (effects log) differential tests.

``aof_server(kind)`` starts a server of that kind that appends every write to a
multi-part AOF (no RDB preamble, fsync always, so the files hold every reply's
command); ``loaded_truth(server)`` starts a FRESH server of the same kind on a copy of
that ``appendonlydir`` (it loads the AOF) and reads its state without the consumers'
seen and active times (``effects_only``): a loading server sets them to its load time
(docs/input.md). Measured: Redis 7.0 sets seen-time so; Valkey 8.1 and 9.1 set seen-time
and, for a consumer the AOF claims for (XCLAIM), active-time too, while a consumer
made by XGROUP CREATECONSUMER stays never active (-1).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any

from tests.redis_diff.server import RedisServer, ServerKind, start_or_fail, stop_server
from tests.redis_diff.truth import read_truth

AOF_ARGS = (
    "--appendonly",
    "yes",
    "--aof-use-rdb-preamble",
    "no",
    "--appendfsync",
    "always",
    "--auto-aof-rewrite-percentage",
    "0",
)
# the loading server times what the log does not carry itself
NOT_IN_AN_AOF = {"ownership": ("seen_time_ms", "active_time_ms")}


def aof_server(kind: ServerKind, timestamps: bool = False) -> RedisServer:
    args = AOF_ARGS + (("--aof-timestamp-enabled", "yes") if timestamps else ())
    return start_or_fail(kind, extra_args=args)


def aof_dir(server: RedisServer) -> str:
    return os.path.join(server.workdir, "appendonlydir")


def copy_aof(server: RedisServer) -> str:
    """A new work dir holding a copy of the server's appendonlydir."""
    workdir = tempfile.mkdtemp(prefix="pelengine-aof-copy-")
    shutil.copytree(aof_dir(server), os.path.join(workdir, "appendonlydir"))
    return workdir


def loaded_truth(
    server: RedisServer, dbs: list[int] | None = None, binary: bool = False
) -> dict[str, list[dict]]:
    """The state of a fresh server of the same kind (the same binary) that loaded a copy
    of ``server``'s AOF (``binary``: as :func:`read_truth` reads it)."""
    workdir = copy_aof(server)
    loaded = start_or_fail(server.kind, extra_args=AOF_ARGS, workdir=workdir)
    try:
        return effects_only(read_truth(loaded, dbs, binary=binary))
    finally:
        stop_server(loaded)


def effects_only(truth: dict[str, list[dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
    """``truth`` without the columns an AOF cannot carry."""
    out = {}
    for table, rows in truth.items():
        drop = NOT_IN_AN_AOF.get(table, ())
        out[table] = [{k: v for k, v in r.items() if k not in drop} for r in rows]
    return out
