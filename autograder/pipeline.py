"""One submission through the stages after the intake, as the grader's worker sees them.

:func:`grade_task` is the one code path that grades a submission, whichever executor runs it. The worker
never reads what the student sent: it has the submission graded by a grading stage (:mod:`autograder.sandbox.stage`)
in a sandbox of its own, in the worker's control groups when the machine has them: forked, with namespaces of its
own, from the worker's warm stage (:mod:`autograder.sandbox.warm_stage`, started at its first submission), or,
without bubblewrap, a new process. It hands the stage the task and the student's notebook, and takes back one
bounded JSON answer, which :mod:`autograder.sandbox.crossing` checks before it becomes a
:class:`autograder.types.Result` and files:

- the feedback page: the Content-Security-Policy first (:mod:`autograder.feedback.escape`), whatever the
  stage wrote, then the grader's notes, escaped;
- the autograded notebook (the one the formgrader shows), already checked against its allowlist;
- the log (``logs/<student>/<assignment>.log``): the worker's lines, nbgrader's (the stage's answer), the
  stage's standard error and the end of the kernel's output, each line marked with where it came from
  (``grader |``, ``nbgrader |``, ``stage |``, ``kernel |``: :func:`log_lines`) and escaped as a line of
  ``report.txt`` (:func:`autograder.feedback.escape.report_text`), so that no byte a student's code wrote
  moves the instructor's terminal, and no line it wrote ("score 16 / 16") passes for the grader's.

It never raises: whatever goes wrong gives the submission 0 and a reason. A failure of the grader itself
(the stage crashed, answered nonsense or ran past its wall-clock limit; the control group could not be made;
the kernel's account could not be claimed)
is marked as such, so that it is never kept as a grade (:mod:`autograder.records`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pickle
import shutil
import stat
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

from autograder.feedback.escape import report_text
from autograder.feedback.pages import add_notes, file_text, ungraded_page
from autograder.sandbox import accounts, cgroups
from autograder.sandbox.crossing import AnswerError, read_answer
from autograder.sandbox.grading_stage import StageRequest, students_splits
from autograder.sandbox.launcher import Limits
from autograder.sandbox.phases import phase_seconds
from autograder.sandbox.stage import (
    HOME,
    ROOT,
    STAGE_MEMORY_MB,
    StageOutcome,
    bwrap_stage_argv,
    private_devices,
    run_stage,
    stage_environment,
    stage_seconds,
)
from autograder.sandbox.warm_stage import WarmStage
from autograder.types import Result, Task, zero_items

MEGABYTE = 1024 * 1024
STAGE_PROCESSES = 64  # nbgrader's threads and the verdicts' checks, beside the kernel's processes
GRADER_FAILURE = "the grader failed on this submission (see its log)"
LOG_SOURCES = ("grader", "nbgrader", "stage", "kernel")


def log_lines(source: str, text: str) -> list[str]:
    """The lines of ``text`` for the log file, each escaped (:func:`report_text`: no control character, no line
    break of any kind) and marked with its ``source``, one of :data:`LOG_SOURCES`: ``kernel | ...``."""
    if source not in LOG_SOURCES:
        raise ValueError(f"source must be one of {LOG_SOURCES}, got {source!r}")
    return [f"{source:>8} | {report_text(line)}" for line in text.splitlines()]


def write_ungraded(task: Task, reason: str, *, grader_failure: bool = False) -> Result:
    """0 for every item, with ``reason``, and a feedback page that says so. ``grader_failure``: the grader,
    not the submission, failed (never kept as a grade). Never raises: when even the page cannot be written,
    the result still carries the reason (and report.txt says so)."""
    result = Result(
        task.student,
        task.assignment,
        zero_items(task.layout, "not graded", reason),
        list(task.notes),
        reason,
        grader_failure=grader_failure,
    )
    try:
        task.feedback.parent.mkdir(parents=True, exist_ok=True)
        page = ungraded_page(task.student, task.assignment, reason, result.items, result.notes)
        task.feedback.write_bytes(file_text(page).encode("utf-8", "backslashreplace"))
    except Exception as error:  # noqa: BLE001 (the grade and its reason must reach grades.csv and report.txt)
        result.notes.append(f"the feedback page could not be written ({type(error).__name__})")
    return result


@dataclass
class Groups:
    """The control groups of one submission: ``whole`` holds the two others and limits their sum (memory,
    processes); ``stage`` holds the grading stage; ``kernel`` the student's kernel, with the kernel's own
    limits. The kernel's launcher, inside the stage's sandbox, moves the kernel into its group."""

    whole: cgroups.KernelGroup
    stage: cgroups.KernelGroup
    kernel: cgroups.KernelGroup

    def remove(self) -> None:
        for group in (self.kernel, self.stage, self.whole):
            group.remove()


def _groups(task: Task | StageSpec) -> Groups | None:
    """The submission's control groups, or None where the machine gives none; OSError if they cannot be made."""
    if not task.use_cgroup:
        return None
    limits = task.limits
    memory = (limits.memory_mb + STAGE_MEMORY_MB) * MEGABYTE if limits.memory_mb else 0
    processes = limits.processes + STAGE_PROCESSES if limits.processes else 0
    whole = cgroups.KernelGroup.create(memory_bytes=memory, processes=processes)
    try:
        stage = whole.child("stage")
        kernel = whole.child("kernel", memory_bytes=limits.memory_mb * MEGABYTE, processes=limits.processes)
    except OSError:
        whole.remove()
        raise
    return Groups(whole, stage, kernel)


