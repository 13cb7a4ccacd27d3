"""The house's rule: data only goes down. Entry points (cli, jobs) sit on top, then the
runs, then the pipeline stages and the read side, then the engine seam and the
parsers, then storage, and at the bottom the model, the schemas and the settings.
A module imports only modules of its own room or of rooms below it, and no import
circle exists anywhere in the package (imports inside functions count too).

The checks are functions of an import graph (module -> the package modules it
imports), so the same code judges the real package and made-up graphs with planted
violations (the tests at the end): a checker that cannot see a climb, a circle or a
module without a room would pass on any package."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "pelengine"
ROOT = "pelengine"

# room of a module (longest matching prefix) -> height; higher may import lower.
# ROOT is a room of one module, the package's own __init__ (which imports nothing): it
# does not hold the modules below it, so a new top-level module must be given a room.
ROOMS = {
    "pelengine.cli": 6,
    "pelengine.commands": 6,
    "pelengine.session": 5,
    "pelengine.runs": 4,
    "pelengine.pipeline": 3,
    "pelengine.local": 3,
    "pelengine.read": 3,
    "pelengine.engine": 2,
    "pelengine.ingest": 2,
    "pelengine.storage": 1,
    "pelengine.settings": 0,
    "pelengine.schemas": 0,
    "pelengine.progress": 0,
    "pelengine.tabular": 0,
    "pelengine.synth": 0,
    "pelengine.model": 0,
    "pelengine": 0,
}
# rooms of one height that must not import each other (siblings, not layers)
SIBLINGS = [("pelengine.pipeline", "pelengine.read"), ("pelengine.engine", "pelengine.ingest")]


def module_name(path: Path, package: Path = PACKAGE) -> str:
    rel = path.relative_to(package.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules(package: Path = PACKAGE) -> dict[str, Path]:
    return {module_name(p, package): p for p in sorted(package.rglob("*.py"))}


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The package modules ``name`` imports (``from a import b``: ``a.b`` when that is a
    module, else ``a``)."""
    tree = ast.parse(path.read_text(), str(path))
    is_pkg = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".") if is_pkg else name.split(".")[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [
                f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names
            ]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    mods = modules(package)
    known = set(mods)
    return {name: imports_of(name, path, known) for name, path in mods.items()}


def room(name: str) -> str | None:
    """The room ``name`` lives in: the longest room that is the module itself or one of
    its packages (ROOT holds only itself); None when no room holds it."""
    holding = [r for r in ROOMS if name == r or (r != ROOT and name.startswith(r + "."))]
    return max(holding, key=len, default=None)


def homeless(g: dict[str, set[str]]) -> list[str]:
    """The modules of ``g`` (importers and imported) that no room holds."""
    return sorted({n for name, targets in g.items() for n in (name, *targets) if not room(n)})


def climbs(g: dict[str, set[str]]) -> list[str]:
    """Every import of ``g`` that goes up a layer or across to a sibling room, one line
    each (imports of a module without a room are :func:`homeless`'s to report)."""
    found = []
    for name, targets in g.items():
        for target in targets:
            here, there = room(name), room(target)
            if here is None or there is None:
                continue
            if ROOMS[there] > ROOMS[here]:
                found.append(f"{name} ({here}) imports {target} ({there})")
            for a, b in SIBLINGS:
                if {here, there} == {a, b}:
                    found.append(f"{name} ({here}) imports its sibling {target} ({there})")
    return sorted(found)


def circles(g: dict[str, set[str]]) -> list[list[str]]:
    """The import circles of ``g``: its strongly connected components of more than one
    module (Tarjan's algorithm), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(g.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return sorted(found)


# ---- the package ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def package() -> dict[str, set[str]]:
    g = graph()
    assert len(g) > 40, sorted(g)  # the walk found the package
    return g


def test_every_module_has_a_room(package: dict[str, set[str]]) -> None:
    assert not homeless(package), f"modules without a room (add to ROOMS): {homeless(package)}"


def test_imports_only_go_down(package: dict[str, set[str]]) -> None:
    upward = climbs(package)
    assert not upward, "imports that climb:\n" + "\n".join(upward)


def test_no_import_circles(package: dict[str, set[str]]) -> None:
    found = circles(package)
    assert not found, f"import circles: {found}"


# ---- the checks themselves, on violations planted for them --------------------------------


def test_a_room_holds_only_its_own_modules() -> None:
    assert room("pelengine.model.ids") == "pelengine.model"
    assert room("pelengine.model") == "pelengine.model"
    assert room("pelengine.cli") == "pelengine.cli"
    assert room("pelengine") == "pelengine"
    # the root holds itself only: a module it does not name has no room, and a name
    # that merely starts like a room's is not in it
    assert room("pelengine.newthing") is None
    assert room("pelengine.newthing.part") is None
    assert room("pelengine.models") is None
    assert room("other.model") is None


def test_the_checks_report_a_made_up_graph_s_violations() -> None:
    g = {
        "pelengine": set(),
        "pelengine.model.ids": {"pelengine.pipeline.route", "pelengine"},  # climbs 0 -> 3
        "pelengine.pipeline.route": {"pelengine.model.ids", "pelengine.read.pending"},
        "pelengine.read.pending": {"pelengine.storage.paths"},
        "pelengine.storage.paths": {"pelengine.engine.udf"},  # climbs 1 -> 2
        "pelengine.engine.udf": {"pelengine.ingest.rdb", "pelengine.model.ids"},
        "pelengine.ingest.rdb": set(),
        "pelengine.cli": {"pelengine.newthing", "pelengine.runs.full"},
        "pelengine.newthing": {"pelengine.model.ids"},  # in no room
        "pelengine.runs.full": {"pelengine.runs.output"},
        "pelengine.runs.output": {"pelengine.runs.full"},  # a circle inside one room
    }
    assert homeless(g) == ["pelengine.newthing"]
    assert climbs(g) == [
        "pelengine.engine.udf (pelengine.engine) imports its sibling pelengine.ingest.rdb "
        "(pelengine.ingest)",
        "pelengine.model.ids (pelengine.model) imports pelengine.pipeline.route "
        "(pelengine.pipeline)",
        "pelengine.pipeline.route (pelengine.pipeline) imports its sibling "
        "pelengine.read.pending (pelengine.read)",
        "pelengine.storage.paths (pelengine.storage) imports pelengine.engine.udf "
        "(pelengine.engine)",
    ]
    assert circles(g) == [
        [
            "pelengine.engine.udf",
            "pelengine.model.ids",
            "pelengine.pipeline.route",
            "pelengine.read.pending",
            "pelengine.storage.paths",
        ],
        ["pelengine.runs.full", "pelengine.runs.output"],
    ]
    # the same graph without its planted faults passes every check
    g["pelengine.model.ids"] = {"pelengine"}
    g["pelengine.pipeline.route"] = {"pelengine.model.ids"}
    g["pelengine.storage.paths"] = set()
    g["pelengine.engine.udf"] = {"pelengine.model.ids"}
    g["pelengine.cli"] = {"pelengine.runs.full"}
    del g["pelengine.newthing"]
    g["pelengine.runs.output"] = set()
    assert (homeless(g), climbs(g), circles(g)) == ([], [], [])


def test_the_checker_sees_a_climb_and_a_circle_in_source(tmp_path: Path) -> None:
    """The walker and the checks on a package written for them: a relative import, an
    absolute one inside a function, an import of a package's name; a climb, a sibling
    import, a circle and a module without a room, all found."""
    pkg = tmp_path / "pelengine"
    files = {
        "__init__.py": "",
        "stray.py": "",
        "model/__init__.py": "",
        "model/a.py": "from . import b\n",
        "model/b.py": "def f():\n    import pelengine.model.a\n",
        "model/c.py": "from pelengine.pipeline import route\n",
        "pipeline/__init__.py": "",
        "pipeline/route.py": "from ..read import pending\nfrom pelengine import model\n",
        "read/__init__.py": "",
        "read/pending.py": "import pelengine.stray\n",
    }
    for rel, text in files.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(text)
    g = graph(pkg)
    assert g == {
        "pelengine": set(),
        "pelengine.stray": set(),
        "pelengine.model": set(),
        "pelengine.model.a": {"pelengine.model.b"},
        "pelengine.model.b": {"pelengine.model.a"},
        "pelengine.model.c": {"pelengine.pipeline.route"},
        "pelengine.pipeline": set(),
        "pelengine.pipeline.route": {"pelengine.read.pending", "pelengine.model"},
        "pelengine.read": set(),
        "pelengine.read.pending": {"pelengine.stray"},
    }
    assert homeless(g) == ["pelengine.stray"]
    assert climbs(g) == [
        "pelengine.model.c (pelengine.model) imports pelengine.pipeline.route (pelengine.pipeline)",
        "pelengine.pipeline.route (pelengine.pipeline) imports its sibling "
        "pelengine.read.pending (pelengine.read)",
    ]
    assert circles(g) == [["pelengine.model.a", "pelengine.model.b"]]
