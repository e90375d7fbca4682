"""Understanding carries the grade: every graded item says what kind of thinking it asks for, and in every
notebook at least half of the points come from a prediction, a diagnosis, a derivation, a design or a reading of
evidence, not from transcribing a formula that the prompt or the book states.

The kinds are read from the table that opens each released notebook (the one its chapter repeats, see
tests/test_book_exercise_lists.py): ``| exercise | kind | points |``, one row per graded item and per quiz
question, then the total. The rows are matched with the notebook's graded cells, in order, by their points.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
ASSIGNMENTS = ("01_permutation", "02_sinusoidal", "03_learned", "04_relative", "05_rope", "06_comparison")
HEADER = ("| exercise | kind | points |", "| --- | --- | --- |")
UNDERSTANDING = {"prediction", "diagnosis", "derivation", "design", "evidence"}
TRANSCRIPTION = {"computation", "implementation", "recall"}


def table(notebook: nbformat.NotebookNode) -> list[tuple[str, str, float]]:
    """``(exercise, kind, points)`` of each row of the opening cell's table, the total row last."""
    intro = notebook.cells[0].source.splitlines()
    assert HEADER[0] in intro, f"the opening cell has no table headed {HEADER[0]!r}"
    start = intro.index(HEADER[0])
    assert intro[start + 1] == HEADER[1]
    rows = []
    for line in intro[start + 2:]:
        if not line.startswith("|"):
            break
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        assert len(cells) == 3, f"a row of three cells (exercise, kind, points), got {line!r}"
        rows.append((cells[0], cells[1], float(cells[2].strip("*"))))
    return rows


def graded_points(notebook: nbformat.NotebookNode) -> list[float]:
    """The points of the notebook's graded cells (autograded tests and hand-graded answers), in order."""
    found = []
    for cell in notebook.cells:
        nbgrader = cell.metadata.get("nbgrader", {})
        if nbgrader.get("grade") and nbgrader.get("points", 0) > 0:
            found.append(float(nbgrader["points"]))
    return found


def understanding_share(rows: list[tuple[str, str, float]]) -> float:
    items = rows[:-1]
    return sum(points for _, kind, points in items if kind in UNDERSTANDING) / sum(points for *_, points in items)


@pytest.fixture(params=ASSIGNMENTS)
def released(request) -> tuple[str, nbformat.NotebookNode]:
    return request.param, nbformat.read(ROOT / "notebooks" / f"{request.param}.ipynb", as_version=4)


def test_each_row_is_one_graded_item_of_a_known_kind(released):
    assignment, notebook = released
    rows = table(notebook)
    *items, total = rows
    assert total[0] == "**total**" and total[1] == ""
    unknown = [(name, kind) for name, kind, _ in items if kind not in UNDERSTANDING | TRANSCRIPTION]
    assert unknown == [], f"{assignment}: kinds outside {sorted(UNDERSTANDING | TRANSCRIPTION)}"
    assert [points for *_, points in items] == graded_points(notebook), assignment
    assert sum(points for *_, points in items) == total[2], assignment


def test_at_least_half_of_the_points_ask_for_understanding(released):
    assignment, notebook = released
    share = understanding_share(table(notebook))
    assert share >= 0.5, f"{assignment}: {share:.0%} of the points ask for understanding"


def test_at_least_half_of_the_quiz_questions_ask_to_apply_an_idea(released):
    assignment, notebook = released
    quiz = [(name, kind) for name, kind, _ in table(notebook)[:-1] if name.startswith("Quiz")]
    assert quiz, f"{assignment} has no quiz question"
    applied = [name for name, kind in quiz if kind != "recall"]
    assert 2 * len(applied) >= len(quiz), f"{assignment}: {len(applied)} of {len(quiz)} quiz questions apply an idea"


def test_the_checks_refuse_a_table_of_transcriptions():
    rows = [("2.1 PE(p)", "computation", 3.0), ("2.2 the table", "implementation", 2.0),
            ("2.3 why", "derivation", 2.0), ("Quiz 1 the formula", "recall", 1.0), ("**total**", "", 8.0)]
    assert understanding_share(rows) == pytest.approx(2 / 8)
    text = "# Chapter 9\n\n" + "\n".join([*HEADER, *(f"| {n} | {k} | {p:g} |" for n, k, p in rows)])
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(text)])
    assert table(notebook)[2] == ("2.3 why", "derivation", 2.0)
    with pytest.raises(AssertionError, match="no table"):
        table(nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("| exercise | points |")]))
