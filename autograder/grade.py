"""``python -m autograder grade PATH --out DIR``: a class's submissions to ``grades.csv`` and feedback pages.

PATH is a folder of ``<student>/<assignment>/<notebook>.ipynb`` or a zip of one. For every submission:

1. :mod:`autograder.sanitize` compares it with the released notebook (generated from ``source/`` in a
   temporary course, never read from ``notebooks/``); a file that cannot be graded gets 0 for every item and
   a feedback page with the reason;
2. a worker process grades it with nbgrader (autograde, then generate_feedback) in a course directory of
   its own, a copy of the template course holding the sources and the gradebook; nbgrader runs the notebook
   in a fresh kernel, sandboxed (:mod:`autograder.sandbox`), its output capped (:mod:`autograder.execute`),
   with the kernel part of the hidden tests put back: the expected values and the checks were cut out of
   the template gradebook (:mod:`autograder.template`, which also turns the explorer cells into comments)
   and are decided in the worker on the values the kernel reported (:mod:`autograder.verdict`), which
   replace nbgrader's scores for those cells;
3. the scores per item are read from that gradebook, the failure message of each test from the autograded
   notebook, and the grader's notes are put on top of nbgrader's feedback page;
4. the main process writes the result into the class's gradebook (:mod:`autograder.gradebook`; it is its
   only writer) as soon as it arrives.

Workers run in parallel (``--jobs``, by default one per core, at most 8); a failure of one submission, even
of the grader itself, gives that submission 0 and a reason, and the batch always completes.

Outputs, in DIR (these names only are replaced):

- ``grades.csv``: nbgrader's export columns, one row per student and assignment (0 where a student sent
  nothing for an assignment that others sent), like ``nbgrader export``;
- ``items.csv``: one row per item (test cell or written answer) of every submission, with its score, status
  (``passed``, ``failed``, ``manual``: waiting for an instructor, ``not graded``: the file could not be
  graded)
  and message (the test's failure message, or the reason);
- ``feedback/<student>/<assignment>/<assignment>.html``;
- ``logs/<student>/<assignment>.log`` (nbgrader's log) and ``report.txt`` (warnings and notes);
- ``gradebook.db`` unless ``db_url`` names another database: updated, never replaced.

Manually graded answers count 0 in ``score`` until an instructor grades them (status ``manual``) but their
points are part of ``max_score``, as in nbgrader.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import csv
import dataclasses
import multiprocessing
import os
import re
import secrets
import shutil
import sys
import tempfile
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from autograder import ASSIGNMENTS, REPOSITORY, cgroups
from autograder.course import NbgraderError, TemporaryCourse, kernel_environment, load_config, run_app
from autograder.escape import csv_row, report_text, sanitize_notebook_file
from autograder.feedback import Item, add_notes, ungraded_page
from autograder.gradebook import copy_assignments, open_gradebook, record
from autograder.sandbox import ENVIRONMENT_VARIABLE, Limits, Settings, bwrap_problem
from autograder.sanitize import prepare
from autograder.submissions import collect, extract_notebooks
from autograder.template import harden_gradebook, quiet_explorers
from autograder.verdict import Split, decide, new_marker, parse_reports, reported_text

EXPORT_COLUMNS = (
    "assignment",
    "duedate",
    "timestamp",
    "student_id",
    "last_name",
    "first_name",
    "email",
    "raw_score",
    "late_submission_penalty",
    "score",
    "max_score",
)
ITEM_COLUMNS = ("student_id", "assignment", "item", "score", "max_score", "status", "message")
OUTPUT_NAMES = ("grades.csv", "items.csv", "report.txt", "feedback", "logs")
MAX_MESSAGE = 600
NOT_SUBMITTED = "no submission"
# Each worker runs one kernel at a time (a few hundred MB with torch): more workers than this by request only.
MAX_DEFAULT_JOBS = 8
MEGABYTE = 1024 * 1024
KERNEL_LOG = "kernel.log"
MAX_KERNEL_LOG_BYTES = 64 * 1024
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


@dataclass(frozen=True)
class LayoutItem:
    """A graded cell of an assignment, as released."""

    grade_id: str
    points: float
    cell_type: str


@dataclass
class Result:
    """The grade of one student for one assignment."""

    student: str
    assignment: str
    items: list[Item]
    notes: list[str] = field(default_factory=list)
    reason: str | None = None  # why nothing could be graded

    @property
    def score(self) -> float:
        return sum(item.score for item in self.items)

    @property
    def max_score(self) -> float:
        return sum(item.max_score for item in self.items)


@dataclass(frozen=True)
class Task:
    """Everything a worker needs to grade one submission (picklable)."""

    student: str
    assignment: str
    notebook: Path
    template: Path
    directory: Path
    layout: tuple[LayoutItem, ...]
    notes: tuple[str, ...]
    feedback: Path
    log: Path
    timeout: int | None
    splits: dict[str, Split] = field(default_factory=dict)  # test cells decided in the grader, by grade_id
    marker: str = ""
    hidden: tuple[str, ...] = ()  # paths the kernel must not see
    limits: Limits = field(default_factory=Limits)
    use_bwrap: bool = True
    use_cgroup: bool = False


def layout_of(released: nbformat.NotebookNode) -> tuple[LayoutItem, ...]:
    """The graded cells of a released notebook, in notebook order."""
    items = []
    for cell in released.cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("grade"):
            items.append(LayoutItem(meta["grade_id"], float(meta.get("points", 0)), cell.cell_type))
    return tuple(items)


def zero_items(layout: tuple[LayoutItem, ...], status: str, message: str = "") -> list[Item]:
    return [Item(item.grade_id, 0.0, item.points, status, message) for item in layout]


# ---------------------------------------------------------------------------------------------------------
# In a worker process
# ---------------------------------------------------------------------------------------------------------


def _init_worker(jupyter_directory: str, log_directory: str) -> None:
    """Kernels of this worker run this interpreter; its own and its kernels' stderr go to a log file."""
    os.environ.update(kernel_environment(Path(jupyter_directory)))
    warnings.filterwarnings("ignore")  # SQLAlchemy's and traitlets' warnings belong to nbgrader, not to us
    log_file = os.open(
        Path(log_directory) / f"worker-{os.getpid()}.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND
    )
    os.dup2(log_file, 1)
    os.dup2(log_file, 2)


