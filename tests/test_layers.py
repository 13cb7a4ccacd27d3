"""The house's rule: data only goes down. Entry points (cli, jobs) sit on top, then the
runs, then the pipeline stages and the read side, then the engine seam and the
parsers, then storage, and at the bottom the model, the schemas and the settings.
A module imports only modules of its own room or of rooms below it, and no import
circle exists anywhere in the package (imports inside functions count too)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "pelengine"

# room of a module (longest matching prefix) -> height; higher may import lower
ROOMS = {
    "pelengine.cli": 6,
    "pelengine.commands": 6,
    "pelengine.session": 5,
    "pelengine.runs": 4,
    "pelengine.pipeline": 3,
    "pelengine.read": 3,
    "pelengine.engine": 2,
    "pelengine.ingest": 2,
    "pelengine.storage": 1,
    "pelengine.settings": 0,
    "pelengine.schemas": 0,
    "pelengine.progress": 0,
    "pelengine.tabular": 0,
    "pelengine.generate": 0,
    "pelengine.model": 0,
    "pelengine": 0,
}
# rooms of one height that must not import each other (siblings, not layers)
SIBLINGS = [("pelengine.pipeline", "pelengine.read"), ("pelengine.engine", "pelengine.ingest")]


def module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


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


def room(name: str) -> str:
    return max((r for r in ROOMS if name == r or name.startswith(r + ".")), key=len)


def graph() -> dict[str, set[str]]:
    mods = modules()
    known = set(mods)
    return {name: imports_of(name, path, known) for name, path in mods.items()}


def test_every_module_has_a_room() -> None:
    assert all(room(name) for name in modules())


def test_imports_only_go_down() -> None:
    upward = []
    for name, targets in graph().items():
        for target in targets:
            if target == "pelengine":
                continue
            here, there = room(name), room(target)
            if ROOMS[there] > ROOMS[here]:
                upward.append(f"{name} ({here}) imports {target} ({there})")
            for a, b in SIBLINGS:
                if {here, there} == {a, b}:
                    upward.append(f"{name} ({here}) imports its sibling {target} ({there})")
    assert not upward, "imports that climb:\n" + "\n".join(sorted(upward))


def test_no_import_circles() -> None:
    g = graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in g.get(v, ()):
            if w == "pelengine":
                continue
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
                circles.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    assert not circles, f"import circles: {circles}"


def test_the_checker_sees_a_climb_and_a_circle(tmp_path: Path) -> None:
    """The walker itself: a relative and an absolute import are both found."""
    pkg = tmp_path / "pelengine"
    (pkg / "model").mkdir(parents=True)
    (pkg / "model" / "__init__.py").write_text("")
    (pkg / "model" / "a.py").write_text("from . import b\n")
    (pkg / "model" / "b.py").write_text("def f():\n    import pelengine.model.a\n")
    known = {"pelengine", "pelengine.model", "pelengine.model.a", "pelengine.model.b"}
    global PACKAGE
    saved, PACKAGE = PACKAGE, pkg
    try:
        assert imports_of("pelengine.model.a", pkg / "model" / "a.py", known) == {
            "pelengine.model.b"
        }
        assert imports_of("pelengine.model.b", pkg / "model" / "b.py", known) == {
            "pelengine.model.a"
        }
    finally:
        PACKAGE = saved
