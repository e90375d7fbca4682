"""``python -m autograder.bench``: notebooks graded per minute, plain ``nbgrader autograde`` against ours.

A class is generated (``--students`` students, each with the full solution of every chosen assignment, taken
from ``source/``), then graded twice in one run:

1. plain nbgrader: one course, every submission in ``submitted/``, ``nbgrader autograde ASSIGNMENT`` for each
   assignment, one notebook after another, kernels unsandboxed, hidden tests run in the student's kernel;
2. ``python -m autograder grade`` (sandboxed when bwrap can run, ``--jobs`` workers, feedback pages included).

It prints both rates and their ratio (ours over plain), and where our workers' time went, phase by phase
(:func:`profile`, from the moments each submission's worker and grading stage mark: :mod:`autograder.sandbox.phases`). Both paths check that every notebook earned all the
points of its test cells (written answers wait for an instructor), so that a fast failure cannot pass for speed.
``--out FILE`` also writes the result as JSON (:func:`record`): the command, the commit, the machine, its load
before and after, both times and rates, the ratio and the profile; the instructors' guide reads its figures from such
files, committed in ``book/data/grading-speed/``. ``--beside-busy N`` runs both beside N processes that keep a core
busy each, as on a machine shared with other work (the result records N).
Ours does not run the explorer cells (:mod:`autograder.verdicts.template`); plain nbgrader runs every cell.

``--workers 1 2``: no plain run; ours with each number of workers, the parallel efficiency of each against one
worker (speed-up over the number of workers), and, from the time a notebook takes one worker, the number of
such workers that grades a course of ``--course-students`` students x 6 assignments in an hour at the
efficiency measured last.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import nbformat

from autograder import ASSIGNMENTS, source_notebook
from autograder.course import TemporaryCourse, run_app
from autograder.student.kernels import kernel_environment_set

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


def ours(submissions: Path, out: Path, jobs: int, points: dict[str, float]) -> tuple[float, bool, dict]:
    """Seconds that ``python -m autograder grade`` takes; whether it ran sandboxed; and its :func:`profile`. Each
    run starts without the workers' fork server, as a new command does (the first run would start it for the
    others)."""
    from autograder.executors.local import stop_fork_server
    from autograder.grade import grade

    stop_fork_server()
    start = time.perf_counter()
    results = grade(submissions, out, jobs=jobs)
    elapsed = time.perf_counter() - start
    for result in results:
        if result.score < points[result.assignment]:
            raise RuntimeError(f"ours: {result.student}/{result.assignment} lost points")
    return elapsed, "WITHOUT a sandbox" not in (out / "report.txt").read_text(), profile(results)


def profile(results) -> dict:
    """Where a worker's time went, per notebook: for each phase of :data:`autograder.sandbox.phases.PHASES`,
    the mean and the median of its seconds over the notebooks that went through it, and its share of the
    mean of a notebook's measured total (the phases' sum)."""
    from autograder.sandbox.phases import PHASES

    timed = [result.seconds for result in results if result.seconds]
    totals = [sum(seconds.values()) for seconds in timed]
    mean_total = statistics.fmean(totals) if totals else 0.0
    phases = []
    for name, _, _ in PHASES:
        values = [seconds[name] for seconds in timed if name in seconds]
        if values:
            mean = statistics.fmean(values)
            phases.append({"phase": name, "notebooks": len(values), "mean_seconds": round(mean, 3),
                           "median_seconds": round(statistics.median(values), 3),
                           "share": round(mean * len(values) / len(timed) / mean_total, 3) if mean_total else 0.0})
    return {"notebooks": len(timed), "mean_seconds_per_notebook": round(mean_total, 3), "phases": phases}


def profile_lines(measured: dict) -> list[str]:
    """The profile as a table for the terminal."""
    lines = [(f"where a worker's time goes, per notebook ({measured['notebooks']} notebooks, "
             f"{measured['mean_seconds_per_notebook']:.2f} s measured on average):")]
    lines += [f"  {row['phase']:<28} mean {row['mean_seconds']:6.2f} s  median {row['median_seconds']:6.2f} s  "
              f"{100 * row['share']:5.1f}%" for row in measured["phases"]]
    return lines


@contextlib.contextmanager
def busy_processes(count: int):
    """``count`` processes that each keep a core busy (a loop of Python), for as long as the block runs."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        yield spinners
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


def record(command: list[str], **measured) -> dict:
    """A bench's result as data: ``measured`` with the command, the date, the commit (and whether the package
    had uncommitted changes), the machine and the versions of Python, nbgrader and torch."""
    import nbgrader
    import torch

    from posenc_ref.lab.sweep import machine_description

    commit, dirty = _grader_version()
    return {
        "command": ["python", "-m", "autograder.bench", *command],
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "commit": commit, "uncommitted_changes": dirty,
        "machine": machine_description("cpu"),
        "versions": {"python": sys.version.split()[0], "nbgrader": nbgrader.__version__, "torch": torch.__version__},
        **measured,
    }


