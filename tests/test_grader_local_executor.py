"""The local executor when a worker process dies (autograder.executors.local).

``concurrent.futures`` fails every submission a broken pool still holds. Here one submission kills its worker
(``os._exit``, as the out-of-memory killer would) in a batch of eight on two workers: it alone gets 0 and the
reason, marked as the grader's failure; every other submission is graded, once.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pytest

from autograder.executors.local import NO_WORKER, WORKER_DIED, run_local, start_workers
from autograder.types import Item, LayoutItem, Result, Task

pytestmark = pytest.mark.slow

KILLER = "s2"


def grade_or_die(task: Task) -> Result:
    """In a worker: the submission of KILLER ends the worker's process; any other gets full marks."""
    if task.student == KILLER:
        os._exit(9)
    return Result(task.student, task.assignment, [Item("first_test", 2.0, 2.0, "passed", "")])


def _task(tmp_path: Path, student: str) -> Task:
    return Task(
        student=student, assignment="01_permutation", notebook=tmp_path / "n.ipynb", template=tmp_path,
        directory=tmp_path / "tasks" / student, layout=(LayoutItem("first_test", 2.0, "code"),), notes=(),
        feedback=tmp_path / "feedback" / student / "f.html", log=tmp_path / "logs" / student / "01_permutation.log",
        timeout=None, autograded=None,
    )


@pytest.mark.parametrize("started", [False, True], ids=["own pool", "workers started before"])
def test_a_worker_that_dies_costs_its_own_submission_only(tmp_path, started):
    tasks = [_task(tmp_path, f"s{index}") for index in range(8)]
    delivered: list[Result] = []
    (tmp_path / "worker-logs").mkdir()
    pool = start_workers(2, tmp_path / "jupyter", tmp_path / "worker-logs") if started else None
    run_local(tasks, 2, tmp_path / "jupyter", tmp_path / "worker-logs", delivered.append, grade=grade_or_die,
              pool=pool)
    assert Counter(result.student for result in delivered) == Counter(task.student for task in tasks)  # once each
    by_student = {result.student: result for result in delivered}
    killed = by_student.pop(KILLER)
    assert killed.grader_failure and killed.score == 0
    assert killed.reason == WORKER_DIED.format("twice, the second time alone")
    assert all(result.reason is None and result.score == 2.0 and not result.grader_failure
               for result in by_student.values()), by_student


def never_begins(task: Task) -> Result:
    raise AssertionError("never called: the workers die first")


def test_workers_that_cannot_start_end_the_batch_with_a_reason_for_each(tmp_path):
    tasks = [_task(tmp_path, f"s{index}") for index in range(3)]
    delivered: list[Result] = []
    # The workers' log folder is missing: each worker fails in its initializer, before it begins a task.
    run_local(tasks, 2, tmp_path / "jupyter", tmp_path / "no-such-folder", delivered.append, grade=never_begins)
    assert sorted(result.student for result in delivered) == ["s0", "s1", "s2"]
    assert all(result.grader_failure and result.reason == NO_WORKER for result in delivered)
