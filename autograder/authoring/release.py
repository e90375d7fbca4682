"""The student notebooks: ``notebooks/<assignment>.ipynb``, generated from ``source/`` by nbgrader.

nbgrader's generate_assignment replaces solutions by stubs, removes hidden tests and mark schemes, locks
the read-only cells and records checksums, in a temporary course. The result is written with nbformat
(sorted keys, one trailing newline); it holds no timestamp, and the checksums depend on the cells only, so
generating twice gives the same bytes and a test can compare ``notebooks/`` with a fresh generation.

Before its first code cell, each student notebook gets one more cell, for the book's Colab button: in Google
Colab it installs posenc_ref from the student edition's repository (``student_repository`` in ``_config.yml``,
the one place that names it: students never see the instructor's repository); anywhere else it does nothing. It is a plain cell, without nbgrader metadata, so that
grading stays exact: nbgrader neither checksums nor restores it, it carries no points, the gradebook never
learns of it, and in the grader's kernel (no ``google.colab``) it runs as a no-op, like any cell a student
may write. A locked cell would have to live in ``source/``, where it would run in nbgrader's validation too.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterable
from pathlib import Path

import nbformat
import yaml

from autograder import ASSIGNMENTS, RELEASED_DIRECTORY, REPOSITORY
from autograder.course import TemporaryCourse

BOOK_CONFIG = REPOSITORY / "_config.yml"
COLAB_CELL_ID = "colab-install"
COLAB_CELL = """\
# In Google Colab only: install the course's package, posenc_ref, from the course's student repository.
# Anywhere else (Jupyter, Binder, a JupyterHub, the grader) it is installed already and this cell does nothing.
try:
    import google.colab  # a module that only Colab has
except ImportError:
    pass
else:
    import subprocess
    import sys

    requirement = {requirement}
    subprocess.check_call([sys.executable, "-m", "pip", "install", "--quiet", requirement])"""


def student_repository(config: Path = BOOK_CONFIG) -> tuple[str, str]:
    """``(url, branch)`` of the student edition's repository, ``student_repository`` in the book's ``_config.yml``.

    Raises:
        ValueError: the file has no ``student_repository.url`` of the form ``https://...``, or no
            ``student_repository.branch``.
    """
    repository = (yaml.safe_load(config.read_text(encoding="utf-8")) or {}).get("student_repository") or {}
    url, branch = str(repository.get("url") or ""), str(repository.get("branch") or "")
    if not url.startswith("https://") or not branch:
        raise ValueError(
            f"{config} must set student_repository.url (https://...) and student_repository.branch; got "
            f"url={url!r}, branch={branch!r}"
        )
    return url.removesuffix("/"), branch


def colab_install_cell(url: str, branch: str) -> nbformat.NotebookNode:
    """The plain code cell that installs ``posenc-ref`` from ``git+{url}@{branch}`` in Colab, and only there."""
    requirement = f"posenc-ref @ git+{url}@{branch}"
    cell = nbformat.v4.new_code_cell(COLAB_CELL.format(requirement=json.dumps(requirement)))
    cell["id"] = COLAB_CELL_ID
    cell.metadata.update({"editable": False, "deletable": False})  # read-only in JupyterLab, as locked cells are
    return cell


def with_colab_install_cell(notebook: nbformat.NotebookNode, url: str, branch: str) -> nbformat.NotebookNode:
    """``notebook`` with :func:`colab_install_cell` before its first code cell."""
    first_code = next((index for index, cell in enumerate(notebook.cells) if cell.cell_type == "code"),
                      len(notebook.cells))
    notebook.cells.insert(first_code, colab_install_cell(url, branch))
    return notebook


def released_text(path: Path) -> str:
    """The canonical text of a generated notebook, with the Colab cell."""
    notebook = with_colab_install_cell(nbformat.read(path, as_version=4), *student_repository())
    return nbformat.writes(notebook) + "\n"


def generate(assignments: Iterable[str] = ASSIGNMENTS) -> dict[str, str]:
    """Generate the student version of each assignment; return the text of each notebook by assignment."""
    assignments = tuple(assignments)
    with tempfile.TemporaryDirectory(prefix="autograder-release-") as root:
        course = TemporaryCourse(Path(root), assignments)
        return {assignment: released_text(course.generate(assignment)) for assignment in assignments}


def release(destination: Path = RELEASED_DIRECTORY, assignments: Iterable[str] = ASSIGNMENTS) -> list[Path]:
    """Write ``<destination>/<assignment>.ipynb`` for each assignment; return the paths written."""
    destination.mkdir(parents=True, exist_ok=True)
    written = []
    for assignment, text in generate(assignments).items():
        path = destination / f"{assignment}.ipynb"
        path.write_text(text)
        written.append(path)
    return written


def stale(destination: Path = RELEASED_DIRECTORY, assignments: Iterable[str] = ASSIGNMENTS) -> list[str]:
    """The assignments whose notebook in ``destination`` differs from a fresh generation (or is missing)."""
    differing = []
    for assignment, text in generate(assignments).items():
        path = destination / f"{assignment}.ipynb"
        if not path.exists() or path.read_text() != text:
            differing.append(assignment)
    return differing
