"""nbgrader's whole loop around ``python -m autograder``, run as the instructors' guide writes it.

The loop is read from book/guide_instructors.md, section "The whole loop: nbgrader's exchange": the commands of
its code block run as written, in order, each in a fresh process. An instructor starts a course directory
(``python -m autograder course``) and releases 04_relative to an exchange folder; a student fetches it and
submits; the instructor collects, grades the collected ``submitted/`` folder with ``python -m autograder
grade``, grades the written answer by hand (nbgrader's Gradebook API plays the guide's formgrader line: it
is what the formgrader's page posts), writes the hand grade into the reports and the feedback (``python -m
autograder feedback``) and releases the feedback, which the student fetches. The student's fetched page must
show the hand-graded total and the instructor's comment.

The student submits twice: the notebook as fetched, then answered (the full solution of tests/planted, the
written answer included), and the instructor collects after each with the course's own ``python -m autograder
collect``, which must take the newest each time, or the grade is that of an empty notebook.

What the test adds to the commands: ``--Exchange.root=FOLDER`` on each ``nbgrader`` command and ``--exchange
FOLDER`` on ``collect`` (an exchange of its own), a folder of its own in place of the repository's root
(``course/`` lands there), the roster the guide has the instructor write (``course/roster.csv``, this one
student), and the student being this machine's user (nbgrader names a student after the account that runs
``submit``) in a home of its own.
"""

from __future__ import annotations

import csv
import html
import os
import pwd
import re
import shlex
from typing import NamedTuple

import nbformat
import pytest
from planted import ROOT, filled, run_module, sandbox_missing, solutions

GUIDE = ROOT / "book" / "guide_instructors.md"
SECTION = "## The whole loop: nbgrader's exchange"
ASSIGNMENT = "04_relative"
WRITTEN = "self_bias_answer"
AUTOGRADED_POINTS = 13.0  # the full solution's automatic points (tests/test_grader_roundtrip.py)
HAND_POINTS = 2.5
COMMENT = "Right idea; say why the bias depends on the distance only."


class Step(NamedTuple):
    """One command of the guide's loop: who runs it, the folder it runs in (relative to the instructor's
    repository root, or ``~`` for the student's home), the module (``autograder`` or ``nbgrader``) and its
    arguments."""

    who: str
    folder: str
    module: str
    arguments: tuple[str, ...]


def guide_loop(text: str) -> list[Step]:
    """The steps of the guide's exchange loop (the code block of its section that starts with the instructor), in
    order.

    A comment line ``# the instructor ...`` or ``# each student ...`` says who runs the lines after it; the
    instructor runs them from the repository's root (``(cd FOLDER && ...)`` from FOLDER), a student in their
    home. A trailing ``# ...`` is a comment.
    """
    section = text.split(f"\n{SECTION}", 1)[1].split("\n## ", 1)[0]
    [block] = [block.split("\n```", 1)[0] for block in section.split("```bash\n")[1:]
               if block.startswith("# the instructor")]
    steps, who = [], None
    for line in block.splitlines():
        if line.startswith("#"):
            who = ("instructor" if line.startswith("# the instructor") else
                   "student" if line.startswith("# each student") else who)
            continue
        command = line.split(" #", 1)[0].strip()
        folder = "." if who == "instructor" else "~"
        if inner := re.fullmatch(r"\(cd (\S+) && (.+)\)", command):
            folder, command = inner.group(1), inner.group(2)
        words = shlex.split(command)
        module = words[2] if words[:2] == ["python", "-m"] else words[0]
        arguments = tuple(words[3:] if words[:2] == ["python", "-m"] else words[1:])
        assert who is not None and module in ("autograder", "nbgrader"), f"a line of the guide's loop: {line!r}"
        steps.append(Step(who, folder, module, arguments))
    return steps


def test_the_guides_loop_is_the_one_this_module_runs():
    steps = guide_loop(GUIDE.read_text(encoding="utf-8"))
    assert [(step.who, step.module, step.arguments[0]) for step in steps] == [
        ("instructor", "autograder", "course"),
        ("instructor", "nbgrader", "release_assignment"),
        ("student", "nbgrader", "fetch_assignment"),
        ("student", "nbgrader", "submit"),
        ("instructor", "autograder", "collect"),
        ("instructor", "autograder", "grade"),
        ("instructor", "autograder", "formgrader"),
        ("instructor", "autograder", "feedback"),
        ("instructor", "nbgrader", "release_feedback"),
        ("student", "nbgrader", "fetch_feedback"),
    ]
    assert all(step.folder in (".", "~", "course") for step in steps), steps
    # The course's collect checks each submission's owner against the roster the guide has the instructor write.
    collect = next(step for step in steps if step.arguments[0] == "collect")
    assert collect.arguments[collect.arguments.index("--roster") + 1] == "course/roster.csv", collect
    assert collect.arguments[collect.arguments.index("--out") + 1] == "course/submitted", collect


def test_the_guide_names_nbgraders_default_exchange():
    from nbgrader.exchange.default.exchange import Exchange

    section = GUIDE.read_text(encoding="utf-8").split(f"\n{SECTION}", 1)[1].split("\n## ", 1)[0]
    assert f"by default `{Exchange.root.default_value}`" in " ".join(section.split())


