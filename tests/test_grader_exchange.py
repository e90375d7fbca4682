"""nbgrader's whole loop around ``python -m autograder``, as README's "The whole loop: nbgrader's exchange" runs it.

An instructor starts a course directory (``python -m autograder course``) and releases 04_relative to an
exchange folder; a student fetches it, answers (the full solution of tests/planted, the written answer
included) and submits; the instructor collects, grades the collected ``submitted/`` folder with ``python -m
autograder grade``, grades the written answer by hand (nbgrader's Gradebook API, what the formgrader's page
posts), writes the hand grade into the reports and the feedback (``python -m autograder feedback``) and
releases the feedback, which the student fetches. The student's fetched page must show the hand-graded total
and the instructor's comment. Every command is nbgrader's own or ours, run in a fresh process; the student is
this machine's user (nbgrader names a student after the account that runs ``submit``), in a home of its own.
"""

from __future__ import annotations

import csv
import html
import os
import pwd
from pathlib import Path

import nbformat
import pytest
from planted import filled, run_module, sandbox_missing, solutions

pytestmark = pytest.mark.slow

ASSIGNMENT = "04_relative"
WRITTEN = "self_bias_answer"
AUTOGRADED_POINTS = 13.0  # the full solution's automatic points (tests/test_grader_roundtrip.py)
HAND_POINTS = 2.5
COMMENT = "Right idea; say why the bias depends on the distance only."


def _nbgrader(cwd: Path, *arguments: str) -> str:
    completed = run_module("nbgrader", *arguments, cwd=cwd, timeout=300)
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    return completed.stdout + completed.stderr


def _autograder(*arguments: str) -> str:
    completed = run_module("autograder", *arguments, timeout=600)
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    return completed.stdout + completed.stderr


@pytest.fixture(autouse=True)
def _sandbox():
    if reason := sandbox_missing():
        pytest.skip(f"the grader's sandbox cannot run here: {reason}")


def test_release_fetch_submit_collect_grade_hand_grade_and_fetched_feedback(tmp_path, monkeypatch):
    from nbgrader.api import Gradebook

    exchange, course, home = tmp_path / "exchange", tmp_path / "course", tmp_path / "student"
    exchange.mkdir()
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))  # nbgrader reads ~/.jupyter: a home of this test's own
    student = pwd.getpwuid(os.getuid()).pw_name
    on_exchange = f"--Exchange.root={exchange}"

    # The instructor: a course directory, and the assignment released to the exchange.
    _autograder("course", "--out", str(course))
    assert (course / "release" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb").is_file()
    _nbgrader(course, "release_assignment", ASSIGNMENT, on_exchange)

    # The student: fetch, answer, submit.
    _nbgrader(home, "fetch_assignment", ASSIGNMENT, "--course", "posenc", on_exchange)
    fetched = home / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    assert fetched.is_file()
    nbformat.write(filled(ASSIGNMENT, solutions(ASSIGNMENT)), fetched)
    _nbgrader(home, "submit", ASSIGNMENT, "--course", "posenc", on_exchange)

    # The instructor: collect, grade, grade the written answer by hand, feedback, release it.
    _nbgrader(course, "collect", ASSIGNMENT, on_exchange)
    submitted = course / "submitted" / student / ASSIGNMENT
    assert (submitted / f"{ASSIGNMENT}.ipynb").is_file() and (submitted / "timestamp.txt").is_file()
    _autograder("grade", str(course / "submitted"), "--out", str(course))
    assert (course / "feedback" / student / ASSIGNMENT / "timestamp.txt").is_file()
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}", course_id="posenc") as gradebook:
        grade = gradebook.find_grade(WRITTEN, ASSIGNMENT, ASSIGNMENT, student)
        assert (grade.auto_score, grade.needs_manual_grade) == (None, True)
        grade.manual_score, grade.needs_manual_grade = HAND_POINTS, False
        comment = gradebook.find_comment(WRITTEN, ASSIGNMENT, ASSIGNMENT, student)
        comment.manual_comment = COMMENT
        gradebook.db.commit()
    _autograder("feedback", "--out", str(course))
    with open(course / "grades.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [(row["student_id"], float(row["score"])) for row in rows] == [
        (student, AUTOGRADED_POINTS + HAND_POINTS)
    ]
    _nbgrader(course, "release_feedback", ASSIGNMENT, on_exchange)

    # The student fetches the feedback.
    _nbgrader(home, "fetch_feedback", ASSIGNMENT, "--course", "posenc", on_exchange)
    pages = sorted((home / ASSIGNMENT / "feedback").glob(f"*/{ASSIGNMENT}.html"))
    assert len(pages) == 1, pages
    page = html.unescape(pages[0].read_text(encoding="utf-8"))
    assert f"Score: {AUTOGRADED_POINTS + HAND_POINTS:.1f} / 16.0" in page  # the notebook's total
    assert f"Score: {HAND_POINTS:.1f} / 3.0" in page  # the written answer's
    assert COMMENT in page
    assert "Content-Security-Policy" in page
