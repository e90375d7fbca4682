"""``python -m autograder publish --out DIR``: the student edition, the repository that students clone.

This repository holds the answer key (the design's "Two sides"): ``source/`` (solutions, hidden tests, mark
schemes), :mod:`autograder.variants` (each student's expected values and mistakes), the grader. The student
edition is built from the student's side only, by allowlist (:func:`edition_files`), so that a file added to
this repository stays out of it until it is named here:

- ``notebooks/<assignment>.ipynb``, the released notebooks as they are in ``notebooks/`` (run
  ``python -m autograder release`` first after a change of ``source/``);
- ``posenc_ref/``, the package's Python files (its benchmark records in ``results/`` are not needed to run it);
- of ``autograder/``, the student's side whole, as the kernel's view takes it (``__init__.py`` and the folder
  ``autograder/student/``: what the notebooks import and ``python -m autograder check``), and
  ``nbgrader_config.py``, whose ``c.AutograderVariants.enabled`` the notebooks read when they print a student's
  parameters;
- ``.binder/`` as it is here, and the edition's own files, kept in ``autograder/student_edition/``: its README, its
  ``requirements.txt`` and ``pyproject.toml``, a ``.gitignore``, and ``autograder/__main__.py``, which offers
  ``check`` only.

The folder written is ready for ``git init``; it holds no ``.git``, no ``tests/`` and no ``book/`` (the book is
published on its own). Its launch buttons and Colab cells name its repository, ``student_repository`` in
``_config.yml``.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from autograder import ASSIGNMENTS, COURSE_DIRECTORY, REPOSITORY, released_notebook
from autograder.sandbox.kernel_view import view_files

# The files the edition has and this repository does not.
OWN_FILES = REPOSITORY / "autograder" / "student_edition"
SETTINGS_FILES = ("autograder/nbgrader_config.py",)
COPIED_FOLDERS = (".binder",)
# An edition written into a package would be copied into the kernel's view (posenc_ref) or lie among the
# grader's own files (autograder).
FORBIDDEN_PLACES = (COURSE_DIRECTORY, REPOSITORY / "posenc_ref")


def _files_under(root: Path) -> list[Path]:
    """The regular files under ``root``, caches aside, in a stable order."""
    found = []
    for folder, folders, files in os.walk(root):
        folders[:] = sorted(name for name in folders if name != "__pycache__")
        found += [Path(folder, name) for name in sorted(files) if Path(folder, name).is_file()]
    return found


def edition_files() -> dict[str, Path]:
    """Every file of the student edition: its path in the edition -> the file it is copied from.

    Raises:
        FileNotFoundError: a released notebook or a file of the allowlist is missing.
    """
    files: dict[str, Path] = {}
    for assignment in ASSIGNMENTS:
        files[released_notebook(assignment).relative_to(REPOSITORY).as_posix()] = released_notebook(assignment)
    for relative in view_files():  # posenc_ref's records of benchmarks are not needed to run it
        if not relative.startswith("posenc_ref/") or relative.endswith(".py"):
            files[relative] = REPOSITORY / relative
    for relative in SETTINGS_FILES:
        files[relative] = REPOSITORY / relative
    for folder in COPIED_FOLDERS:
        for path in _files_under(REPOSITORY / folder):
            files[path.relative_to(REPOSITORY).as_posix()] = path
    for path in _files_under(OWN_FILES):
        files[path.relative_to(OWN_FILES).as_posix()] = path  # the edition's own __main__ among them
    missing = sorted(relative for relative, path in files.items() if not path.is_file())
    if missing:
        raise FileNotFoundError(f"the student edition needs {', '.join(missing)}, missing in {REPOSITORY}")
    return dict(sorted(files.items()))


def _checked_destination(out: Path) -> Path:
    """``out`` resolved; ValueError naming ``--out`` when it is not an empty or new folder outside the packages."""
    resolved = Path(out).resolve()
    for place in FORBIDDEN_PLACES:
        if resolved.is_relative_to(place):
            raise ValueError(f"--out must lie outside {place}, got {out}")
    if resolved.exists() and (not resolved.is_dir() or any(resolved.iterdir())):
        raise ValueError(f"--out must be a new or an empty folder, got {out}, which is not")
    return resolved


def publish(out: Path) -> list[str]:
    """Write the student edition (:func:`edition_files`) into ``out``; return its files' paths in it.

    Raises:
        ValueError: ``out`` exists and is not an empty folder, or lies in ``autograder/`` or ``posenc_ref/``.
        FileNotFoundError: a file of the edition is missing here.
    """
    destination = _checked_destination(out)
    files = edition_files()
    destination.mkdir(parents=True, exist_ok=True)
    for relative, source in files.items():
        target = destination / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
    return list(files)
