"""The student notebooks: ``notebooks/<assignment>.ipynb``, generated from ``source/`` by nbgrader.

nbgrader's generate_assignment replaces solutions by stubs, removes hidden tests and mark schemes, locks
the read-only cells and records checksums, in a temporary course. The result is written with nbformat
(sorted keys, one trailing newline); it holds no timestamp, and the checksums depend on the cells only, so
generating twice gives the same bytes and a test can compare ``notebooks/`` with a fresh generation.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterable
from pathlib import Path

import nbformat

from autograder import ASSIGNMENTS, RELEASED_DIRECTORY
from autograder.course import TemporaryCourse


def released_text(path: Path) -> str:
    """The canonical text of a generated notebook."""
    return nbformat.writes(nbformat.read(path, as_version=4)) + "\n"


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
