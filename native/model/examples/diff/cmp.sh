#!/bin/bash
# Differential check of the Rust port against the Python model (build first:
# cargo build -p pelmodel --example replay_dump). kind: fuzz | real (the tests/model
# log generators); e.g. ./cmp.sh fuzz 3 1500 7.4 spill
# cmp.sh kind seed n profile [spill]
set -e
out=${OUT:-/tmp/pel}; mkdir -p $out; here=$(cd "$(dirname "$0")" && pwd); cd $out
/work/main/.venv/bin/python $here/gen.py $1 $2 $3 > log_$1_$2.jsonl
/work/main/.venv/bin/python $here/pydump.py $4 $5 < log_$1_$2.jsonl > py_$1_$2_$4$5.json
/work/main/native/target/debug/examples/replay_dump $4 $5 < log_$1_$2.jsonl > rs_$1_$2_$4$5.json
/work/main/.venv/bin/python - py_$1_$2_$4$5.json rs_$1_$2_$4$5.json <<'PY'
import json, sys
a = json.load(open(sys.argv[1])); b = json.load(open(sys.argv[2]))
def norm(o):
    return [x if not (isinstance(x, list) and x and x[0] == "exception") else ["exception"] for x in o]
a["outcomes"] = norm(a["outcomes"]); b["outcomes"] = norm(b["outcomes"])
bad = False
for k in a:
    if a[k] != b.get(k):
        bad = True
        if k == "outcomes":
            for i, (x, y) in enumerate(zip(a[k], b[k])):
                if x != y:
                    print("first outcome diff at row", i, x, y); break
        elif k == "tables":
            for t in a[k]:
                for ci, (x, y) in enumerate(zip(a[k][t], b[k][t])):
                    if x != y:
                        j = next((j for j, (p, q) in enumerate(zip(x, y)) if p != q), min(len(x), len(y)))
                        print("table", t, "col", ci, "row", j, x[j:j+2], y[j:j+2], len(x), len(y)); break
        else:
            print("DIFF", k, json.dumps(a[k])[:600], "\n   RS", json.dumps(b.get(k))[:600])
print(sys.argv[1], "MISMATCH" if bad else "ok", sum(1 for o in a["outcomes"] if o and o[0] == "exception"), "exceptions")
PY
