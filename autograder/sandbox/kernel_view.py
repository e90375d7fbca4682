"""What a student's kernel can import: a folder built from an allowlist of the course's files.

The grader's kernel needs the student's side of the course only (the design's "Two sides"): the folder
``autograder/student/`` whole (what the notebooks import, :mod:`autograder.student`), the package's
``__init__.py`` that holds paths and names only, and ``posenc_ref``. The view is made of copies of exactly
those files (:func:`kernel_packages`); the sandbox binds it read-only at :data:`MOUNT`, the kernel's
``PYTHONPATH``, and binds nothing of the repository (:func:`autograder.sandbox.launcher.bwrap_argv`). So the
grader's side (:mod:`autograder.variants`, which computes every student's expected values, the hidden tests in
``source/``, :mod:`autograder.grade`, ...) is not in the kernel's file system at all, and importing it raises
``ModuleNotFoundError``: a module lies on the student's side by the folder it is in, not by a list.

The grader builds the folder once per batch; a kernel started without one (``bwrap_problem``, a test) uses
:func:`default_kernel_view`, a copy made once per process in a new private folder of the machine's temporary
directory. (A cache under a fixed name, ``autograder-<uid>``, let any account of the machine make that name
first and so stop every grading run of the class.)
"""

from __future__ import annotations

import functools
import multiprocessing.util
import os
import shutil
import stat
import tempfile
from pathlib import Path

import autograder

REPOSITORY = Path(autograder.REPOSITORY).resolve()
MOUNT = "/course"  # where the kernel sees the folder, and its PYTHONPATH
STUDENT_FILES = ("autograder/__init__.py",)  # paths and names only
STUDENT_PACKAGES = ("autograder/student", "posenc_ref")  # whole folders: every file but caches
# What the notebooks import, which a kernel loads before the student's first cell.
STUDENT_IMPORTS = (
    "autograder.student.progress",
    "autograder.student.answers",
    "autograder.student.parameters",
    "autograder.student.submitted_tables",
    "posenc_ref",
)
SKIPPED = ("__pycache__",)


def _package_files(package: str) -> list[str]:
    """The regular files of ``package`` (relative to the repository), without caches; links are not followed."""
    root = REPOSITORY / package
    found = []
    for folder, folders, files in os.walk(root):
        folders[:] = sorted(name for name in folders if name not in SKIPPED and not os.path.islink(Path(folder, name)))
        for name in sorted(files):
            path = Path(folder, name)
            if stat.S_ISREG(path.lstat().st_mode) and not name.endswith(".pyc"):
                found.append(path.relative_to(REPOSITORY).as_posix())
    return found


def view_files() -> tuple[str, ...]:
    """Every file of the kernel's view, relative to the repository (and to the view)."""
    files = list(STUDENT_FILES)
    for package in STUDENT_PACKAGES:
        files += _package_files(package)
    return tuple(files)


def kernel_packages(destination: Path) -> Path:
    """Copy the kernel's view (:func:`view_files`) into ``destination``, which must not exist; return it.

    Files are written read-only; the folder holds nothing else.
    """
    destination = Path(destination)
    destination.mkdir(parents=True, mode=0o755)
    for relative in view_files():
        target = destination / relative
        target.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
        shutil.copyfile(REPOSITORY / relative, target, follow_symlinks=False)
        target.chmod(0o444)
    return destination


@functools.cache
def default_kernel_view() -> Path:
    """The kernel's view of this course, built once per process in a new folder of the machine's temporary
    directory that only this user can enter (``tempfile.mkdtemp``: a name drawn at random, made by this call,
    so that no other account can have made it first or put anything in it), and removed when the process
    exits."""
    folder = Path(tempfile.mkdtemp(prefix="autograder-view-"))
    # multiprocessing's exit finalizers run in every process that ends, forked workers included (which run no
    # exit function of atexit's)
    multiprocessing.util.Finalize(None, shutil.rmtree, args=(folder, True), exitpriority=0)
    return kernel_packages(folder / "view")
