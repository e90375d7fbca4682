"""The formgrader's buttons that would bypass the course's grader, clicked in Chromium after the exchange loop's
``grade`` (book/guide_instructors.md, "The whole loop" and "Grading the written answers: the formgrader").

A course directory is made with ``python -m autograder course --out course/``; two students' notebooks lie in
``course/submitted/<student>/04_relative/`` with the ``timestamp.txt`` and ``submission_secret.txt`` that
``python -m autograder collect`` writes beside them, and ``python -m autograder grade course/submitted --out
course/`` grades them. The formgrader (``python -m autograder formgrader --out course/ --no-browser``, run as
the guide writes it) must then list both submissions as "needs manual grading", never "needs autograding"
(nbgrader counts a submission as autograded only when the gradebook holds the time of its ``timestamp.txt``).

Each button of Manage Submissions (Autograde, Generate Feedback, Release Feedback) and of Manage Assignments
(Generate Feedback, Release Feedback) is clicked, and Collect's call is made from the page as its button makes it
(the button is shown only for an assignment released to an exchange): each is refused, the formgrader's error
dialog shows the course's command that does the job, and nothing changed in the course directory (gradebook,
autograded notebooks, feedback pages, submissions) or in nbgrader's default exchange.
"""

from __future__ import annotations

import hashlib
import sqlite3
import tempfile
from pathlib import Path

import pytest
from planted import run_module, sandbox_missing, write_full_and_mistakes
from test_grader_formgrader import CHROMIUM, CHROMIUM_ARGS, IN_CI, Formgrader

from autograder.intake.exchange import record_collected

pytestmark = pytest.mark.slow

ASSIGNMENT = "04_relative"
STUDENTS = ("full", "mistakes")
TIMESTAMP = "2026-11-27 08:40:00.123456 UTC"  # as nbgrader submit writes it, and collect copies it
SECRET = "8e2c54d6d27c4b0b9f0d7d3fbd0a1c5e"
EXCHANGE = Path("/usr/local/share/nbgrader/exchange")  # nbgrader's default, which the course's config keeps


@pytest.fixture(autouse=True)
def _sandbox():
    if reason := sandbox_missing():
        pytest.skip(f"the grader's sandbox cannot run here: {reason}")


@pytest.fixture(scope="module")
def course(tmp_path_factory) -> Path:
    """``course/``, graded as the exchange loop grades it."""
    course = tmp_path_factory.mktemp("buttons") / "course"
    completed = run_module("autograder", "course", "--out", str(course), timeout=300)
    assert completed.returncode == 0, completed.stderr[-3000:]
    write_full_and_mistakes(course / "submitted", ASSIGNMENT, STUDENTS)
    for student in STUDENTS:  # as `python -m autograder collect` writes them, its record of the timestamps too
        folder = course / "submitted" / student / ASSIGNMENT
        (folder / "timestamp.txt").write_text(TIMESTAMP)
        (folder / "submission_secret.txt").write_text(SECRET)
        record_collected(course / "submitted", ASSIGNMENT, student, TIMESTAMP.encode())
    completed = run_module(
        "autograder", "grade", str(course / "submitted"), "--out", str(course), "--jobs", "2", timeout=600
    )
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    return course


