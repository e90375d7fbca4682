"""``python -m autograder grade PATH --out DIR``: a class's submissions to ``grades.csv`` and feedback pages.

PATH is a folder of ``<student>/<assignment>/<notebook>.ipynb`` or a zip of one. For every submission:

1. :mod:`autograder.student.sanitize` compares it with the released notebook (generated from ``source/`` in a
   temporary course, never read from ``notebooks/``); a file that cannot be graded gets 0 for every item and
   a feedback page with the reason;
2. a worker process grades it with nbgrader (autograde, then generate_feedback) in a course directory of
   its own, a copy of the template course holding the sources and the gradebook; nbgrader runs the notebook
   in a fresh kernel, sandboxed (:mod:`autograder.sandbox.launcher`), its output capped (:mod:`autograder.sandbox.execute`),
   with the kernel part of the hidden tests put back: the expected values and the checks were cut out of
   the template gradebook (:mod:`autograder.verdicts.template`, which also turns the explorer cells into comments)
   and are decided in the worker on the values the kernel reported (:mod:`autograder.verdicts.verdict`), which
   replace nbgrader's scores for those cells;
3. the scores per item are read from that gradebook, the failure message of each test from the autograded
   notebook, and the grader's notes are put on top of nbgrader's feedback page;
4. the main process writes the result into the class's gradebook (:mod:`autograder.gradebook`; it is its
   only writer) as soon as it arrives.

Workers run in parallel (``--jobs`` local processes, or a Dask cluster with ``--scheduler``:
:mod:`autograder.executors`); a failure of one submission, even of the grader itself, gives that submission 0
and a reason, and the batch always completes. Each result is also kept as it arrives
(:mod:`autograder.records`), so that a batch that stopped resumes.

Outputs, in DIR (these names only are replaced):

- ``grades.csv``: nbgrader's export columns, one row per student and assignment (0 where a student sent
  nothing for an assignment that others sent), like ``nbgrader export``; a student whose folder holds only
  files that were not read (a notebook one folder too high, an unknown assignment's folder) has rows too, 0
  with the reason in ``items.csv`` and ``report.txt``;
- ``items.csv``: one row per item (test cell or written answer) of every submission, with its score, status
  (``passed``, ``failed``, ``manual``: waiting for an instructor, ``not graded``: the file could not be
  graded)
  and message (the test's failure message, or the reason);
- ``feedback/<student>/<assignment>/<assignment>.html``;
- ``logs/<student>/<assignment>.log`` (nbgrader's log) and ``report.txt`` (warnings and notes);
- ``autograded/<student>/<assignment>/<assignment>.ipynb`` (each notebook as graded, its outputs cleaned),
  ``source/`` and ``nbgrader_config.py``: with the gradebook, DIR is an nbgrader course directory that the
  formgrader serves (:mod:`autograder.course_directory`, ``python -m autograder formgrader``);
- ``gradebook.db`` unless ``db_url`` names another database: updated, never replaced.

Manually graded answers count 0 in ``score`` until an instructor grades them (status ``manual``) but their
points are part of ``max_score``, as in nbgrader. Once graded by hand (in the formgrader), an item counts its
manual score (status ``hand-graded``, the instructor's comment as its message), here and in every later
grade: in the score reported of each submission as it arrives, in ``grades.csv`` and ``report.txt``; and its
submission's feedback page is made again with it (:mod:`autograder.feedback.handgraded`). The items that
still wait for a hand grade are printed at the end, and listed in ``report.txt``, by their numbers
("04_relative 4.6 waits for a hand grade in 1 of 2 submissions: mistakes"), after the list of what was not
graded and why (:func:`not_graded_lines`), which ``report.txt`` holds too.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import platform
import secrets
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import nbformat

from autograder import ASSIGNMENTS, REPOSITORY
from autograder.course import TemporaryCourse, course_version, load_config
from autograder.course_directory import CONFIG_NAME, copy_exchange_files, write_course_files
from autograder.executors.dask import SchedulerLost, run_dask
from autograder.executors.local import run_local, start_workers
from autograder.feedback.escape import report_text
from autograder.feedback.handgraded import has_hand_grade, write_page
from autograder.feedback.reports import Labels, waiting_for_hand_grades, write_csvs, write_report
from autograder.gradebook import (
    answer_digests,
    copy_assignments,
    open_gradebook,
    record,
    submission_times,
    submitted_timestamp,
    with_hand_grades,
)
from autograder.intake.exchange import collected_timestamps
from autograder.intake.submissions import Skipped, collect
from autograder.pipeline import StageSpec, write_ungraded
from autograder.records import Records, record_key
from autograder.sandbox import accounts, cgroups, seccomp
from autograder.sandbox.grading_stage import cut_text
from autograder.sandbox.kernel_view import kernel_packages
from autograder.sandbox.launcher import KERNEL_OPEN_FILES, Limits, bwrap_problem
from autograder.sandbox.stand_ins import check_nbgrader_schemas_once
from autograder.student.progress import item_labels
from autograder.student.received import DEFAULT_MAX_CLASS_BYTES
from autograder.types import NOT_SUBMITTED, Result, Task, layout_of, zero_items
from autograder.variants import enabled_in_config
from autograder.verdicts.template import harden_gradebook, quiet_explorers
from autograder.verdicts.verdict import new_marker

OUTPUT_NAMES = (
    "grades.csv", "items.csv", "report.txt", "feedback", "logs", "autograded", "source", CONFIG_NAME,
)
MEGABYTE = 1024 * 1024
UNSANDBOXED = (
    "grading WITHOUT a sandbox (--no-sandbox): each student's kernel runs as the grader's user, with resource "
    "limits only; it can read every file that user can read (other students' submissions, the exercise "
    "sources and hidden tests, the gradebook), write wherever that user can (no cap on /tmp or on files), see "
    "the grader's processes and reach the network; the notebook is parsed and rendered in a plain process "
    "under the same limits, not in a sandbox. Use it only for notebooks you trust"
)


def configured_limits() -> Limits:
    """The kernels' limits set in ``nbgrader_config.py`` (``c.AutograderSandbox.<field>``), else the defaults."""
    section = load_config(Path(tempfile.gettempdir())).get("AutograderSandbox", {})
    defaults = Limits()
    return Limits(**{name: int(section.get(name, getattr(defaults, name))) for name in Limits.__dataclass_fields__})


