r"""The quiz questions, the grader's side: the letter each student must give, for the order of the options drawn for
them (:data:`autograder.student.parameters.QUIZ_ORDERS`).

The hidden test of a quiz question names the right option as the source writes it, in the constant
``EXPECTED_CHOICE``; for a student whose order is :math:`o` (the source's letters in the order shown), the right
letter is the place of that option in :math:`o` (:func:`autograder.student.parameters.shown_letter`), and it replaces the
constant as any varied item's expected values do. The right options are read from ``source/``, which only the
grader has.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Mapping
from functools import partial
from typing import Any

from autograder import source_notebook
from autograder.student.parameters import QUIZZES, shown_letter
from autograder.student.progress import item_labels
from autograder.variants import Variant

CONSTANT = "EXPECTED_CHOICE"


def _source_letter(hidden_test: str) -> str | None:
    """The value of ``EXPECTED_CHOICE = "B"`` in a test cell's source, or None."""
    for statement in ast.parse(hidden_test).body:
        if (
            isinstance(statement, ast.Assign)
            and [getattr(target, "id", None) for target in statement.targets] == [CONSTANT]
            and isinstance(statement.value, ast.Constant)
        ):
            return statement.value.value
    return None


def _expected(source_letter: str, parameters: Mapping[str, Any]) -> dict[str, Any]:
    return {CONSTANT: shown_letter(parameters["order"], source_letter)}


def quiz_variants(assignment: str) -> tuple[Variant, ...]:
    """A variant for every quiz question of ``assignment``; ValueError when one has no ``EXPECTED_CHOICE``."""
    cells = json.loads(source_notebook(assignment).read_text(encoding="utf-8"))["cells"]
    labels = item_labels(cells)  # grade_id -> "Quiz 1"
    found = []
    for cell in cells:
        grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if labels.get(grade_id, "") not in QUIZZES.get(assignment, ()):
            continue
        letter = _source_letter("".join(cell["source"]))
        if letter is None:
            raise ValueError(f"{assignment}: the test cell {grade_id} of {labels[grade_id]} sets no {CONSTANT}")
        found.append(Variant.of(assignment, labels[grade_id], grade_id, partial(_expected, letter)))
    return tuple(found)
