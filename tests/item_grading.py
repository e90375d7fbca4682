"""One item of a source notebook graded here as the grader grades it, without a notebook kernel.

The answer runs in a fresh namespace after the notebook's imports (and any locked ``setup`` cells, such as the
code an item asks to diagnose); then the visible part of the item's test cell, then the kernel's part of its
hidden tests with the grader's reporter, whose reports :func:`autograder.verdicts.verdict.decide` judges with
the constants and checks that never enter a kernel. Used by the tests of the items in
``tests/test_grader_items_*.py``.
"""

from __future__ import annotations

import math
from typing import Any

import nbformat

from autograder import source_notebook
from autograder.verdicts import verdict
from autograder.verdicts.verdict import (
    HIDDEN_BEGIN,
    decide,
    hidden_section,
    parse_reports,
    split_hidden_tests,
)

MARKER = "AUTOGRADER-REPORT-" + "1" * 32
VISIBLE_FAILURE = "visible test: "


def source_cells(assignment: str) -> dict[str, str]:
    """The source of every cell of an assignment's source notebook, by grade id."""
    notebook = nbformat.read(source_notebook(assignment), as_version=4)
    return {cell.metadata["nbgrader"]["grade_id"]: cell.source for cell in notebook.cells}


def hidden_constants(assignment: str, test_id: str) -> dict[str, Any]:
    """The constants of a hidden test (EXPECTED, MISTAKES, ...), as the grader reads them."""
    split = split_hidden_tests(hidden_section(source_cells(assignment)[test_id]))
    constants: dict[str, Any] = {}
    exec(compile(split.constants, "<constants>", "exec"), {}, constants)  # noqa: S102 (source/: trusted)
    return constants


def parameter_cells(cells: dict[str, str]) -> tuple[str, ...]:
    """The cells that define ``my_parameters`` (with an empty STUDENT_ID: the one answer key's), if any."""
    return ("student_id", "my_parameters") if "my_parameters" in cells else ()


def grade_item(monkeypatch, assignment: str, test_id: str, answer: str | None = None, *,
               values: dict[str, Any] | None = None, setup: tuple[str, ...] = ()) -> tuple[bool, str]:
    """The verdict ``(passed, message)`` of test cell ``test_id`` on an answer given as the source of an answer
    cell (``answer``) or as the values it defines (``values``). A failure of the visible test fails the item
    before its hidden tests run; its message then starts with :data:`VISIBLE_FAILURE`."""
    cells = source_cells(assignment)
    shown: list[str] = []

    def display(data, raw=False, **_):
        if isinstance(data, dict) and verdict.REPORT_MIME in data:
            shown.append(data[verdict.REPORT_MIME])

    monkeypatch.setattr("IPython.display.display", display)
    namespace: dict[str, Any] = {}
    for grade_id in ("imports", *parameter_cells(cells), *setup):
        exec(cells[grade_id], namespace)  # noqa: S102 (source/: trusted)
    if answer is not None:
        exec(answer, namespace)  # noqa: S102 (answers written in the tests)
    namespace.update(values or {})
    source = cells[test_id]
    try:
        exec(source.split(HIDDEN_BEGIN)[0], namespace)  # noqa: S102
    except AssertionError as error:
        return False, f"{VISIBLE_FAILURE}{error}"
    split = split_hidden_tests(hidden_section(source))
    assert split is not None, f"{test_id}: its hidden tests could not be split"
    try:
        exec(f"{verdict.reporter_source(MARKER)}\n{split.kernel_source}", namespace)  # noqa: S102
        kernel_error = None
    except Exception as error:  # noqa: BLE001 (a coercion in the kernel refuses an answer there)
        kernel_error = f"{type(error).__name__}: {error}"
    reports, problem = parse_reports("\n".join(shown), MARKER, split)
    return decide(split, reports, problem or kernel_error)


def adam_l2_entry(learning_rate: float, steps: int, start: float, weight_decay: float = 0.1) -> float:
    """An entry whose only gradient is Adam's L2 term weight_decay * w (3.7), stepped by Adam's update written out
    here (Kingma and Ba, with PyTorch's defaults: betas 0.9 and 0.999, eps 1e-8, bias-corrected moments)."""
    w, m, v = start, 0.0, 0.0
    for t in range(1, steps + 1):
        g = weight_decay * w
        m, v = 0.9 * m + 0.1 * g, 0.999 * v + 0.001 * g * g
        w -= learning_rate * (m / (1 - 0.9**t)) / (math.sqrt(v / (1 - 0.999**t)) + 1e-8)
    return w
