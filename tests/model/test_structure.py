"""The model's modules form no import circle, and its output sinks keep rows intact."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import pelengine.model
from pelengine.model import Replayer
from pelengine.model.calls import Columns

MODEL_DIR = Path(pelengine.model.__file__).parent
PACKAGE = "pelengine.model"


def _imports(path: Path, modules: set[str]) -> set[str]:
    """The model modules ``path`` imports, anywhere in it (``TYPE_CHECKING`` blocks and
    function bodies included)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        for name in names:
            if name.startswith(PACKAGE + ".") and name[len(PACKAGE) + 1 :] in modules:
                found.add(name[len(PACKAGE) + 1 :])
    return found


def test_no_model_module_imports_one_that_imports_it_back() -> None:
    modules = {p.stem for p in MODEL_DIR.glob("*.py") if p.stem != "__init__"}
    graph = {m: _imports(MODEL_DIR / f"{m}.py", modules) - {m} for m in modules}
    assert "replay" not in graph["commands"]
    assert "snapshot" not in graph["replay"]
    # depth-first search for a circle
    state: dict[str, int] = {}

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for dep in sorted(graph[module]):
            if state.get(dep) == 1:
                circle = path[path.index(dep) :] + [dep] if dep in path else [module, dep]
                pytest.fail(f"import circle: {' -> '.join(circle)}")
            if dep not in state:
                visit(dep, [*path, dep])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])


def test_the_replayer_keeps_only_the_replay() -> None:
    assert not hasattr(Replayer, "snapshot")


def test_columns_append_take_and_rows() -> None:
    sink = Columns(("a", "b"))
    sink.append(1, "x")
    sink.append(2, None)
    assert len(sink) == 2
    taken = sink.take()
    assert len(sink) == 0 and sink.rows() == []
    assert taken.rows() == [{"a": 1, "b": "x"}, {"a": 2, "b": None}]
    assert taken.column("b") == ["x", None]
    assert taken.subset([1]).rows() == [{"a": 2, "b": None}]
    again = Columns.from_rows(("a", "b"), [{"b": "y"}])
    taken.extend(again)
    assert taken.rows()[-1] == {"a": None, "b": "y"}
    with pytest.raises(ValueError):
        taken.extend(Columns(("b", "a")))
    sink.append(3)  # a value missing
    with pytest.raises(ValueError):
        sink.take()


def _replayed() -> Replayer:
    r = Replayer("7.0")
    r.apply(1, 1000, ["XGROUP", "CREATE", "s", "g", "$", "MKSTREAM"])
    r.apply(2, 1001, ["XADD", "s", "1-0", "f", "v"])
    r.apply(3, 1002, ["XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", ">"])
    r.apply(4, 1003, ["XCLAIM", "s", "g", "d", "0", "1-0"])
    return r
