"""One submission through the stages after the intake: execution in the sandbox, verdicts, feedback page.

:func:`grade_task` is the one code path that grades a submission, whichever executor runs it: it copies the
template course, runs nbgrader's autograde in a kernel sandboxed by :mod:`autograder.sandbox` (in a control
group of its own when the machine has them), decides the split test cells from the values the kernel
reported (:mod:`autograder.verdicts`), reads the scores and messages, and writes the feedback page
(:mod:`autograder.feedback`). It never raises: whatever goes wrong gives the submission 0 and a reason.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import shutil
import traceback
from pathlib import Path

import nbformat

from autograder import variants
from autograder.course import NbgraderError, load_config, run_app
from autograder.feedback.outputs import sanitize_notebook_file
from autograder.feedback.pages import add_notes, ungraded_page
from autograder.sandbox import cgroups
from autograder.sandbox.launcher import ENVIRONMENT_VARIABLE, Limits, Settings
from autograder.types import Item, Result, Task, zero_items
from autograder.verdicts.verdict import Split, decide, parse_reports, reported_text

MAX_MESSAGE = 600
MEGABYTE = 1024 * 1024
KERNEL_LOG = "kernel.log"
MAX_KERNEL_LOG_BYTES = 64 * 1024
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


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
            split, parameters = _for_this_student(task, grade_id, split)
            passed, message = decide(split, reports, problem or kernel_errors.get(grade_id))
            if parameters and not passed:
                message = f"with your parameters ({parameters}): {message}"
            grade = gradebook.find_grade(grade_id, task.assignment, task.assignment, task.student)
            grade.auto_score = points.get(grade_id, 0.0) if passed else 0.0
            if not passed:
                messages[grade_id] = message if len(message) <= MAX_MESSAGE else message[: MAX_MESSAGE - 3] + "..."
        gradebook.db.commit()
    return messages


def _for_this_student(task: Task, grade_id: str, split: Split) -> tuple[Split, str]:
    """The split of a varied item with the expected values of this student's parameters (drawn from the
    student folder, or the one answer key's when variants are off), and those parameters in words ("" when
    every student has the same); the split as it is, and "", for any other item."""
    variant = variants.variant_of_cell(task.assignment, grade_id)
    if variant is None:
        return split, ""
    parameters = variants.parameters_for(task.assignment, task.student, enabled=task.variants)[variant.item]
    constants = f"{split.constants}\n{variants.constants_source(variant, parameters)}"
    return dataclasses.replace(split, constants=constants), variant.describe(parameters) if task.variants else ""


def parameters_note(task: Task) -> str | None:
    """The feedback's line that lists the student's parameters, when the assignment has varied items."""
    varied = variants.variants_of(task.assignment)
    if not (varied and task.variants):
        return None
    drawn = variants.parameters_for(task.assignment, task.student, enabled=True)
    listed = "; ".join(f"{variant.item} {variant.describe(drawn[variant.item])}" for variant in varied)
    return f"the varied items were graded with the parameters of student {task.student}: {listed}"


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

    from autograder.sandbox.execute import CappedExecute

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


def write_ungraded(task: Task, reason: str) -> Result:
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
        task.student,
        task.variants,
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
            return write_ungraded(task, _failure_reason(str(error), _memory_note(task, group)))
        notes = [*task.notes, *_timeout_notes(log[-1])]
        if note := parameters_note(task):
            notes.append(note)
        if memory_note := _memory_note(task, group):
            notes.append(memory_note)
        decided = _decide_outside_kernel(course_root, task)
        items = _items_from_gradebook(course_root, task, decided)
        # Student HTML, scripts and active outputs never reach the page the instructor opens.
        autograded = course_root / "autograded" / task.student / task.assignment / task.notebook.name
        sanitize_notebook_file(autograded)
        if task.autograded is not None:  # the notebook the formgrader shows the instructor: the cleaned one
            task.autograded.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(autograded, task.autograded)
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
        return write_ungraded(task, "the grader failed on this submission (see its log)")
    finally:
        if group is not None:
            group.remove()
        with contextlib.suppress(Exception):  # a log that cannot be written must not lose the grade
            log.append(_kernel_log_tail(task))
            task.log.parent.mkdir(parents=True, exist_ok=True)
            task.log.write_bytes("\n".join(log).encode("utf-8", "backslashreplace"))
        shutil.rmtree(task.directory, ignore_errors=True)
