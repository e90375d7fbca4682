"""autograder.sandbox.phases: where a submission's grading time goes, as the bench's profile reads it.

The phases are computed from moments given here by hand; the stage's moments are refused unless typed as the
crossing allows; and a real graded submission carries every phase, each one non-negative, their sum within
the time the whole grade took as measured around it, and the kernel's start and the notebook's cells inside
the autograde step that holds them.
"""

from __future__ import annotations

import json
import math
import time

import pytest
from planted import filled, solutions, write_submission

from autograder.bench import profile
from autograder.sandbox import phases
from autograder.sandbox.crossing import AnswerError, read_answer
from autograder.types import Item, Result

ASSIGNMENT = "01_permutation"
EVERY_MARK = ("begun", "spawned", *phases.STAGE_MARKS, "exited", "received", "done")


def test_each_phase_is_the_time_between_its_two_moments():
    marks = {name: 10.0 + index for index, name in enumerate(EVERY_MARK)}  # one second apart
    seconds = phases.phase_seconds(marks)
    assert list(seconds) == [name for name, _, _ in phases.PHASES]
    assert set(seconds.values()) == {1.0}
    marks["kernel_started"] = marks["kernel_starting"] + 4.5  # the cells then took -3.5 s: not kept
    seconds = phases.phase_seconds(marks)
    assert seconds["kernel start"] == 4.5 and "notebook cells" not in seconds


def test_a_moment_outside_the_workers_span_is_not_believed():
    marks = {"begun": 100.0, "main": 50.0, "imported": 101.0, "read": 102.0, "done": 110.0}
    seconds = phases.phase_seconds(marks)
    assert "stage imports" not in seconds  # "main" lies before "begun"
    assert seconds == {"read and repair": 1.0}
    assert phases.phase_seconds({"main": 1.0, "imported": 2.0}) == {}  # no span of the worker's: nothing


@pytest.mark.parametrize("marks", [
    {"spawned": 1.0},  # a worker's moment is the worker's to mark
    {"main": "1.0"},
    {"main": float("nan")},
    {"main": float("inf")},
    {"main": True},
    ["main", 1.0],
])
def test_the_crossing_refuses_marks_of_another_shape(marks):
    answer = {"reason": "not a notebook", "notes": [], "log": "", "marks": marks}
    with pytest.raises(AnswerError, match="marks"):
        read_answer(json.dumps(answer, allow_nan=True).encode("ascii"), ())


def test_the_profile_averages_each_phase_over_the_notebooks_that_went_through_it():
    def result(seconds):
        return Result("s", ASSIGNMENT, [Item("a", 1.0, 1.0, "passed")], seconds=seconds)

    measured = profile([result({"kernel start": 1.0, "notebook cells": 3.0}),
                        result({"kernel start": 2.0}),  # its kernel died: no cells
                        result({})])  # a kept result, graded by an earlier run: not timed
    rows = {row["phase"]: row for row in measured["phases"]}
    assert measured["notebooks"] == 2 and measured["mean_seconds_per_notebook"] == 3.0  # (4 + 2) / 2
    assert rows["kernel start"]["mean_seconds"] == 1.5 and rows["kernel start"]["notebooks"] == 2
    assert rows["notebook cells"]["mean_seconds"] == 3.0 and rows["notebook cells"]["notebooks"] == 1
    assert rows["kernel start"]["share"] == 0.5 and rows["notebook cells"]["share"] == 0.5  # 3 s and 3 s of 6


def test_a_graded_submission_carries_every_phase(tmp_path):
    from autograder.grade import grade

    submissions = tmp_path / "class"
    write_submission(submissions, "ada", ASSIGNMENT, filled(ASSIGNMENT, solutions(ASSIGNMENT)))
    start = time.monotonic()
    (result,) = grade(submissions, tmp_path / "out", jobs=1)
    elapsed = time.monotonic() - start
    assert result.score == result.max_score > 0
    assert list(result.seconds) == [name for name, _, _ in phases.PHASES]
    assert all(value >= 0 and math.isfinite(value) for value in result.seconds.values())
    assert sum(result.seconds.values()) <= elapsed
    assert result.seconds["kernel start"] > 0.05 and result.seconds["notebook cells"] > 0.05
