"""The feedback page a student reads, opened in Chromium on a phone, after the instructors' guide's commands.

A class of two (the full solution and the planted mistakes of 04) is graded with ``python -m autograder grade``; an
instructor's comment that holds HTML (``<b>x</b>``) and a hand grade are set on the written answer of ``mistakes``
through nbgrader's API, as the formgrader sets them, and ``python -m autograder feedback`` writes the page again.
Debian's Chromium, driven by Playwright, opens ``mistakes``'s page from its file at a phone's viewport (390 px
wide) and checks what the student meets: no console error (the page's Content-Security-Policy blocks nothing,
because the page asks for nothing: no CDN script, no font file), no sideways scroll of the page (a wide formula
scrolls in its own box), every item named as the notebook numbers it ("4.2", "Quiz 1"), the checks' verdicts
but none of the grader's machinery (hidden tests, the reporter, the run's marker, notices of removed reports),
formulas with TeX's escapes converted (``max_exact``, not ``max\\_exact``), the student's own code, and the
comment as text. axe-core runs on the page as it does on the book's pages (tests/test_book_a11y.py): no serious or
critical violation. The autograded notebook, which the formgrader shows, holds none of the machinery either.

The browser tests skip only where /usr/bin/chromium or axe-core is missing outside CI; in CI they fail instead.
"""

from __future__ import annotations

import os
from pathlib import Path

import nbformat
import pytest
from planted import run_module, sandbox_missing, write_full_and_mistakes
from test_book_a11y import AXE, BLOCKING_IMPACTS, PHONE, RUN_AXE

pytestmark = pytest.mark.slow

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]
IN_CI = os.environ.get("CI", "").lower() not in ("", "0", "false", "no")
ASSIGNMENT = "04_relative"
STUDENT = "mistakes"
TERMINAL_CONTROLS = "\x1b]0;owned\x07\x1b]52;c;b3duZWQ=\x07\x9b2J"  # a window title, a clipboard write, a cleared screen
WRITTEN = "self_bias_answer"  # 4.6, graded by hand
COMMENT = "See <b>x</b>: the bias depends on the distance only.\n<script>window.commentRan = 1</script>"
# The items of 04 as its introduction lists them, in the order of the notebook.
ITEMS = ["4.1", "4.2", "4.3", "4.4", "4.5", "4.6", "4.7", "4.8", "Quiz 1", "Quiz 2", "Quiz 3"]
# The grader's machinery, which no page a student reads shows.
HARNESS = (
    "### BEGIN HIDDEN TESTS",
    "### END HIDDEN TESTS",
    "BEGIN HIDDEN",
    "_autograder_report",
    "AUTOGRADER-REPORT-",  # the run's marker (autograder.verdicts.verdict.new_marker)
    "text/x-autograder-report",
    "removed from this page",
    "Test cell",
)

# The page's width against the screen's, and the elements that reach past its right edge outside a box that
# scrolls on its own.
MEASURE_WIDTH = """() => {
    const width = document.documentElement.clientWidth;
    const scrolls = element => ['auto', 'scroll'].includes(getComputedStyle(element).overflowX);
    const inScrollingBox = element => {
        for (let parent = element.parentElement; parent; parent = parent.parentElement) {
            if (scrolls(parent)) return true;
        }
        return false;
    };
    const beyond = Array.from(document.body.querySelectorAll('*'))
        .filter(element => element.getBoundingClientRect().right > width + 0.5 && !inScrollingBox(element))
        .slice(0, 5)
        .map(element => `${element.tagName.toLowerCase()}: ${element.textContent.slice(0, 60)}`);
    return {scrollWidth: document.documentElement.scrollWidth, clientWidth: width, beyond: beyond};
}"""

# The formula of 4.2 that names max_exact: its text, and the box around it: its class, whether the keyboard
# reaches it, how it overflows, and whether the formula is wider than the box (so that it scrolls in it).
WIDE_FORMULA = """() => {
    const formula = Array.from(document.querySelectorAll('math')).find(math => math.textContent.includes('max_exact'));
    if (!formula) return null;
    const box = formula.parentElement;
    return {text: formula.textContent, box: box.className, tabIndex: box.tabIndex, overflowX: getComputedStyle(box).overflowX,
            scrollWidth: box.scrollWidth, clientWidth: box.clientWidth};
}"""