def _failure_messages(autograded: Path) -> dict[str, str]:
    """For each test cell of the autograded notebook that raised, ``"Name: message"``."""
    messages = {}
    if not autograded.exists():
        return messages
    for cell in nbformat.read(autograded, as_version=4).cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        for output in cell.get("outputs", []):
            if grade_id and output.get("output_type") == "error":
                text = _ANSI.sub("", f"{output.get('ename', '')}: {output.get('evalue', '')}").strip()
                messages[grade_id] = text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 3] + "..."
                break
    return messages


def _decide_outside_kernel(course_root: Path, task: Task) -> dict[str, str]:
    """Decide the split test cells from their reports; write the scores into the gradebook.

    nbgrader's own score for such a cell (did it raise in the student's kernel?) is replaced: the cell passes
    when the grader's checks pass on the values the kernel reported, and only then. Returns the failure
    message of each split cell that failed.
    """
    from nbgrader.api import Gradebook

    if not task.splits:
        return {}
    autograded = course_root / "autograded" / task.student / task.assignment / task.notebook.name
    cells = {}
    if autograded.exists():
        for cell in nbformat.read(autograded, as_version=4).cells:
            grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
            if grade_id in task.splits:
                cells[grade_id] = cell
    kernel_errors = _failure_messages(autograded)
    messages = {}
    points = {item.grade_id: item.points for item in task.layout}
    with Gradebook(f"sqlite:///{course_root / 'gradebook.db'}") as gradebook:
        for grade_id, split in task.splits.items():
            cell = cells.get(grade_id)
            reports, problem = parse_reports(reported_text(cell) if cell else "", task.marker, split)
            passed, message = decide(split, reports, problem or kernel_errors.get(grade_id))
            grade = gradebook.find_grade(grade_id, task.assignment, task.assignment, task.student)
            grade.auto_score = points.get(grade_id, 0.0) if passed else 0.0
            if not passed:
                messages[grade_id] = message if len(message) <= MAX_MESSAGE else message[: MAX_MESSAGE - 3] + "..."
        gradebook.db.commit()
    return messages