def _grader_version() -> tuple[str | None, bool | None]:
    """``(commit, uncommitted changes in autograder/)`` of the checkout, or ``(None, None)`` outside one."""
    from posenc_ref.lab.sweep import git_commit

    return git_commit(Path(__file__).resolve().parent)


def _write(path: str | None, result: dict) -> None:
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {path}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autograder.bench", description=__doc__.splitlines()[0])
    parser.add_argument("--students", type=int, default=40)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--workers", type=int, nargs="+", default=None, help="scaling run (see above)")
    parser.add_argument("--course-students", type=int, default=10_000)
    parser.add_argument("--out", metavar="FILE", help="also write the result as JSON to FILE")
    parser.add_argument("--beside-busy", type=int, default=0, metavar="N",
                        help="run both beside N processes that keep a core busy each (a shared machine)")
    parser.add_argument("assignments", nargs="*", default=list(ASSIGNMENTS))
    arguments = parser.parse_args(argv)
    command = sys.argv[1:] if argv is None else list(argv)
    assignments = tuple(arguments.assignments)
    if arguments.workers:
        return scaling(arguments.students, assignments, arguments.workers, arguments.course_students,
                       out=arguments.out, command=command)
    if arguments.beside_busy < 0:
        parser.error(f"--beside-busy must be 0 or more processes, got {arguments.beside_busy}")
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="autograder-bench-") as work_name, busy_processes(arguments.beside_busy):
        work = Path(work_name)
        course = TemporaryCourse(work / "plain", assignments)
        released = {assignment: course.generate(assignment) for assignment in assignments}
        count = generate_class(work / "class", arguments.students, assignments, released)
        points = {assignment: autograded_points(released[assignment]) for assignment in assignments}
        plain_seconds = plain_nbgrader(course, work / "class", points)
        our_seconds, sandboxed, measured = ours(work / "class", work / "out", arguments.jobs, points)
    plain_rate, our_rate = 60 * count / plain_seconds, 60 * count / our_seconds
    print(f"{count} notebooks ({arguments.students} students x {', '.join(assignments)}), {os.cpu_count()} cores")
    print(f"plain nbgrader autograde, serial: {plain_seconds:.1f} s, {plain_rate:.1f} notebooks/minute")
    print(
        f"python -m autograder grade --jobs {arguments.jobs} ({'sandboxed' if sandboxed else 'NOT sandboxed'}): "
        f"{our_seconds:.1f} s, {our_rate:.1f} notebooks/minute"
    )
    print(f"ratio: {our_rate / plain_rate:.2f}x" + (f", beside {arguments.beside_busy} busy process(es)"
                                                     if arguments.beside_busy else ""))
    print(f"plain nbgrader: {plain_seconds / count:.2f} s per notebook")
    print("\n".join(profile_lines(measured)))
    _write(arguments.out, record(
        command, students=arguments.students, assignments=list(assignments), notebooks=count, jobs=arguments.jobs,
        sandboxed=sandboxed, busy_processes=arguments.beside_busy,
        plain_seconds=round(plain_seconds, 1), ours_seconds=round(our_seconds, 1),
        plain_per_minute=round(plain_rate, 2), ours_per_minute=round(our_rate, 2),
        ratio=round(our_rate / plain_rate, 3), plain_seconds_per_notebook=round(plain_seconds / count, 3),
        profile=measured, load_before=list(load_before), load_after=list(os.getloadavg())))
    return 0


def scaling(students: int, assignments: tuple[str, ...], workers: list[int], course_students: int, *,
            out: str | None = None, command: list[str] | None = None) -> int:
    """Ours with each number of ``workers``; the parallel efficiency; the workers a whole course needs."""
    seconds = {}
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="autograder-bench-") as work_name:
        work = Path(work_name)
        course = TemporaryCourse(work / "plain", assignments)
        released = {assignment: course.generate(assignment) for assignment in assignments}
        count = generate_class(work / "class", students, assignments, released)
        points = {assignment: autograded_points(released[assignment]) for assignment in assignments}
        for jobs in workers:
            seconds[jobs], sandboxed, _ = ours(work / "class", work / f"out-{jobs}", jobs, points)
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
    _write(out, record(
        command or [], students=students, assignments=list(assignments), notebooks=count, sandboxed=sandboxed,
        seconds={str(jobs): round(seconds[jobs], 1) for jobs in workers},
        efficiency={str(jobs): round(seconds[base] * base / (seconds[jobs] * jobs), 3) for jobs in workers},
        seconds_per_notebook=round(per_notebook, 2), course_students=course_students, workers_needed=needed,
        load_before=list(load_before), load_after=list(os.getloadavg())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
