r"""Per-student variants: the numerical items give every student parameters of their own.

A varied item (a hand-computed encoding, a prediction) asks the same question of every student with other
numbers: the position of an encoding, the distance of a dot product, the bucket counts of T5, ... Each
parameter is drawn from a short list of allowed values by a hash of the assignment, the item, the
parameter's name and the student ID,

.. math:: \text{index} = \operatorname{sha256}(\text{assignment} \,|\, \text{item} \,|\, \text{name} \,|\, \text{id}) \bmod |\text{values}|,

so that the draw needs no stored table, is the same in the student's notebook and in the grader, and differs
from student to student (an answer passed around a class is right for the students who drew the same
values only). The first allowed value of every parameter is the *one answer key*: the value every student
gets when the instructor turns variants off, with ``c.AutograderVariants.enabled = False`` in
``autograder/nbgrader_config.py`` (or ``python -m autograder grade --variants off`` for one batch).

Where the student ID comes from:

- in the student's notebook, from the ``STUDENT_ID = "..."`` line of its first code cell, else from
  ``JUPYTERHUB_USER`` (a JupyterHub sets it); :func:`your_parameters` prints them above the items;
- while grading, from the nbgrader student folder of the submission, which the grader puts in the kernel's
  environment (:data:`STUDENT_VARIABLE`, with :data:`ENABLED_VARIABLE`); a declared ``STUDENT_ID`` that
  differs is named in the feedback (:func:`declared_student_id`) and the folder's ID decides.

The expected values of an item are computed, for the student's parameters, by the item's ``constants``
function with ``posenc_ref`` (in the grader's process, never in the kernel), and replace the constants of
the same names in its hidden test (:func:`constants_source`). The hidden test keeps the constants of the
one answer key as literals, which a test of the course compares with ``constants`` at the first values.
"""

from __future__ import annotations

import ast
import hashlib
import math
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from autograder import CONFIG_FILE

CONFIG_SECTION = "AutograderVariants"
STUDENT_VARIABLE = "AUTOGRADER_STUDENT_ID"  # the student folder of the submission, in the grader's kernel
ENABLED_VARIABLE = "AUTOGRADER_VARIANTS"  # "1" or "0", in the grader's kernel
HUB_VARIABLE = "JUPYTERHUB_USER"
DECLARATION = "STUDENT_ID"
MAX_ID = 200  # characters; a longer ID is refused (nbgrader's student IDs are short names)


@dataclass(frozen=True)
class Variant:
    """One varied item: where it is, its parameters and what its hidden test expects for them.

    ``choices`` maps each parameter name to its allowed values, the one answer key's first. ``describe``
    says the parameters in words ("position p = 7"). ``constants`` returns, for a dict of parameters, the
    secret constants of the item's hidden test (``EXPECTED``, ``MISTAKES``, ...), computed with ``posenc_ref``.
    """

    assignment: str
    item: str  # as the notebook numbers it: "2.2"
    test_cell: str  # grade_id of the test cell whose hidden part uses the parameters
    choices: Mapping[str, tuple[Any, ...]]
    describe: Callable[[Mapping[str, Any]], str]
    constants: Callable[[Mapping[str, Any]], dict[str, Any]]

    @property
    def answer_key(self) -> dict[str, Any]:
        """The parameters of the one answer key: the first allowed value of each."""
        return {name: values[0] for name, values in self.choices.items()}


def check_student_id(name: str, student_id: Any) -> str:
    """``student_id`` (a string, or a whole number such as 12345) as a string stripped of surrounding blanks;
    TypeError / ValueError naming ``name`` otherwise."""
    if type(student_id) is int and student_id >= 0:
        student_id = str(student_id)
    if type(student_id) is not str:
        raise TypeError(f"{name} must be a string such as \"jdoe\", got {type(student_id).__name__} {student_id!r}")
    stripped = student_id.strip()
    if len(stripped) > MAX_ID or any(not character.isprintable() for character in stripped):
        raise ValueError(f"{name} must be a printable ID of at most {MAX_ID} characters, got {student_id[:40]!r}")
    return stripped


def draw(variant: Variant, student_id: str) -> dict[str, Any]:
    """The parameters of ``student_id`` for ``variant`` (see the module's docstring for the formula)."""
    drawn = {}
    for name, values in variant.choices.items():
        key = f"{variant.assignment}|{variant.item}|{name}|{student_id}".encode()
        index = int.from_bytes(hashlib.sha256(key).digest()[:8], "big") % len(values)
        drawn[name] = values[index]
    return drawn


def variants_of(assignment: str) -> tuple[Variant, ...]:
    """The varied items of ``assignment``, in the notebook's order (none for an assignment without any)."""
    from autograder.variants.registry import VARIANTS

    return VARIANTS.get(assignment, ())


