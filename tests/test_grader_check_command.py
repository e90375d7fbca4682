"""``python -m autograder check NOTEBOOK`` as the students' guide (book/guide_students.md) writes it: its whole
output is about the notebook, its last line is the one the guide quotes, and every line names its item as the
notebook does ("2.2", "Quiz 1"), not by nbgrader's cell id. The kernel talks to the command over Unix sockets in a
private folder, so nothing (no warning about unencrypted TCP, no kernel left behind) reaches the student's terminal.

The names come from the notebook itself (:func:`autograder.student.progress.item_labels`); here they are compared with
another place of the same notebook, the items its last cell lists (``print_status("2.1", ...)``)."""

from __future__ import annotations

import ast

import nbformat
import pytest
from planted import ROOT, run_module

from autograder import ASSIGNMENTS, released_notebook
from autograder.student.progress import item_labels

GUIDE = ROOT / "book" / "guide_students.md"
COMMAND = "python -m autograder check notebooks/02_sinusoidal.ipynb"
LAST_LINE = "0 of 10 visible tests pass (10 not answered yet)"


def test_the_students_guide_writes_the_command_and_its_last_line():
    text = GUIDE.read_text(encoding="utf-8")
    assert f"```bash\n{COMMAND}\n```" in text
    assert f"`{LAST_LINE}`" in " ".join(text.split())


def _listed_items(notebook: nbformat.NotebookNode) -> list[str]:
    """The items of the notebook's last cell, ``print_status("2.1", ..., written=(...))``, in order."""
    call = ast.parse(notebook.cells[-1].source).body[0].value
    assert call.func.id == "print_status"
    return [argument.value for argument in call.args]


def _graded(notebook: nbformat.NotebookNode, cell_type: str | None = None) -> list[str]:
    return [
        cell.metadata["nbgrader"]["grade_id"]
        for cell in notebook.cells
        if cell.metadata.get("nbgrader", {}).get("grade") and cell_type in (None, cell.cell_type)
    ]


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_every_graded_cell_is_named_by_an_item_its_last_cell_lists(assignment):
    notebook = nbformat.read(released_notebook(assignment), as_version=4)
    labels = item_labels(notebook.cells)
    assert list(labels) == _graded(notebook)
    # several cells may share an item (4.4 and 4.5's heading), but every item listed has its cell, in order
    assert list(dict.fromkeys(labels.values())) == _listed_items(notebook)


def test_a_written_answer_is_named_by_the_heading_of_its_question():
    notebook = nbformat.read(released_notebook("04_relative"), as_version=4)
    assert _graded(notebook, "markdown") == ["self_bias_answer"]
    assert item_labels(notebook.cells)["self_bias_answer"] == "4.6"


def _cell(cell_type: str, source: str, grade_id: str | None = None, **nbgrader) -> dict:
    meta = {"nbgrader": {"grade_id": grade_id, **nbgrader}} if grade_id else {}
    return {"cell_type": cell_type, "source": source, "metadata": meta}


def test_a_cell_with_no_number_above_it_and_no_visible_test_is_named_by_its_id():
    cells = [
        _cell("markdown", "## 7.1 A question (2 points)"),
        _cell("code", "assert answer == 1", "first_test", grade=True),  # no visible_test: its heading's number
        _cell("markdown", "## Quiz (1 point each)"),  # a heading without a number ends item 7.1
        _cell("markdown", "YOUR ANSWER HERE", "essay", grade=True, solution=True),
        _cell("markdown", "**Quiz 2.** Which one?"),
        _cell("markdown", "## 9.9 a student's heading", "quiz_answer_text", solution=True),  # an answer heads nothing
        _cell("code", 'with visible_test("Quiz 2", "", "quiz"):\n    pass', "quiz_test", grade=True),
        _cell("code", "x = (", "broken_test", grade=True),  # not Python: the heading above, Quiz 2
        _cell("code", "quiz = 'A'", "quiz_answer", solution=True),  # not graded: no name
    ]
    assert item_labels(cells) == {
        "first_test": "7.1", "essay": "essay", "quiz_test": "Quiz 2", "broken_test": "Quiz 2",
    }  # fmt: skip