def _memory_note(task: Task, groups: Groups | None) -> str:
    if groups is None or not (groups.kernel.memory_limit_hits() or groups.whole.memory_limit_hits()):
        return ""
    return f"the kernel reached its memory limit ({task.limits.memory_mb} MB) and a process of it was ended"


class NoKernelAccount(Exception):
    """A grader that gives kernels accounts of their own could not give this one its account."""


def _kernel_namespace(log: list[str]) -> int | None:
    """The user namespace that gives this worker's kernels an account of their own (:mod:`autograder.sandbox.accounts`),
    or None where the grader cannot map any (the log says why, and report.txt for a root grader).

    Raises:
        NoKernelAccount: the grader maps accounts, but not this worker's: every account of
            ``AUTOGRADER_KERNEL_ACCOUNTS`` is claimed, or the namespace could not be made. The kernel does not
            run under the grader's account instead (root's, where accounts are mapped)."""
    problem = accounts.account_problem()
    if problem is not None:
        log += log_lines("grader", f"the kernel runs under the grader's account: {problem}")
        return None
    try:
        account = accounts.kernel_account()
        descriptor = accounts.user_namespace(account)
    except OSError as error:
        raise NoKernelAccount(str(error)) from error
    log += log_lines("grader", f"the kernel runs under the machine's user ID {account}, an account of its own")
    return descriptor


@dataclass
class ServerContext:
    """What a worker keeps with its warm stage's server (:mod:`autograder.sandbox.warm_stage`): the control
    groups its submissions run in, one at a time, the lines each submission's log begins with, and the folder of
    its device files (:func:`autograder.sandbox.stage.private_devices`)."""

    groups: Groups | None
    log: tuple[str, ...]
    devices: Path | None = None
    procs_modes: dict[str, int] = dataclasses.field(default_factory=dict)  # the kernel group's, as made

    def restore_procs(self) -> None:
        """The kernel group's ``cgroup.procs`` files, which every stage of the server can write (its kernel's
        launcher moves the kernel there), as they were made: their mode, and no extended attribute. A stage that
        changed them would otherwise stop every later kernel of the worker, or pass them data."""
        for path, mode in self.procs_modes.items():
            with contextlib.suppress(OSError):
                os.chmod(path, mode)
            with contextlib.suppress(OSError):
                for name in os.listxattr(path):
                    os.removexattr(path, name)

    def close(self) -> None:
        if self.groups is not None:
            self.groups.remove()
        if self.devices is not None:
            shutil.rmtree(self.devices, ignore_errors=True)


_SERVER: WarmStage | None = None  # this worker's


@dataclass(frozen=True)
class StageSpec:
    """What a worker's warm stage is started for, the fields of a :class:`Task` of that name: the template course,
    the kernelspec's folder, the kernel's view, the limits and whether control groups are used."""

    template: Path
    jupyter: Path | None
    kernel_view: str
    limits: Limits
    use_cgroup: bool

    @classmethod
    def of(cls, task: Task) -> StageSpec:
        return cls(task.template, task.jupyter, task.kernel_view, task.limits, task.use_cgroup)


def start_stage(spec: StageSpec) -> None:
    """Start this worker's warm stage for the tasks of ``spec`` now, before its first submission, which then
    finds it running (a worker's first minutes are otherwise idle while the batch is prepared). Never raises: a
    stage that cannot start here is started by the first submission, which reports why."""
    with contextlib.suppress(Exception):
        _warm_server(spec)


def close_stage() -> None:
    """End this worker's warm stage, if it has one, with its sandbox, control groups and device files."""
    global _SERVER
    if _SERVER is not None:
        _SERVER.close()
        _SERVER = None


def _server_key(spec: StageSpec) -> tuple:
    """What a server is started for: ``spec``, with which folder the template course is; a task that differs in
    any needs another server."""
    template = spec.template.stat()
    return (str(spec.template), template.st_dev, template.st_ino, str(spec.jupyter), spec.kernel_view, spec.limits,
            spec.use_cgroup)


