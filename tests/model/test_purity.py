"""The model is pure Python: importing all of it pulls in no Spark, pandas or Arrow."""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys

import pelengine.model

HEAVY = ("pyspark", "pandas", "pyarrow")

SCRIPT = """
import importlib, json, pkgutil, sys
import pelengine.model
names = [m.name for m in pkgutil.walk_packages(pelengine.model.__path__, "pelengine.model.")]
for name in names:
    importlib.import_module(name)
print(json.dumps({"modules": names, "loaded": sorted(sys.modules)}))
"""


def test_model_imports_no_heavy_library() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, check=True, timeout=60
    )
    result = json.loads(done.stdout)
    expected = {m.name for m in pkgutil.walk_packages(pelengine.model.__path__, "pelengine.model.")}
    assert set(result["modules"]) == expected
    assert {
        "pelengine.model.commands",
        "pelengine.model.replay",
        "pelengine.model.routing",
    } <= expected
    loaded = result["loaded"]
    heavy = [m for m in loaded if m.split(".")[0] in HEAVY]
    assert heavy == []
