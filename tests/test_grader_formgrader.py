"""The instructor's path after ``grade``, as the instructors' guide (book/guide_instructors.md), section "Grading
the written answers: the formgrader", runs it.

A class of three (the full solution, the planted mistakes, and a student whose code prints a script and whose
written answer holds active HTML) is graded with ``python -m autograder grade``; ``python -m autograder
formgrader --out DIR --no-browser`` is started exactly as the guide writes it (from the repository's root, the
virtual environment not active, so ``alembic`` is not on ``PATH``), and Debian's Chromium, driven by
Playwright with every request that is not to the formgrader aborted, goes through nbgrader's pages: the
assignments, the submissions waiting for a manual grade, Gradebook -> 04_relative -> a submission, where a
score and a comment are typed into the written answer's fields. The test then reads the gradebook (nbgrader's
API), runs ``python -m autograder feedback --out DIR`` and reads ``grades.csv``, ``items.csv`` and the feedback
page; grading again keeps the hand grade. No file appears in the repository. The browser test skips only
where /usr/bin/chromium is missing outside CI; in CI it fails instead.

The same browser checks that the server is locked down: every response carries a Content-Security-Policy whose
script-src allows neither inline script nor eval, terminals are off, and an autograded notebook planted with
the outputs the grader removes (an image size that nbconvert writes unquoted as an ``onerror`` handler, a
``<script>``, an ``<img onerror>``) runs none of them on the grading page, which still works: its own inline
scripts run and the only scripts the policy blocks are the planted ones.

The other tests need no browser: grading again and ``--regrade`` keep a hand grade set through nbgrader's
API, and the autograded notebooks that the formgrader shows hold no active content.
"""

from __future__ import annotations

import contextlib
import csv
import html
import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from pathlib import Path

import nbformat
import pytest
from planted import (
    ROOT,
    filled,
    run_module,
    sandbox_missing,
    solutions,
    write_full_and_mistakes,
    write_submission,
)

pytestmark = pytest.mark.slow

GUIDE = ROOT / "book" / "guide_instructors.md"
SECTION = "## Grading the written answers: the formgrader"
# The guide's commands, which this module runs (grade with --jobs 2 besides; the paths are the test's own).
GUIDE_COMMANDS = [
    ".venv/bin/python -m autograder grade submissions/ --out graded/",
    ".venv/bin/python -m autograder formgrader --out graded/ --no-browser",
    ".venv/bin/python -m autograder feedback --out graded/",
]

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]
IN_CI = os.environ.get("CI", "").lower() not in ("", "0", "false", "no")
ASSIGNMENT = "04_relative"
WRITTEN = "self_bias_answer"  # 3 points, graded by hand
AUTOGRADED_POINTS = {"full": 13.0, "mistakes": 7.0}  # tests/test_grader_roundtrip.py
HAND_POINTS = 2.0
COMMENT = "Correct: the bias depends on the distance only. State what the softmax then sees."
HOSTILE_OUTPUT = (
    '\nfrom IPython.display import HTML, display\n'
    'display(HTML("<script>window.hostileOutput = 1</script><img src=x onerror=\\"window.hostileOutput = 2\\">'
    '<b>bold output</b>"))'
)
# Outputs that the grader's rebuild removes (autograder.feedback.outputs), written into an autograded notebook
# after grading, as if they had slipped through: nbconvert writes the width unquoted, so it becomes a handler.
BROKEN_PNG = "AAAA"  # base64 of no image: the browser fires onerror
PLANTED_OUTPUTS = [
    {"output_type": "display_data", "data": {"image/png": BROKEN_PNG, "text/plain": "planted image"},
     "metadata": {"image/png": {"width": "1 onerror=window.plantedWidth=1;document.title='planted'"}}},
    {"output_type": "display_data", "metadata": {},
     "data": {"text/html": '<script>window.plantedScript = 1</script><img src=x onerror="window.plantedImg = 1">'
                           "<b>planted html</b>"}},
]  # fmt: skip
PLANTED_GLOBALS = "() => [window.plantedWidth, window.plantedScript, window.plantedImg, document.title]"
HOSTILE_ANSWER = (
    '<img src=x onerror="window.hostileAnswer = 1"><script>window.hostileAnswer = 2</script> '
    "The bias depends on the distance only."
)


def _class(root: Path) -> Path:
    """``full``, ``mistakes`` and ``hostile`` (the full solution, a script in an output and in its answer)."""
    write_full_and_mistakes(root, ASSIGNMENT)
    answers = solutions(ASSIGNMENT)
    answers["bias_answer"] += HOSTILE_OUTPUT
    answers[WRITTEN] = HOSTILE_ANSWER
    write_submission(root, "hostile", ASSIGNMENT, filled(ASSIGNMENT, answers))
    return root


