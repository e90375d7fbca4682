"""``python -m autograder.bench``: notebooks graded per minute, plain ``nbgrader autograde`` against ours.

A class is generated (``--students`` students, each with the full solution of every chosen assignment, taken
from ``source/``), then graded twice in one run:

1. plain nbgrader: one course, every submission in ``submitted/``, ``nbgrader autograde ASSIGNMENT`` for each
   assignment, one notebook after another, kernels unsandboxed, hidden tests run in the student's kernel;
2. ``python -m autograder grade`` (sandboxed when bwrap can run, ``--jobs`` workers, feedback pages included).

It prints both rates and their ratio (ours over plain). Both paths check that every notebook earned all the
points of its test cells (written answers wait for an instructor), so that a fast failure cannot pass for speed.
Ours does not run the explorer cells (:mod:`autograder.verdicts.template`); plain nbgrader runs every cell.

``--workers 1 2``: no plain run; ours with each number of workers, the parallel efficiency of each against one
worker (speed-up over the number of workers), and, from the time a notebook takes one worker, the number of
such workers that grades a course of ``--course-students`` students x 6 assignments in an hour at the
efficiency measured last.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import sys
import tempfile
import time
import warnings
from pathlib import Path

import nbformat

from autograder import ASSIGNMENTS, source_notebook
from autograder.course import TemporaryCourse, run_app
from autograder.kernels import kernel_environment_set

SOLUTION_LINES = ("### BEGIN SOLUTION", "### END SOLUTION")


def _solutions(assignment: str) -> dict[str, str]:
    """The source's answer cells, markers removed, by grade_id."""
    answers = {}
    for cell in nbformat.read(source_notebook(assignment), as_version=4).cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("solution"):
            lines = [line for line in cell.source.splitlines() if line.strip() not in SOLUTION_LINES]
            answers[meta["grade_id"]] = "\n".join(lines)
    return answers


def generate_class(root: Path, students: int, assignments: tuple[str, ...], released: dict[str, Path]) -> int:
    """Write ``root/<student>/<assignment>/<assignment>.ipynb``; return the number of notebooks."""
    for assignment in assignments:
        notebook = nbformat.read(released[assignment], as_version=4)
        answers = _solutions(assignment)
        for cell in notebook.cells:
            grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
            if grade_id in answers:
                cell.source = answers[grade_id]
        for index in range(students):
            path = root / f"student{index:03d}" / assignment / f"{assignment}.ipynb"
            path.parent.mkdir(parents=True, exist_ok=True)
            nbformat.write(notebook, path)
    return students * len(assignments)


def autograded_points(released: Path) -> float:
    """The points of a released notebook's test cells (written answers wait for an instructor)."""
    return sum(
        float(cell.metadata["nbgrader"].get("points", 0))
        for cell in nbformat.read(released, as_version=4).cells
        if cell.cell_type == "code" and cell.metadata.get("nbgrader", {}).get("grade")
    )


def plain_nbgrader(course: TemporaryCourse, submissions: Path, points: dict[str, float]) -> float:
    """Seconds that ``nbgrader autograde`` takes on every submission, serially, in ``course``."""
    from nbgrader.api import Gradebook
    from nbgrader.converters import Autograde
    from nbgrader.coursedir import CourseDirectory
    from sqlalchemy.exc import SAWarning

    shutil.copytree(submissions, course.directory / "submitted")
    start = time.perf_counter()
    with kernel_environment_set(course.jupyter_directory), warnings.catch_warnings():
        warnings.simplefilter("ignore", SAWarning)  # nbgrader's own, once per submission
        for assignment in points:
            config = course.config()
            directory = CourseDirectory(config=config)
            directory.assignment_id = assignment
            app = Autograde(coursedir=directory, config=config)
            app.create_student = True
            run_app(app)
    elapsed = time.perf_counter() - start
    with Gradebook(f"sqlite:///{course.gradebook}") as gradebook:
        for assignment, expected in points.items():
            for submission in gradebook.assignment_submissions(assignment):
                if submission.score < expected:
                    raise RuntimeError(f"plain nbgrader: {submission.student_id}/{assignment} lost points")
    return elapsed


