"""The kernels that run the course's notebooks: a kernelspec of this interpreter, and its environment.

A notebook's kernel is the Python that runs the command. A kernelspec named ``python3`` whose command is
``sys.executable`` is written into a temporary directory and put first on ``JUPYTER_PATH``, so no user-level or
system kernelspec of the same name can pick another interpreter. The repository is put on the kernel's
``PYTHONPATH``: the notebooks import :mod:`autograder.student.progress` and ``posenc_ref`` even where the package is not
installed.

This module is on the student's side (``python -m autograder check`` runs a plain kernel with it); the grader's
kernels start through the sandbox's launcher instead (:func:`autograder.course.write_kernelspec`).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from autograder import REPOSITORY

KERNEL_NAME = "python3"
PLAIN_KERNEL = ("-m", "ipykernel_launcher", "-f", "{connection_file}")


def write_kernelspec(jupyter_directory: Path, arguments: Sequence[str] = PLAIN_KERNEL) -> Path:
    """Write ``<jupyter_directory>/kernels/python3/kernel.json``, which runs ``sys.executable`` with
    ``arguments`` (a plain ipykernel unless told otherwise); return its folder."""
    kernel_directory = jupyter_directory / "kernels" / KERNEL_NAME
    kernel_directory.mkdir(parents=True, exist_ok=True)
    spec = {
        "argv": [sys.executable, *arguments],
        "display_name": "Python 3 (ipykernel)",
        "language": "python",
        # A sandboxed kernel is in a session of its own, out of reach of signals to the launcher's process
        # group; messages interrupt every kernel alike.
        "interrupt_mode": "message",
        "metadata": {"debugger": False},
    }
    (kernel_directory / "kernel.json").write_text(json.dumps(spec, indent=1) + "\n")
    return kernel_directory


def kernel_environment(jupyter_directory: Path, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment under which kernels resolve to this interpreter and find the repository, and nbgrader
    finds the executables installed next to this interpreter."""
    environment = dict(os.environ if base is None else base)
    path = [str(Path(sys.executable).parent), *filter(None, environment.get("PATH", "").split(os.pathsep))]
    environment["PATH"] = os.pathsep.join(dict.fromkeys(path))
    python_path = [str(REPOSITORY), *filter(None, environment.get("PYTHONPATH", "").split(os.pathsep))]
    environment["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(python_path))
    jupyter_path = [
        str(jupyter_directory),
        *filter(None, environment.get("JUPYTER_PATH", "").split(os.pathsep)),
    ]
    environment["JUPYTER_PATH"] = os.pathsep.join(jupyter_path)
    # Figures are not shown while grading; several kernels share a few cores.
    environment["MPLBACKEND"] = "Agg"
    environment.setdefault("OMP_NUM_THREADS", "1")
    # The debugger's warning about frozen modules would land on every kernel's stderr.
    environment["PYDEVD_DISABLE_FILE_VALIDATION"] = "1"
    return environment


@contextmanager
def kernel_environment_set(jupyter_directory: Path) -> Iterator[None]:
    """Set :func:`kernel_environment` in ``os.environ`` for the duration of the block."""
    saved = dict(os.environ)
    os.environ.update(kernel_environment(jupyter_directory, saved))
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def execute_in_own_loop(client, **kernel_options) -> None:
    """``client.execute()`` for an nbclient ``NotebookClient``, in an event loop of its own that ends with it.

    nbclient's ``execute`` runs on an event loop that it keeps for the thread, and a cell that raises can leave
    its kernel-alive poll behind on it. The poll then fails on the next notebook's run and lies in memory until
    the garbage collector finds it, wherever that happens to be: asyncio logs the failure with a traceback, and
    on Python 3.11 formatting that traceback parses source code, which breaks an ``ast.parse`` that the
    collector interrupted ("AST constructor recursion depth mismatch"). :func:`asyncio.run` cancels whatever
    the run leaves pending before it closes the loop, so nothing is left to fail later.

    ``kernel_options`` go to the kernel manager's ``start_kernel`` (``stdout``, ``stderr``, ``cwd``).
    """
    import asyncio

    asyncio.run(client.async_execute(**kernel_options))
