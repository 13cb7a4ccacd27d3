"""The pure distribution: `pelengine` installs and runs without the native replay core.

The native core (`pelengine_native`, built from native/py) is a separate, optional
distribution (the `native` extra, docs/native.md). Here: the pure wheel carries no
compiled code and names the native one only under its extra; and with `pelengine_native`
made unimportable (a meta path finder that refuses it, as a machine without the wheel
would), the CLI starts, the Python model replays, and the engine seam
(pelengine.engine.native) reports the Python engine for `auto` and refuses `native`.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import tomllib
import zipfile
from pathlib import Path

from tests.processes import start_wheel_build

REPO = Path(__file__).resolve().parents[2]

# Run first in the child: any import of pelengine_native fails as if it were not installed.
BLOCK_NATIVE = textwrap.dedent(
    """
    import sys

    class _NoNative:
        def find_spec(self, name, path=None, target=None):
            if name == "pelengine_native" or name.startswith("pelengine_native."):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, _NoNative())
    """
)

CHILD = textwrap.dedent(
    """
    import contextlib
    import io
    import json

    from pelengine import cli
    from pelengine.engine import native
    from pelengine.model import Replayer

    out = {}
    help_text = io.StringIO()
    with contextlib.redirect_stdout(help_text):
        try:
            cli.build_parser().parse_args(["--help"])
        except SystemExit as exc:
            out["help_exit"] = exc.code
    out["help"] = help_text.getvalue()

    outcome = Replayer("7.0").apply(1, 1, ["XADD", "s", "1-1", "f", "v"])
    out["outcome"] = repr(outcome)

    out["load"] = repr(native.load())
    out["auto"] = list(native.resolve_engine("auto"))
    out["python"] = list(native.resolve_engine("python"))
    try:
        native.resolve_engine("native")
    except Exception as exc:
        out["native_error"] = f"{type(exc).__name__}: {exc}"
    out["imported"] = sorted(m for m in sys.modules if m.startswith("pelengine_native"))
    print(json.dumps(out))
    """
)


def test_runs_without_the_native_module() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", BLOCK_NATIVE + CHILD],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.splitlines()[-1])
    assert out["help_exit"] == 0 and "reconstruct" in out["help"]
    assert "applied" in out["outcome"].lower(), out["outcome"]
    assert out["load"] == "None"
    engine, reason = out["auto"]
    assert engine == "python", out["auto"]
    assert "pelengine_native" in reason, "the reason names the missing module"
    assert out["python"][0] == "python"
    assert "native_error" in out, "--engine native without the native core must be refused"
    assert out["imported"] == []


def test_pure_wheel_has_no_native_code(tmp_path: Path) -> None:
    """`make dist`'s pip command, on a copy of the sources (no build/ in the repo)."""
    build, dist = start_wheel_build(tmp_path)
    assert build.wait(timeout=300) == 0, "pip wheel failed"
    (wheel,) = dist.glob("pelengine-*.whl")
    assert wheel.name.endswith("-py3-none-any.whl"), wheel.name
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        (meta_name,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        metadata = zf.read(meta_name).decode("utf-8")
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {"pelengine"}, tops
    compiled = [n for n in names if n.endswith((".so", ".pyd", ".dylib", ".dll"))]
    assert not compiled, compiled
    requires = [
        line.split(":", 1)[1].strip()
        for line in metadata.splitlines()
        if line.startswith("Requires-Dist:")
    ]
    native = [r for r in requires if r.lower().startswith("pelengine-native")]
    project = tomllib.loads((REPO / "native/py/pyproject.toml").read_text("utf-8"))["project"]
    assert native == [f'{project["name"]}=={project["version"]}; extra == "native"'], native
    assert "Provides-Extra: native" in metadata
