"""Which engine replays: the native core (``pelengine_native``, Rust) or the Python model.

The native core is an optional, separately built distribution (``pelengine-native``;
``pip install pelengine[native]`` or ``make install`` from a clone): the pure package
installs and runs without it. ``--engine`` (conf ``reconstruct.engine``) chooses:

* ``python``: the Python model (``pelengine.model``), the readable reference;
* ``native``: the native core, an error when it cannot be imported;
* ``auto`` (the default): the native core when it can be imported, else the Python model.

Both engines have one interface (a ``FamilyReplay`` with ``feed``/``finish``, a
``Router`` with ``route``): the Python one is :mod:`pelengine.engine.python`, the
native one this module loads. The choice is made once, on the driver, and handed to the
Arrow functions (:mod:`pelengine.engine.udf`) as a plain value;
the run report says which engine ran and why. Executors that cannot import the native
core the driver chose fail with a message saying so (install the wheel on the cluster,
or run with ``--engine python``).
"""

from __future__ import annotations

from types import ModuleType

# the pelengine_native API this package speaks (its ``ABI``): 4 since it takes the
# resolved profile and raises pelengine's errors (pelengine.engine.errors)
NATIVE_ABI = 4


class EngineError(RuntimeError):
    """The engine asked for cannot run here."""


_loaded: ModuleType | None = None
_why_not: str | None = None


def load() -> ModuleType | None:
    """The native core's module, or None when it cannot be imported (``why_not`` says why)."""
    global _loaded, _why_not
    if _loaded is not None:
        return _loaded
    try:
        import pelengine_native  # type: ignore[import-not-found,unused-ignore]
    except ImportError as exc:
        _why_not = f"pelengine_native is not importable ({exc})"
        return None
    abi = getattr(pelengine_native, "ABI", None)
    if abi != NATIVE_ABI:
        _why_not = (
            f"pelengine_native {getattr(pelengine_native, '__version__', '?')} speaks ABI "
            f"{abi}, this pelengine needs {NATIVE_ABI}: install the matching pelengine-native"
        )
        return None
    _loaded = pelengine_native
    return _loaded


def why_not() -> str | None:
    """Why ``load`` returned None (None when it did not, or was not called)."""
    return _why_not


def resolve_engine(choice: str, *, keep_state: bool = False) -> tuple[str, str]:
    """The engine a run uses for ``choice`` (auto, native, python: checked where the run's
    :class:`~pelengine.settings.Settings` is built), with the reason.
    ``keep_state``: an incremental run, whose replay reads and writes each family's saved
    model (both engines do: a state either saved loads in the other)."""
    if choice == "python":
        return "python", "python chosen"
    module = load()
    if module is not None:
        version = getattr(module, "__version__", "?")
        return "native", f"{choice} chosen, pelengine_native {version} importable"
    if choice == "native":
        raise EngineError(
            f"--engine native: {why_not()}. Install it (pip install 'pelengine[native]', or "
            "make install from a clone) or run with --engine python"
        )
    return "python", f"auto: {why_not()}"


def require() -> ModuleType:
    """On an executor: the native core the driver chose (an error naming the fix if absent)."""
    module = load()
    if module is None:
        raise EngineError(
            f"the run chose the native engine but this Python worker cannot use it: "
            f"{why_not()}. Install pelengine-native where the executors run (the Databricks "
            "bundle ships it as a job library) or run with --engine python"
        )
    return module
