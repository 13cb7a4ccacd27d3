"""Execute a notebook with parameters and write the executed copy (used by `make notebook`).

    python notebooks/execute.py NOTEBOOK OUTPUT [-p NAME=VALUE ...] [--timeout S]
    python notebooks/execute.py --clear NOTEBOOK     # strip outputs in place (before a commit)

Parameters are injected the way papermill does it: a cell tagged
``injected-parameters`` holding ``NAME = VALUE`` lines goes right after the cell
tagged ``parameters``, so the defaults stay visible and the overrides are explicit.
A VALUE is a Python literal (``20``, ``None``, ``['conf/local.yaml']``); anything
that is not one is taken as a string (``demo/out``).

The kernel is ipykernel on this interpreter (``sys.executable``), whatever
kernelspecs are installed (jupyter_client would take a user's own ``python3``
kernelspec first): run the script with the project's venv python so that
pelengine and pyspark import. The kernel runs in the notebook's folder,
as under Jupyter, with ``PYSPARK_PYTHON`` set to the same interpreter, and is
shut down at the end. Output written straight to the process's file descriptors
(the Spark JVM's log) goes to this script's stderr instead of the notebook.
The executed copy is written even when a cell fails.
"""

from __future__ import annotations

import argparse
import ast
import os
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import nbformat
from jupyter_client.kernelspec import KernelSpec, KernelSpecManager
from jupyter_client.manager import AsyncKernelManager
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError
from traitlets import default

KERNEL_NAME = "python3"
PARAMETERS_TAG = "parameters"
INJECTED_TAG = "injected-parameters"


class ThisInterpreterSpecs(KernelSpecManager):
    """Every kernel name resolves to ipykernel on this interpreter."""

    def get_kernel_spec(self, kernel_name: str) -> KernelSpec:
        from ipykernel.kernelspec import RESOURCES, get_kernel_dict

        return KernelSpec(resource_dir=RESOURCES, **get_kernel_dict())


class ThisInterpreterKernelManager(AsyncKernelManager):
    """nbclient's kernel manager, with kernels started on this interpreter."""

    @default("kernel_spec_manager")
    def _kernel_spec_manager_default(self) -> KernelSpecManager:
        return ThisInterpreterSpecs(data_dir=self.data_dir)


def parse_value(text: str) -> Any:
    """A Python literal, or the text itself when it is not one."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def inject_parameters(nb: nbformat.NotebookNode, params: Mapping[str, Any]) -> None:
    """Put a cell assigning `params` after the `parameters` cell (replacing an earlier one)."""
    cells = [c for c in nb.cells if INJECTED_TAG not in c.metadata.get("tags", [])]
    tagged = [i for i, c in enumerate(cells) if PARAMETERS_TAG in c.metadata.get("tags", [])]
    if len(tagged) != 1:
        raise ValueError(f"expected one cell tagged {PARAMETERS_TAG!r}, found {len(tagged)}")
    source = "# Injected parameters\n" + "".join(f"{k} = {v!r}\n" for k, v in params.items())
    cell = nbformat.v4.new_code_cell(source.rstrip("\n"))
    cell.metadata["tags"] = [INJECTED_TAG]
    cells.insert(tagged[0] + 1, cell)
    nb.cells = cells


def clear_outputs(nb: nbformat.NotebookNode) -> None:
    """Drop outputs, execution counts and execution timings (what git should not see)."""
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
        cell.metadata.pop("execution", None)


def kernel_env() -> dict[str, str]:
    """The kernel's environment: ours, with Spark's Python workers on this interpreter."""
    return {**os.environ, "PYSPARK_PYTHON": sys.executable}


def execute_notebook(
    nb: nbformat.NotebookNode, cwd: str | Path, timeout: int = 600
) -> nbformat.NotebookNode:
    """Run every cell of `nb` in a fresh kernel on this interpreter, started in `cwd`
    (outputs land in `nb`); raises CellExecutionError at the first failing cell. The
    kernel is shut down either way."""
    client = NotebookClient(
        nb,
        kernel_name=KERNEL_NAME,
        kernel_manager_class=ThisInterpreterKernelManager,
        timeout=timeout,
        resources={"metadata": {"path": str(cwd)}},
        shutdown_kernel="graceful",
        # the Spark JVM's own log lines go to our stderr, not into the cells' outputs
        extra_arguments=["--IPKernelApp.capture_fd_output=False"],
    )
    client.execute(env=kernel_env())
    return nb


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebook", help="notebook to run (left unchanged)")
    parser.add_argument("output", nargs="?", help="where to write the executed copy")
    parser.add_argument(
        "--clear", action="store_true", help="clear NOTEBOOK's outputs in place, run nothing"
    )
    parser.add_argument(
        "-p",
        "--param",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="override a parameter (repeatable)",
    )
    parser.add_argument("--timeout", type=int, default=600, help="seconds per cell (default 600)")
    args = parser.parse_args(argv)
    params: dict[str, Any] = {}
    for item in args.param:
        name, sep, value = item.partition("=")
        if not sep or not name.isidentifier():
            parser.error(f"-p {item!r}: expected NAME=VALUE")
        params[name] = parse_value(value)

    source = Path(args.notebook)
    nb = nbformat.read(source, as_version=4)
    if args.clear:
        clear_outputs(nb)
        nbformat.write(nb, source)
        print(f"{source}: outputs cleared")
        return 0
    if args.output is None:
        parser.error("OUTPUT is required (or --clear)")
    if params:
        inject_parameters(nb, params)
    started = time.monotonic()
    failed: CellExecutionError | None = None
    try:
        execute_notebook(nb, cwd=source.resolve().parent, timeout=args.timeout)
    except CellExecutionError as exc:
        failed = exc
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, output)
    took = time.monotonic() - started
    if failed is not None:
        print(f"{source}: a cell failed after {took:.0f} s; partial copy in {output}")
        print(failed, file=sys.stderr)
        return 1
    print(f"{source}: executed in {took:.0f} s; executed copy in {output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