def _warm_server(spec: StageSpec) -> WarmStage:
    """This worker's server for ``spec``, started when there is none for it (or the one there is has ended).

    Raises:
        OSError: the control groups could not be made, or the server did not start.
        NoKernelAccount: see :func:`_kernel_namespace`.
    """
    global _SERVER
    key = _server_key(spec)
    if _SERVER is not None and (_SERVER.key != key or not _SERVER.alive()):
        _SERVER.close()
        _SERVER = None
    if _SERVER is not None:
        return _SERVER
    jupyter = spec.jupyter or Path(os.environ["JUPYTER_PATH"].split(os.pathsep)[0])
    groups = _groups(spec)
    namespace = None
    devices_folder = Path(tempfile.mkdtemp(prefix="autograder-devices-"))
    try:
        log: list[str] = []
        devices = private_devices(devices_folder / "dev")
        namespace = _kernel_namespace(log)
        kernel_group = () if groups is None else groups.kernel.folders
        argv = bwrap_stage_argv(
            spec.template, jupyter,
            extra=(Path(spec.kernel_view),) if spec.kernel_view else (),
            writable=tuple(Path(folder) / "cgroup.procs" for folder in kernel_group),
            user_namespace=namespace, devices=devices,
        )
        _SERVER = WarmStage.start(
            key, argv, stage_environment(jupyter, HOME), spec.limits,
            join_group=None if groups is None else groups.stage.join,
            pass_fds=() if namespace is None else (namespace,),
            context=ServerContext(groups, tuple(log), devices_folder, {
                str(Path(folder) / "cgroup.procs"): stat.S_IMODE((Path(folder) / "cgroup.procs").stat().st_mode)
                for folder in kernel_group}),
        )
        if groups is not None:
            groups.whole.weigh_folder()  # now that its server runs in it: counted with the other workers' groups
    except BaseException:
        if groups is not None:
            groups.remove()
        shutil.rmtree(devices_folder, ignore_errors=True)
        raise
    finally:
        if namespace is not None:
            os.close(namespace)
    return _SERVER


def _wait_until_empty(group: cgroups.KernelGroup, seconds: float = 5.0) -> None:
    """Wait until ``group`` holds no process (the system ends a namespace's processes, then frees what they held,
    a little after its first process ended), at most ``seconds``; then kill what is left."""
    deadline = time.monotonic() + seconds
    while group.pids() and time.monotonic() < deadline:
        time.sleep(0.01)
    for pid in group.pids():
        with contextlib.suppress(OSError):
            os.kill(pid, 9)


def _grade_warm(task: Task, marks: dict[str, float], log: list[str]) -> tuple[StageOutcome, str]:
    """Grade ``task`` in a child of this worker's server; the stage's outcome and the note of the kernel's
    memory limit, if it was reached during this submission."""
    server = _warm_server(StageSpec.of(task))
    context: ServerContext = server.context
    log += context.log
    groups = context.groups
    if groups is not None:  # the last submission's kernel is gone with its namespace; its group empty, and uncharged
        _wait_until_empty(groups.kernel)
        context.restore_procs()
    before = None if groups is None else (groups.kernel.memory_limit_hits(), groups.whole.memory_limit_hits())
    kernel_group = None if groups is None else (groups.kernel.version, tuple(map(str, groups.kernel.folders)))
    released = task.template / "release" / task.assignment / f"{task.assignment}.ipynb"
    request = StageRequest(task, released, ROOT, True, task.notebook.stat().st_size, kernel_group)
    marks["spawned"] = time.monotonic()
    outcome = server.grade(pickle.dumps(request), task.notebook, stage_seconds(task.limits))
    marks["exited"] = time.monotonic()
    hit = groups is not None and (groups.kernel.memory_limit_hits(), groups.whole.memory_limit_hits()) != before
    note = f"the kernel reached its memory limit ({task.limits.memory_mb} MB) and a process of it was ended"
    return outcome, note if hit else ""


def _stage_outcome(task: Task, groups: Groups | None, marks: dict[str, float], log: list[str]) -> tuple[StageOutcome, str]:
    """The outcome of ``task``'s grading stage, warm in bubblewrap, cold without (``groups``: a cold stage's), and
    the note of the kernel's memory limit if the kernel reached it."""
    if task.use_bwrap:
        return _grade_warm(task, marks, log)
    return _start_stage(task, groups, marks, log), _memory_note(task, groups)


