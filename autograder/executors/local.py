"""The local executor: a pool of worker processes on this machine, one kernel at a time each.

A worker that dies (the machine's out-of-memory killer, a crash in native code, an operator's ``kill``) breaks
its pool, and ``concurrent.futures`` then fails every submission the pool still held, begun or not. So each
worker marks a submission as begun (a file in a folder of the batch) before it grades it, and after a break:

- a submission that no worker had begun is handed to a new pool, as if nothing happened;
- one that a worker had begun is graded again alone, in a pool of one worker; if that worker dies too, the
  submission is the one that kills workers, and it gets 0 and the reason.

So one death costs the batch a new pool, never the other students' grades.

The workers are forked by a fork server of this module's own (:data:`_FORK_SERVER`, multiprocessing's
``forkserver`` method with its own server process): a single-threaded process, started once, that has imported
what grading needs (:mod:`autograder.executors.worker_image`), so that a worker costs a fork where a spawned one
imported torch again (seconds of a core per worker, per batch and per new pool). It is not multiprocessing's
shared fork server, which :mod:`autograder.verdicts.verdict` starts with its own imports: a check forked from an
image that holds torch would begin near its address-space limit. A worker takes the environment of the process
that made its pool, not the fork server's (:func:`_init_worker`), as a spawned one would.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import io
import multiprocessing.context
import multiprocessing.forkserver
import multiprocessing.popen_forkserver
import multiprocessing.reduction
import multiprocessing.spawn
import multiprocessing.util
import os
import tempfile
import threading
import warnings
from collections.abc import Callable
from pathlib import Path

from autograder.pipeline import StageSpec, close_stage, grade_task, start_stage, write_ungraded
from autograder.student.kernels import kernel_environment
from autograder.types import Result, Task

WORKER_DIED = "the grader's worker process failed (it died while grading this submission, {})"
NO_WORKER = "the grader's worker process failed (the workers died before they began any submission)"


class _ForkServerPopen(multiprocessing.popen_forkserver.Popen):
    """multiprocessing's ``forkserver`` start, through :data:`_FORK_SERVER`: its ``_launch`` with the server named."""

    def _launch(self, process_obj) -> None:
        preparation = multiprocessing.spawn.get_preparation_data(process_obj._name)  # sys.path, the folder, main
        message = io.BytesIO()
        multiprocessing.context.set_spawning_popen(self)  # the pool's pipes are passed as descriptors
        try:
            multiprocessing.reduction.dump(preparation, message)
            multiprocessing.reduction.dump(process_obj, message)
        finally:
            multiprocessing.context.set_spawning_popen(None)
        self.sentinel, writer = _FORK_SERVER.connect_to_new_process(self._fds)
        parent_writer = os.dup(writer)  # the child sees its parent's end as the end of this descriptor
        self.finalizer = multiprocessing.util.Finalize(self, multiprocessing.util.close_fds,
                                                       (parent_writer, self.sentinel))
        with open(writer, "wb", closefd=True) as pipe:
            pipe.write(message.getbuffer())
        self.pid = multiprocessing.forkserver.read_signed(self.sentinel)


class _WorkerProcess(multiprocessing.context.ForkServerProcess):
    @staticmethod
    def _Popen(process_obj):
        return _ForkServerPopen(process_obj)


class _WorkerContext(multiprocessing.context.ForkServerContext):
    Process = _WorkerProcess


_FORK_SERVER = multiprocessing.forkserver.ForkServer()
_FORK_SERVER.set_forkserver_preload(["autograder.executors.worker_image"])
_CONTEXT = _WorkerContext()


def stop_fork_server() -> None:
    """End the fork server, if it runs: the next pool starts a new one, which imports everything again (a
    measurement of a whole batch, :mod:`autograder.bench`, starts each run from there, as a new command does)."""
    _FORK_SERVER._stop()


def _init_worker(jupyter_directory: str, log_directory: str, environment: dict[str, str]) -> None:
    """This worker's environment is ``environment`` (its pool's maker's, where the fork server kept its own);
    kernels of this worker run this interpreter; the worker's own output goes to a log file (each kernel has its
    own, autograder.sandbox)."""
    os.environ.clear()
    os.environ.update(environment)
    tempfile.tempdir = None  # found again from this environment's TMPDIR when first asked for
    os.environ.update(kernel_environment(Path(jupyter_directory)))
    warnings.filterwarnings("ignore")  # SQLAlchemy's and traitlets' warnings belong to nbgrader, not to us
    log_file = os.open(
        Path(log_directory) / f"worker-{os.getpid()}.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND
    )
    os.dup2(log_file, 1)
    os.dup2(log_file, 2)
    # A forked worker ends without Python's exit functions (multiprocessing's os._exit), so its warm stage's
    # cleanup (its control groups, its device files) runs among multiprocessing's own finalizers.
    multiprocessing.util.Finalize(None, close_stage, exitpriority=10)


def _grade_marked(task: Task, begun: str, grade: Callable[[Task], Result]) -> Result:
    """In the worker: mark ``task`` as begun (the file ``begun``), then ``grade`` it."""
    Path(begun).touch()
    return grade(task)


def start_workers(jobs: int, jupyter_directory: Path, worker_logs: Path,
                  stage: StageSpec | None = None) -> concurrent.futures.ProcessPoolExecutor:
    """A pool of ``jobs`` workers, started now, for :func:`run_local`: the workers (and the fork server, with
    its imports, on the first pool of this process) start in a thread of their own while the caller still
    prepares the batch (the template course, the gradebook), on the cores that preparation leaves idle, and each
    starts its warm grading stage for ``stage`` (:func:`autograder.pipeline.start_stage`) if it is given. The
    pool's first :meth:`~concurrent.futures.Executor.submit` in the caller waits for the workers to exist."""
    pool = _new_pool(jobs, jupyter_directory, worker_logs)
    threading.Thread(target=_start, args=(pool, jobs, stage), name="autograder-workers", daemon=True).start()
    return pool


def _start(pool: concurrent.futures.ProcessPoolExecutor, jobs: int, stage: StageSpec | None) -> None:
    """Start ``jobs`` workers of ``pool`` (a submission starts one while none is idle)."""
    with contextlib.suppress(Exception):  # the caller's own submissions meet the same failure, and report it
        for _ in range(jobs):
            pool.submit(_warm_up, stage)


def _warm_up(stage: StageSpec | None) -> None:
    """In a worker: import what its first submission would (:mod:`autograder.executors.worker_image`, already
    imported where the fork server imported it), and start its warm grading stage for ``stage``."""
    import autograder.executors.worker_image  # noqa: F401

    if stage is not None:
        start_stage(stage)


def _new_pool(jobs: int, jupyter_directory: Path, worker_logs: Path) -> concurrent.futures.ProcessPoolExecutor:
    return concurrent.futures.ProcessPoolExecutor(
        max_workers=jobs,
        mp_context=_CONTEXT,  # forked by a single-threaded server, never by this process (which may hold threads)
        initializer=_init_worker,
        initargs=(str(jupyter_directory), str(worker_logs), dict(os.environ)),
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
