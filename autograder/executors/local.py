"""The local executor: a pool of worker processes on this machine, one kernel at a time each."""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import os
import warnings
from collections.abc import Callable
from pathlib import Path

from autograder.pipeline import grade_task, write_ungraded
from autograder.student.kernels import kernel_environment
from autograder.types import Result, Task


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


def run_local(
    tasks: list[Task], jobs: int, jupyter_directory: Path, worker_logs: Path, deliver: Callable[[Result], None]
) -> None:
    """Grade ``tasks`` in ``jobs`` worker processes; hand each result to ``deliver`` as soon as it is ready.
    A worker process that dies gives its submission 0 and a reason; the others go on."""
    context = multiprocessing.get_context("spawn")  # no fork of a process that may hold threads
    with concurrent.futures.ProcessPoolExecutor(
        max_workers=jobs,
        mp_context=context,
        initializer=_init_worker,
        initargs=(str(jupyter_directory), str(worker_logs)),
    ) as pool:
        futures = {pool.submit(grade_task, task): task for task in tasks}
        for future in concurrent.futures.as_completed(futures):
            task = futures[future]
            try:
                result = future.result()
            except Exception as error:  # noqa: BLE001 (the worker process itself died)
                result = write_ungraded(task, f"the grader's worker process failed ({type(error).__name__})", grader_failure=True)
            deliver(result)