def _publish(staging: Path, out: Path) -> None:
    """Put the outputs built in ``staging`` in place of the previous ones in ``out``, then drop the old ones.

    Until this step the previous results stay whole: a batch that fails on the way deletes nothing.
    """
    retired = staging / ".previous"
    retired.mkdir()
    for name in OUTPUT_NAMES:
        if (out / name).exists() or (out / name).is_symlink():
            os.replace(out / name, retired / name)
        if (staging / name).exists():
            os.replace(staging / name, out / name)
    shutil.rmtree(staging, ignore_errors=True)


def _enforcement_warnings(bwrap: str | None, cgroup: str | None, limits: Limits) -> list[str]:
    """What report.txt says about the limits that do not hold on this machine, plainly."""
    found = []
    if bwrap:
        found.append(
            f"kernels ran WITHOUT a sandbox, with resource limits only: {bwrap}. They could read what the "
            "grader's user can read and reach the network"
        )
    if not bwrap and os.geteuid() == 0 and (account := accounts.account_problem()) is not None:
        found.append(
            f"kernels ran under the grader's own account, root, not accounts of their own: {account}. What Linux "
            "counts per account (epoll watches, pipe buffers) was shared by every kernel, the grader and the "
            "machine's other processes of root (book/guide_instructors.md: 'The grader's threat model')"
        )
    if cgroup:
        root = os.geteuid() == 0
        processes = "NOT limited (the grader runs as root, which RLIMIT_NPROC does not bind)" if root else (
            "limited per user, not per kernel"
        )
        if platform.machine() in seccomp.DENIED:
            bound = seccomp.buffer_bound(KERNEL_OPEN_FILES)
            buffers = (f"at most {bound / 2**20:.0f} MB" if bound else
                       "an amount this machine's /proc/sys/net/core does not tell")
            kernel_total = ("with no bound for a whole kernel, whose processes are not limited as root" if root
                            else f"times the processes a kernel may start ({limits.processes}, per user)")
            outside = ("anonymous memory files and System V shared memory, semaphores and message queues were "
                       "refused to kernels by a seccomp "
                       "filter, and the buffers of the sockets and pipes a kernel fills, which no limit counts "
                       f"without a control group, were held by it to their default sizes: {buffers} per process "
                       f"of a kernel (its {KERNEL_OPEN_FILES} open files, each with its default buffers), "
                       f"{kernel_total}")
        else:
            outside = (f"memory a kernel holds outside its address space, in anonymous files (memfd_create), System "
                       f"V shared memory or the buffers of its sockets and pipes, was NOT limited on this machine "
                       f"({platform.machine()}, which the kernel's seccomp filter does not know): a kernel could "
                       f"fill the machine's memory")
        found.append(
            f"kernels had no control group ({cgroup}): memory was limited as address space only "
            f"({limits.memory_mb} MB; files in /tmp and /dev/shm count only against their size cap; {outside}), "
            f"processes were {processes}, and no kernel had a CPU share of its own "
            "(book/guide_instructors.md: 'Grading safely')"
        )
    return found