@pytest.mark.slow
def test_check_prints_the_tests_by_their_numbers_and_no_warning_of_the_kernel():
    completed = run_module(*COMMAND.split()[2:], cwd=ROOT, timeout=300)
    output = completed.stdout + completed.stderr
    assert completed.returncode == 1, output  # the released notebook has no answers yet
    assert "visible tests pass" in completed.stdout
    assert "TCP" not in output and "WARNING" not in output and "Parent appears to have exited" not in output, output
    lines = [line for line in output.splitlines() if line.strip()]
    assert all(line.lstrip().startswith("NOT ANSWERED") for line in lines[:-1]), output
    named = [line.split()[2] if line.split()[2] != "Quiz" else " ".join(line.split()[2:4]) for line in lines[:-1]]
    expected = ["2.1", "2.2", "2.3", "2.4", "2.5", "2.6", "2.7", "Quiz 1", "Quiz 2", "Quiz 3"]
    assert named == expected, output
    assert "_test" not in output, output
    assert LAST_LINE in lines[-1]
    assert "Written answers" not in output, output  # 02 has none: the closing line speaks of what the notebook has


@pytest.mark.slow
def test_check_speaks_of_written_answers_where_the_notebook_has_them():
    completed = run_module("autograder", "check", "notebooks/04_relative.ipynb", cwd=ROOT, timeout=300)
    output = completed.stdout + completed.stderr
    lines = [line for line in output.splitlines() if line.strip()]
    assert any(line.lstrip().startswith("WRITTEN ANSWER") for line in lines), output
    assert lines[-1].endswith("Written answers are graded by an instructor."), output


@pytest.mark.slow
def test_check_prints_no_byte_a_terminal_would_act_on_and_none_of_the_kernels_own_output(tmp_path):
    notebook = nbformat.read(ROOT / "notebooks" / "01_permutation.ipynb", as_version=4)
    osc_title, osc_clipboard = "\x1b]0;pwned\x07", "\x1b]52;c;ZWNobyBwd25lZA==\x07"
    hostile = [
        # The kernel's own standard output and error, written past Jupyter's capture.
        nbformat.v4.new_code_cell(f"import os\nos.write(1, {osc_title.encode()!r})\nos.write(2, b'\\r\\x1b[2Kerased')"),
        # A graded cell of the student's own: its grade id names the item, its error is the message.
        nbformat.v4.new_code_cell(f"raise ValueError({osc_clipboard + ' FORGED'!r} + '\\u202e')",
                                  metadata={"nbgrader": {"grade": True, "grade_id": "own\x1b[31m\u2028item",
                                                         "points": 1}}),
    ]
    notebook.cells = hostile + notebook.cells
    path = tmp_path / "01_permutation.ipynb"
    nbformat.write(notebook, path)
    completed = run_module("autograder", "check", str(path), cwd=tmp_path, timeout=300)
    output = completed.stdout + completed.stderr
    assert "visible tests pass" in completed.stdout, output
    assert not any(character in output for character in "\x1b\x07\r\u202e\u2028"), ascii(output)
    assert "pwned" not in output and "erased" not in output, output
    [line] = [line for line in output.splitlines() if "FORGED" in line]
    assert "own\\x1b[31m\\u2028item" in line and "\\x1b]52;c;ZWNobyBwd25lZA==\\x07 FORGED\\u202e" in line, line


def test_check_reads_nbgrader_metadata_of_any_type_without_a_traceback(tmp_path):
    """Round 20: metadata of another type (``"nbgrader": []``, a list as a grade id, points of infinity) or a
    number of 5,000 digits ended the student's own check in a traceback. The cells are read as ungraded, and the
    number is a reason."""
    notebook = nbformat.read(ROOT / "notebooks" / "01_permutation.ipynb", as_version=4)
    odd = [nbformat.v4.new_code_cell("x = 1", metadata=metadata) for metadata in (
        {"nbgrader": []}, {"nbgrader": {"grade": True, "grade_id": ["a"], "points": 1}},
        {"nbgrader": {"grade": True, "grade_id": "odd_points", "points": float("inf")}})]
    notebook.cells = odd + notebook.cells
    path = tmp_path / "01_permutation.ipynb"
    nbformat.write(notebook, path)
    completed = run_module("autograder", "check", str(path), cwd=tmp_path, timeout=300)
    assert "Traceback" not in completed.stderr and "visible tests pass" in completed.stdout, completed.stderr[-2000:]
    huge = tmp_path / "huge.ipynb"
    huge.write_text('{"nbformat": 4, "x": ' + "9" * 5000 + "}")
    completed = run_module("autograder", "check", str(huge), cwd=tmp_path, timeout=300)
    assert completed.returncode == 2 and "a number too long" in completed.stdout, completed.stderr[-2000:]
