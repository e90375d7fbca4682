"""The local executor: a pool of worker processes on this machine, one kernel at a time each.

A worker that dies (the machine's out-of-memory killer, a crash in native code, an operator's ``kill``) breaks
its pool, and ``concurrent.futures`` then fails every submission the pool still held, begun or not. So each
worker marks a submission as begun (a file in a folder of the batch) before it grades it, and after a break:

- a submission that no worker had begun is handed to a new pool, as if nothing happened;
- one that a worker had begun is graded again alone, in a pool of one worker; if that worker dies too, the
  submission is the one that kills workers, and it gets 0 and the reason.

So one death costs the batch a new pool, never the other students' grades.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import contextlib
import multiprocessing
import os
import sys
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path

from autograder.pipeline import grade_task, write_ungraded
from autograder.student.kernels import kernel_environment
from autograder.types import Result, Task

WORKER_DIED = "the grader's worker process failed (it died while grading this submission, {})"
NO_WORKER = "the grader's worker process failed (the workers died before they began any submission)"


def _init_worker(jupyter_directory: str, log_directory: str) -> None:
    """Kernels of this worker run this interpreter; the worker's own output goes to a log file (each kernel has
    its own, autograder.sandbox)."""
    os.environ.update(kernel_environment(Path(jupyter_directory)))
    warnings.filterwarnings("ignore")  # SQLAlchemy's and traitlets' warnings belong to nbgrader, not to us
    log_file = os.open(
        Path(log_directory) / f"worker-{os.getpid()}.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND
    )
    os.dup2(log_file, 1)
    os.dup2(log_file, 2)
    atexit.register(_end_now)  # registered last, so run first once the pool has let the worker go


def _end_now() -> None:
    """A worker's last step, once the pool has told it to end: its output flushed, then its process ended
    without Python's finalization, which tears down torch, nbgrader and SQLAlchemy one module at a time (about a
    second of every worker, which the batch waited for). Nothing of a worker's is left to save by then: its
    results went back as they were made, and it holds no file or database of the batch open."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(0)


def _grade_marked(task: Task, begun: str, grade: Callable[[Task], Result]) -> Result:
    """In the worker: mark ``task`` as begun (the file ``begun``), then ``grade`` it."""
    Path(begun).touch()
    return grade(task)


def start_workers(jobs: int, jupyter_directory: Path, worker_logs: Path) -> concurrent.futures.ProcessPoolExecutor:
    """A pool of ``jobs`` workers, started now, each importing what grading needs (:func:`_warm_up`), for
    :func:`run_local`: the workers start while the caller still prepares the batch (the template course, the
    gradebook), on the cores that preparation leaves idle."""
    pool = _new_pool(jobs, jupyter_directory, worker_logs)
    for _ in range(jobs):
        pool.submit(_warm_up)
    return pool


def _warm_up() -> None:
    """In a worker: import what its first submission would (torch, for the expected values of varied items, and
    torch's compiler, which ``torch.optim`` imports on its first use: a second of the first 03_learned)."""
    import torch._dynamo  # noqa: F401 (imports torch first)

    import autograder.variants  # noqa: F401


def _new_pool(jobs: int, jupyter_directory: Path, worker_logs: Path) -> concurrent.futures.ProcessPoolExecutor:
    return concurrent.futures.ProcessPoolExecutor(
        max_workers=jobs,
        mp_context=multiprocessing.get_context("spawn"),  # no fork of a process that may hold threads
        initializer=_init_worker,
        initargs=(str(jupyter_directory), str(worker_logs)),
    )


def run_local(
    tasks: list[Task], jobs: int, jupyter_directory: Path, worker_logs: Path, deliver: Callable[[Result], None],
    grade: Callable[[Task], Result] | None = None, pool: concurrent.futures.ProcessPoolExecutor | None = None,
) -> None:
    """Grade ``tasks`` in ``jobs`` worker processes (``grade``, default :func:`autograder.pipeline.grade_task`: a
    function of a module, which the workers import; ``pool``: workers already started by :func:`start_workers`,
    used first and shut down here); hand each result to ``deliver`` as soon as it is ready. A worker process that
    dies gives 0 and a reason to the submission it was grading, and to no other (see the module docstring);
    workers that die before they begin any give every submission left 0 and that reason."""
    grade = grade or grade_task
    with tempfile.TemporaryDirectory(prefix="autograder-begun-") as marks:
        begun = {id(task): str(Path(marks) / str(index)) for index, task in enumerate(tasks)}
        waiting = list(tasks)
        while waiting:
            pool = pool or _new_pool(min(jobs, len(waiting)), jupyter_directory, worker_logs)
            broken = _run_pool(pool, waiting, deliver, begun, grade)
            pool = None
            suspects = [task for task in broken if os.path.exists(begun[id(task)])]
            suspected = {id(task) for task in suspects}
            if broken and not suspects:  # no worker began a task: the pool's workers cannot start at all
                for task in broken:
                    deliver(write_ungraded(task, NO_WORKER, grader_failure=True))
                return
            for task in suspects:  # each alone: a second death is its own
                alone = _new_pool(1, jupyter_directory, worker_logs)
                if _run_pool(alone, [task], deliver, begun, grade):
                    deliver(write_ungraded(task, WORKER_DIED.format("twice, the second time alone"),
                                           grader_failure=True))
            waiting = [task for task in broken if id(task) not in suspected]
    if pool is not None:  # started, but given no task
        pool.shutdown()


def _run_pool(
    pool: concurrent.futures.ProcessPoolExecutor, tasks: list[Task], deliver: Callable[[Result], None],
    begun: dict[int, str], grade: Callable[[Task], Result],
) -> list[Task]:
    """``tasks`` through ``pool``, each result delivered, then the pool shut down; returns the tasks that the
    pool failed because one of its workers died (none when no worker died)."""
    broken = []
    with pool:
        futures = {}
        for task in tasks:
            try:
                futures[pool.submit(_grade_marked, task, begun[id(task)], grade)] = task
            except concurrent.futures.process.BrokenProcessPool:  # a worker died before (while warming up)
                broken.append(task)
        for future in concurrent.futures.as_completed(futures):
            task = futures[future]
            try:
                result = future.result()
            except concurrent.futures.process.BrokenProcessPool:
                broken.append(task)
                continue
            except Exception as error:  # noqa: BLE001 (the task could not reach its worker, or come back)
                result = write_ungraded(task, f"the grader's worker process failed ({type(error).__name__})",
                                        grader_failure=True)
            deliver(result)
    return broken