def _items_from_gradebook(course_root: Path, task: Task, decided: dict[str, str]) -> list[Item]:
    from nbgrader.api import Gradebook

    messages = _failure_messages(
        course_root / "autograded" / task.student / task.assignment / task.notebook.name
    )
    messages.update(decided)
    with Gradebook(f"sqlite:///{course_root / 'gradebook.db'}") as gradebook:
        submitted = gradebook.find_submission_notebook(task.assignment, task.assignment, task.student)
        grades = {grade.name: (grade.score, grade.needs_manual_grade) for grade in submitted.grades}
    items = []
    for layout_item in task.layout:
        score, needs_manual_grade = grades.get(layout_item.grade_id, (0.0, False))
        score = float(score or 0.0)
        if layout_item.cell_type == "markdown":
            status = (
                "manual" if needs_manual_grade else ("passed" if score >= layout_item.points else "failed")
            )
            message = "to be graded by an instructor" if needs_manual_grade else ""
            if not needs_manual_grade and score == 0:
                message = "no answer was written"
        else:
            status = "passed" if score >= layout_item.points else "failed"
            message = (
                "" if status == "passed" else messages.get(layout_item.grade_id, "the test did not pass")
            )
        items.append(Item(layout_item.grade_id, score, layout_item.points, status, message))
    return items


def _nbgrader_step(app_class, course_root: Path, task: Task, **config_updates) -> str:
    from nbgrader.coursedir import CourseDirectory

    config = load_config(course_root, timeout=task.timeout, sockets=task.directory / "runtime" / "kernel")
    for section, values in config_updates.items():
        for key, value in values.items():
            config[section][key] = value
    course_directory = CourseDirectory(config=config)
    course_directory.assignment_id = task.assignment
    course_directory.student_id = task.student
    app = app_class(coursedir=course_directory, config=config)
    app.force = True
    if hasattr(app, "create_student"):
        app.create_student = True
    return run_app(app)


def _autograde_config(limits: Limits) -> dict[str, dict]:
    """nbgrader's autograde steps with :class:`autograder.execute.CappedExecute` in place of Execute."""
    from nbgrader.converters import Autograde
    from nbgrader.preprocessors import Execute

    from autograder.execute import CappedExecute

    steps = Autograde.class_traits()["autograde_preprocessors"].default()
    return {
        "Autograde": {"autograde_preprocessors": [CappedExecute if step is Execute else step for step in steps]},
        "CappedExecute": {
            "max_output_bytes": limits.output_kb * 1024,
            "max_notebook_bytes": limits.notebook_output_kb * 1024,
        },
    }


def _memory_note(task: Task, group: cgroups.KernelGroup | None) -> str:
    if group is None or not group.memory_limit_hits():
        return ""
    return f"the kernel reached its memory limit ({task.limits.memory_mb} MB) and a process of it was ended"


def _failure_reason(log: str, memory_note: str = "") -> str:
    """Why nbgrader could not run a notebook, from its log."""
    if memory_note:
        return memory_note
    if "Kernel died" in log or "DeadKernelError" in log:
        return "the kernel died while running the notebook (a cell ended Python or ran out of memory)"
    errors = [
        line.strip() for line in log.splitlines() if line.startswith("[ERROR]") and "Please see" not in line
    ]
    return f"nbgrader could not run the notebook ({errors[-1][8:] if errors else 'see the log'})"