needs_browser = pytest.mark.skipif(
    (not CHROMIUM.exists() or not AXE.exists()) and not IN_CI,
    reason="/usr/bin/chromium or axe-core is missing (`make chromium`, `make axe`); in CI this test fails instead",
)


@pytest.fixture(scope="module")
def graded(tmp_path_factory) -> Path:
    """``grade`` on the class, a hand grade and a comment with HTML on 4.6 of ``mistakes``, then ``feedback``:
    the guide's commands; returns the folder of the results."""
    from nbgrader.api import Gradebook

    if reason := sandbox_missing():
        pytest.skip(f"the grader's sandbox cannot run here: {reason}")
    root = tmp_path_factory.mktemp("feedback-page")
    write_full_and_mistakes(root / "class", ASSIGNMENT)
    path = root / "class" / STUDENT / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    notebook = nbformat.read(path, as_version=4)
    answer = next(cell for cell in notebook.cells if cell.cell_type == "code" and cell.metadata.get("nbgrader", {}).get("solution"))
    answer.source += f"\n# {TERMINAL_CONTROLS}"  # a comment in an answer: the page shows it, a terminal must not run it
    nbformat.write(notebook, path)
    out = root / "graded"
    completed = run_module("autograder", "grade", str(root / "class"), "--out", str(out), "--jobs", "2", timeout=900)
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    with Gradebook(f"sqlite:///{out / 'gradebook.db'}", course_id="posenc") as gradebook:
        grade = gradebook.find_grade(WRITTEN, ASSIGNMENT, ASSIGNMENT, STUDENT)
        grade.manual_score, grade.needs_manual_grade = 2.0, False
        gradebook.find_comment(WRITTEN, ASSIGNMENT, ASSIGNMENT, STUDENT).manual_comment = COMMENT
        gradebook.db.commit()
    completed = run_module("autograder", "feedback", "--out", str(out), timeout=300)
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    return out


def _page(out: Path) -> Path:
    return out / "feedback" / STUDENT / ASSIGNMENT / f"{ASSIGNMENT}.html"


def test_the_feedback_page_file_runs_no_escape_sequence_in_a_terminal(graded):
    """Round 12: an answer's escape sequences (the window title, a clipboard write, a cleared screen) reached the
    page's file raw, and ``cat`` on it ran them. The page, made again by ``feedback`` after a hand grade, shows
    them as visible escapes."""
    page = _page(graded).read_text(encoding="utf-8")
    controls = {character for character in TERMINAL_CONTROLS if ord(character) < 0x20 or 0x7F <= ord(character) <= 0x9F}
    assert controls == {"\x1b", "\x07", "\x9b"} and not controls & set(page)
    assert "\\x1b]0;owned\\x07" in page and "\\x9b2J" in page


def test_the_notebook_the_formgrader_shows_holds_no_machinery_and_keeps_the_student_s_code(graded):
    notebook = nbformat.read(graded / "autograded" / STUDENT / ASSIGNMENT / f"{ASSIGNMENT}.ipynb", as_version=4)
    shown = "\n".join(
        [cell.source for cell in notebook.cells]
        + [str(output) for cell in notebook.cells for output in cell.get("outputs", [])]
    )
    for text in HARNESS:
        assert text not in shown, text
    assert "def t5_bucket(" in shown  # the student's answer to 4.2
    assert 'with visible_test("4.2"' in shown  # the visible checks stay
    items = [cell.metadata["autograder"]["item"] for cell in notebook.cells if cell.metadata.get("nbgrader", {}).get("grade")]
    assert items == ITEMS