def test_the_guide_writes_the_commands_this_module_runs():
    section = GUIDE.read_text(encoding="utf-8").split(f"\n{SECTION}", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```bash\n(.*?)\n```", section, flags=re.DOTALL)
    assert [line for block in blocks for line in block.splitlines()] == GUIDE_COMMANDS


def _grade(submissions: Path, out: Path, *options: str) -> None:
    completed = run_module("autograder", "grade", str(submissions), "--out", str(out), *options, timeout=600)
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]


def _feedback(out: Path) -> None:
    completed = run_module("autograder", "feedback", "--out", str(out), timeout=300)
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]


def _scores(out: Path) -> dict[str, float]:
    with open(out / "grades.csv", newline="") as handle:
        return {row["student_id"]: float(row["score"]) for row in csv.DictReader(handle)}


def _item(out: Path, student: str, item: str) -> dict[str, str]:
    with open(out / "items.csv", newline="") as handle:
        rows = [row for row in csv.DictReader(handle) if (row["student_id"], row["item"]) == (student, item)]
    assert len(rows) == 1, rows
    return rows[0]


def _page(out: Path, student: str) -> str:
    return html.unescape((out / "feedback" / student / ASSIGNMENT / f"{ASSIGNMENT}.html").read_text("utf-8"))


def _hand_grade(out: Path, student: str) -> tuple[float | None, bool, str | None]:
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{out / 'gradebook.db'}", course_id="posenc") as gradebook:
        grade = gradebook.find_grade(WRITTEN, ASSIGNMENT, ASSIGNMENT, student)
        comment = gradebook.find_comment(WRITTEN, ASSIGNMENT, ASSIGNMENT, student)
        return grade.manual_score, grade.needs_manual_grade, comment.manual_comment


def _check_hand_grade_everywhere(out: Path) -> None:
    """The hand grade of ``full`` in the gradebook, grades.csv, items.csv and its feedback page."""
    assert _hand_grade(out, "full") == (HAND_POINTS, False, COMMENT)
    assert _hand_grade(out, "mistakes")[:2] == (None, True)
    scores = _scores(out)
    assert scores["full"] == AUTOGRADED_POINTS["full"] + HAND_POINTS
    assert scores["mistakes"] == AUTOGRADED_POINTS["mistakes"]
    assert _item(out, "full", WRITTEN) == {
        "student_id": "full", "assignment": ASSIGNMENT, "item": WRITTEN, "score": str(HAND_POINTS),
        "max_score": "3.0", "status": "hand-graded", "message": COMMENT,
    }  # fmt: skip
    assert _item(out, "mistakes", WRITTEN)["status"] == "manual"
    page = _page(out, "full")
    assert f"Score: {AUTOGRADED_POINTS['full'] + HAND_POINTS:.1f} / 16.0" in page
    assert f"Score: {HAND_POINTS:.1f} / 3.0" in page and COMMENT in page
    assert "Content-Security-Policy" in page
    report = (out / "report.txt").read_text(encoding="utf-8").splitlines()
    full = report.index(f"full/{ASSIGNMENT}: {AUTOGRADED_POINTS['full'] + HAND_POINTS:g} / 16")
    assert report[full + 1] == f"  graded by hand: 4.6 ({HAND_POINTS:g} / 3)"
    mistakes = report.index(f"mistakes/{ASSIGNMENT}: {AUTOGRADED_POINTS['mistakes']:g} / 16")
    assert report[mistakes + 1] == "  waiting for a hand grade: 4.6 (3 points, counted 0 until graded)"
    waiting = [line for line in report if line.startswith(f"- {ASSIGNMENT} 4.6 waits for a hand grade in ")]
    assert len(waiting) == 1, report
    assert "mistakes" in waiting[0].rsplit(": ", 1)[1].split(", ")
    assert "full" not in waiting[0].rsplit(": ", 1)[1].split(", ")


