"""What a student sees while working: one line per visible test, and the status of every item of a notebook.

A test cell of ``source/`` wraps its visible checks in :func:`visible_test`::

    with visible_test("2.2", "PE(p) for d = 4", "pe_d4_at_p"):
        assert isinstance(pe_d4_at_p, (list, tuple)), "pe_d4_at_p must be a list of numbers"

and the block ends in one of three ways:

- the checks pass: it prints ``✓ 2.2 PE(p) for d = 4: format ok`` (the form only, never the answer's value);
- a name the item's answer defines (``pe_d4_at_p``) is not defined, because the answer cell still holds
  nbgrader's stub (a comment, ``# YOUR CODE HERE``) or was never run: it prints ``2.2 not answered yet`` and
  the notebook runs on, so that *Restart & Run All* reaches the end with items still open;
- a check fails: the error is raised as before, with its message.

At grading time an unanswered item must score 0, and nbgrader counts a test cell that does not raise as
passed. Two things make sure it fails:

1. the grader's kernel runs with :data:`GRADING_VARIABLE` set (:func:`autograder.sandbox.launcher.kernel_environment`
   builds the kernel's whole environment); there an unanswered item raises :class:`NotAnswered`, whose
   message is the feedback;
2. whatever the student's code does to that variable or to this module, the hidden part of the cell, which
   runs next, reads the same answer: an undefined name raises in the kernel, no value is reported, and the
   grader fails the item (:mod:`autograder.verdicts.verdict`).

Each outcome is also shown as display data of :data:`STATUS_MIME` (read by ``python -m autograder check``,
:mod:`autograder.student.check`) and kept in this module, for :func:`print_status`, the last cell of every notebook.

Outside the kernel, :func:`item_labels` reads the same numbers from a notebook's cells, so that ``check`` and the
grader's reports name an item as the notebook does (``2.2``, ``Quiz 1``) rather than by its nbgrader cell id.
"""

from __future__ import annotations

import ast
import decimal
import math
import numbers
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self

GRADING_VARIABLE = "AUTOGRADER_GRADING"
STATUS_MIME = "application/vnd.autograder.item-status+json"
PASSED, NOT_ANSWERED, FAILED = "passed", "not answered", "failed"
WRITTEN = "written answer"
NOT_RUN = "not run"
MAX_REASON = 300


def is_number(value: Any) -> bool:
    """Whether ``value`` is a finite real number of a kind the hidden tests read: ``int`` (not ``bool``),
    ``float`` and its subclasses (``numpy.float64``), numpy's other real scalars, ``fractions.Fraction``,
    ``decimal.Decimal`` and sympy's numbers (``Rational(3, 4)``, ``Integer(12)``, ``Float``).

    The visible tests use it, so that an exact answer the students' guide accepts is not refused by the form
    check before the hidden test reads it exactly (:func:`autograder.student.answers.as_number`)."""
    if isinstance(value, bool):
        return False
    kind = type(value)
    is_sympy_number = kind.__module__.startswith("sympy.") and bool(getattr(value, "is_Number", False))
    if not (isinstance(value, (numbers.Real, decimal.Decimal)) or is_sympy_number):
        return False
    try:
        return math.isfinite(float(value))
    except (TypeError, ValueError, OverflowError, decimal.InvalidOperation):
        return False


class NotAnswered(AssertionError):
    """An item whose answer is missing, in the grader's kernel: the item scores 0 and says why."""


@dataclass(frozen=True)
class ItemStatus:
    """Where one item stands: its number (``"2.2"``), title, status and, for a failure, the reason."""

    item: str
    title: str
    status: str
    reason: str = ""


def status_line(status: ItemStatus, *, in_list: bool = False) -> str:
    """The one line a student reads about an item, under its test cell or (``in_list``) in a list of items."""
    label = f"{status.item} {status.title}".strip()
    if status.status == PASSED:
        return f"✓ {label}: format ok"
    if status.status == NOT_ANSWERED:
        line = f"{status.item} not answered yet" + (f" ({status.reason})" if status.reason else "")
        return f"○ {line}" if in_list else line
    if status.status == FAILED:
        return f"✗ {label}: failing: {status.reason}"
    if status.status == WRITTEN:
        return f"✎ {label}: written answer, graded by an instructor"
    return f"? {label}: not checked yet (run its test cell)"


def grading() -> bool:
    """Whether this process is a kernel started by the grader (``python -m autograder grade``)."""
    return os.environ.get(GRADING_VARIABLE) == "1"


_statuses: dict[str, ItemStatus] = {}


