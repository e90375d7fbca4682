"""The data that passes between the grader's stages: a submission's task, its items and its result.

Every stage reads and writes these, and nothing else: the intake makes :class:`Task`s, an executor runs
each through :func:`autograder.pipeline.grade_task` (the sandbox, the verdicts, the feedback page) and hands
back a :class:`Result`, which the gradebook records and the reports write out.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import nbformat

from autograder.sandbox.launcher import Limits
from autograder.verdicts.verdict import Split

NOT_SUBMITTED = "no submission"


@dataclass(frozen=True)
class Item:
    """One graded cell of a submission."""

    grade_id: str
    score: float
    max_score: float
    status: str  # "passed", "failed", "manual" (waiting for a grader), "not graded"
    message: str = ""



@dataclass(frozen=True)
class LayoutItem:
    """A graded cell of an assignment, as released."""

    grade_id: str
    points: float
    cell_type: str


@dataclass
class Result:
    """The grade of one student for one assignment."""

    student: str
    assignment: str
    items: list[Item]
    notes: list[str] = field(default_factory=list)
    reason: str | None = None  # why nothing could be graded
    # True when the grader, not the submission, failed (a worker died, the grader raised, a disk was full, the
    # kernel's control group could not be made): the result is reported but never reused as a grade.
    grader_failure: bool = False
    # Seconds of each phase of this submission's grading (autograder.sandbox.phases), for the bench's profile.
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def score(self) -> float:
        return sum(item.score for item in self.items)

    @property
    def max_score(self) -> float:
        return sum(item.max_score for item in self.items)


@dataclass(frozen=True)
class Task:
    """Everything a worker needs to grade one submission (picklable)."""

    student: str
    assignment: str
    notebook: Path
    template: Path
    directory: Path
    layout: tuple[LayoutItem, ...]
    notes: tuple[str, ...]
    feedback: Path
    log: Path
    timeout: int | None
    splits: dict[str, Split] = field(default_factory=dict)  # test cells decided in the grader, by grade_id
    # The splits with this student's expected values, and their parameters in words, by grade_id: computed by
    # the worker (autograder.pipeline), where torch stays imported from one submission to the next; empty: the
    # grading stage computes them.
    student_splits: dict[str, tuple[Split, str]] = field(default_factory=dict)
    marker: str = ""
    hidden: tuple[str, ...] = ()  # paths the kernel must not see
    limits: Limits = field(default_factory=Limits)
    use_bwrap: bool = True
    use_cgroup: bool = False
    variants: bool = True  # the varied items' parameters drawn from ``student`` (False: the one answer key)
    withhold_answers: bool = False  # a wrong answer's message says no more than that it is wrong
    kernel_view: str = ""  # what the kernel imports (autograder.sandbox.kernel_view); "": a cached copy
    autograded: Path | None = None  # where the sanitized autograded notebook goes (the formgrader reads it)
    jupyter: Path | None = None  # the folder of the kernelspec (default: the first of JUPYTER_PATH)

    @staticmethod
    def with_notes(task: Task, notes: list[str]) -> Task:
        return replace(task, notes=tuple(notes))


def layout_of(released: nbformat.NotebookNode) -> tuple[LayoutItem, ...]:
    """The graded cells of a released notebook, in notebook order."""
    items = []
    for cell in released.cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("grade"):
            items.append(LayoutItem(meta["grade_id"], float(meta.get("points", 0)), cell.cell_type))
    return tuple(items)


def zero_items(layout: tuple[LayoutItem, ...], status: str, message: str = "") -> list[Item]:
    return [Item(item.grade_id, 0.0, item.points, status, message) for item in layout]