def _timeout_notes(log: str) -> list[str]:
    """A note for every cell that nbgrader interrupted at the time limit."""
    limits = re.findall(r"Timeout waiting for execute reply \((\d+)s\)", log)
    return [
        f"a cell ran longer than {limit} seconds and was interrupted; the cells after it still ran"
        for limit in limits
    ]


def _write_ungraded(task: Task, reason: str) -> Result:
    """0 for every item, with ``reason``, and a feedback page that says so. Never raises: when even the page
    cannot be written, the result still carries the reason (and report.txt says so)."""
    result = Result(
        task.student, task.assignment, zero_items(task.layout, "not graded", reason), list(task.notes), reason
    )
    try:
        task.feedback.parent.mkdir(parents=True, exist_ok=True)
        page = ungraded_page(task.student, task.assignment, reason, result.items, result.notes)
        task.feedback.write_bytes(page.encode("utf-8", "backslashreplace"))
    except Exception as error:  # noqa: BLE001 (the grade and its reason must reach grades.csv and report.txt)
        result.notes.append(f"the feedback page could not be written ({type(error).__name__})")
    return result


def _set_sandbox(task: Task, group: cgroups.KernelGroup | None) -> None:
    """The kernel of this task starts in a sandbox with a scratch folder, a runtime folder and a log file of its
    own, in its control group when it has one."""
    scratch, runtime = task.directory / "scratch", task.directory / "runtime"
    scratch.mkdir(parents=True)
    runtime.mkdir(parents=True, mode=0o700)
    settings = Settings(
        str(scratch),
        str(runtime),
        str(task.directory / KERNEL_LOG),
        task.hidden,
        task.limits,
        task.use_bwrap,
        None if group is None else (group.version, tuple(str(folder) for folder in group.folders)),
    )
    os.environ[ENVIRONMENT_VARIABLE] = settings.to_json()
    os.environ["JUPYTER_RUNTIME_DIR"] = str(runtime)


def _kernel_log_tail(task: Task) -> str:
    """The end of what the kernel wrote on its standard output and error (its own log file)."""
    path = task.directory / KERNEL_LOG
    if not path.exists():
        return ""
    with open(path, "rb") as handle:
        handle.seek(max(0, path.stat().st_size - MAX_KERNEL_LOG_BYTES))
        tail = handle.read().decode("utf-8", "backslashreplace")
    return f"--- the kernel's standard output and error (last {MAX_KERNEL_LOG_BYTES} bytes at most) ---\n{tail}"


def _kernel_group(task: Task, log: list[str]) -> cgroups.KernelGroup | None:
    if not task.use_cgroup:
        return None
    limits = task.limits
    try:
        return cgroups.KernelGroup.create(memory_bytes=limits.memory_mb * MEGABYTE, processes=limits.processes)
    except OSError as error:
        log.append(f"the kernel's control group could not be made: {error}")
        return None


