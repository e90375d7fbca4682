"""The Dask executor: every submission a task on an existing ``dask.distributed`` cluster.

``python -m autograder grade PATH --out DIR --scheduler tls://HOST:PORT --cluster-credentials CREDENTIALS``
connects to the scheduler over mutual TLS (:mod:`autograder.executors.credentials`: only an end that shows a
certificate of the instructor's own authority is let in; a ``tcp://`` scheduler is refused, for anyone who
reaches it could run code on the workers and read the hidden tests), then:

1. checks every worker before any task runs (:func:`check_worker`): the same course version as the main
   process (:func:`autograder.course.course_version`), bubblewrap able to make the sandbox, the kernel's
   packages importable, one thread (a task sets its kernel's sandbox in the process's environment) and not a
   daemonic process (the verdicts fork their checks). A worker that fails gets no task, and the command says
   which worker and why;
2. ships the course to the workers from the main process (no shared file system): the template course (the
   sources, the hardened gradebook) as one archive, unpacked once on every checked worker
   (:func:`install_course`); each submission travels with its task as bytes;
3. runs :func:`autograder.pipeline.grade_task` on the worker, in a folder of its own, and sends back the
   result, the feedback page and the log; the main process writes them and records the result (it stays the
   gradebook's only writer), as each arrives.

Faults: a worker that dies mid-task has its task run again on another worker by the scheduler; a submission
whose task has ended as many workers as the scheduler allows (its ``distributed.scheduler.allowed-failures``,
3 by default) gets 0 with that reason, and the batch goes on. When the
scheduler itself goes away, :class:`SchedulerLost` ends the command; what was recorded before stays recorded
(:mod:`autograder.records`), so running the command again resumes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import multiprocessing
import os
import shutil
import tarfile
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

from autograder.sandbox.kernel_view import STUDENT_IMPORTS, kernel_packages
from autograder.types import Result, Task

CONNECT_SECONDS = 30
KERNEL_PACKAGES = ("ipykernel", "nbgrader", "numpy", "torch", *STUDENT_IMPORTS)
KERNEL_VIEW = "kernel-view"  # beside the unpacked course: what the worker's kernels import


class SchedulerLost(RuntimeError):
    """The scheduler went away in the middle of a batch."""


@dataclasses.dataclass(frozen=True)
class Shipped:
    """What comes back from a worker for one task."""

    result: Result
    feedback: bytes
    log: bytes
    autograded: bytes = b""  # empty when the submission could not be graded


def check_worker(expected_version: str, dask_worker=None) -> str | None:
    """Why this worker cannot grade (None when it can). Runs on the worker (``Client.run`` passes it as
    ``dask_worker``)."""
    from autograder.course import course_version
    from autograder.sandbox.launcher import bwrap_problem

    problems = []
    if (version := course_version()) != expected_version:
        problems.append(f"its course version is {version[:12]}, the grader's is {expected_version[:12]}")
    if dask_worker is not None and dask_worker.state.nthreads != 1:
        problems.append(f"it runs {dask_worker.state.nthreads} threads; start it with --nthreads 1")
    if multiprocessing.current_process().daemon:
        problems.append("it is a daemonic process; start it with --no-nanny (or DASK_DISTRIBUTED__WORKER__DAEMON=False)")
    if (problem := bwrap_problem()) is not None:
        problems.append(problem)
    for package in KERNEL_PACKAGES:
        try:
            __import__(package)
        except Exception as error:  # noqa: BLE001 (any import failure disqualifies the worker)
            problems.append(f"the kernel cannot import {package} ({type(error).__name__}: {error})")
    return "; ".join(problems) or None


def pack_course(template: Path) -> bytes:
    """The template course (``source/`` and the gradebook) as a gzipped tar archive."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        archive.add(template, arcname="course")
    return buffer.getvalue()


_courses: dict[str, Path] = {}  # the template courses unpacked in this worker process, by key
_kernelspec: dict[str, Path] = {}
_lock = threading.Lock()


def install_course(archive: bytes, key: str) -> None:
    """Unpack the template course ``archive`` in this worker process, under ``key``. Runs on the worker
    (``Client.run``), before any task: the tasks then depend on nothing, so the scheduler hands a worker one
    task at a time and a worker that dies takes few tasks with it."""
    with _lock:
        if key not in _courses:
            folder = Path(tempfile.mkdtemp(prefix="autograder-course-"))
            with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as bundle:
                bundle.extractall(folder, filter="data")
            kernel_packages(folder / KERNEL_VIEW)  # from this worker's own checkout, of the same course version
            _courses[key] = folder / "course"


