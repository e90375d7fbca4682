"""What each graded item assesses, checked against the book: every item of every notebook has a record in
``autograder/assessment/<assignment>.toml`` (the instructor's side), and an item labelled as understanding names
the passage of its chapter that it builds on, says what the student adds, and lists what would give its answer
away; the passage must be in the chapter, and none of the giveaways may be.

The chapter is read twice: its MyST source (``book/<assignment>.md``, prose and code) and, where the book is
built, the text of its page, which also holds what the code cells print. Both are compared after collapsing
whitespace; the giveaways are looked for without regard to case.

A second check reads the answers rather than the labels: the share of each notebook's auto-graded points whose
expected answer depends on the student, computed from the grader's variants for many student IDs (not from what
a record or a table claims).
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import pytest
from test_book_gives_no_answer import page_text

from autograder import ASSIGNMENTS, source_notebook
from autograder.student.progress import item_labels
from autograder.variants import constants_source, parameters_for, variant_of_cell

ROOT = Path(__file__).resolve().parents[1]
RECORDS = ROOT / "autograder" / "assessment"
PAGES = ROOT / "_build" / "html" / "book"
UNDERSTANDING = {"prediction", "diagnosis", "derivation", "design", "evidence"}
TRANSCRIPTION = {"computation", "implementation", "recall"}
FIELDS = {"label", "kind", "points", "chapter", "passage", "adds", "gives_away"}
STUDENTS = [f"student{number:03d}" for number in range(60)]
VARYING_SHARE = 0.6


def collapsed(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def records(assignment: str) -> list[dict]:
    path = RECORDS / f"{assignment}.toml"
    assert path.is_file(), f"{assignment} has no assessment record ({path.relative_to(ROOT)})"
    return tomllib.loads(path.read_text(encoding="utf-8"))["item"]


def graded_cells(assignment: str) -> list[tuple[str, str, float, bool]]:
    """``(grade_id, label, points, autograded)`` of the source notebook's graded cells, in order."""
    cells = json.loads(source_notebook(assignment).read_text(encoding="utf-8"))["cells"]
    labels = item_labels(cells)
    found = []
    for cell in cells:
        nbgrader = cell["metadata"].get("nbgrader", {})
        if nbgrader.get("grade") and nbgrader.get("points", 0) > 0:
            found.append((nbgrader["grade_id"], labels[nbgrader["grade_id"]], float(nbgrader["points"]),
                          cell["cell_type"] == "code"))
    return found


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_every_graded_item_has_one_record_of_its_kind_and_points(assignment):
    import nbformat
    from test_exercise_kinds import table

    listed = records(assignment)
    for record in listed:
        assert set(record) == FIELDS, f"{assignment} {record.get('label')}: fields {sorted(set(record) ^ FIELDS)}"
        assert record["kind"] in UNDERSTANDING | TRANSCRIPTION, f"{assignment} {record['label']}: {record['kind']}"
    points_by_label: dict[str, float] = {}
    for _, label, points, _ in graded_cells(assignment):
        points_by_label[label] = points_by_label.get(label, 0.0) + points
    assert [record["label"] for record in listed] == list(points_by_label), assignment
    assert {record["label"]: float(record["points"]) for record in listed} == points_by_label, assignment
    released = nbformat.read(ROOT / "notebooks" / f"{assignment}.ipynb", as_version=4)
    table_kinds = [kind for _, kind, _ in table(released)[:-1]]
    assert [record["kind"] for record in listed] == table_kinds, f"{assignment}: the records and the notebook's table"