def _prepare_task(task: Task, submission) -> Task | Result:
    """The task to run for one submission, or its result when there is nothing to grade. The student's
    notebook is not read here: the grading stage reads it, in its sandbox (:mod:`autograder.pipeline`)."""
    if submission.path is None:  # a copy the grader could not keep is its failure: no hand grade is touched
        return write_ungraded(task, submission.reason or "the folder holds no notebook",
                              grader_failure=submission.grader_failure)
    return dataclasses.replace(task, notebook=submission.path)


class Delivery:
    """Where each result goes as soon as it is ready, in the main process: the class's gradebook (this is its
    only writer), the records a resumed run reads (:mod:`autograder.records`), the progress bar and the
    caller's ``report``."""

    def __init__(
        self, gradebook, report: Callable[[Result], None], total: int, progress: bool, records: Records,
        course: str | None = None,
    ) -> None:
        from tqdm import tqdm

        self.gradebook = gradebook
        self.report = report
        self.records = records
        self.course = course  # the course version the answers' digests are recorded under
        self.keys: dict[tuple[str, str], tuple[str, dict[str, Path]]] = {}  # (student, assignment) -> key, files
        self.results: list[Result] = []
        self.warnings: list[str] = []
        self.bar = tqdm(total=total, unit="notebook", desc="grading", disable=not progress, file=sys.stderr)

    def __call__(self, result: Result) -> None:
        kept = self.keys.get((result.student, result.assignment))
        # the nbgrader files that came with the submission were copied beside its autograded notebook
        timestamp = submitted_timestamp(kept[1]["autograded.ipynb"].parent) if kept is not None else None
        notebook = kept[1]["autograded.ipynb"] if kept is not None else None
        graded_cells = [item.grade_id for item in result.items]
        # no notebook (the submission could not be graded): no answer now, so no hand grade carries over
        answers = answer_digests(notebook, graded_cells) if notebook is not None and notebook.is_file() else {}
        try:
            changes = record(self.gradebook, result, timestamp, answers=answers, course=self.course)
            if changes.removed:
                self.warnings.append(
                    f"{result.student}/{result.assignment}: the answer of {', '.join(changes.removed)} changed since "
                    "its hand grade, which was given to the earlier answer and is removed: it waits for a new one")
            if changes.kept_across_update:
                self.warnings.append(
                    f"{result.student}/{result.assignment}: the hand grade of {', '.join(changes.kept_across_update)} "
                    "is kept across an update of the course, but the cell the formgrader shows differs from the one "
                    "graded (the answer changed, or the new course rebuilds it otherwise): look at it again")
        except Exception as error:  # noqa: BLE001 (the grades still reach grades.csv; report.txt says why)
            self.gradebook.db.rollback()
            self.warnings.append(
                f"{result.student}/{result.assignment} was not written into the gradebook "
                f"({type(error).__name__}: {str(error)[:200]})"
            )
        self.results.append(result)  # as graded: the hand grades are read again once the batch is done
        if kept is not None:
            try:
                self.records.save(result, *kept)
            except OSError as error:
                self.warnings.append(f"{result.student}/{result.assignment} was not kept for a resumed run ({error})")
        self.bar.update()
        self.report(self._with_hand_grades(result))

    def _with_hand_grades(self, result: Result) -> Result:
        """``result`` with the hand grades the gradebook holds, for its score reported now; as graded when
        they cannot be read (grades.csv still has them, read after the batch)."""
        try:
            return with_hand_grades(self.gradebook, result)
        except Exception:  # noqa: BLE001 (a report line is not worth a batch)
            self.gradebook.db.rollback()
            return result

    def close(self) -> None:
        self.bar.close()
        self.gradebook.close()