def variant_of_cell(assignment: str, test_cell: str) -> Variant | None:
    return next((variant for variant in variants_of(assignment) if variant.test_cell == test_cell), None)


def enabled_in_config() -> bool:
    """``c.AutograderVariants.enabled`` of ``autograder/nbgrader_config.py`` (True when it is not set)."""
    from traitlets.config.loader import PyFileConfigLoader

    config = PyFileConfigLoader(CONFIG_FILE.name, path=str(CONFIG_FILE.parent)).load_config()
    value = config.get(CONFIG_SECTION, {}).get("enabled", True)
    if type(value) is not bool:
        raise ValueError(f"c.{CONFIG_SECTION}.enabled in {CONFIG_FILE} must be True or False, got {value!r}")
    return value


def parameters_for(assignment: str, student_id: str, *, enabled: bool) -> dict[str, dict[str, Any]]:
    """Every varied item's parameters, by item number: the student's when ``enabled`` and the ID is not empty,
    else the answer key's (an empty ID is nobody's: the instructor's source notebook runs with it)."""
    return {
        variant.item: draw(variant, student_id) if enabled and student_id else variant.answer_key
        for variant in variants_of(assignment)
    }


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


def declared_student_id(notebook: Any) -> str | None:
    """The ID of the notebook's ``STUDENT_ID = "..."`` line, read without running anything; None when the
    notebook has no such line, or leaves it empty."""
    for cell in notebook.get("cells", []):
        if cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        source = "".join(source) if isinstance(source, list) else str(source)
        if DECLARATION not in source:
            continue
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        for statement in tree.body:
            if (
                isinstance(statement, ast.Assign)
                and [getattr(target, "id", None) for target in statement.targets] == [DECLARATION]
                and isinstance(statement.value, ast.Constant)
                and type(statement.value.value) in (str, int)
            ):
                declared = str(statement.value.value).strip()
                return declared[:MAX_ID] or None
    return None


# ---------------------------------------------------------------------------------------------------------
# In the student's notebook
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class YourParameters(Mapping):
    """A student's parameters for the varied items of one assignment, by item number (``parameters["2.2"]``
    is a dict such as ``{"position": 7}``); :meth:`show` prints the line above an item."""

    assignment: str
    student_id: str
    source: str  # where the ID came from, in words
    enabled: bool
    by_item: Mapping[str, Mapping[str, Any]]

    def __getitem__(self, item: str) -> Mapping[str, Any]:
        if item not in self.by_item:
            raise KeyError(f"item must be one of {sorted(self.by_item)} (the varied items of {self.assignment}), got {item!r}")
        return dict(self.by_item[item])

    def __iter__(self) -> Iterator[str]:
        return iter(self.by_item)

    def __len__(self) -> int:
        return len(self.by_item)

    def line(self, item: str) -> str:
        parameters = self[item]  # a KeyError that lists the varied items, for any other
        variant = next(variant for variant in variants_of(self.assignment) if variant.item == item)
        return f"Your parameters for {item}: {variant.describe(parameters)}"

    def show(self, item: str) -> None:
        """Print the parameters of ``item``, and what is missing if the student ID is not set."""
        print(self.line(item) + ("" if self.student_id or not self.enabled else "  (set STUDENT_ID first!)"))

    def summary(self) -> str:
        if not self.enabled:
            head = "Variants are turned off for this class: every student answers with the same parameters."
        elif self.student_id:
            head = f"Student ID: {self.student_id} ({self.source}). These parameters are yours alone:"
        else:
            head = (
                f"{DECLARATION} is empty: write your student ID between the quotes of {DECLARATION} = \"\" in the "
                "cell above and run the notebook again. The parameters below are the one answer key's, not yours yet:"
            )
        return "\n".join([head, *(f"  {self.line(item)}" for item in self.by_item)])


def your_parameters(assignment: str, student_id: str = "") -> YourParameters:
    """The parameters of the student working in this notebook, printed, for every varied item of ``assignment``.

    The ID is ``student_id`` (the notebook's ``STUDENT_ID``), else ``$JUPYTERHUB_USER``; in the grader's
    kernel it is the submission's student folder.
    """
    from autograder.progress import grading

    if grading():  # the folder decides; a malformed declaration is the feedback's business, not a crash
        student, source = os.environ.get(STUDENT_VARIABLE, ""), "the folder of your submission"
        enabled = os.environ.get(ENABLED_VARIABLE, "1") == "1"
    else:
        declared = check_student_id("STUDENT_ID", student_id)
        hub_user = os.environ.get(HUB_VARIABLE, "").strip()
        student, source = (declared, "STUDENT_ID") if declared else (hub_user, f"${HUB_VARIABLE}")
        enabled = enabled_in_config()
    parameters = YourParameters(assignment, student, source, enabled, parameters_for(assignment, student, enabled=enabled))
    print(parameters.summary())
    return parameters
