"""The Dask executor: every submission a task on an existing ``dask.distributed`` cluster.

``python -m autograder grade PATH --out DIR --scheduler tls://HOST:PORT --cluster-credentials CREDENTIALS``
grades on the cluster of that scheduler. The grader's own process never connects to it: Dask unpickles what
its peers send, so one sandboxed process, the bridge (:mod:`autograder.executors.bridge`), is the cluster's
client and sends the grader JSON only. The bridge connects over mutual TLS
(:mod:`autograder.executors.credentials`: only an end that shows a certificate of the instructor's own
authority is let in; a ``tcp://`` scheduler is refused, for anyone who reaches it could run code on the workers
and read the hidden tests), then:

1. checks every worker before any task runs (:func:`check_worker`): the same course version as the grader
   (:func:`autograder.course.course_version`), bubblewrap able to make the sandbox, the kernel's packages
   importable, one thread (a task sets its kernel's sandbox in the process's environment) and not a daemonic
   process (the verdicts fork their checks). A worker that fails gets no task, and the command says which
   worker and why;
2. ships the course to the workers (no shared file system): the template course (the sources, the hardened
   gradebook), packed by the grader as one archive, unpacked once on every checked worker
   (:func:`install_course`); each submission travels with its task as bytes;
3. runs :func:`autograder.pipeline.grade_task` on the worker, in a folder of its own, and sends back the
   result, the feedback page and the log; the grader checks the result against the task
   (:func:`autograder.executors.bridge.parse_result`), writes them and records the result (it stays the
   gradebook's only writer), as each arrives.

Faults: a worker that dies mid-task has its task run again on another worker by the scheduler; a submission
whose task has ended as many workers as the scheduler allows (its ``distributed.scheduler.allowed-failures``,
3 by default) gets 0 with that reason, and the batch goes on. When the
scheduler itself goes away, :class:`SchedulerLost` ends the command; what was recorded before stays recorded
(:mod:`autograder.records`), so running the command again resumes.
"""

from __future__ import annotations

import dataclasses
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


def lost_scheduler(error: BaseException) -> bool:
    """Whether ``error`` says that the client lost its scheduler (rather than that one task failed)."""
    from distributed.comm.core import CommClosedError

    if getattr(error, "reason", None) == "scheduler-connection-lost":  # the futures cancelled by the client
        return True
    if any(getattr(group, "reason", None) == "scheduler-connection-lost" for group in getattr(error, "error_groups", ())):
        return True  # the same, as a wait on several futures says it
    return isinstance(error, CommClosedError | OSError | TimeoutError) or "not running" in str(error)


def _shipped_result(task: Task, message: dict) -> Result:
    """The result of one task as the bridge sent it, its page, log and notebook written where the main process
    keeps them; 0 with the reason when the result does not fit the task (:func:`parse_result`)."""
    from autograder.executors.bridge import bytes_of, parse_result
    from autograder.feedback.escape import report_text
    from autograder.feedback.pages import PAGE_PREFIX
    from autograder.pipeline import write_ungraded
    from autograder.sandbox.crossing import AnswerError, check_autograded

    autograded = bytes_of(message, "autograded")
    try:
        result = parse_result(message.get("result"), task)
        if autograded:  # the notebook the formgrader shows: held to the allowlist it crosses on a local worker
            check_autograded(autograded.decode("utf-8"))
    except (TypeError, ValueError, AnswerError, UnicodeDecodeError) as error:
        return write_ungraded(task, f"the cluster sent a result that the grader does not accept ({error})",
                              grader_failure=True)
    page = bytes_of(message, "feedback")
    if not page.startswith(PAGE_PREFIX.encode("utf-8")):  # the policy before any byte a worker wrote
        page = PAGE_PREFIX.encode("utf-8") + page
    log = "\n".join(report_text(line) for line in bytes_of(message, "log").decode("utf-8", "replace").splitlines())
    written = [(page, task.feedback), (log.encode("utf-8") + b"\n", task.log)]
    if autograded and task.autograded is not None:
        written.append((autograded, task.autograded))
    for data, path in written:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return result


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
    """Grade ``tasks`` on the cluster of ``scheduler`` through the sandboxed bridge
    (:mod:`autograder.executors.bridge`); hand each result to ``deliver`` as it arrives.

    ``warn`` receives a line for every worker that failed its check. ``credentials``: the folder of the
    cluster's credentials (:func:`autograder.executors.credentials.credential_files`). ``remote`` is the
    function run on the workers (tests replace it to fail on purpose).

    Raises:
        ValueError: the scheduler is not tls://, the credentials are missing or open to other accounts, no
            sandbox can be made for the bridge, the scheduler cannot be reached, or no worker passed its check.
        SchedulerLost: the scheduler went away before every task was done.
        autograder.executors.bridge.BridgeBroken: the bridge ended early or sent what is not a message.
    """
    from autograder.executors.bridge import BridgeBroken, Job, index_of, started_bridge, text_of
    from autograder.executors.credentials import credential_files
    from autograder.pipeline import write_ungraded
    from autograder.sandbox.launcher import bwrap_problem

    check_cluster_address(scheduler, credentials)
    files = credential_files(credentials)
    if (problem := bwrap_problem()) is not None:
        raise ValueError(f"--scheduler: the grader talks to a cluster from a sandbox only, and {problem}")
    job = Job(scheduler, files, version, pack_course(template), remote, CONNECT_SECONDS, len(tasks))
    outcomes: set[int] = set()
    with started_bridge(job, [(task, task.notebook.read_bytes()) for task in tasks]) as messages:
        for message in messages:
            kind = message["kind"]
            if kind == "warn":
                warn(text_of(message, "message"))
                continue
            if kind == "error":
                raise ValueError(text_of(message, "message"))
            if kind == "lost":
                raise SchedulerLost(text_of(message, "message"))
            index = index_of(message, len(tasks))
            if index in outcomes:
                raise BridgeBroken(f"the cluster's bridge sent a second outcome for task {index}")
            outcomes.add(index)
            if kind == "failed":
                deliver(write_ungraded(tasks[index], text_of(message, "reason"), grader_failure=True))
            else:
                deliver(_shipped_result(tasks[index], message))
    if len(outcomes) != len(tasks):
        raise BridgeBroken(f"the cluster's bridge ended with {len(tasks) - len(outcomes)} task(s) without an outcome")