def _open_class_gradebook(db_url: str):
    """The class's gradebook at ``db_url`` (the course of ``nbgrader_config.py``); ValueError (password
    hidden) when it cannot be opened."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, SQLAlchemyError

    try:
        shown = make_url(db_url).render_as_string(hide_password=True)
    except ArgumentError as error:
        raise ValueError(f"db_url must be a database URL such as sqlite:///gradebook.db, got {db_url!r}") from error
    try:
        course_id = load_config(Path(tempfile.gettempdir())).CourseDirectory.course_id
        return open_gradebook(db_url, course_id)
    except (SQLAlchemyError, ImportError) as error:
        raise ValueError(f"db_url {shown}: the gradebook cannot be opened ({type(error).__name__}: {error})") from error


@dataclasses.dataclass(frozen=True)
class Options:
    """How :func:`grade` runs a batch (its keyword arguments)."""

    jobs: int | None
    timeout: int | None
    report: Callable[[Result], None]
    limits: Limits
    sandbox: bool
    db_url: str | None
    progress: bool
    scheduler: str | None
    cluster_credentials: Path | None
    regrade: bool
    variants: bool
    withhold_answers: bool
    max_class_bytes: int


def grade(
    path: Path,
    out: Path,
    *,
    jobs: int | None = None,
    timeout: int | None = None,
    report: Callable[[Result], None] | None = None,
    limits: Limits | None = None,
    sandbox: bool = True,
    db_url: str | None = None,
    progress: bool = False,
    scheduler: str | None = None,
    cluster_credentials: Path | None = None,
    regrade: bool = False,
    variants: bool | None = None,
    withhold_answers: bool = False,
    max_class_mb: int | None = None,
) -> list[Result]:
    """Grade every submission under ``path`` (a folder or a zip); write the outputs into ``out``.

    Args:
        path: a folder of ``<student>/<assignment>/<notebook>.ipynb``, or a zip of one.
        out: the output folder (created if needed).
        jobs: local worker processes, >= 1; default one per core, as many as the memory holds kernels of
            ``limits.memory_mb`` (:func:`default_jobs`), and at most one per submission. Unused with
            ``scheduler``.
        timeout: seconds a cell may run before it is interrupted; default from ``nbgrader_config.py``.
        report: called with each result as soon as it is ready.
        limits: the resource limits of each kernel; default from ``nbgrader_config.py``
            (``c.AutograderSandbox``), else :class:`autograder.sandbox.launcher.Limits`.
        sandbox: run each kernel in bubblewrap; when bwrap cannot run here (or ``sandbox`` is False) the
            kernels run with the limits only and ``report.txt`` says so.
        db_url: the class's nbgrader gradebook (:mod:`autograder.gradebook`), any SQLAlchemy URL nbgrader
            supports; default ``sqlite:///<out>/gradebook.db``. It is updated, never cleared.
        progress: show a progress bar on standard error.
        scheduler: the address of a ``dask.distributed`` scheduler (``tls://HOST:PORT``): every submission
            is a task on its cluster (:mod:`autograder.executors.dask`) instead of a local process.
        cluster_credentials: the folder of the cluster's credentials (:mod:`autograder.executors.credentials`),
            required with ``scheduler``: the grader talks to a cluster over mutual TLS only.
        regrade: grade every submission, even those whose result is kept from an earlier run into ``out``
            with the same file, course and options (:mod:`autograder.records`).
        variants: per-student variants of the numerical items (:mod:`autograder.variants`): True draws each
            student's parameters from the student folder, False grades every student against the one answer
            key; default ``c.AutograderVariants.enabled`` of ``nbgrader_config.py`` (True when unset).
        withhold_answers: a wrong answer's message says only that it is wrong (never the named mistake, the
            right value or the right letter), for feedback released while resubmission is still open; a
            malformed answer still says what form is asked for.
        max_class_mb: the most MB of the class's files the grader copies for a batch (its ``received/``
            folder, in the temporary folder), default 2048; a file that would pass it, or leave the
            temporary folder with less than 256 MB free, is not copied and its submission gets 0 with the
            reason (:mod:`autograder.student.received`).

    Returns:
        One result per student and assignment, sorted by assignment then student.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: ``path`` is a file that is not a zip, or a zip of too many members; ``jobs`` < 1;
            ``max_class_mb`` < 1;
            ``db_url`` is not a URL or its database cannot be opened; ``scheduler`` cannot be reached or
            has no worker that passes its check.
        SchedulerLost: the scheduler went away mid-batch; the results recorded so far are kept, and the same
            command resumes.
    """
    path, out = Path(path).resolve(), Path(out).resolve()
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist")
    if not (path.is_dir() or path.is_file()):
        raise FileNotFoundError(f"{path} is neither a folder nor a zip file")
    if jobs is not None and jobs < 1:
        raise ValueError(f"jobs must be >= 1, got {jobs}")
    if max_class_mb is not None and (isinstance(max_class_mb, bool) or not isinstance(max_class_mb, int) or max_class_mb < 1):
        raise ValueError(f"max_class_mb must be a whole number of MB >= 1, got {max_class_mb!r}")
    given_accounts = accounts.account_range()  # a range of kernel accounts that is set is a range (ValueError names it)
    if given_accounts is not None and scheduler is None and jobs is not None and jobs > len(given_accounts):
        raise ValueError(
            f"jobs={jobs} is more workers than the {len(given_accounts)} accounts of {accounts.ACCOUNTS_VARIABLE}="
            f"{os.environ[accounts.ACCOUNTS_VARIABLE]!r}: each worker's kernels need an account of their own; give at "
            f"most {len(given_accounts)} jobs, or a wider range"
        )
    if scheduler is not None:
        from autograder.executors.dask import check_cluster_address

        check_cluster_address(scheduler, cluster_credentials)
    if sandbox and scheduler is None and (problem := bwrap_problem()) is not None:
        # --no-sandbox is named only where bubblewrap itself is missing or refused, never for a problem that
        # someone else could cause on this machine (a folder in its temporary directory, a full disk).
        advice = (
            "install it (Debian: apt-get install bubblewrap) and allow user namespaces, or pass --no-sandbox to "
            "grade without it (book/guide_instructors.md, 'The grader's threat model', says what is then "
            "unprotected)" if problem.startswith("bwrap") else "fix what the reason names, and grade again"
        )
        raise ValueError(
            f"no submission was graded: the sandbox cannot run on this machine ({problem}). Every student's "
            f"notebook is read, run and rendered in bubblewrap; {advice}"
        )
    if not sandbox:
        print(report_text(UNSANDBOXED), file=sys.stderr, flush=True)
    options = Options(
        jobs, timeout, report or (lambda result: None), limits or configured_limits(), sandbox, db_url, progress,
        scheduler, cluster_credentials, regrade, enabled_in_config() if variants is None else variants, withhold_answers,
        DEFAULT_MAX_CLASS_BYTES if max_class_mb is None else max_class_mb * MEGABYTE,
    )
    out.mkdir(parents=True, exist_ok=True)
    class_db_url = db_url or f"sqlite:///{out / 'gradebook.db'}"
    class_gradebook = _open_class_gradebook(class_db_url)
    staging = out / f".autograder-new-{secrets.token_hex(4)}"
    staging.mkdir()
    try:
        results, warnings_found, labels, unread, unrecorded = _grade_into(path, staging, out, class_gradebook,
                                                                          options)
        write_course_files(staging, out, class_db_url)
        results = _with_hand_grades(results, class_db_url, staging, warnings_found, options.limits)
        with _open_class_gradebook(class_db_url) as gradebook:
            times = submission_times(gradebook, results)
        write_csvs(results, staging, times)
        write_report(results, warnings_found, staging, labels)
        _publish(staging, out)
        Records(out).save_batch(results, unrecorded)  # what feedback reports: these rows, no earlier one
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    if not_graded := not_graded_lines(results, unread):
        print(f"Not graded ({len(not_graded)}; report.txt in {out} says the same):")
        print("\n".join(f"- {report_text(line)}" for line in not_graded), flush=True)
    if waiting := waiting_for_hand_grades(results, labels):
        print(f"Waiting for a hand grade (python -m autograder formgrader --out {out}), counted 0 until graded:")
        print("\n".join(f"- {report_text(line)}" for line in waiting), flush=True)
    return results


def _with_hand_grades(results: list[Result], db_url: str, staging: Path, warnings_found: list[str],
                      limits: Limits) -> list[Result]:
    """The results with the instructors' hand grades of the class's gradebook (kept by every grade), and the
    feedback page of each submission that has one made again with them (:mod:`autograder.feedback.handgraded`)."""
    with _open_class_gradebook(db_url) as gradebook:
        results = [with_hand_grades(gradebook, result) for result in results]
    for result in results:
        if has_hand_grade(result) and result.reason is None:
            try:
                write_page(staging, result, db_url, limits)
            except Exception as error:  # noqa: BLE001 (the grades still reach grades.csv; report.txt says why)
                warnings_found.append(
                    f"{result.student}/{result.assignment}: the feedback page could not show the hand grades "
                    f"({type(error).__name__}: {str(error)[:200]})"
                )
    return results


def default_jobs(limits: Limits) -> int:
    """One worker per core, but no more than the machine's memory holds kernels of ``limits.memory_mb``, nor
    than the accounts that ``AUTOGRADER_KERNEL_ACCOUNTS`` gives (one for each worker's kernels)."""
    cores = os.cpu_count() or 1
    memory_mb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // MEGABYTE
    jobs = max(1, min(cores, memory_mb // limits.memory_mb if limits.memory_mb else cores))
    given_accounts = accounts.account_range()
    return jobs if given_accounts is None else min(jobs, len(given_accounts))


def _grade_into(path: Path, staging: Path, out: Path, class_gradebook, options: Options):
    """The batch of :func:`grade`, its outputs written into ``staging``: (results, warnings, the number of each
    item of each assignment by grade id, read from its released notebook, the intake's warnings about what it
    did not read that belong to no student's row, and the results' rows that no submission made)."""
    limits = options.limits
    with tempfile.TemporaryDirectory(prefix="autograder-grade-") as work_name, contextlib.ExitStack() as stopping:
        work = Path(work_name)
        collection = collect(path, ASSIGNMENTS, received=work / "received", max_bytes=options.max_class_bytes)
        warnings_found = list(collection.warnings)
        assignments = sorted({submission.assignment for submission in collection.submissions}
                             | {skipped.assignment for skipped in collection.skipped if skipped.assignment})
        course = TemporaryCourse(work / "template", assignments)
        kernel_view = kernel_packages(work / "kernel-view")  # what every kernel of the batch imports
        problem = bwrap_problem() if options.sandbox else "the sandbox was turned off (--no-sandbox)"
        cgroup_problem = cgroups.problem()
        worker_logs = staging / "logs"
        pool = None
        if collection.submissions and not options.scheduler:  # its workers start beside what follows
            worker_logs.mkdir(parents=True, exist_ok=True)
            # Each worker's warm stage binds the template course's folder, which is filled in below.
            stage = StageSpec(course.directory, course.jupyter_directory, str(kernel_view), limits,
                              cgroup_problem is None) if problem is None else None
            pool = start_workers(options.jobs or default_jobs(limits), course.jupyter_directory, worker_logs, stage)
            stopping.callback(pool.shutdown, cancel_futures=True)  # whatever happens before run_local ends it
        check_nbgrader_schemas_once()  # as in the stage: nbgrader's validation, each schema checked once
        with course.gradebook_in_memory_only():  # a template, thrown away with the batch
            released = {
                assignment: nbformat.read(course.generate(assignment), as_version=4) for assignment in assignments
            }
        with open_gradebook(f"sqlite:///{course.gradebook}") as template:
            copy_assignments(template, class_gradebook, assignments)
        layouts = {assignment: layout_of(notebook) for assignment, notebook in released.items()}
        # The timestamps `collect` wrote into this class folder: the only ones recorded as submission times.
        collected = {assignment: collected_timestamps(path, assignment) if path.is_dir() else {}
                     for assignment in assignments}
        labels: Labels = {assignment: item_labels(notebook.cells) for assignment, notebook in released.items()}
        warnings_found += _enforcement_warnings(problem, cgroup_problem, limits)
        database = _sqlite_file(options.db_url)
        hidden = tuple(
            str(hidden_path)
            for hidden_path in (
                work, out, path, *([database] if database else []),
                REPOSITORY / "autograder" / "source", REPOSITORY / "tests", REPOSITORY / ".git",
            )
        )
        marker = new_marker()
        splits = {}
        for assignment in assignments:
            splits[assignment], whole = harden_gradebook(
                course.gradebook, assignment, released[assignment], marker
            )
            quiet_explorers(course.gradebook, assignment, released[assignment])
            if whole:
                warnings_found.append(
                    f"{assignment}: the hidden tests of {', '.join(whole)} run whole in the student's kernel "
                    "(they check objects that cannot be reported); their grades rest on that kernel"
                )
        records = Records(out)
        version = course_version()
        graded_with = {
            "limits": limits, "timeout": options.timeout, "sandbox": problem is None, "variants": options.variants,
            "withhold_answers": options.withhold_answers,
            "cgroup": cgroup_problem is None,
        }
        deliver = Delivery(class_gradebook, options.report, len(collection.submissions), options.progress, records,
                           version)
        try:
            tasks = []
            for index, submission in enumerate(collection.submissions):
                task = Task(
                    student=submission.student,
                    assignment=submission.assignment,
                    notebook=work / "prepared" / str(index) / f"{submission.assignment}.ipynb",
                    template=course.directory,
                    jupyter=course.jupyter_directory,
                    directory=work / "tasks" / str(index),
                    layout=layouts[submission.assignment],
                    notes=submission.notes,
                    feedback=staging
                    / "feedback"
                    / submission.student
                    / submission.assignment
                    / f"{submission.assignment}.html",
                    log=staging / "logs" / submission.student / f"{submission.assignment}.log",
                    autograded=staging
                    / "autograded"
                    / submission.student
                    / submission.assignment
                    / f"{submission.assignment}.ipynb",
                    timeout=options.timeout,
                    splits=splits[submission.assignment],
                    marker=marker,
                    hidden=hidden,
                    limits=limits,
                    use_bwrap=problem is None,
                    use_cgroup=cgroup_problem is None,
                    variants=options.variants,
                    withhold_answers=options.withhold_answers,
                    kernel_view=str(kernel_view),
                )
                notes = copy_exchange_files(submission.folder, (task.feedback.parent, task.autograded.parent),
                                            collected[submission.assignment].get(submission.student))
                task = dataclasses.replace(task, notes=(*task.notes, *notes))
                key = _record_key(submission.path, version, graded_with)
                kept_files = {"feedback.html": task.feedback, "log.txt": task.log, "autograded.ipynb": task.autograded}
                deliver.keys[submission.student, submission.assignment] = (key, kept_files)
                kept = None if options.regrade else records.load(submission.student, submission.assignment, key, kept_files)
                if kept is not None:
                    deliver(kept)
                    continue
                prepared = _prepare_task(task, submission)
                if isinstance(prepared, Result):
                    deliver(prepared)
                else:
                    tasks.append(prepared)
            if tasks and options.scheduler:
                try:
                    run_dask(tasks, options.scheduler, course.directory, deliver, _warn_now(warnings_found), version=version,
                             credentials=options.cluster_credentials)
                except SchedulerLost as error:
                    recorded = sorted(f"{result.student}/{result.assignment}" for result in deliver.results)
                    raise SchedulerLost(
                        f"{error}. {len(recorded)} of {len(collection.submissions)} submissions were recorded "
                        f"({', '.join(recorded) or 'none'}); run the same command again to grade the rest"
                    ) from error
            elif tasks:
                workers = min(options.jobs or default_jobs(limits), len(tasks))
                run_local(tasks, workers, course.jupyter_directory, worker_logs, deliver, pool=pool)
        finally:
            deliver.close()
    results = deliver.results
    warnings_found += deliver.warnings
    unrecorded = _rows_without_a_submission(results, collection.skipped, assignments, layouts)
    results += unrecorded
    results.sort(key=lambda result: (result.assignment, result.student))
    of_students = {skipped.reason for skipped in collection.skipped}
    unread = [warning for warning in collection.warnings if warning not in of_students]
    return results, warnings_found, labels, unread, unrecorded


def not_graded_lines(results: list[Result], unread: list[str]) -> list[str]:
    """What the batch did not grade, a line each, for the terminal: every submission graded 0 with a reason
    (``ana/02_sinusoidal: <why>``), then every file or folder the intake did not read that belongs to no
    student (a notebook at the class's top, a folder whose name is no student id)."""
    lines = [f"{result.student}/{result.assignment}: {result.reason}" for result in results
             if result.reason not in (None, NOT_SUBMITTED)]
    return lines + unread


def _rows_without_a_submission(results: list[Result], skipped: list[Skipped], assignments: list[str],
                               layouts: dict) -> list[Result]:
    """A row of 0 for every student found in the class (graded, or with a file that was not read) and every
    assignment of the batch that the student has no result for: the reason is what was not read of theirs,
    for that assignment or for none in particular, else :data:`NOT_SUBMITTED`."""
    reasons: dict[tuple[str, str | None], list[str]] = {}
    for one in skipped:
        reasons.setdefault((one.student, one.assignment), []).append(one.reason)
    students = sorted({result.student for result in results} | {one.student for one in skipped})
    graded = {(result.student, result.assignment) for result in results}
    rows = []
    for assignment in assignments:
        for student in students:
            if (student, assignment) in graded:
                continue
            why = reasons.get((student, assignment)) or reasons.get((student, None))
            if why:
                reason = _reasons_text(why)
                rows.append(Result(student, assignment, zero_items(layouts[assignment], "not graded", reason), [],
                                   reason))
            else:
                rows.append(Result(student, assignment, zero_items(layouts[assignment], "not submitted"), [],
                                   NOT_SUBMITTED))
    return rows


MAX_ROW_REASONS = 5  # reasons of the intake's that one row names; the others are counted
MAX_ROW_REASON = 2000  # characters of that row's reason: every item's message repeats it


def _reasons_text(reasons: list[str]) -> str:
    """The intake's ``reasons`` for one row, in one text: the first :data:`MAX_ROW_REASONS`, a count of the
    others, and at most :data:`MAX_ROW_REASON` characters (the names in them are the student's, and so is how many
    files they misplaced)."""
    text = "; ".join(reasons[:MAX_ROW_REASONS])
    if len(reasons) > MAX_ROW_REASONS:
        text += f"; and {len(reasons) - MAX_ROW_REASONS} more like these"
    return cut_text(text, MAX_ROW_REASON)


def _warn_now(warnings_found: list[str]) -> Callable[[str], None]:
    """A warning for ``report.txt`` that is also printed on standard error at once (a worker left out)."""

    def warn(line: str) -> None:
        warnings_found.append(line)
        print(report_text(line), file=sys.stderr, flush=True)

    return warn


def _record_key(submitted: Path | None, version: str, graded_with: dict) -> str:
    try:
        content = b"" if submitted is None else submitted.read_bytes()
    except OSError:
        content = b"unreadable"
    return record_key(content, version, graded_with)


def _sqlite_file(db_url: str | None) -> Path | None:
    """The file of a SQLite gradebook URL (None for the default, inside the output folder, or another database)."""
    if not db_url or not db_url.startswith("sqlite:///"):
        return None
    return Path(db_url[len("sqlite:///") :]).resolve()
