"""Feedback while working (autograder.student.progress): one line per visible test, unanswered items that do not stop
the notebook, and the list of every item's status in each notebook's last cell.

The helpers are tested here in this process (no kernel); the notebooks' use of them is read from the sources;
and every released notebook is run from top to bottom in a kernel, as *Restart & Run All* runs it, which must
reach its last cell with every item unanswered. That grading still gives unanswered items 0 is tested by the
round trip (tests/test_grader_roundtrip.py: the ``blank`` and ``unset`` students).
"""

from __future__ import annotations

import ast
import re
import tempfile
from pathlib import Path

import nbformat
import pytest

from autograder import ASSIGNMENTS, released_notebook, source_notebook
from autograder.course import write_kernelspec
from autograder.student import progress
from autograder.student.kernels import KERNEL_NAME, execute_in_own_loop, kernel_environment_set
from autograder.student.progress import NotAnswered, print_status, visible_test


@pytest.fixture(autouse=True)
def fresh_statuses(monkeypatch):
    """Each test starts with no item recorded and outside the grader's kernel."""
    monkeypatch.setattr(progress, "_statuses", {})
    monkeypatch.delenv(progress.GRADING_VARIABLE, raising=False)


def test_a_passing_visible_test_prints_exactly_one_line_naming_the_item(capsys):
    answer = [0.0, 1.0, 0.0, 1.0]
    with visible_test("2.1", "PE(0) for d = 4", "answer"):
        assert len(answer) == 4
    assert capsys.readouterr().out == "✓ 2.1 PE(0) for d = 4: format ok\n"


def test_an_undefined_answer_says_not_answered_yet_and_does_not_raise(capsys):
    with visible_test("2.2", "PE(1) for d = 4", "pe_d4_at_p"):
        assert len(pe_d4_at_p) == 4  # noqa: F821 (the answer this test is about is not defined)
    assert capsys.readouterr().out == "2.2 not answered yet\n"


def test_an_earlier_answer_that_is_missing_is_named():
    with visible_test("5.2", "the relative property", "relative_gap", "rope_rotate"):
        rope_rotate  # noqa: B018, F821
    assert progress._statuses["5.2"].reason == "it uses rope_rotate, which is not defined yet"


def test_a_failing_check_raises_as_before_and_is_recorded_with_its_reason(capsys):
    with pytest.raises(AssertionError, match="must have 4 entries"), visible_test("2.2", "PE(1)", "pe_d4_at_p"):
        raise AssertionError("pe_d4_at_p must have 4 entries, got 3")
    assert capsys.readouterr().out == ""
    assert progress._statuses["2.2"].status == progress.FAILED


def test_a_name_error_of_another_name_is_a_failure_not_an_unanswered_item():
    with pytest.raises(NameError), visible_test("2.4", "the whole table", "sinusoidal_table"):
        torhc  # noqa: B018, F821 (a typo in the student's code)
    assert progress._statuses["2.4"].status == progress.FAILED


def test_in_the_graders_kernel_an_unanswered_item_fails_its_cell(monkeypatch):
    monkeypatch.setenv(progress.GRADING_VARIABLE, "1")
    message = r"^2\.2 is not answered \(pe_d4_at_p is not defined\)$"
    with pytest.raises(NotAnswered, match=message), visible_test("2.2", "PE(1) for d = 4", "pe_d4_at_p"):
        pe_d4_at_p  # noqa: B018, F821
    assert issubclass(NotAnswered, AssertionError)  # nbgrader counts the cell as failed


def test_the_status_list_names_every_item_in_order(capsys):
    with visible_test("4.1", "a relative bias at work", "weights"):
        pass
    with visible_test("4.2", "T5 buckets", "t5_bucket"):
        t5_bucket  # noqa: B018, F821
    with pytest.raises(AssertionError), visible_test("Quiz 1", "", "quiz"):
        raise AssertionError("quiz must be one of A, B, C, D")
    capsys.readouterr()
    print_status("4.1", "4.2", "4.3", "4.6", "Quiz 1", written=("4.6",))
    lines = capsys.readouterr().out.splitlines()
    assert lines[1:6] == [
        "  ✓ 4.1 a relative bias at work: format ok",
        "  ○ 4.2 not answered yet",
        "  ? 4.3: not checked yet (run its test cell)",
        "  ✎ 4.6: written answer, graded by an instructor",
        "  ✗ Quiz 1: failing: quiz must be one of A, B, C, D",
    ]
    assert lines[6].startswith("1 passing, 1 not answered, 1 failing.")