def grade_task(task: Task) -> Result:
    """Grade one submission in a course directory of its own; never raises."""
    from nbgrader.converters import Autograde, GenerateFeedback

    course_root = task.directory / "course"
    log: list[str] = []
    group = None
    try:
        shutil.copytree(task.template / "source" / task.assignment, course_root / "source" / task.assignment)
        shutil.copy2(task.template / "gradebook.db", course_root / "gradebook.db")
        submitted = course_root / "submitted" / task.student / task.assignment
        submitted.mkdir(parents=True)
        shutil.copy2(task.notebook, submitted / task.notebook.name)
        group = _kernel_group(task, log)
        _set_sandbox(task, group)
        try:
            log.append(_nbgrader_step(Autograde, course_root, task, **_autograde_config(task.limits)))
        except NbgraderError as error:
            log.append(str(error))
            return _write_ungraded(task, _failure_reason(str(error), _memory_note(task, group)))
        notes = [*task.notes, *_timeout_notes(log[-1])]
        if memory_note := _memory_note(task, group):
            notes.append(memory_note)
        decided = _decide_outside_kernel(course_root, task)
        items = _items_from_gradebook(course_root, task, decided)
        # Student HTML, scripts and active outputs never reach the page the instructor opens.
        sanitize_notebook_file(course_root / "autograded" / task.student / task.assignment / task.notebook.name)
        log.append(
            _nbgrader_step(GenerateFeedback, course_root, task, HTMLExporter={"template_name": "feedback"})
        )
        page = (
            course_root
            / "feedback"
            / task.student
            / task.assignment
            / task.notebook.with_suffix(".html").name
        )
        task.feedback.parent.mkdir(parents=True, exist_ok=True)
        task.feedback.write_text(add_notes(page.read_text(encoding="utf-8"), notes), encoding="utf-8")
        return Result(task.student, task.assignment, items, notes)
    except Exception:  # noqa: BLE001 (a grader bug must not stop the batch; the log keeps the traceback)
        log.append(traceback.format_exc())
        return _write_ungraded(task, "the grader failed on this submission (see its log)")
    finally:
        if group is not None:
            group.remove()
        with contextlib.suppress(Exception):  # a log that cannot be written must not lose the grade
            log.append(_kernel_log_tail(task))
            task.log.parent.mkdir(parents=True, exist_ok=True)
            task.log.write_bytes("\n".join(log).encode("utf-8", "backslashreplace"))
        shutil.rmtree(task.directory, ignore_errors=True)


# ---------------------------------------------------------------------------------------------------------
# In the main process
# ---------------------------------------------------------------------------------------------------------


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
    if cgroup:
        root = os.geteuid() == 0
        processes = "NOT limited (the grader runs as root, which RLIMIT_NPROC does not bind)" if root else (
            "limited per user, not per kernel"
        )
        found.append(
            f"kernels had no control group ({cgroup}): memory was limited as address space only "
            f"({limits.memory_mb} MB; files in /tmp and /dev/shm count only against their size cap), processes "
            f"were {processes}, and no kernel had a CPU share of its own (README: 'Limits that hold')"
        )
    return found


def _prepare_task(task: Task, submission, released: nbformat.NotebookNode) -> Task | Result:
    """The task to run for one submission, or its result when it cannot be graded. Never raises."""
    try:
        if submission.path is None:
            return _write_ungraded(task, "the folder holds no notebook")
        prepared = prepare(submission.path, released)
        task = dataclasses.replace(task, notes=(*task.notes, *prepared.notes))
        if prepared.notebook is None:
            return _write_ungraded(task, prepared.reason or "unknown")
        task.notebook.parent.mkdir(parents=True)
        task.notebook.write_bytes(nbformat.writes(prepared.notebook).encode("utf-8"))
        return task
    except Exception as error:  # noqa: BLE001 (one submission's problem stays with it)
        return _write_ungraded(task, f"the grader could not read this submission ({type(error).__name__})")


def _submission_root(path: Path, work: Path) -> tuple[Path, list[str]]:
    if path.is_dir():
        return path, []
    if path.is_file():
        root = work / "unzipped"
        root.mkdir()
        return root, extract_notebooks(path, root)
    raise FileNotFoundError(f"{path} is neither a folder nor a zip file")


def _run_tasks(tasks: list[Task], jobs: int, jupyter_directory: Path, worker_logs: Path, deliver: Delivery) -> None:
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
                result = _write_ungraded(task, f"the grader's worker process failed ({type(error).__name__})")
            deliver(result)