@pytest.mark.slow
def test_release_fetch_submit_collect_grade_hand_grade_and_fetched_feedback(tmp_path, monkeypatch):
    if reason := sandbox_missing():
        pytest.skip(f"the grader's sandbox cannot run here: {reason}")
    from nbgrader.api import Gradebook
    from nbgrader.utils import parse_utc

    exchange, root, home = tmp_path / "exchange", tmp_path / "instructor", tmp_path / "student"
    for folder in (exchange, root, home):
        folder.mkdir()
    exchange.chmod(0o1777)  # the guide's one-time root step: writable by every account, and sticky
    (exchange / "posenc").mkdir(mode=0o755)  # and the course's folder, the instructor's from the start
    assert "sudo chmod 1777 /usr/local/share/nbgrader/exchange" in GUIDE.read_text(encoding="utf-8")
    assert 'sudo install -d -o "$USER" -m 755 /usr/local/share/nbgrader/exchange/posenc' in GUIDE.read_text(encoding="utf-8")
    monkeypatch.setenv("HOME", str(home))  # nbgrader reads ~/.jupyter: a home of this test's own
    student = pwd.getpwuid(os.getuid()).pw_name
    course = root / "course"
    fetched = home / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    submitted = course / "submitted" / student / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    steps = {step.arguments[0]: step for step in guide_loop(GUIDE.read_text(encoding="utf-8"))}

    def run(step: Step) -> None:
        cwd = home if step.folder == "~" else root / step.folder
        arguments = list(step.arguments)
        if step.module == "nbgrader":
            arguments.append(f"--Exchange.root={exchange}")
        elif step.arguments[0] == "collect":
            arguments.append(f"--exchange={exchange}")
        completed = run_module(step.module, *arguments, cwd=cwd, timeout=600)
        assert completed.returncode == 0, (step, completed.stdout[-3000:] + completed.stderr[-3000:])

    # The instructor: a course directory, and the assignment released to the exchange.
    run(steps["course"])
    assert (course / "release" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb").is_file()
    (course / "roster.csv").write_text(f"student_id,account\n{student},{student}\n", encoding="utf-8")
    run(steps["release_assignment"])

    # The student fetches and submits the notebook as fetched; the instructor collects it.
    run(steps["fetch_assignment"])
    assert fetched.is_file()
    as_fetched = fetched.read_bytes()
    run(steps["submit"])
    run(steps["collect"])
    assert submitted.read_bytes() == as_fetched and (submitted.parent / "timestamp.txt").is_file()

    # The student answers and submits again; the guide's collect takes the newer one, and only the notebook
    # and nbgrader's two text files.
    nbformat.write(filled(ASSIGNMENT, solutions(ASSIGNMENT)), fetched)
    answered = fetched.read_bytes()
    assert answered != as_fetched
    run(steps["submit"])
    run(steps["collect"])
    assert submitted.read_bytes() == answered
    assert sorted(path.name for path in submitted.parent.iterdir()) == [
        f"{ASSIGNMENT}.ipynb", "submission_secret.txt", "timestamp.txt"
    ]

    # The instructor grades, grades the written answer by hand (the formgrader's page posts what the
    # Gradebook API sets here), writes the feedback and releases it.
    run(steps["grade"])
    assert (course / "feedback" / student / ASSIGNMENT / "timestamp.txt").is_file()
    assert steps["formgrader"].arguments[1:] == ("--out", "course/"), steps["formgrader"]
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}", course_id="posenc") as gradebook:
        grade = gradebook.find_grade(WRITTEN, ASSIGNMENT, ASSIGNMENT, student)
        assert (grade.auto_score, grade.needs_manual_grade) == (None, True)
        grade.manual_score, grade.needs_manual_grade = HAND_POINTS, False
        comment = gradebook.find_comment(WRITTEN, ASSIGNMENT, ASSIGNMENT, student)
        comment.manual_comment = COMMENT
        gradebook.db.commit()
    run(steps["feedback"])
    with open(course / "grades.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [(row["student_id"], float(row["score"])) for row in rows] == [
        (student, AUTOGRADED_POINTS + HAND_POINTS)
    ]
    # The time of the submission graded, as nbgrader export gives it: the collected timestamp.txt's.
    assert parse_utc(rows[0]["timestamp"]) == parse_utc((submitted.parent / "timestamp.txt").read_text())
    run(steps["release_feedback"])

    # The student fetches the feedback.
    run(steps["fetch_feedback"])
    pages = sorted((home / ASSIGNMENT / "feedback").glob(f"*/{ASSIGNMENT}.html"))
    assert len(pages) == 1, pages
    page = html.unescape(pages[0].read_text(encoding="utf-8"))
    assert f"Score: {AUTOGRADED_POINTS + HAND_POINTS:.1f} / 16.0" in page  # the notebook's total
    assert f"Score: {HAND_POINTS:.1f} / 3.0" in page  # the written answer's
    assert COMMENT in page
    assert "Content-Security-Policy" in page
