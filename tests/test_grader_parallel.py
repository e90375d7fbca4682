"""Parallel equals serial: ``--jobs 2`` writes the same grades.csv and items.csv as ``--jobs 1``.

A small class (an honest student, one with the planted mistakes, one with objects that override comparison, for
two assignments) is graded twice through the command line.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from planted import CHEATS, OTHER_MISTAKES, filled, run_module, solutions, with_mistakes, write_submission

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
ASSIGNMENTS = ("01_permutation", "06_comparison")


def _class(root: Path) -> None:
    for assignment in ASSIGNMENTS:
        notebooks = {
            "full": filled(assignment, solutions(assignment)),
            "mistakes": with_mistakes(assignment, OTHER_MISTAKES[assignment]),
        }
        if assignment in CHEATS:
            notebooks["cheat"] = with_mistakes(assignment, CHEATS[assignment])
        for student, notebook in notebooks.items():
            write_submission(root, student, assignment, notebook)


def _grade(submissions: Path, out: Path, jobs: int) -> None:
    completed = run_module(
        "autograder", "grade", str(submissions), "--out", str(out), "--jobs", str(jobs), timeout=600
    )
    assert completed.returncode == 0, completed.stderr[-3000:]


def test_parallel_grading_writes_the_same_csvs_as_serial_grading(tmp_path):
    submissions = tmp_path / "submitted"
    _class(submissions)
    _grade(submissions, tmp_path / "serial", 1)
    _grade(submissions, tmp_path / "parallel", 2)
    for name in ("grades.csv", "items.csv"):
        serial = (tmp_path / "serial" / name).read_text()
        assert serial == (tmp_path / "parallel" / name).read_text(), name
    grades = (tmp_path / "serial" / "grades.csv").read_text()
    # The full solutions earn every point of both assignments: the grades are not trivially equal.
    assert grades.count(",full,,,,13.0,0.0,13.0,13.0") == 1, grades  # 01_permutation's 13 points
    assert grades.count(",full,,,,14.0,0.0,14.0,14.0") == 1, grades  # 06_comparison's 14
