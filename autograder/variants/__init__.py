r"""Per-student variants, the grader's side: what each varied item expects for a student's parameters.

The parameters themselves (their allowed values, the draw from the student ID, ``your_parameters`` in the
notebook) are the student's side, in :mod:`autograder.student.parameters`, which this package imports and re-exports;
nothing there imports this package, and the grader's kernel cannot import it
(:mod:`autograder.sandbox.kernel_view`).

The expected values of an item are computed, for the student's parameters, by the item's ``constants``
function with ``posenc_ref`` (in the grader's process, never in the kernel), and replace the constants of
the same names in its hidden test (:func:`constants_source`). The hidden test keeps the constants of the
one answer key as literals, which a test of the course compares with ``constants`` at the first values.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from autograder.student.parameters import (
    ENABLED_VARIABLE,
    STUDENT_VARIABLE,
    VariedItem,
    declared_student_id,
    draw,
    enabled_in_config,
    parameters_for,
    varied_item,
    your_parameters,
)

__all__ = [
    "ENABLED_VARIABLE",
    "STUDENT_VARIABLE",
    "Variant",
    "constants_source",
    "declared_student_id",
    "distinct_mistakes",
    "draw",
    "enabled_in_config",
    "parameters_for",
    "variant_of_cell",
    "variants_of",
    "your_parameters",
]


@dataclass(frozen=True)
class Variant:
    """One varied item as the grader sees it: the student's side of it (:class:`autograder.student.parameters.VariedItem`:
    where it is, its parameters) and what its hidden test expects for them.

    ``constants`` returns, for a dict of parameters, the secret constants of the item's hidden test
    (``EXPECTED``, ``MISTAKES``, ...), computed with ``posenc_ref``.
    """

    varied: VariedItem
    test_cell: str  # grade_id of the test cell whose hidden part uses the parameters
    constants: Callable[[Mapping[str, Any]], dict[str, Any]]

    @classmethod
    def of(cls, assignment: str, item: str, test_cell: str,
           constants: Callable[[Mapping[str, Any]], dict[str, Any]]) -> Variant:
        """The variant of the varied item ``item`` of ``assignment`` (KeyError when the student's side has none)."""
        return cls(varied_item(assignment, item), test_cell, constants)

    @property
    def assignment(self) -> str:
        return self.varied.assignment

    @property
    def item(self) -> str:
        return self.varied.item

    @property
    def choices(self) -> Mapping[str, tuple[Any, ...]]:
        return self.varied.choices

    @property
    def describe(self) -> Callable[[Mapping[str, Any]], str]:
        return self.varied.describe

    @property
    def answer_key(self) -> dict[str, Any]:
        """The parameters of the one answer key: the first allowed value of each."""
        return self.varied.answer_key


def variants_of(assignment: str) -> tuple[Variant, ...]:
    """The varied items of ``assignment``, in the notebook's order (none for an assignment without any)."""
    from autograder.variants.registry import VARIANTS

    return VARIANTS.get(assignment, ())


def variant_of_cell(assignment: str, test_cell: str) -> Variant | None:
    return next((variant for variant in variants_of(assignment) if variant.test_cell == test_cell), None)


def distinct_mistakes(right: Any, mistakes: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """The ``(why, answer)`` mistakes whose answer is neither the right one for these parameters (that is no
    mistake) nor the answer of a mistake listed before."""
    kept, seen = [], [right]
    for why, wrong in mistakes:
        if wrong not in seen:
            kept.append((why, wrong))
            seen.append(wrong)
    return kept


def _literal(value: Any) -> str:
    """Python source that evaluates to ``value`` (numbers, strings, lists, tuples), exactly."""
    if type(value) is float:
        if not math.isfinite(value):
            raise ValueError(f"an expected value must be finite, got {value!r}")
        return repr(value)
    if type(value) in (int, str, bool):
        return repr(value)
    if type(value) in (list, tuple):
        inner = ", ".join(_literal(item) for item in value)
        return f"[{inner}]" if type(value) is list else f"({inner}{',' if len(value) == 1 else ''})"
    if type(value) is dict:
        return "{" + ", ".join(f"{_literal(key)}: {_literal(item)}" for key, item in value.items()) + "}"
    raise TypeError(f"an expected value must be a number, a string, or a list or dict of them, got {type(value).__name__}")


def constants_source(variant: Variant, parameters: Mapping[str, Any]) -> str:
    """The assignments ``NAME = <literal>`` of the item's secret constants for ``parameters``, which the
    grader runs after the hidden test's own constants (so that these replace the answer key's)."""
    return "\n".join(f"{name} = {_literal(value)}" for name, value in variant.constants(parameters).items())