def _chapter_texts(chapter: str) -> list[tuple[str, str]]:
    """The chapter's source and, where the book is built, its page's text: ``(where, collapsed text)``."""
    path = ROOT / chapter
    assert path.is_file(), f"no chapter {chapter}"
    texts = [(chapter, collapsed(path.read_text(encoding="utf-8")))]
    page = PAGES / f"{Path(chapter).stem}.html"
    if not PAGES.is_dir():
        pytest.fail(f"no built book in {PAGES}: run `make book` first (`make test` does)")
    texts.append((str(page.relative_to(ROOT)), collapsed(page_text(page.read_text(encoding="utf-8")))))
    return texts


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_an_understanding_item_builds_on_a_passage_of_its_chapter_that_does_not_answer_it(assignment):
    for record in records(assignment):
        label = f"{assignment} {record['label']}"
        if record["kind"] not in UNDERSTANDING:
            continue
        assert record["chapter"] == f"book/{assignment}.md", f"{label}: read beside its own chapter"
        assert len(collapsed(record["passage"])) >= 40, f"{label}: the passage it builds on, a sentence or more"
        assert collapsed(record["adds"]), f"{label}: what the student adds"
        assert record["gives_away"], f"{label}: what would give the answer away"
        source, *page = _chapter_texts(record["chapter"])
        assert collapsed(record["passage"]) in source[1], f"{label}: the passage is not in {record['chapter']}"
        for where, text in (source, *page):
            for giveaway in record["gives_away"]:
                assert collapsed(giveaway), f"{label}: an empty giveaway"
                assert collapsed(giveaway).lower() not in text.lower(), f"{label}: {where} prints {giveaway!r}"


def _expected_constants(assignment: str, grade_id: str, student: str) -> str | None:
    variant = variant_of_cell(assignment, grade_id)
    if variant is None:
        return None
    return constants_source(variant, parameters_for(assignment, student, enabled=True)[variant.item])


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_most_auto_graded_points_have_an_answer_of_each_student_s_own(assignment):
    """An item counts when its expected values, computed by the grader for 60 student IDs, take more than one
    value; an answer shared by the class is worth what a shared answer sheet gives."""
    autograded = [(grade_id, points) for grade_id, _, points, is_code in graded_cells(assignment) if is_code]
    varying = 0.0
    for grade_id, points in autograded:
        answers = {_expected_constants(assignment, grade_id, student) for student in STUDENTS}
        if None not in answers and len(answers) > 1:
            varying += points
    total = sum(points for _, points in autograded)
    assert varying >= VARYING_SHARE * total, (
        f"{assignment}: {varying:g} of {total:g} auto-graded points depend on the student"
    )


def test_the_records_stay_with_the_instructor():
    from autograder.authoring.publish import edition_files

    sources = {path.resolve() for path in edition_files().values()}
    assert RECORDS.is_dir()
    assert not [path for path in RECORDS.iterdir() if path.resolve() in sources], "the records are the instructor's"


def test_the_students_guide_names_every_item_graded_as_an_exact_expression():
    exact = []
    for assignment in ASSIGNMENTS:
        cells = json.loads(source_notebook(assignment).read_text(encoding="utf-8"))["cells"]
        labels = item_labels(cells)
        for cell in cells:
            grade_id = cell["metadata"].get("nbgrader", {}).get("grade_id")
            if "check_expressions(" in "".join(cell["source"]):
                exact.append(labels[grade_id])
    guide = collapsed((ROOT / "book" / "guide_students.md").read_text(encoding="utf-8"))
    match = re.search(r"the exact expressions of exercises? ([\d., and]+?), the only items graded as exact", guide)
    assert match, "the students' guide says which items are graded as exact expressions"
    named = re.findall(r"\d+\.\d+", match.group(1))
    assert named == exact


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_the_instructors_guide_shows_each_notebooks_items_as_a_table_with_its_shares(assignment):
    """The guide's section "What each notebook assesses", as built: a sentence with the notebook's shares, computed
    here from the records and the grader's variants, and a table with one row per item."""
    import html as html_module

    page = (PAGES / "guide_instructors.html").read_text(encoding="utf-8")
    listed = records(assignment)
    total = sum(record["points"] for record in listed)
    understanding = sum(record["points"] for record in listed if record["kind"] in UNDERSTANDING)
    autograded = [(grade_id, points) for grade_id, _, points, is_code in graded_cells(assignment) if is_code]
    own = sum(points for grade_id, points in autograded
              if len({_expected_constants(assignment, grade_id, student) for student in STUDENTS[:12]} - {None}) > 1)
    sentence = (f"{understanding:g} of {total:g} points ask for understanding; {own:g} of "
                f"{sum(points for _, points in autograded):g} auto-graded points have an answer of each student's own")
    text = collapsed(html_module.unescape(re.sub(r"<[^>]+>", " ", page))).replace("\u2019", "'")
    assert sentence in text, sentence
    start = page.index(f'<span class="pre">{assignment}</span>')
    table = page[page.index("<table", start) : page.index("</table>", start)]
    assert table.count("<tr") == len(listed) + 1, assignment  # a header, then an item a row