def _show(status: ItemStatus) -> None:
    """Print the item's line, with its status as data that ``python -m autograder check`` reads."""
    _statuses[status.item] = status
    line = status_line(status)
    try:
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:
        get_ipython = None
    if get_ipython is None or get_ipython() is None:
        print(line)
        return
    data = {"item": status.item, "title": status.title, "status": status.status, "reason": status.reason}
    display({"text/plain": line, STATUS_MIME: data}, raw=True)


def _reason(error: BaseException) -> str:
    text = str(error) if isinstance(error, AssertionError) and str(error) else f"{type(error).__name__}: {error}"
    return text if len(text) <= MAX_REASON else text[: MAX_REASON - 3] + "..."


class visible_test:
    """The visible checks of one item; see the module's docstring.

    ``item`` and ``title`` are the item's number and title as the notebook's introduction lists them;
    ``answers`` are the names its answer defines (or the names of earlier answers the checks call).
    """

    def __init__(self, item: str, title: str, *answers: str) -> None:
        self.item, self.title, self.answers = item, title, answers

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> bool:
        if error is None:
            _show(ItemStatus(self.item, self.title, PASSED))
            return False
        missing = getattr(error, "name", None) if kind is NameError else None
        if missing is not None and missing in self.answers:
            own = missing == self.answers[0]
            reason = "" if own else f"it uses {missing}, which is not defined yet"
            if grading():
                raise NotAnswered(f"{self.item} is not answered ({missing} is not defined)") from None
            _show(ItemStatus(self.item, self.title, NOT_ANSWERED, reason))
            return True
        if isinstance(error, Exception):
            _statuses[self.item] = ItemStatus(self.item, self.title, FAILED, _reason(error))
        return False


def print_status(*items: str, written: tuple[str, ...] = ()) -> None:
    """Print one line for each of ``items`` (numbers, in the notebook's order) from the visible tests run in
    this kernel: passing, not answered, failing with the reason, or not run yet; the ``written`` ones are
    graded by an instructor."""
    lines = []
    for item in items:
        if item in written:
            status = ItemStatus(item, "", WRITTEN)
        else:
            status = _statuses.get(item, ItemStatus(item, "", NOT_RUN))
        lines.append("  " + status_line(status, in_list=True))
    counts = {kind: sum(_statuses.get(item, ItemStatus(item, "", NOT_RUN)).status == kind for item in items)
              for kind in (PASSED, NOT_ANSWERED, FAILED)}
    print(
        "The items of this notebook, from the visible tests run in this kernel (they check the form of an "
        "answer; hidden tests decide the points):"
    )
    print("\n".join(lines))
    print(
        f"{counts[PASSED]} passing, {counts[NOT_ANSWERED]} not answered, {counts[FAILED]} failing. "
        "Run `python -m autograder check` on the saved notebook to check it in a fresh kernel."
    )


# The number of an item in the first line of a markdown cell: "## 4.6 A bias ..." or "**Quiz 1.** Which ...".
# Any other heading ("## Quiz (1 point each)", "## Where you stand") ends the item before it.
_HEADING = re.compile(r"#+\s+(?P<number>\d+(?:\.\d+)+)?")
_QUIZ = re.compile(r"\*\*(?P<number>Quiz \d+)\.?\*\*")


def _visible_test_item(source: str) -> str | None:
    """The first argument of the first ``visible_test("2.2", ...)`` call in a code cell, if it is a string."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and getattr(node.func, "id", getattr(node.func, "attr", None)) == "visible_test"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            return node.args[0].value
    return None


def item_labels(cells: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """The item each graded cell of a notebook belongs to, as a student reads it, by nbgrader grade id.

    A test cell is the item its :class:`visible_test` names (``"2.2"``, ``"Quiz 1"``); a written answer, or a
    test cell without one, is the item whose heading comes last above it (``## 4.6 ...``, ``**Quiz 1.**``);
    a cell with neither is named by its grade id. ``cells`` are a notebook's cells (nbformat's or plain dicts).
    """
    labels: dict[str, str] = {}
    heading: str | None = None
    for cell in cells:
        metadata = cell.get("metadata")
        meta = metadata.get("nbgrader") if isinstance(metadata, Mapping) else None
        meta = meta if isinstance(meta, Mapping) else {}  # a student's notebook may hold anything there
        source = cell.get("source", "")
        source = "".join(source) if isinstance(source, list) else str(source)
        first_line = source.lstrip().split("\n", 1)[0]
        is_heading = cell.get("cell_type") == "markdown" and not meta.get("solution")  # an answer heads nothing
        if is_heading and (match := _HEADING.match(first_line) or _QUIZ.match(first_line)):
            heading = match.group("number")
        grade_id = meta.get("grade_id")
        if meta.get("grade") and isinstance(grade_id, str):
            label = _visible_test_item(source) if cell.get("cell_type") == "code" else None
            labels[grade_id] = label or heading or grade_id
    return labels
