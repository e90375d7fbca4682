"""A temporary nbgrader course, and the environment of the kernels that run the course's notebooks.

Every command works on a copy: the course's configuration and its ``source/`` notebooks are copied into a
temporary directory, which becomes nbgrader's course root (gradebook, ``release/``, ``submitted/``,
``autograded/``, ``feedback/``). Nothing is ever written into ``autograder/``.

Tools: nbgrader runs the ``alembic`` executable when it creates a gradebook, so the folder of this interpreter
(the virtual environment's ``bin``) is put first on ``PATH``.

Kernels: a notebook's kernel is the Python that runs this command, started through the sandbox's launcher
(:func:`write_kernelspec`), with the kernelspec and environment of :mod:`autograder.student.kernels`: the repository is
on the kernel's ``PYTHONPATH``, since the hidden tests import :mod:`autograder.student.answers`, and chapters that build
on ``posenc_ref`` import it even where the package is not installed.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterable
from pathlib import Path

from autograder import CONFIG_FILE, REPOSITORY, source_notebook
from autograder.gradebook import stamp_if_new
from autograder.student import kernels
from autograder.student.kernels import kernel_environment_set

# The grader's kernels start through the sandbox's launcher, which runs a plain ipykernel when no grader asked
# for a sandbox (autograder.sandbox.launcher.main).
SANDBOX_KERNEL = ("-m", "autograder.sandbox.launcher", "{connection_file}")


def write_kernelspec(jupyter_directory: Path) -> Path:
    """Write ``<jupyter_directory>/kernels/python3/kernel.json``, which starts this interpreter's ipykernel through
    the sandbox's launcher."""
    return kernels.write_kernelspec(jupyter_directory, SANDBOX_KERNEL)


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

    @contextlib.contextmanager
    def gradebook_in_memory_only(self):
        """While the block runs, this course's SQLite gradebook is written without waiting for the disk
        (``PRAGMA synchronous = OFF``, its journal in memory): nbgrader commits once per cell, and each commit
        waited for the disk (about 0.3 s of each assignment that ``generate`` fills). For a course that is
        thrown away afterwards, as the grader's template is: a crash in the block can leave its file
        inconsistent. Any other database, and this one after the block, is written as before."""
        import sqlite3

        from sqlalchemy import event
        from sqlalchemy.engine import Engine

        path = str(self.gradebook.resolve())

        def unsynced(connection, _record) -> None:
            if not isinstance(connection, sqlite3.Connection):
                return
            cursor = connection.cursor()
            try:
                if path in {row[2] for row in cursor.execute("PRAGMA database_list")}:
                    cursor.execute("PRAGMA synchronous = OFF")
                    cursor.execute("PRAGMA journal_mode = MEMORY")
            finally:
                cursor.close()

        event.listen(Engine, "connect", unsynced)
        try:
            yield
        finally:
            event.remove(Engine, "connect", unsynced)

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
