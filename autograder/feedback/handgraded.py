"""Hand grades into the reports and the feedback pages, without running any kernel again.

After an instructor grades the written answers in the formgrader (``python -m autograder formgrader``), the
class's gradebook holds their scores and comments. ``python -m autograder feedback --out DIR`` reads them and
writes again, in DIR:

- ``grades.csv`` and ``items.csv``: each hand-graded item with its manual score, status ``hand-graded`` and the
  instructor's comment as its message (:func:`autograder.gradebook.with_hand_grades`);
- ``report.txt``: the same totals, each submission's items graded by hand and those still waiting, and the
  warnings of the ``grade`` that wrote DIR, kept as they were;
- ``feedback/<student>/<assignment>/<assignment>.html`` of every submission with a hand grade: the feedback
  page (:mod:`autograder.feedback.template`) made again from the autograded notebook (already cleaned) and the class's gradebook, so it shows the manual scores and
  comments, with the grader's notes and Content-Security-Policy as ``grade`` wrote them.

The results come from the records ``grade`` keeps in ``DIR`` (:mod:`autograder.records`); ``grade`` does the
same for every submission that has a hand grade when it runs again.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

from autograder.course import load_config, run_app
from autograder.feedback.outputs import cleaned_again_file
from autograder.feedback.pages import add_notes, file_text
from autograder.feedback.reports import Labels, report_warnings, write_csvs, write_report
from autograder.feedback.template import exporter_config, generate_feedback_config
from autograder.sandbox.launcher import Limits
from autograder.types import NOT_SUBMITTED, Item, Result


def feedback_page(autograded: Path, student: str, assignment: str, db_url: str, notes: list[str]) -> str:
    """nbgrader's feedback page of one autograded notebook, with the scores and comments of the gradebook at
    ``db_url``, and the grader's ``notes`` on top (:func:`autograder.feedback.pages.add_notes`)."""
    from nbgrader.converters import GenerateFeedback
    from nbgrader.coursedir import CourseDirectory

    with tempfile.TemporaryDirectory(prefix="autograder-feedback-") as root_name:
        root = Path(root_name)
        target = root / "autograded" / student / assignment / f"{assignment}.ipynb"
        target.parent.mkdir(parents=True)
        shutil.copyfile(autograded, target)
        cleaned_again_file(target)
        config = load_config(root)
        config.CourseDirectory.db_url = db_url
        for key, value in exporter_config().items():
            config.HTMLExporter[key] = value
        for key, value in generate_feedback_config().items():
            config.GenerateFeedback[key] = value
        course_directory = CourseDirectory(config=config)
        course_directory.assignment_id = assignment
        course_directory.student_id = student
        app = GenerateFeedback(coursedir=course_directory, config=config)
        app.force = True
        run_app(app)
        page = root / "feedback" / student / assignment / f"{assignment}.html"
        return add_notes(page.read_text(encoding="utf-8"), notes)


def has_hand_grade(result: Result) -> bool:
    from autograder.gradebook import HAND_GRADED_STATUS

    return any(item.status == HAND_GRADED_STATUS for item in result.items)


def autograded_notebook(out: Path, result: Result) -> Path:
    return out / "autograded" / result.student / result.assignment / f"{result.assignment}.ipynb"


def write_page(out: Path, result: Result, db_url: str, limits: Limits) -> None:
    """Make ``out/feedback/<student>/<assignment>/<assignment>.html`` again from ``out/autograded/``, in a
    process of its own under the grading stage's ``limits`` (:mod:`autograder.feedback.limited`); the page is
    replaced only once the new one is complete.

    Raises:
        RenderFailed: the page could not be made (the old one stays).
    """
    from autograder.feedback.limited import render_page

    student, assignment = result.student, result.assignment
    page = out / "feedback" / student / assignment / f"{assignment}.html"
    text = render_page(autograded_notebook(out, result), student, assignment, db_url, result.notes, limits)
    page.parent.mkdir(parents=True, exist_ok=True)
    partial = page.with_name(page.name + ".partial")
    partial.write_text(file_text(text), encoding="utf-8")
    os.replace(partial, page)


def with_unsubmitted(results: list[Result]) -> list[Result]:
    """``results`` with a zero row for every student who sent nothing for an assignment that others sent,
    sorted by assignment then student (as ``grade`` writes them)."""
    results = [result for result in results if result.reason != NOT_SUBMITTED]
    students = sorted({result.student for result in results})
    layouts: dict[str, list[Item]] = {}
    for result in results:
        layouts.setdefault(result.assignment, result.items)
    graded = {(result.student, result.assignment) for result in results}
    for assignment, items in layouts.items():
        for student in students:
            if (student, assignment) not in graded:
                zeros = [Item(item.grade_id, 0.0, item.max_score, "not submitted") for item in items]
                results.append(Result(student, assignment, zeros, [], NOT_SUBMITTED))
    return sorted(results, key=lambda result: (result.assignment, result.student))


def item_numbers(assignments: set[str]) -> Labels:
    """Per assignment, the number a student reads for each graded cell (``"4.6"``), from the source notebook."""
    import nbformat

    from autograder import source_notebook
    from autograder.student.progress import item_labels

    return {assignment: item_labels(nbformat.read(source_notebook(assignment), as_version=4).cells)
            for assignment in sorted(assignments)}


def refresh(out: Path) -> list[Result]:
    """``python -m autograder feedback --out DIR``: the hand grades of the class's gradebook into DIR's
    ``grades.csv``, ``items.csv``, ``report.txt`` and feedback pages; returns the results written.

    Raises:
        ValueError: ``out`` is not a folder that ``grade`` wrote, or its gradebook cannot be opened.
    """
    from sqlalchemy.exc import SQLAlchemyError

    from autograder.course_directory import configured_db_url
    from autograder.feedback.escape import report_text
    from autograder.feedback.limited import RenderFailed
    from autograder.grade import configured_limits
    from autograder.gradebook import open_gradebook, submission_times, with_hand_grades
    from autograder.records import Records

    out = Path(out).resolve()
    db_url = configured_db_url(out)
    kept = Records(out).kept()
    if not kept:
        raise ValueError(f"out {str(out)!r} holds no graded submission; run `python -m autograder grade PATH --out DIR` first")
    course_id = load_config(out).CourseDirectory.course_id
    try:
        with open_gradebook(db_url, course_id) as gradebook:
            results = [with_hand_grades(gradebook, result) for result in kept]
            times = submission_times(gradebook, with_unsubmitted(results))
    except SQLAlchemyError as error:
        raise ValueError(f"the gradebook of {out} cannot be opened ({type(error).__name__}: {error})") from error
    limits, not_made = configured_limits(), []
    for result in results:
        if has_hand_grade(result) and autograded_notebook(out, result).is_file():
            try:
                write_page(out, result, db_url, limits)
            except RenderFailed as error:  # that page stays as it was; the others are made
                not_made.append(f"{result.student}/{result.assignment}: {error}; its previous page is kept")
                print(report_text(not_made[-1]), file=sys.stderr, flush=True)
    results = with_unsubmitted(results)
    with tempfile.TemporaryDirectory(prefix=".autograder-reports-", dir=out) as staging_name:
        staging = Path(staging_name)
        write_csvs(results, staging, times)
        labels = item_numbers({result.assignment for result in results})
        write_report(results, [*report_warnings(out / "report.txt"), *not_made], staging, labels)
        for name in ("grades.csv", "items.csv", "report.txt"):
            os.replace(staging / name, out / name)
    return results