def ours(submissions: Path, out: Path, jobs: int, points: dict[str, float]) -> tuple[float, bool]:
    """Seconds that ``python -m autograder grade`` takes; and whether it ran sandboxed."""
    from autograder.grade import grade

    start = time.perf_counter()
    results = grade(submissions, out, jobs=jobs)
    elapsed = time.perf_counter() - start
    for result in results:
        if result.score < points[result.assignment]:
            raise RuntimeError(f"ours: {result.student}/{result.assignment} lost points")
    return elapsed, "WITHOUT a sandbox" not in (out / "report.txt").read_text()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autograder.bench", description=__doc__.splitlines()[0])
    parser.add_argument("--students", type=int, default=40)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--workers", type=int, nargs="+", default=None, help="scaling run (see above)")
    parser.add_argument("--course-students", type=int, default=10_000)
    parser.add_argument("assignments", nargs="*", default=list(ASSIGNMENTS))
    arguments = parser.parse_args(argv)
    assignments = tuple(arguments.assignments)
    if arguments.workers:
        return scaling(arguments.students, assignments, arguments.workers, arguments.course_students)
    with tempfile.TemporaryDirectory(prefix="autograder-bench-") as work_name:
        work = Path(work_name)
        course = TemporaryCourse(work / "plain", assignments)
        released = {assignment: course.generate(assignment) for assignment in assignments}
        count = generate_class(work / "class", arguments.students, assignments, released)
        points = {assignment: autograded_points(released[assignment]) for assignment in assignments}
        plain_seconds = plain_nbgrader(course, work / "class", points)
        our_seconds, sandboxed = ours(work / "class", work / "out", arguments.jobs, points)
    plain_rate, our_rate = 60 * count / plain_seconds, 60 * count / our_seconds
    print(f"{count} notebooks ({arguments.students} students x {', '.join(assignments)}), {os.cpu_count()} cores")
    print(f"plain nbgrader autograde, serial: {plain_seconds:.1f} s, {plain_rate:.1f} notebooks/minute")
    print(
        f"python -m autograder grade --jobs {arguments.jobs} ({'sandboxed' if sandboxed else 'NOT sandboxed'}): "
        f"{our_seconds:.1f} s, {our_rate:.1f} notebooks/minute"
    )
    print(f"ratio: {our_rate / plain_rate:.2f}x")
    return 0


def scaling(students: int, assignments: tuple[str, ...], workers: list[int], course_students: int) -> int:
    """Ours with each number of ``workers``; the parallel efficiency; the workers a whole course needs."""
    seconds = {}
    with tempfile.TemporaryDirectory(prefix="autograder-bench-") as work_name:
        work = Path(work_name)
        course = TemporaryCourse(work / "plain", assignments)
        released = {assignment: course.generate(assignment) for assignment in assignments}
        count = generate_class(work / "class", students, assignments, released)
        points = {assignment: autograded_points(released[assignment]) for assignment in assignments}
        for jobs in workers:
            seconds[jobs], sandboxed = ours(work / "class", work / f"out-{jobs}", jobs, points)
    print(f"{count} notebooks ({students} students x {', '.join(assignments)}), {os.cpu_count()} cores, "
          f"{'sandboxed' if sandboxed else 'NOT sandboxed'}")
    base = workers[0]
    for jobs in workers:
        efficiency = seconds[base] * base / (seconds[jobs] * jobs)
        print(f"{jobs} worker(s): {seconds[jobs]:.1f} s, {60 * count / seconds[jobs]:.1f} notebooks/minute, "
              f"parallel efficiency {efficiency:.2f}")
    per_notebook = seconds[base] * base / count  # seconds of one worker per notebook
    course_notebooks = course_students * 6
    needed = math.ceil(course_notebooks * per_notebook / 3600 / efficiency)
    print(f"one worker grades a notebook in {per_notebook:.1f} s: {course_students} students x 6 assignments "
          f"({course_notebooks} notebooks) in an hour need {needed} such workers at efficiency {efficiency:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