def _start_stage(task: Task, groups: Groups | None, marks: dict[str, float], log: list[str]) -> StageOutcome:
    """A cold stage without bubblewrap (``--no-sandbox``): a new process under the same limits, its folders on
    the grader's disk."""
    released = task.template / "release" / task.assignment / f"{task.assignment}.ipynb"
    jupyter = task.jupyter or Path(os.environ["JUPYTER_PATH"].split(os.pathsep)[0])
    kernel_group = None if groups is None else (groups.kernel.version, tuple(map(str, groups.kernel.folders)))
    root = task.directory / "grading"
    (root / "home").mkdir(parents=True)
    request = StageRequest(task, released, str(root), False, task.notebook.stat().st_size, kernel_group)
    marks["spawned"] = time.monotonic()
    outcome = run_stage(
        pickle.dumps(request), [sys.executable, "-m", "autograder.sandbox"],
        stage_environment(jupyter, str(root / "home")), task.limits, cwd=str(root),
        join_group=None if groups is None else groups.stage.join,
    )
    marks["exited"] = time.monotonic()
    return outcome


def grade_task(task: Task) -> Result:
    """Grade one submission in its grading stage; never raises."""
    log: list[str] = []  # lines already marked (log_lines)
    groups = None
    marks: dict[str, float] = {"begun": time.monotonic()}
    try:
        task.directory.mkdir(parents=True, exist_ok=True)
        try:
            groups = None if task.use_bwrap else _groups(task)  # a warm stage's are its server's
        except OSError as error:
            log += log_lines("grader", f"the kernel's control group could not be made: {error}")
            return write_ungraded(task, "the grader could not make the kernel's control group", grader_failure=True)
        # The expected values of this student's varied items are computed here, not in the stage: they need torch,
        # which a worker imports once, where each stage would import it again.
        task = dataclasses.replace(task, student_splits=students_splits(task))
        try:
            outcome, memory_note = _stage_outcome(task, groups, marks, log)
        except NoKernelAccount as error:
            log += log_lines("grader", f"no kernel was started: {error}")
            return write_ungraded(task, f"the grader could not give the kernel an account of its own ({error})",
                                  grader_failure=True)
        except OSError as error:  # the warm stage's control groups or server
            log += log_lines("grader", f"the grading stage could not start: {error}")
            return write_ungraded(task, "the grader could not start its grading stage", grader_failure=True)
        result = _accept(task, outcome, memory_note, log, marks)
        marks["done"] = time.monotonic()
        return dataclasses.replace(result, seconds=phase_seconds(marks))
    except Exception:  # noqa: BLE001 (a grader bug must not stop the batch; the log keeps the traceback)
        log += log_lines("grader", traceback.format_exc())
        return write_ungraded(task, GRADER_FAILURE, grader_failure=True)
    finally:
        if groups is not None:
            groups.remove()
        with contextlib.suppress(Exception):  # a log that cannot be written must not lose the grade
            task.log.parent.mkdir(parents=True, exist_ok=True)
            task.log.write_bytes("".join(line + "\n" for line in log).encode("utf-8"))
        shutil.rmtree(task.directory, ignore_errors=True)


def _accept(task: Task, outcome: StageOutcome, memory_note: str, log: list[str], marks: dict[str, float]) -> Result:
    """The result of a stage's ``outcome``, its files written; see the module docstring."""
    errors = outcome.errors.decode("utf-8", "backslashreplace")
    stage_errors = [
        *log_lines("grader", f"--- the grading stage's standard error (exit code {outcome.returncode}) ---"),
        *log_lines("stage", errors),
    ]
    if outcome.stopped:
        log += stage_errors
        return write_ungraded(task, outcome.stopped, grader_failure=True)
    try:
        answer = read_answer(outcome.response, task.layout)
    except AnswerError as error:
        log += stage_errors
        if memory_note:  # the stage was ended at the group's memory limit: the kernel's doing
            return write_ungraded(task, memory_note)
        log += log_lines("grader", f"its answer was refused: {error}")
        return write_ungraded(task, GRADER_FAILURE, grader_failure=True)
    marks.update(answer.marks)
    marks["received"] = time.monotonic()
    log += log_lines("nbgrader", answer.log)
    if answer.kernel_log:
        log += log_lines(
            "grader", "--- the end of the kernel's standard output and error (the student's code wrote it) ---"
        )
        log += log_lines("kernel", answer.kernel_log)
    if answer.failure is not None:
        log += stage_errors
        return write_ungraded(task, answer.failure, grader_failure=True)
    notes = [*task.notes, *answer.notes]
    if answer.reason is not None:
        reason = memory_note if memory_note and answer.kernel_failed else answer.reason
        return write_ungraded(Task.with_notes(task, notes), reason)
    if memory_note:
        notes.append(memory_note)
    task.feedback.parent.mkdir(parents=True, exist_ok=True)
    task.feedback.write_text(file_text(add_notes(answer.feedback, notes)), encoding="utf-8")
    if task.autograded is not None:  # the notebook the formgrader shows the instructor: the cleaned one
        task.autograded.parent.mkdir(parents=True, exist_ok=True)
        task.autograded.write_text(answer.autograded, encoding="utf-8")
    return Result(task.student, task.assignment, answer.items, notes)
