"""Every quiz question shows its options in an order of each student's own, and the grader expects the letter
under which that student sees the right option.

The right option is read here from the source notebook's hidden test (the letter the source writes) and its
text from the options cell; what a student sees is read from what ``show_options`` displays for them; the
grader's letter comes from :mod:`autograder.variants.quizzes`. Three readings, one answer.
"""

from __future__ import annotations

import ast
import collections
import re

import nbformat
import pytest
from item_grading import hidden_constants

from autograder import ASSIGNMENTS, released_notebook, source_notebook
from autograder.student.parameters import (
    QUIZ_ORDERS,
    QUIZZES,
    draw,
    parameters_for,
    varied_item,
    your_parameters,
)
from autograder.student.progress import item_labels
from autograder.variants import variants_of

STUDENTS = [f"student{number:03d}" for number in range(240)]


def quiz_cells(assignment: str) -> dict[str, tuple[str, list[str]]]:
    """``label -> (test cell id, the four option texts as the source writes them)``, from the released notebook."""
    notebook = nbformat.read(released_notebook(assignment), as_version=4)
    labels = item_labels(notebook.cells)
    options = {}
    for cell in notebook.cells:
        if cell.cell_type == "code" and cell.source.startswith("my_parameters.show_options("):
            call = ast.parse(cell.source).body[0].value
            options[call.args[0].value] = [element.value for element in call.args[1].elts]
    return {label: (grade_id, options[label]) for grade_id, label in labels.items() if label.startswith("Quiz")}


def shown(assignment: str, label: str, student: str, monkeypatch, capsys) -> dict[str, str]:
    """The options as ``student`` sees them: letter -> text, read from what the notebook's cell displays."""
    monkeypatch.delenv("AUTOGRADER_GRADING", raising=False)
    parameters = your_parameters(assignment, student)
    capsys.readouterr()
    parameters.show_options(label, quiz_cells(assignment)[label][1])
    lines = capsys.readouterr().out.splitlines()
    return {line[0]: line[3:] for line in lines if re.match(r"[ABCD]  ", line)}


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_every_quiz_question_is_listed_and_varied(assignment):
    assert QUIZZES[assignment] == tuple(quiz_cells(assignment))
    varied = {variant.item: variant for variant in variants_of(assignment)}
    for label in QUIZZES[assignment]:
        assert varied[label].test_cell == quiz_cells(assignment)[label][0]


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_each_student_is_expected_to_give_the_letter_printed_beside_the_right_option(assignment, monkeypatch, capsys):
    varied = {variant.item: variant for variant in variants_of(assignment)}
    for label, (grade_id, options) in quiz_cells(assignment).items():
        source_letter = hidden_constants(assignment, grade_id)["EXPECTED_CHOICE"]
        right_text = options["ABCD".index(source_letter)]
        for student in STUDENTS[:12]:
            seen = shown(assignment, label, student, monkeypatch, capsys)
            assert sorted(seen.values()) == sorted(options), (label, student)
            letter = next(letter for letter, text in seen.items() if text == right_text)
            parameters = parameters_for(assignment, student, enabled=True)[label]
            assert varied[label].constants(parameters) == {"EXPECTED_CHOICE": letter}, (label, student)


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_the_right_letter_is_spread_over_the_class(assignment):
    """Over 240 students each letter is the right one for about a quarter: a letter passed around is wrong for
    most of the class."""
    for label in QUIZZES[assignment]:
        variant = next(variant for variant in variants_of(assignment) if variant.item == label)
        letters = collections.Counter(
            variant.constants(draw(varied_item(assignment, label), student))["EXPECTED_CHOICE"] for student in STUDENTS
        )
        assert set(letters) == set("ABCD") and max(letters.values()) <= 0.35 * len(STUDENTS), (label, letters)


def test_the_orders_are_every_order_of_the_four_options_the_source_s_first():
    assert len(set(QUIZ_ORDERS)) == 24 and QUIZ_ORDERS[0] == "ABCD"
    assert all(sorted(order) == list("ABCD") for order in QUIZ_ORDERS)


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_the_source_solution_answers_with_the_student_s_letter(assignment):
    """The source's answer cell asks ``my_parameters.letter`` for the option its hidden test names, so that the
    planted full student is right whatever order it drew."""
    notebook = nbformat.read(source_notebook(assignment), as_version=4)
    labels = item_labels(notebook.cells)
    sources = {cell.metadata.get("nbgrader", {}).get("grade_id"): cell.source for cell in notebook.cells}
    for grade_id, label in labels.items():
        if not label.startswith("Quiz"):
            continue
        source_letter = hidden_constants(assignment, grade_id)["EXPECTED_CHOICE"]
        answer = sources[grade_id.removesuffix("_test") + "_answer"]
        assert f'my_parameters.letter("{label}", "{source_letter}")' in answer, (assignment, label)
