"""The local executor when a worker process dies (autograder.executors.local).

``concurrent.futures`` fails every submission a broken pool still holds. Here one submission kills its worker
(``os._exit``, as the out-of-memory killer would) in a batch of eight on two workers: it alone gets 0 and the
reason, marked as the grader's failure; every other submission is graded, once.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

import pytest

from autograder.executors.local import NO_WORKER, WORKER_DIED, run_local, start_workers
from autograder.sandbox.launcher import bwrap_problem
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


def where_it_runs(task: Task) -> Result:
    """In a worker: its parent, the environment variable the test set, and its temporary folder, as the message."""
    import tempfile

    seen = {"parent": os.getppid(), "mark": os.environ.get("AUTOGRADER_TEST_MARK"), "tmp": tempfile.gettempdir()}
    return Result(task.student, task.assignment, [Item("first_test", 2.0, 2.0, "passed", json.dumps(seen))])


def test_workers_are_forked_by_a_warm_single_threaded_server_with_the_callers_environment(tmp_path, monkeypatch):
    from autograder.executors import local

    (tmp_path / "worker-logs").mkdir()
    first: list[Result] = []
    run_local([_task(tmp_path, "s0")], 1, tmp_path / "jupyter", tmp_path / "worker-logs", first.append,
              grade=where_it_runs)  # the fork server runs from here on, with the environment it started with
    server = local._FORK_SERVER._forkserver_pid
    assert server is not None and json.loads(first[0].items[0].message)["parent"] == server
    maps = Path(f"/proc/{server}/maps").read_text()
    assert "libtorch" in maps  # torch was imported once, into the server, before any worker was forked
    assert len(os.listdir(f"/proc/{server}/task")) == 1  # so a fork loses no thread

    temporary = tmp_path / "tmp"
    temporary.mkdir()
    monkeypatch.setenv("AUTOGRADER_TEST_MARK", "set after the server started")
    monkeypatch.setenv("TMPDIR", str(temporary))
    delivered: list[Result] = []
    pool = start_workers(2, tmp_path / "jupyter", tmp_path / "worker-logs")
    run_local([_task(tmp_path, f"s{index}") for index in range(4)], 2, tmp_path / "jupyter",
              tmp_path / "worker-logs", delivered.append, grade=where_it_runs, pool=pool)
    seen = [json.loads(result.items[0].message) for result in delivered]
    assert len(seen) == 4
    assert all(entry == {"parent": server, "mark": "set after the server started", "tmp": str(temporary)}
               for entry in seen), seen

    local.stop_fork_server()  # as the bench does before each run: the next pool starts a server of its own
    assert not Path(f"/proc/{server}").exists()
    after: list[Result] = []
    run_local([_task(tmp_path, "s9")], 1, tmp_path / "jupyter", tmp_path / "worker-logs", after.append,
              grade=where_it_runs)
    assert json.loads(after[0].items[0].message)["parent"] == local._FORK_SERVER._forkserver_pid != server


def stage_of_this_worker(task: Task) -> Result:
    """In a worker: full marks when the worker's warm stage for ``task`` runs already, as its first submission
    finds it; 0 otherwise."""
    from autograder import pipeline

    server = pipeline._SERVER
    running = server is not None and server.alive() and server.key == pipeline._server_key(
        pipeline.StageSpec.of(task))
    held = [] if server is None else [str(server.context.devices), *(
        str(folder) for folder in (server.context.groups.whole.folders if server.context.groups else ()))]
    return Result(task.student, task.assignment,
                  [Item("first_test", 2.0 if running else 0.0, 2.0, "passed", json.dumps(held))])


@pytest.mark.skipif(bwrap_problem() is not None, reason=f"bwrap cannot run here: {bwrap_problem()}")
@pytest.mark.parametrize("given", [True, False], ids=["stage given", "no stage"])
def test_a_worker_started_for_a_stage_has_it_running_before_its_first_submission(tmp_path, given):
    from dataclasses import replace

    from autograder.course import TemporaryCourse
    from autograder.pipeline import StageSpec
    from autograder.sandbox import cgroups
    from autograder.sandbox.kernel_view import kernel_packages
    from autograder.sandbox.launcher import Limits

    course = TemporaryCourse(tmp_path / "template", ["01_permutation"])
    view = kernel_packages(tmp_path / "kernel-view")
    spec = StageSpec(course.directory, course.jupyter_directory, str(view), Limits(), cgroups.problem() is None)
    (tmp_path / "worker-logs").mkdir()
    pool = start_workers(1, course.jupyter_directory, tmp_path / "worker-logs", spec if given else None)
    task = replace(_task(tmp_path, "s0"), template=spec.template, jupyter=spec.jupyter, kernel_view=spec.kernel_view,
                   limits=spec.limits, use_cgroup=spec.use_cgroup)
    delivered: list[Result] = []
    run_local([task], 1, course.jupyter_directory, tmp_path / "worker-logs", delivered.append,
              grade=stage_of_this_worker, pool=pool)
    assert delivered[0].score == (2.0 if given else 0.0)
    held = json.loads(delivered[0].items[0].message)  # the stage's device files and control groups
    assert bool(held) == given
    assert not [folder for folder in held if Path(folder).exists()]  # gone with the worker
