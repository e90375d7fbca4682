"""A temporary nbgrader course, and the environment of the kernels that run the course's notebooks.

Every command works on a copy: the course's configuration and its ``source/`` notebooks are copied into a
temporary directory, which becomes nbgrader's course root (gradebook, ``release/``, ``submitted/``,
``autograded/``, ``feedback/``). Nothing is ever written into ``autograder/``.

Tools: nbgrader runs the ``alembic`` executable when it creates a gradebook, so the folder of this interpreter
(the virtual environment's ``bin``) is put first on ``PATH``.

Kernels: a notebook's kernel is the Python that runs this command. A kernelspec named ``python3`` whose
command is ``sys.executable`` is written into the temporary directory and put first on ``JUPYTER_PATH``, so
no user-level or system kernelspec of the same name can pick another interpreter. The repository is put on
the kernel's ``PYTHONPATH``: the hidden tests import :mod:`autograder.answers`, and chapters that build on
``posenc_ref`` import it even where the package is not installed.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from autograder import CONFIG_FILE, REPOSITORY, source_notebook
from autograder.gradebook import stamp_if_new

KERNEL_NAME = "python3"


def write_kernelspec(jupyter_directory: Path) -> Path:
    """Write ``<jupyter_directory>/kernels/python3/kernel.json`` running this interpreter's ipykernel."""
    kernel_directory = jupyter_directory / "kernels" / KERNEL_NAME
    kernel_directory.mkdir(parents=True, exist_ok=True)
    spec = {
        # The launcher starts the kernel in its sandbox when the grader asks for one (autograder.sandbox.launcher),
        # as a plain ipykernel otherwise; a sandboxed kernel is in a session of its own, out of reach of
        # signals to the launcher's process group, so interrupts are sent as messages.
        "argv": [sys.executable, "-m", "autograder.sandbox.launcher", "{connection_file}"],
        "display_name": "Python 3 (ipykernel)",
        "language": "python",
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


def load_config(course_root: Path, *, timeout: int | None = None, sockets: Path | None = None):
    """The course's nbgrader configuration with ``course_root`` as the course directory.

    ``sockets``: kernels talk to nbgrader over Unix sockets named ``<sockets>-<n>`` (a sandboxed kernel has no
    network).
    """
    from traitlets.config.loader import PyFileConfigLoader

    config = PyFileConfigLoader(CONFIG_FILE.name, path=str(CONFIG_FILE.parent)).load_config()
    config.CourseDirectory.root = str(course_root)
    if sockets is not None:
        config.KernelManager.transport = "ipc"
        config.KernelManager.ip = str(sockets)
    if timeout is not None:
        config.Execute.timeout = timeout
    return config


class NbgraderError(RuntimeError):
    """An nbgrader step failed; the message holds nbgrader's log."""


def run_app(app) -> str:
    """Start an nbgrader application; return its log, or raise NbgraderError with its log and traceback."""
    from nbgrader.utils import capture_log

    result = capture_log(app)
    if not result["success"]:
        raise NbgraderError(f"{result.get('log', '')}\n{result.get('error', '')}".strip())
    return result.get("log", "")


class TemporaryCourse:
    """An nbgrader course under ``root``: the course's configuration and the sources of some assignments.

    ``root/course`` is the course directory and ``root/jupyter`` holds the kernelspec.
    """

    def __init__(self, root: Path, assignments: Iterable[str]) -> None:
        self.root = root
        self.directory = root / "course"
        self.jupyter_directory = root / "jupyter"
        self.assignments = tuple(assignments)
        self.directory.mkdir(parents=True, exist_ok=True)
        for assignment in self.assignments:
            destination = self.directory / "source" / assignment
            destination.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source_notebook(assignment), destination / f"{assignment}.ipynb")
        shutil.copy2(CONFIG_FILE, self.directory / CONFIG_FILE.name)
        write_kernelspec(self.jupyter_directory)
        stamp_if_new(f"sqlite:///{self.gradebook}")  # saves nbgrader's run of the alembic program

    @property
    def gradebook(self) -> Path:
        return self.directory / "gradebook.db"

    def config(self, *, timeout: int | None = None):
        return load_config(self.directory, timeout=timeout)

    def generate(self, assignment: str) -> Path:
        """Run nbgrader's generate_assignment; return the released notebook. Fills the gradebook."""
        from nbgrader.converters import GenerateAssignment
        from nbgrader.coursedir import CourseDirectory

        config = self.config()
        course_directory = CourseDirectory(config=config)
        course_directory.assignment_id = assignment
        app = GenerateAssignment(coursedir=course_directory, config=config)
        app.force = True
        app.create_assignment = True
        with kernel_environment_set(self.jupyter_directory):
            run_app(app)
        return self.directory / "release" / assignment / f"{assignment}.ipynb"


def course_version() -> str:
    """A hash of what decides a grade on this machine: every file of ``autograder/`` (the grader and the
    exercises' sources) and of ``posenc_ref/`` (the package the kernels import). Two machines grade alike when
    their versions are equal."""
    import hashlib

    digest = hashlib.sha256()
    for package in ("autograder", "posenc_ref"):
        root = REPOSITORY / package
        for path in sorted(root.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                digest.update(str(path.relative_to(REPOSITORY)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()
