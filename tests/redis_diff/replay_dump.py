"""Replay a dumped failing log through the model, without a server.

    .venv/bin/python -m tests.redis_diff.replay_dump /tmp/pytest-of-.../seed-7.jsonl [SEQ] [PROFILE]

Prints every command with the server's answer and the model's outcome (up to
``SEQ`` if given), then the model's tables at that point, so a mismatch found by
the differential tests can be debugged from the file alone. The model profile is
the dump's own (its ``meta`` line names the server's profile; "7.0" for dumps
without one) unless ``PROFILE`` is given.
"""

from __future__ import annotations

import json
import sys
from pprint import pprint


def main(argv: list[str]) -> int:
    from pelengine.model import Replayer, snapshot_tables

    path = argv[1]
    upto = int(argv[2]) if len(argv) > 2 and argv[2] != "-" else None
    with open(path, encoding="utf-8") as fh:
        rows = [json.loads(line) for line in fh]
    meta = next((row["meta"] for row in rows if "meta" in row), {})
    profile = argv[3] if len(argv) > 3 else meta.get("profile", "7.0")
    print("meta:", meta, "| replayed with profile", profile)
    replayer = Replayer(profile=profile)
    last = None
    for row in rows:
        if "meta" in row:
            continue
        if upto is not None and row["seq"] > upto:
            break
        out = replayer.apply(row["seq"], row["ts_ms"], row["argv"], row["db"], row["client"])
        server = f"ERR {row['error']}" if row["error"] else repr(row["reply"])[:100]
        print(f"{row['seq']:>6} {row['ts_ms']} db={row['db']} {row['argv']}")
        print(f"         server: {server} | model: {out.kind} {out.error or ''}")
        last = row
    if last is not None:
        pprint(snapshot_tables(replayer, as_of_ms=last["ts_after_ms"], as_of_seq=last["seq"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