class Delivery:
    """Where each result goes as soon as it is ready, in the main process: the class's gradebook (this is its
    only writer), the progress bar and the caller's ``report``."""

    def __init__(self, gradebook, report: Callable[[Result], None], total: int, progress: bool) -> None:
        from tqdm import tqdm

        self.gradebook = gradebook
        self.report = report
        self.results: list[Result] = []
        self.warnings: list[str] = []
        self.bar = tqdm(total=total, unit="notebook", desc="grading", disable=not progress, file=sys.stderr)

    def __call__(self, result: Result) -> None:
        try:
            record(self.gradebook, result)
        except Exception as error:  # noqa: BLE001 (the grades still reach grades.csv; report.txt says why)
            self.gradebook.db.rollback()
            self.warnings.append(
                f"{result.student}/{result.assignment} was not written into the gradebook "
                f"({type(error).__name__}: {str(error)[:200]})"
            )
        self.results.append(result)
        self.bar.update()
        self.report(result)

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


def _export_row(result: Result) -> dict[str, str]:
    """The row of ``nbgrader export`` for one result (no names, due dates or late penalties here)."""
    score = str(float(result.score))
    row = dict.fromkeys(EXPORT_COLUMNS, "")
    row.update(
        assignment=result.assignment,
        student_id=result.student,
        raw_score=score,
        late_submission_penalty="0.0",
        score=score,
        max_score=str(float(result.max_score)),
    )
    return row