def _new_files_in_repository() -> set[str]:
    """Untracked and ignored entries under autograder/ and notebooks/ (compiled modules aside)."""
    completed = subprocess.run(
        ["git", "status", "--porcelain", "--ignored", "--untracked-files=all", "--", "autograder", "notebooks"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return {
        line for line in completed.stdout.splitlines()
        if line[:2] in ("??", "!!") and "__pycache__" not in line
    }  # fmt: skip


@pytest.fixture(autouse=True)
def _sandbox():
    if reason := sandbox_missing():
        pytest.skip(f"the grader's sandbox cannot run here: {reason}")


# ---------------------------------------------------------------------------------------------------------
# Without a browser
# ---------------------------------------------------------------------------------------------------------


def test_grading_again_and_regrading_keep_a_hand_grade_in_every_output(tmp_path):
    from nbgrader.api import Gradebook

    submissions, out = tmp_path / "class", tmp_path / "graded"
    write_full_and_mistakes(submissions, ASSIGNMENT)
    (submissions / "notes.ipynb").write_text("{}")  # not a submission: grade warns, and feedback keeps the warning
    stray = "- notes.ipynb: not graded: a submission must be <student>/<assignment>/<notebook>.ipynb"
    _grade(submissions, out, "--jobs", "2")
    assert _item(out, "full", WRITTEN)["status"] == "manual"
    graded_report = (out / "report.txt").read_text(encoding="utf-8").splitlines()
    assert graded_report[:2] == ["Warnings:", stray], graded_report[:5]
    assert f"- {ASSIGNMENT} 4.6 waits for a hand grade in 2 of 2 submissions: full, mistakes" in graded_report
    with Gradebook(f"sqlite:///{out / 'gradebook.db'}", course_id="posenc") as gradebook:
        grade = gradebook.find_grade(WRITTEN, ASSIGNMENT, ASSIGNMENT, "full")
        grade.manual_score, grade.needs_manual_grade = HAND_POINTS, False
        gradebook.find_comment(WRITTEN, ASSIGNMENT, ASSIGNMENT, "full").manual_comment = COMMENT
        gradebook.db.commit()
    _feedback(out)
    _check_hand_grade_everywhere(out)
    assert (out / "report.txt").read_text(encoding="utf-8").splitlines()[:2] == ["Warnings:", stray]
    _grade(submissions, out, "--jobs", "2")  # the results are reused: nothing changed
    _check_hand_grade_everywhere(out)
    _grade(submissions, out, "--jobs", "2", "--regrade")  # every notebook runs again
    _check_hand_grade_everywhere(out)


def test_a_hand_grade_stays_with_the_answer_it_was_given_to(tmp_path):
    from nbgrader.api import Gradebook

    submissions, out = tmp_path / "class", tmp_path / "graded"
    write_full_and_mistakes(submissions, ASSIGNMENT)
    _grade(submissions, out, "--jobs", "2")
    with Gradebook(f"sqlite:///{out / 'gradebook.db'}", course_id="posenc") as gradebook:
        grade = gradebook.find_grade(WRITTEN, ASSIGNMENT, ASSIGNMENT, "full")
        grade.manual_score, grade.needs_manual_grade = HAND_POINTS, False
        gradebook.find_comment(WRITTEN, ASSIGNMENT, ASSIGNMENT, "full").manual_comment = COMMENT
        gradebook.db.commit()
    answers = solutions(ASSIGNMENT)
    answers["bias_answer"] += "\n# checked again"  # another cell changed: the written answer's grade stays
    write_submission(submissions, "full", ASSIGNMENT, filled(ASSIGNMENT, answers))
    _grade(submissions, out, "--jobs", "2")
    assert _hand_grade(out, "full") == (HAND_POINTS, False, COMMENT)
    assert _scores(out)["full"] == AUTOGRADED_POINTS["full"] + HAND_POINTS
    notebook = submissions / "full" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    notebook.write_text("{ this is not a notebook")  # nothing to grade: the hand grade does not carry over
    _grade(submissions, out, "--jobs", "2")
    assert _hand_grade(out, "full")[::2] == (None, COMMENT) and _scores(out)["full"] == 0.0
    write_submission(submissions, "full", ASSIGNMENT, filled(ASSIGNMENT, answers))  # the graded answer again
    _grade(submissions, out, "--jobs", "2")
    assert _hand_grade(out, "full") == (None, True, COMMENT)  # it waits: the instructor grades it again
    with Gradebook(f"sqlite:///{out / 'gradebook.db'}", course_id="posenc") as gradebook:
        grade = gradebook.find_grade(WRITTEN, ASSIGNMENT, ASSIGNMENT, "full")
        grade.manual_score, grade.needs_manual_grade = HAND_POINTS, False
        gradebook.db.commit()
    answers[WRITTEN] = "YOUR ANSWER HERE"  # the answer the grade was given to is gone
    write_submission(submissions, "full", ASSIGNMENT, filled(ASSIGNMENT, answers))
    _grade(submissions, out, "--jobs", "2")
    assert _hand_grade(out, "full")[::2] == (None, COMMENT)  # the comment stays, the score is gone
    assert _scores(out)["full"] == AUTOGRADED_POINTS["full"]  # the blank answer gets the grader's 0
    assert _item(out, "full", WRITTEN)["status"] != "hand-graded"
    report = (out / "report.txt").read_text(encoding="utf-8")
    assert (f"- full/{ASSIGNMENT}: the answer of {WRITTEN} ({HAND_POINTS:g}) changed since its hand grade, which "
            "was given to the earlier answer and is removed: it waits for a new one") in report
    answers[WRITTEN] = "The bias depends on the distance only, now in other words."  # a new written answer
    write_submission(submissions, "full", ASSIGNMENT, filled(ASSIGNMENT, answers))
    _grade(submissions, out, "--jobs", "2")
    assert _hand_grade(out, "full") == (None, True, COMMENT)  # waits for the instructor
    assert _item(out, "full", WRITTEN)["status"] == "manual"
    shutil.rmtree(submissions / "mistakes")  # taken out of the class: feedback does not bring it back
    _grade(submissions, out, "--jobs", "2")
    graded_scores = _scores(out)
    _feedback(out)
    assert _scores(out) == graded_scores and set(graded_scores) == {"full"}


def test_the_feedback_command_names_a_folder_that_grade_did_not_write(tmp_path):
    completed = run_module("autograder", "feedback", "--out", str(tmp_path), timeout=120)
    assert completed.returncode == 2
    assert f"out '{tmp_path}' holds no nbgrader_config.py" in completed.stderr


def test_the_formgrader_command_names_a_folder_that_grade_did_not_write(tmp_path):
    completed = run_module("autograder", "formgrader", "--out", str(tmp_path), "--no-browser", timeout=120)
    assert completed.returncode == 2
    assert f"out '{tmp_path}' holds no nbgrader_config.py" in completed.stderr


# ---------------------------------------------------------------------------------------------------------
# In the browser
# ---------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def graded_class(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("formgrader")
    _grade(_class(root / "class"), root / "graded", "--jobs", "2")
    return root / "graded"


def test_the_autograded_notebooks_the_formgrader_shows_hold_no_active_content(graded_class):
    notebook = nbformat.read(graded_class / "autograded" / "hostile" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb", 4)
    shown = [cell.source for cell in notebook.cells if cell.cell_type == "markdown"]  # code is shown as text
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            shown += [str(value) for value in output.get("data", {}).values()]
    text = "\n".join(shown)
    assert "bold output" in text and "The bias depends on the distance only." in text  # cleaned, not removed
    assert "<script" not in text and "onerror" not in text


def _guide_environment(home: Path) -> dict[str, str]:
    """The instructor's shell: the virtual environment not active (its bin is not on PATH), no token set."""
    environment = {key: value for key, value in os.environ.items() if key not in ("VIRTUAL_ENV", "JUPYTER_TOKEN")}
    venv_bin = os.path.abspath(os.path.dirname(sys.executable))
    environment["PATH"] = os.pathsep.join(
        folder for folder in environment.get("PATH", "").split(os.pathsep) if os.path.abspath(folder) != venv_bin
    )
    environment["HOME"] = str(home)  # JupyterLab's settings and runtime files go to this test's home
    environment["PYTHONUNBUFFERED"] = "1"
    return environment


class Formgrader:
    """``.venv/bin/python -m autograder formgrader --out DIR --no-browser``, run from the repository's root."""

    def __init__(self, out: Path, home: Path, log: Path) -> None:
        self.log = open(log, "w")  # noqa: SIM115 (closed in stop)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "autograder", "formgrader", "--out", str(out), "--no-browser"],
            cwd=ROOT, env=_guide_environment(home), stdout=subprocess.PIPE, stderr=self.log, text=True,
            start_new_session=True,
        )  # fmt: skip
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.process.stdout:
            self.lines.put(line)

    def url(self, timeout: float = 180) -> str:
        while True:
            try:
                line = self.lines.get(timeout=timeout)
            except queue.Empty:
                pytest.fail(f"the formgrader printed no address in {timeout} s:\n{Path(self.log.name).read_text()[-3000:]}")
            if "/formgrader?token=" in line:
                return line.split(": ", 1)[1].strip()

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self.log.close()


def _plant(out: Path) -> tuple[Path, str]:
    """The hostile student's autograded notebook with :data:`PLANTED_OUTPUTS` added; its path and former text."""
    path = out / "autograded" / "hostile" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    original = path.read_text(encoding="utf-8")
    notebook = nbformat.reads(original, as_version=4)
    code = next(cell for cell in notebook.cells if cell.cell_type == "code")
    code.outputs = [*code.outputs, *(nbformat.from_dict(output) for output in PLANTED_OUTPUTS)]
    path.write_text(nbformat.writes(notebook, version=4), encoding="utf-8")  # nbformat would refuse the width
    return path, original


def _script_src(policy: str) -> list[str]:
    (directive,) = [part.split()[1:] for part in policy.split(";") if part.split()[:1] == ["script-src"]]
    return directive


def _check_policy(response) -> None:
    """The response carries the formgrader's policy: scripts from the server and hashes, nothing inline."""
    policy = response.headers.get("content-security-policy", "")
    sources = _script_src(policy)
    assert sources[0] == "'self'", (response.url, policy)
    assert "'unsafe-inline'" not in sources, (response.url, policy)
    # JupyterLab's page needs eval (autograder/formgrader/csp.py); no other page gets it.
    parts = urllib.parse.urlsplit(response.url).path.strip("/").split("/")  # [the run's random path, ...]
    jupyterlab = parts[1:2] == ["lab"]
    assert ("'unsafe-eval'" in sources) == jupyterlab, (response.url, policy)
    keywords = ("'self'", "'report-sample'", "'unsafe-hashes'", "'unsafe-eval'")
    assert all(source.startswith("'sha256-") or source in keywords for source in sources), (response.url, policy)
    assert "object-src 'none'" in policy


def _offsite(violation: list[str], base: str) -> bool:
    """A violation report of a script that would have loaded from another site (MathJax's CDN)."""
    directive, uri, _ = violation
    return directive.startswith("script-src") and uri.startswith("http") and not uri.startswith(base + "/")


VIOLATIONS = """() => {
  window.cspViolations = [];
  document.addEventListener("securitypolicyviolation",
    (event) => window.cspViolations.push([event.effectiveDirective, event.blockedURI, event.sample]));
}"""


@pytest.mark.skipif(
    not CHROMIUM.exists() and not IN_CI,
    reason=f"{CHROMIUM} is missing (`make chromium` installs it); in CI this test fails instead",
)
def test_an_instructor_grades_a_written_answer_in_the_formgrader_and_it_reaches_every_output(
    graded_class, tmp_path
):
    from nbgrader.api import Gradebook

    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing (`make chromium` installs it); in CI the browser test must run")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as error:
        pytest.fail(f"Playwright for Python is not installed (it is in requirements.txt): {error}")
    with Gradebook(f"sqlite:///{graded_class / 'gradebook.db'}", course_id="posenc") as gradebook:
        ids = {
            student: gradebook.find_submission_notebook(ASSIGNMENT, ASSIGNMENT, student).id
            for student in ("full", "mistakes", "hostile")
        }
    before = _new_files_in_repository()
    home = tmp_path / "home"
    home.mkdir()
    server = Formgrader(graded_class, home, tmp_path / "formgrader.log")
    offsite: list[str] = []
    try:
        url = server.url()
        base = url.split("/formgrader", 1)[0]
        token = url.split("token=", 1)[1]

        def route(request_route) -> None:
            if request_route.request.url.startswith(base + "/"):
                request_route.continue_()
            else:
                offsite.append(request_route.request.url)
                request_route.abort()

        with tempfile.TemporaryDirectory(prefix="formgrader-chromium-") as profile, sync_playwright() as playwright:
            context = playwright.chromium.launch_persistent_context(
                profile, executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True,
                viewport={"width": 1280, "height": 900}, service_workers="block",
            )  # fmt: skip
            context.route("**/*", route)
            page = context.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            responses = []
            page.on("response", lambda response: responses.append(response))
            context.add_init_script(script=f"({VIOLATIONS})()")

            page.goto(url)  # -> Manage Assignments
            page.wait_for_url("**/formgrader/manage_assignments")
            row = page.locator("tr", has_text=ASSIGNMENT).first
            row.wait_for()
            assert row.locator("td").nth(0).inner_text().strip().startswith(ASSIGNMENT)

            page.goto(f"{base}/formgrader/manage_submissions/{ASSIGNMENT}")
            for student in ids:
                page.locator("tr", has_text=student).first.wait_for()
            assert page.locator("text=needs manual grading").count() == 3

            page.get_by_role("link", name="Manual Grading").first.click()
            page.get_by_role("link", name=ASSIGNMENT).first.click()
            page.wait_for_url(f"**/formgrader/gradebook/{ASSIGNMENT}")
            page.get_by_role("link", name=ASSIGNMENT).last.click()
            page.wait_for_url(f"**/formgrader/gradebook/{ASSIGNMENT}/{ASSIGNMENT}")
            links = page.locator(f"a[href$='/formgrader/submissions/{ids['full']}']")
            links.first.wait_for()
            assert page.locator("a[href*='/formgrader/submissions/']").count() >= 3
            links.first.click()
            page.wait_for_url(f"**/formgrader/submissions/{ids['full']}/")
            page.wait_for_load_state("networkidle")  # the fields save once the page has loaded their grades

            score = page.locator(f"input.score#{WRITTEN}")
            with page.expect_response(lambda r: "/formgrader/api/grade/" in r.url and r.request.method == "PUT") as saved:
                score.fill(f"{HAND_POINTS:g}")
                score.press("Tab")
            assert saved.value.ok
            comment = page.locator(f"textarea#{WRITTEN}-comment")
            with page.expect_response(
                lambda r: "/formgrader/api/comment/" in r.url and r.request.method == "PUT"
            ) as saved:
                comment.fill(COMMENT)
                comment.press("Tab")
            assert saved.value.ok

            page.goto(f"{base}/formgrader/submissions/{ids['hostile']}/")
            page.wait_for_load_state("networkidle")
            assert page.get_by_text("bold output").count() >= 1
            assert page.get_by_text("The bias depends on the distance only.").count() >= 1
            assert page.evaluate("() => [window.hostileOutput, window.hostileAnswer]") == [None, None]
            assert page.locator("img[onerror]").count() == 0
            # nbgrader's own scripts all run; what is blocked is MathJax, from elsewhere (the test refuses it too).
            assert all(_offsite(blocked, base) for blocked in page.evaluate("() => window.cspViolations"))

            planted, original = _plant(graded_class)
            try:
                page.goto(f"{base}/formgrader/submissions/{ids['hostile']}/")
                page.wait_for_load_state("networkidle")
                page.get_by_text("planted html").first.wait_for()
                title = page.title()
                assert page.locator("img[onerror]").count() >= 1  # the handler is in the page, and blocked:
                assert page.evaluate(PLANTED_GLOBALS) == [None, None, None, title]
                assert title != "planted"
                blocked = [item for item in page.evaluate("() => window.cspViolations") if not _offsite(item, base)]
                assert blocked and all(directive.startswith("script-src") for directive, _, _ in blocked), blocked
                assert all(uri == "inline" and "planted" in sample for _, uri, sample in blocked), blocked
                assert page.evaluate("() => typeof toggle_name") == "function"  # its inline scripts ran
                assert page.locator(f"input.score#{WRITTEN}").count() == 1
            finally:
                planted.write_text(original, encoding="utf-8")

            served = [response for response in responses if response.url.startswith(base + "/")]
            assert any(response.url.endswith(".js") for response in served)
            for response in served:
                _check_policy(response)
            lab = context.new_page()
            lab_errors: list[str] = []
            lab.on("pageerror", lambda error: lab_errors.append(str(error)))
            lab.on("console", lambda message: message.type == "error" and lab_errors.append(message.text))
            lab_messages: list[str] = []
            lab.on("console", lambda message: lab_messages.append(message.text))
            with lab.expect_response(lambda response: response.url.startswith(f"{base}/lab")) as lab_page:
                lab.goto(f"{base}/lab")
            _check_policy(lab_page.value)
            lab.locator(".jp-Launcher").first.wait_for(timeout=60_000)  # JupyterLab starts under the policy
            assert not [error for error in lab_errors if "Content Security Policy" in error], lab_errors
            lab_blocked = lab.evaluate("() => window.cspViolations")
            assert lab_blocked == [], lab_blocked
            # nbgrader's student-side panels and the notebook's Validate button are not loaded (their routes are
            # refused below); its formgrader panel is.
            lab.wait_for_function("() => document.querySelector('#jp-mainmenu-nbgrader') !== null"
                                  " || document.querySelector('.lm-MenuBar-itemLabel') !== null")
            disabled = json.loads(lab.locator("#jupyter-config-data").text_content())["disabledExtensions"]
            assert {"@jupyter/nbgrader:assignment-list", "@jupyter/nbgrader:course-list",
                    "@jupyter/nbgrader:validate-assignment"} <= set(disabled), disabled
            activated = [message for message in lab_messages if "is activated" in message]
            assert any("formgrader is activated" in message for message in activated), activated
            assert not [message for message in activated
                        if any(part in message for part in ("assignment-list", "course-list", "validate-assignment"))]
            lab.get_by_text("Nbgrader", exact=True).first.click()
            menu = lab.locator("#jp-mainmenu-nbgrader")
            menu.wait_for(timeout=10_000)
            assert "Formgrader" in menu.inner_text()
            assert "Assignment List" not in menu.inner_text() and "Course List" not in menu.inner_text()
            lab.keyboard.press("Escape")
            terminals = context.request.get(f"{base}/api/terminals", headers={"Authorization": f"token {token}"})
            assert terminals.status == 404, terminals.status
            # No kernel: one would run a notebook's code as the grader's user (root here), outside the sandbox.
            for route, body in (("kernels", {"name": "python3"}),
                                ("sessions", {"path": "x.ipynb", "type": "notebook", "kernel": {"name": "python3"}})):
                started = context.request.post(f"{base}/api/{route}", headers={"Authorization": f"token {token}"},
                                               data=json.dumps(body))
                assert started.status >= 400, (route, started.status)  # a session reports its kernel's refusal
                assert route == "sessions" or (started.status == 403 and "starts no kernel" in started.text())
            kernels = context.request.get(f"{base}/api/kernels", headers={"Authorization": f"token {token}"})
            assert kernels.ok and kernels.json() == []
            # nbgrader's Validate (a kernel of its own, as the server's user), its lists, and nbconvert's export.
            export = f"nbconvert/html/autograded/full/{ASSIGNMENT}/{ASSIGNMENT}.ipynb"
            for method, route in (("post", "assignments/validate"), ("get", "assignments"), ("get", "courses"),
                                  ("get", "formgraders"), ("get", export)):
                refused = getattr(context.request, method)(
                    f"{base}/{route}", headers={"Authorization": f"token {token}"},
                    **({"form": {"path": f"autograded/full/{ASSIGNMENT}/{ASSIGNMENT}.ipynb"}} if method == "post" else {}))
                assert refused.status == 403 and "Not served by the formgrader" in refused.text(), (route, refused.status)
            assert context.request.get(f"{base}/api/status", headers={"Authorization": f"token {token}"}).ok
            context.close()
        # nbgrader's grading page loads MathJax from a CDN, which this test (like an offline machine) refuses.
        assert not [error for error in errors if error != "MathJax is not defined"], errors
        assert all(not address.startswith(("http://127.", "http://localhost")) for address in offsite)
    finally:
        server.stop()

    _feedback(graded_class)
    _check_hand_grade_everywhere(graded_class)
    _grade(graded_class.parent / "class", graded_class, "--jobs", "2")
    _check_hand_grade_everywhere(graded_class)
    assert _new_files_in_repository() == before


def test_a_submission_opened_again_loads_its_grades_and_saves_with_the_browser_cache_on(graded_class, tmp_path):
    """The second visit to a grading page, with Chromium's HTTP cache on (no request interception, which turns it
    off): by Back, a reload and a deep link with ``?token=``, the score field shows the gradebook's score and a new
    score is saved."""
    from nbgrader.api import Gradebook

    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing (`make chromium` installs it); in CI the browser test must run")
    from playwright.sync_api import sync_playwright

    with Gradebook(f"sqlite:///{graded_class / 'gradebook.db'}", course_id="posenc") as gradebook:
        submission = gradebook.find_submission_notebook(ASSIGNMENT, ASSIGNMENT, "mistakes").id
    home = tmp_path / "home"
    home.mkdir()
    server = Formgrader(graded_class, home, tmp_path / "formgrader.log")
    try:
        url = server.url()
        base, token = url.split("/formgrader", 1)[0], url.split("token=", 1)[1]
        page_url = f"{base}/formgrader/submissions/{submission}/"
        with tempfile.TemporaryDirectory(prefix="formgrader-cache-") as profile, sync_playwright() as playwright:
            context = playwright.chromium.launch_persistent_context(
                profile, executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True,
                viewport={"width": 1280, "height": 900},
            )  # fmt: skip
            page = context.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            page.goto(url)
            page.wait_for_url("**/formgrader/manage_assignments")

            def save(points: float) -> None:
                page.wait_for_load_state("networkidle")  # the fields save once the page has loaded their grades
                score = page.locator(f"input.score#{WRITTEN}")
                with page.expect_response(
                    lambda r: "/formgrader/api/grade/" in r.url and r.request.method == "PUT"
                ) as saved:
                    score.fill(f"{points:g}")
                    score.press("Tab")
                assert saved.value.ok

            def shown() -> str:
                page.wait_for_load_state("networkidle")
                page.wait_for_function(f"() => document.querySelector('input.score#{WRITTEN}').value !== ''")
                return page.locator(f"input.score#{WRITTEN}").input_value()

            page.goto(page_url)
            save(1)
            page.goto(f"{base}/formgrader/manage_assignments")
            page.go_back()  # back to the grading page
            assert shown() == "1"
            save(2)
            page.reload()
            assert shown() == "2"
            save(3)
            page.goto(f"{page_url}?token={token}")  # a deep link as a colleague would send it
            assert shown() == "3"
            save(1.5)
            # Round 32: a student's page on another port of the host set _xsrf at path / (cookies ignore ports);
            # the browser sends it after the formgrader's own, which the page sends back as the token.
            context.add_cookies([{"name": "_xsrf", "value": "2|deadbeef|00112233445566778899aabbccddeeff|1700000000",
                                  "domain": urllib.parse.urlsplit(base).hostname, "path": "/",
                                  "expires": time.time() + 365 * 86400}])
            page.reload()
            assert shown() == "1.5"
            save(2.5)
            assert [cookie["path"] for cookie in context.cookies() if cookie["name"] == "_xsrf"].count("/") == 1
            # Round 33: "-_xsrf", which the pages' pattern \b_xsrf= matches first, then "_xsrf", both for every path,
            # and enough other cookies for Chromium to push the formgrader's own out (180 a host): what is left
            # is this. The instructor logs in again by the deep link.
            host = urllib.parse.urlsplit(base).hostname
            context.clear_cookies()
            for name, value in (("-_xsrf", "2|cafebabe|ffeeddccbbaa99887766554433221100|1700000000"),
                                ("_xsrf", "2|deadbeef|00112233445566778899aabbccddeeff|1700000000")):
                context.add_cookies([{"name": name, "value": value, "domain": host, "path": "/",
                                      "expires": time.time() + 365 * 86400}])
                page.wait_for_timeout(50)  # created one after the other: the browser lists them in that order
            page.goto(f"{page_url}?token={token}")
            assert shown() == "2.5"
            save(0.5)
            # MathJax is nbgrader's tag for a CDN, which the policy refuses; every other script of the page ran
            assert not [error for error in errors if "MathJax" not in error], errors
    finally:
        server.stop()
    with Gradebook(f"sqlite:///{graded_class / 'gradebook.db'}", course_id="posenc") as gradebook:
        grade = gradebook.find_grade(WRITTEN, ASSIGNMENT, ASSIGNMENT, "mistakes")
        assert grade.manual_score == 0.5


def test_a_view_the_renderer_cannot_make_is_refused_with_its_reason_and_the_other_views_go_on(graded_class, tmp_path):
    """In Chromium: a submission's view is made in a child under the stage's limits; one the child cannot make
    (here a notebook nbformat refuses, with a title escape and markup in it) answers 500 with a reason that quotes
    none of it, under the policy, and the next view is made as before."""
    from nbgrader.api import Gradebook

    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing (`make chromium` installs it); in CI the browser test must run")
    from playwright.sync_api import sync_playwright

    with Gradebook(f"sqlite:///{graded_class / 'gradebook.db'}", course_id="posenc") as gradebook:
        ids = {student: gradebook.find_submission_notebook(ASSIGNMENT, ASSIGNMENT, student).id
               for student in ("full", "hostile")}
    broken = graded_class / "autograded" / "hostile" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    original = broken.read_bytes()
    home = tmp_path / "home"
    home.mkdir()
    server = Formgrader(graded_class, home, tmp_path / "formgrader.log")
    try:
        url = server.url()
        base = url.split("/formgrader", 1)[0]
        broken.write_text('{"cells": "\x1b]0;owned\x07<b id=planted>planted</b>"', encoding="utf-8")
        with tempfile.TemporaryDirectory(prefix="formgrader-views-") as profile, sync_playwright() as playwright:
            context = playwright.chromium.launch_persistent_context(
                profile, executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
            page = context.new_page()
            page.goto(url)
            page.wait_for_url("**/formgrader/manage_assignments")
            refused = page.goto(f"{base}/formgrader/submissions/{ids['hostile']}/")
            assert refused.status == 500
            _check_policy(refused)
            text = page.locator("body").inner_text()
            assert "was not shown: the renderer ended with code 1 (" in text, text
            assert "planted" not in page.content() and "owned" not in page.content()
            shown = page.goto(f"{base}/formgrader/submissions/{ids['full']}/")
            assert shown.status == 200
            page.locator(f"input.score#{WRITTEN}").wait_for()
            context.close()
    finally:
        broken.write_bytes(original)
        server.stop()
    log = (tmp_path / "formgrader.log").read_text(encoding="utf-8")
    assert "submission views are rendered under the stage's limits" in log
    assert f"the view of submission {ids['hostile']} was not made" in log and "\x1b" not in log


def test_the_formgrader_server_ends_when_its_command_is_killed(graded_class, tmp_path):
    """The command killed outright (SIGKILL: no handler runs) leaves no JupyterLab serving the class folder."""
    home = tmp_path / "home"
    home.mkdir()
    server = Formgrader(graded_class, home, tmp_path / "formgrader.log")
    children = ""
    try:
        url = server.url()
        host, port = url.split("//", 1)[1].split("/", 1)[0].rsplit(":", 1)
        children = subprocess.run(["pgrep", "-P", str(server.process.pid)], check=False, capture_output=True,
                                  text=True).stdout
        assert children.split(), "the command started no server"
        os.kill(server.process.pid, signal.SIGKILL)
        server.process.wait()
        deadline = time.monotonic() + 60
        while _answers(host, int(port)) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not _answers(host, int(port)), "JupyterLab still serves the class folder after its command ended"
    finally:
        server.stop()
        for pid in children.split():  # a server left by a failure of this test
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)


def _answers(host: str, port: int) -> bool:
    import socket

    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False