def test_a_hand_graded_page_shows_the_html_of_a_crossed_notebook_only_as_cleaned_html(graded, tmp_path):
    """The crossing checks the autograded notebook's shape, not its HTML; the page ``feedback`` makes again after
    a hand grade cleans that HTML again (:func:`autograder.feedback.outputs.cleaned_again`), so a ``<style>`` or a
    handler that a stage which was not itself wrote reaches no page."""
    from autograder.feedback.handgraded import feedback_page
    from autograder.sandbox.crossing import check_autograded

    notebook = nbformat.read(graded / "autograded" / STUDENT / ASSIGNMENT / f"{ASSIGNMENT}.ipynb", as_version=4)
    markdown = next(cell for cell in notebook.cells if cell.cell_type == "markdown")
    markdown.source = markdown.source[:-len("</div>")] + '<style>body{display:none}</style><b onclick="x()">forged</b></div>'
    code = next(cell for cell in notebook.cells if cell.cell_type == "code" and cell.outputs)
    code.outputs.append(nbformat.v4.new_output("display_data", data={"text/html": '<style>p{color:red}</style><i onmouseover="y()">out</i>'}))
    text = nbformat.writes(notebook)
    check_autograded(text)  # it crosses
    autograded = tmp_path / f"{ASSIGNMENT}.ipynb"
    autograded.write_text(text, encoding="utf-8")
    page = feedback_page(autograded, STUDENT, ASSIGNMENT, f"sqlite:///{graded / 'gradebook.db'}", [])
    assert "<b>forged</b>" in page and "<i>out</i>" in page
    for planted in ("<style>body", "<style>p{", "onclick", "onmouseover"):
        assert planted not in page, planted


@needs_browser
def test_the_student_reads_the_feedback_page_on_a_phone(graded):
    from playwright.sync_api import sync_playwright

    page_url = _page(graded).resolve().as_uri()
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        try:
            tab = browser.new_page(viewport=PHONE)
            errors: list[str] = []
            tab.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
            tab.on("pageerror", lambda error: errors.append(str(error)))
            tab.goto(page_url, wait_until="load")
            tab.wait_for_timeout(500)  # a blocked font or script reports after the load event
            assert errors == []

            width = tab.evaluate(MEASURE_WIDTH)
            assert width["scrollWidth"] <= width["clientWidth"] == PHONE["width"], width
            assert width["beyond"] == [], width

            links = tab.eval_on_selector_all("#toc a", "links => links.map(link => link.textContent.trim())")
            assert [link for link in links if not link.startswith("Comment on ")] == ITEMS
            assert "Comment on 4.6" in links
            headings = tab.eval_on_selector_all(".nbgrader_cell .nbgrader-label", "labels => labels.map(l => l.textContent)")
            assert "Checks of 4.2" in headings and "Your answer to 4.6" in headings, headings

            text = tab.inner_text("body")
            for harness in HARNESS:
                assert harness not in text, harness
            assert "def t5_bucket(" in text  # what the student wrote
            assert "Not right:" in text  # what a failed check said (4.2 of the planted mistakes)
            assert "max\\_exact" not in text

            formula = tab.evaluate(WIDE_FORMULA)
            assert formula is not None and "max\\_exact" not in formula["text"]
            assert (formula["box"], formula["tabIndex"], formula["overflowX"]) == ("formula", 0, "auto"), formula
            assert formula["scrollWidth"] > formula["clientWidth"], formula  # wider than the screen: it scrolls

            comment = tab.locator(".instructor-comment")
            assert comment.count() == 1
            assert "See <b>x</b>: the bias depends on the distance only." in comment.inner_text()
            assert "<script>window.commentRan = 1</script>" in comment.inner_text()
            assert comment.evaluate("element => element.children.length") == 0  # no element: neither <b> nor <script>
            assert tab.evaluate("() => window.commentRan") is None
        finally:
            browser.close()


@needs_browser
def test_axe_finds_no_serious_or_critical_violation_on_the_feedback_page(graded):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        try:
            # The page's policy runs no script, axe's neither: this context alone lets the test's script in.
            context = browser.new_context(viewport=PHONE, bypass_csp=True)
            tab = context.new_page()
            tab.goto(_page(graded).resolve().as_uri(), wait_until="load")
            tab.add_script_tag(path=str(AXE))
            violations = tab.evaluate(RUN_AXE)
        finally:
            browser.close()
    blocking = [violation for violation in violations if violation["impact"] in BLOCKING_IMPACTS]
    report = "\n".join(f"{v['id']} ({v['impact']}): {', '.join(v['targets'][:5])}" for v in blocking)
    assert not blocking, report