def _write_csvs(results: list[Result], out: Path) -> None:
    """``grades.csv`` and ``items.csv``; every cell a student could choose is neutralized (:func:`csv_row`)."""
    with open(out / "grades.csv", "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(EXPORT_COLUMNS)
        for result in results:
            row = _export_row(result)
            writer.writerow(csv_row(row[column] for column in EXPORT_COLUMNS))
    with open(out / "items.csv", "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(ITEM_COLUMNS)
        for result in results:
            if result.reason == NOT_SUBMITTED:
                continue
            for item in result.items:
                scores = (str(float(item.score)), str(float(item.max_score)))
                writer.writerow(
                    csv_row([result.student, result.assignment, item.grade_id, *scores, item.status, item.message])
                )


def _write_report(results: list[Result], warnings_found: list[str], out: Path) -> None:
    """``report.txt``: one line per warning, per submission and per note, control characters escaped."""
    lines = ["Warnings:", *(f"- {report_text(warning)}" for warning in warnings_found)] if warnings_found else []
    for result in results:
        header = f"{result.student}/{result.assignment}: {result.score:g} / {result.max_score:g}"
        lines.append(report_text(header + (f" (not graded: {result.reason})" if result.reason else "")))
        lines += [f"  note: {report_text(note)}" for note in result.notes]
    (out / "report.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")


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
) -> list[Result]:
    """Grade every submission under ``path`` (a folder or a zip); write the outputs into ``out``.

    Args:
        path: a folder of ``<student>/<assignment>/<notebook>.ipynb``, or a zip of one.
        out: the output folder (created if needed).
        jobs: parallel workers, >= 1; default one per core, at most 8 (and at most one per submission).
        timeout: seconds a cell may run before it is interrupted; default from ``nbgrader_config.py``.
        report: called with each result as soon as it is ready.
        limits: the resource limits of each kernel; default from ``nbgrader_config.py``
            (``c.AutograderSandbox``), else :class:`autograder.sandbox.Limits`.
        sandbox: run each kernel in bubblewrap; when bwrap cannot run here (or ``sandbox`` is False) the
            kernels run with the limits only and ``report.txt`` says so.
        db_url: the class's nbgrader gradebook (:mod:`autograder.gradebook`), any SQLAlchemy URL nbgrader
            supports; default ``sqlite:///<out>/gradebook.db``. It is updated, never cleared.
        progress: show a progress bar on standard error.

    Returns:
        One result per student and assignment, sorted by assignment then student.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: ``path`` is a file that is not a zip, or a zip beyond the size limits; ``jobs`` < 1;
            ``db_url`` is not a URL or its database cannot be opened.
    """
    path, out = Path(path).resolve(), Path(out).resolve()
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist")
    if jobs is not None and jobs < 1:
        raise ValueError(f"jobs must be >= 1, got {jobs}")
    out.mkdir(parents=True, exist_ok=True)
    class_gradebook = _open_class_gradebook(db_url or f"sqlite:///{out / 'gradebook.db'}")
    staging = out / f".autograder-new-{secrets.token_hex(4)}"
    staging.mkdir()
    try:
        results, warnings_found = _grade_into(
            path, staging, out, class_gradebook, db_url, jobs, timeout, report, limits, sandbox, progress
        )
        _write_csvs(results, staging)
        _write_report(results, warnings_found, staging)
        _publish(staging, out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return results


def _grade_into(path, staging, out, class_gradebook, db_url, jobs, timeout, report, limits, sandbox, progress):
    """The batch of :func:`grade`, its outputs written into ``staging``: (results, warnings)."""
    with tempfile.TemporaryDirectory(prefix="autograder-grade-") as work_name:
        work = Path(work_name)
        root, warnings_found = _submission_root(path, work)
        collection = collect(root, ASSIGNMENTS)
        warnings_found += collection.warnings
        assignments = sorted({submission.assignment for submission in collection.submissions})
        course = TemporaryCourse(work / "template", assignments)
        released = {
            assignment: nbformat.read(course.generate(assignment), as_version=4) for assignment in assignments
        }
        with open_gradebook(f"sqlite:///{course.gradebook}") as template:
            copy_assignments(template, class_gradebook, assignments)
        layouts = {assignment: layout_of(notebook) for assignment, notebook in released.items()}
        limits = limits or configured_limits()
        problem = bwrap_problem() if sandbox else "the sandbox was turned off (--no-sandbox)"
        cgroup_problem = cgroups.problem()
        warnings_found += _enforcement_warnings(problem, cgroup_problem, limits)
        database = _sqlite_file(db_url)
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
        deliver = Delivery(class_gradebook, report or (lambda result: None), len(collection.submissions), progress)
        try:
            tasks = []
            for index, submission in enumerate(collection.submissions):
                task = Task(
                    student=submission.student,
                    assignment=submission.assignment,
                    notebook=work / "prepared" / str(index) / f"{submission.assignment}.ipynb",
                    template=course.directory,
                    directory=work / "tasks" / str(index),
                    layout=layouts[submission.assignment],
                    notes=submission.notes,
                    feedback=staging
                    / "feedback"
                    / submission.student
                    / submission.assignment
                    / f"{submission.assignment}.html",
                    log=staging / "logs" / submission.student / f"{submission.assignment}.log",
                    timeout=timeout,
                    splits=splits[submission.assignment],
                    marker=marker,
                    hidden=hidden,
                    limits=limits,
                    use_bwrap=problem is None,
                    use_cgroup=cgroup_problem is None,
                )
                prepared = _prepare_task(task, submission, released[submission.assignment])
                if isinstance(prepared, Result):
                    deliver(prepared)
                else:
                    tasks.append(prepared)
            if tasks:
                worker_logs = staging / "logs"
                worker_logs.mkdir(parents=True, exist_ok=True)
                workers = min(jobs or min(os.cpu_count() or 1, MAX_DEFAULT_JOBS), len(tasks))
                _run_tasks(tasks, workers, course.jupyter_directory, worker_logs, deliver)
        finally:
            deliver.close()
    results = deliver.results
    warnings_found += deliver.warnings
    students = sorted({result.student for result in results})
    graded = {(result.student, result.assignment) for result in results}
    for assignment in assignments:
        for student in students:
            if (student, assignment) not in graded:
                results.append(
                    Result(
                        student,
                        assignment,
                        zero_items(layouts[assignment], "not submitted"),
                        [],
                        NOT_SUBMITTED,
                    )
                )
    results.sort(key=lambda result: (result.assignment, result.student))
    return results, warnings_found


def _sqlite_file(db_url: str | None) -> Path | None:
    """The file of a SQLite gradebook URL (None for the default, inside the output folder, or another database)."""
    if not db_url or not db_url.startswith("sqlite:///"):
        return None
    return Path(db_url[len("sqlite:///") :]).resolve()