def _files(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` (nbgrader's and JupyterLab's logs and settings aside) and its SHA-256."""
    if not folder.is_dir():
        return {}
    return {
        str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*"))
        if path.is_file() and not path.name.startswith(".") and ".ipynb_checkpoints" not in path.parts
    }


def _gradebook(course: Path) -> list[tuple]:
    """Every grade and every submission's time and score, read with SQLite (not through the code under test)."""
    with sqlite3.connect(course / "gradebook.db") as connection:
        grades = connection.execute(
            "SELECT grade.id, grade.auto_score, grade.manual_score, grade.needs_manual_grade FROM grade "
            "ORDER BY grade.id"
        ).fetchall()
        submissions = connection.execute(
            "SELECT submitted_assignment.id, submitted_assignment.timestamp FROM submitted_assignment ORDER BY 1"
        ).fetchall()
    return [*grades, *submissions]


def test_grade_leaves_the_exchange_loops_submissions_autograded_in_the_gradebook(course):
    """What the formgrader compares: the submission's time in the gradebook and its ``timestamp.txt``."""
    with sqlite3.connect(course / "gradebook.db") as connection:
        times = dict(
            connection.execute(
                "SELECT student.id, submitted_assignment.timestamp FROM submitted_assignment "
                "JOIN student ON student.id = submitted_assignment.student_id"
            ).fetchall()
        )
    assert times == dict.fromkeys(STUDENTS, "2026-11-27 08:40:00.123456"), times


# The button (or call), the request it makes, and a line the dialog must show.
SUBMISSION_BUTTONS = [
    ("td.autograde a", f"/formgrader/api/submission/{ASSIGNMENT}/full/autograde",
     "python -m autograder grade CLASS --out {course}"),
    ("td.generate-feedback a", f"/formgrader/api/assignment/{ASSIGNMENT}/full/generate_feedback",
     "python -m autograder feedback --out {course}"),
    ("td.release-feedback a", f"/formgrader/api/assignment/{ASSIGNMENT}/full/release_feedback",
     f"(cd {{course}} && nbgrader release_feedback {ASSIGNMENT})"),
]  # fmt: skip
ASSIGNMENT_BUTTONS = [
    ("td.generate-feedback a", f"/formgrader/api/assignment/{ASSIGNMENT}/generate_feedback",
     "python -m autograder feedback --out {course}"),
    ("td.release-feedback a", f"/formgrader/api/assignment/{ASSIGNMENT}/release_feedback",
     f"(cd {{course}} && nbgrader release_feedback {ASSIGNMENT})"),
    ("td.assign a", f"/formgrader/api/assignment/{ASSIGNMENT}/assign",  # Generate (the student version)
     "python -m autograder course --out {course}"),
]  # fmt: skip
COLLECT = f"python -m autograder collect {ASSIGNMENT} --roster ROSTER.csv --out {{course}}/submitted"


@pytest.mark.skipif(
    not CHROMIUM.exists() and not IN_CI,
    reason=f"{CHROMIUM} is missing (`make chromium` installs it); in CI this test fails instead",
)
def test_the_formgraders_autograde_feedback_and_collect_buttons_are_refused_and_change_nothing(course, tmp_path):
    from playwright.sync_api import sync_playwright

    before = {name: _files(course / name) for name in ("autograded", "feedback", "submitted", "release", "source")}
    gradebook_before = _gradebook(course)
    exchange_before = _files(EXCHANGE)
    home = tmp_path / "home"
    home.mkdir()
    server = Formgrader(course, home, tmp_path / "formgrader.log")
    dialogs: list[str] = []
    try:
        url = server.url()
        base = url.split("/formgrader", 1)[0]
        with tempfile.TemporaryDirectory(prefix="formgrader-buttons-") as profile, sync_playwright() as playwright:
            context = playwright.chromium.launch_persistent_context(
                profile, executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True,
                viewport={"width": 1280, "height": 900}, service_workers="block",
            )  # fmt: skip
            context.route(  # nbgrader's pages name MathJax on a CDN: refused, like an offline machine would
                "**/*", lambda route: route.continue_() if route.request.url.startswith(base + "/") else route.abort()
            )
            page = context.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            page.goto(url)
            page.wait_for_url("**/formgrader/manage_assignments")

            def click_and_read(button, path: str) -> str:
                """Click ``button``; the answer to its request, and the text of the error dialog it opens."""
                with page.expect_response(lambda r: r.url == base + path and r.request.method == "POST") as answer:
                    button.click()
                assert answer.value.status == 200, (path, answer.value.status)
                assert answer.value.json()["success"] is False, answer.value.text()[:1000]
                dialog = page.locator("#error-modal")
                dialog.wait_for(state="visible")
                text = dialog.inner_text()
                dialog.locator("button.btn-primary").click()
                dialog.wait_for(state="detached")
                dialogs.append(text)
                return text

            page.goto(f"{base}/formgrader/manage_submissions/{ASSIGNMENT}")
            rows = {
                student: page.locator("tr", has=page.locator("td.student-id", has_text=student)) for student in STUDENTS
            }
            for row in rows.values():
                row.locator("td.status span").wait_for()
            assert [rows[student].locator("td.status").inner_text().strip() for student in STUDENTS] == [
                "needs manual grading"
            ] * 2
            assert page.get_by_text("needs autograding").count() == 0
            for selector, path, command in SUBMISSION_BUTTONS:
                text = click_and_read(rows["full"].locator(selector), path)
                assert "Not run" in text and command.format(course=course) in text, text
                rows["full"].locator("td.status span").wait_for()  # the row is drawn again after the answer
            assert rows["full"].locator("td.status").inner_text().strip() == "needs manual grading"

            page.goto(f"{base}/formgrader/manage_assignments")
            row = page.locator("tr", has=page.locator("td.name", has_text=ASSIGNMENT))
            row.locator("td.generate-feedback a").wait_for()
            for selector, path, command in ASSIGNMENT_BUTTONS:
                text = click_and_read(row.locator(selector), path)
                assert "Not run" in text and command.format(course=course) in text, text
            # Collect's button shows only for an assignment released to an exchange: its call, as the button makes it.
            answer = page.evaluate(
                "(path) => new Promise((done) => $.post(base_url + path).done((text) => done(JSON.parse(text))))",
                f"/formgrader/api/assignment/{ASSIGNMENT}/collect",
            )
            assert answer["success"] is False and COLLECT.format(course=course) in answer["error"], answer
            context.close()
        assert not [error for error in errors if "MathJax" not in error], errors
    finally:
        server.stop()
    assert len(dialogs) == len(SUBMISSION_BUTTONS) + len(ASSIGNMENT_BUTTONS)
    assert {name: _files(course / name) for name in before} == before  # nothing autograded, no page written
    assert _gradebook(course) == gradebook_before
    assert _files(EXCHANGE) == exchange_before  # no feedback released, nothing collected
    log = (tmp_path / "formgrader.log").read_text(encoding="utf-8")
    assert log.count("autograder: refused the formgrader's") == len(dialogs) + 1, log[-3000:]