# ------------------------------------------------------------------------------------------- the notebooks


def _grade_id(cell) -> str:
    return cell.metadata.get("nbgrader", {}).get("grade_id", "")


def _visible_test_call(cell) -> ast.Call:
    tree = ast.parse(cell.source.split("### BEGIN HIDDEN TESTS")[0])
    [statement] = tree.body
    assert isinstance(statement, ast.With), f"{_grade_id(cell)}: the visible tests are not one with-block"
    call = statement.items[0].context_expr
    assert isinstance(call, ast.Call) and call.func.id == "visible_test", _grade_id(cell)
    return call


def _items(notebook) -> list[tuple[str, str, tuple[str, ...]]]:
    items = []
    for cell in notebook.cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("grade") and cell.cell_type == "code":
            item, title, *answers = [ast.literal_eval(argument) for argument in _visible_test_call(cell).args]
            items.append((item, title, tuple(answers)))
    return items


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_every_test_cell_names_its_item_as_the_introduction_lists_it(assignment):
    notebook = nbformat.read(source_notebook(assignment), as_version=4)
    table = notebook.cells[0].source
    quiz_numbers = []
    for item, title, answers in _items(notebook):
        if item.startswith("Quiz "):
            quiz_numbers.append(int(item.split()[1]))
            assert title == ""
        else:
            number = item.split(" (")[0]  # "6.1 (a)" is listed whole, "4.4 (1 point)" by its number
            assert f"| {item} {title}" in table or f"| {number} {title}" in table, \
                f"{assignment}: {item} {title!r} is not in the table"
        assert answers, item
    assert quiz_numbers == list(range(1, len(quiz_numbers) + 1))


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_every_item_names_the_answers_its_solution_defines(assignment):
    notebook = nbformat.read(source_notebook(assignment), as_version=4)
    defined = set()
    for cell in notebook.cells:
        if cell.metadata.get("nbgrader", {}).get("solution") and cell.cell_type == "code":
            tree = ast.parse(cell.source)
            defined |= {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
            defined |= {node.name for node in tree.body if isinstance(node, ast.FunctionDef | ast.ClassDef)}
    for item, _, answers in _items(notebook):
        assert set(answers) <= defined, f"{assignment} {item}: {set(answers) - defined} is no answer"


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_the_last_cell_lists_every_item_in_order(assignment):
    notebook = nbformat.read(source_notebook(assignment), as_version=4)
    last = notebook.cells[-1]
    assert _grade_id(last) == "status" and last.metadata["nbgrader"]["locked"]
    call = ast.parse(last.source).body[0].value
    assert call.func.id == "print_status"
    listed = [ast.literal_eval(argument) for argument in call.args]
    written_ids = [
        _grade_id(cell) for cell in notebook.cells
        if cell.cell_type == "markdown" and cell.metadata.get("nbgrader", {}).get("grade")
    ]
    written = ast.literal_eval(call.keywords[0].value) if call.keywords else ()
    assert len(written) == len(written_ids)
    assert [item for item in listed if item not in written] == [item for item, _, _ in _items(notebook)]
    imports = next(cell for cell in notebook.cells if _grade_id(cell) == "imports")
    assert re.search(r"^from autograder\.student\.progress import (is_number, )?print_status, visible_test$", imports.source,
                     flags=re.MULTILINE), imports.source


@pytest.mark.slow
@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_restart_and_run_all_reaches_the_end_of_a_notebook_with_no_answer(assignment):
    from nbclient import NotebookClient

    notebook = nbformat.read(released_notebook(assignment), as_version=4)
    with tempfile.TemporaryDirectory(prefix="progress-") as name:
        write_kernelspec(Path(name))
        with kernel_environment_set(Path(name)):
            execute_in_own_loop(NotebookClient(notebook, timeout=300, kernel_name=KERNEL_NAME, allow_errors=False))
    shown = {}
    for cell in notebook.cells:
        if cell.metadata.get("nbgrader", {}).get("grade") and cell.cell_type == "code":
            [output] = cell.outputs
            shown[_grade_id(cell)] = output["data"]["text/plain"]
    unanswered = re.compile(r"(\d\.\d( \([a-e]\))?|Quiz \d) not answered yet")
    assert all(unanswered.fullmatch(line) for line in shown.values()), shown
    status = "".join(output.get("text", "") for output in notebook.cells[-1].outputs)
    assert f"0 passing, {len(shown)} not answered, 0 failing." in status