def grade_on_worker(course_key: str, task: Task, notebook: bytes) -> Shipped:
    """Grade one submission on this worker, in a folder of its own; send back what the main process writes.

    The task's paths are the main process's: they are replaced by paths here.
    """
    from autograder.course import write_kernelspec
    from autograder.pipeline import grade_task
    from autograder.student.kernels import kernel_environment

    template = _courses.get(course_key)
    if template is None:
        raise RuntimeError("the course was not installed on this worker (a worker that joined after the check)")
    with _lock:
        if "jupyter" not in _kernelspec:  # kernels of this worker run its own interpreter
            _kernelspec["jupyter"] = Path(tempfile.mkdtemp(prefix="autograder-jupyter-"))
            write_kernelspec(_kernelspec["jupyter"])
            os.environ.update(kernel_environment(_kernelspec["jupyter"]))
    work = Path(tempfile.mkdtemp(prefix="autograder-task-"))
    try:
        local = dataclasses.replace(
            task,
            notebook=work / "submitted" / task.notebook.name,
            template=template,
            directory=work / "task",
            feedback=work / "feedback.html",
            log=work / "log.txt",
            autograded=work / "autograded.ipynb",
            hidden=(str(work), str(template.parent)),
            jupyter=_kernelspec["jupyter"],
            kernel_view=str(template.parent / KERNEL_VIEW),
        )
        local.notebook.parent.mkdir(parents=True)
        local.notebook.write_bytes(notebook)
        result = grade_task(local)
        return Shipped(
            result, _read_or_empty(local.feedback), _read_or_empty(local.log), _read_or_empty(local.autograded)
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _read_or_empty(path: Path) -> bytes:
    return path.read_bytes() if path.exists() else b""


def _allowed_failures() -> int:
    import dask

    return int(dask.config.get("distributed.scheduler.allowed-failures"))


def check_cluster_address(scheduler: str, credentials: Path | None) -> None:
    """Refuse a scheduler the grader does not talk to: one that is not ``tls://``, or no credentials.

    Raises:
        ValueError: naming ``--scheduler`` or ``--cluster-credentials`` and what is allowed.
    """
    if not scheduler.startswith("tls://"):
        raise ValueError(
            f"--scheduler must be a tls:// address (mutual TLS with the cluster's credentials), got {scheduler!r}: "
            "over tcp:// anyone who reaches the scheduler can run code on the workers and read the hidden tests "
            "(book/guide_instructors.md, 'Grading on a cluster')")
    if credentials is None:
        raise ValueError("--scheduler needs --cluster-credentials DIR (python -m autograder cluster-credentials "
                         "--out DIR makes them)")


def _connect(scheduler: str, credentials: Path | None):
    from distributed import Client

    from autograder.executors.credentials import cluster_security

    check_cluster_address(scheduler, credentials)
    security = cluster_security(credentials)
    try:
        return Client(scheduler, timeout=CONNECT_SECONDS, set_as_default=False, security=security)
    except (OSError, TimeoutError, ValueError) as error:
        raise ValueError(f"scheduler {scheduler!r} cannot be reached ({type(error).__name__}: {error})") from error


def _lost(error: BaseException) -> bool:
    """Whether ``error`` says that the client lost its scheduler (rather than that one task failed)."""
    from distributed.comm.core import CommClosedError

    if getattr(error, "reason", None) == "scheduler-connection-lost":  # the futures cancelled by the client
        return True
    return isinstance(error, CommClosedError | OSError | TimeoutError) or "not running" in str(error)


def _received(future, task: Task, allowed: int) -> Result:
    """The result of one finished task, its page and log written where the main process keeps them; 0 with the
    reason when the task failed. Re-raises when the scheduler itself is lost."""
    from distributed.scheduler import KilledWorker

    from autograder.pipeline import write_ungraded

    try:
        shipped = future.result()
    except KilledWorker:
        return write_ungraded(task, f"grading it ended {allowed + 1} worker(s), more than the scheduler allows ({allowed})", grader_failure=True)
    except Exception as error:  # one task's failure stays with its submission
        if _lost(error):
            raise
        return write_ungraded(task, f"the grader's worker failed ({type(error).__name__}: {str(error)[:300]})", grader_failure=True)
    written = [(shipped.feedback, task.feedback), (shipped.log, task.log)]
    if shipped.autograded and task.autograded is not None:
        written.append((shipped.autograded, task.autograded))
    for data, path in written:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return shipped.result


def run_dask(
    tasks: list[Task],
    scheduler: str,
    template: Path,
    deliver: Callable[[Result], None],
    warn: Callable[[str], None],
    *,
    version: str,
    credentials: Path | None = None,
    remote: Callable = grade_on_worker,
) -> None:
    """Grade ``tasks`` on the cluster of ``scheduler``; hand each result to ``deliver`` as it arrives.

    ``warn`` receives a line for every worker that failed its check. ``credentials``: the folder of the
    cluster's credentials (:func:`autograder.executors.credentials.cluster_security`). ``remote`` is the
    function run on the workers (tests replace it to fail on purpose).

    Raises:
        ValueError: the scheduler is not tls://, the credentials are missing or open to other accounts, the
            scheduler cannot be reached, or no worker passed its check.
        SchedulerLost: the scheduler went away before every task was done.
    """
    from distributed import as_completed

    client = _connect(scheduler, credentials)
    try:
        checks = client.run(check_worker, version)
        good = sorted(worker for worker, problem in checks.items() if problem is None)
        for worker, problem in sorted(checks.items()):
            if problem is not None:
                warn(f"the worker {worker} got no task: {problem}")
        if not good:
            reasons = "; ".join(f"{worker}: {problem}" for worker, problem in sorted(checks.items()))
            raise ValueError(f"scheduler {scheduler!r}: no worker passed its check ({reasons or 'no worker connected'})")
        allowed = client.run_on_scheduler(_allowed_failures)
        archive = pack_course(template)
        course_key = hashlib.sha256(archive).hexdigest()
        client.run(install_course, archive, course_key, workers=good)
        futures = {}
        batch = course_key[:12]  # keys unique to this course and run: a long-lived cluster grades many batches
        for task in tasks:
            future = client.submit(
                remote, course_key, task, task.notebook.read_bytes(), key=f"grade-{batch}-{task.directory.name}",
                workers=good, allow_other_workers=False, retries=0, pure=False,
            )
            futures[future] = task
        try:
            with client.as_current():
                for future in as_completed(futures):
                    deliver(_received(future, futures[future], allowed))
        except Exception as error:
            if _lost(error):
                cause = str(error).splitlines()[0] if str(error) else ""
                raise SchedulerLost(f"the scheduler {scheduler} went away ({type(error).__name__}: {cause})") from error
            raise
    finally:
        try:
            client.close(timeout=5)
        except Exception:  # noqa: BLE001,S110 (a client whose scheduler is gone may not close cleanly)
            pass
