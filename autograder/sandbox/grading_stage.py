"""What the grading stage does with one submission, inside its sandbox (:mod:`autograder.sandbox.stage`).

From the student's bytes to plain data, in this order:

1. the notebook is read and repaired against its release (:func:`autograder.student.sanitize.prepare`): a file
   that is no notebook ends here, with the reason;
2. a copy of the template course (sources and hardened gradebook) is made in the stage's folder, the
   notebook put in its ``submitted/``, and nbgrader's autograde runs it in the student's kernel, itself
   sandboxed inside this one (:mod:`autograder.sandbox.launcher`), its output capped and the whole notebook
   held to ``notebook_seconds`` (:mod:`autograder.sandbox.execute`);
3. the split test cells are decided on the values the kernel reported (:mod:`autograder.verdicts`), and the
   score and message of every item read from the gradebook and the autograded notebook;
4. the autograded notebook is rebuilt from an allowlist (:mod:`autograder.feedback.outputs`) and nbconvert
   renders the feedback page from it with the course's template (:mod:`autograder.feedback.template`).

The answer (:func:`grade_in_stage`) is a dict of plain values: the items, the notes, a reason when nothing
could be graded, the feedback page and the autograded notebook as text, the log (nbgrader's) and apart from
it the end of what the kernel wrote (``kernel_log``), so that the worker marks each line of the log file with
where it came from. The worker trusts none of it until :mod:`autograder.sandbox.crossing` has checked it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import traceback
from dataclasses import dataclass
from pathlib import Path

import nbformat

from autograder import variants
from autograder.course import NbgraderError, load_config, run_app
from autograder.sandbox import accounts, phases
from autograder.sandbox.crossing import MAX_NOTE, MAX_NOTES, MAX_PAGE, MAX_REASON
from autograder.sandbox.launcher import ENVIRONMENT_VARIABLE, Limits, Settings
from autograder.sandbox.stage import MAX_RESPONSE_BYTES
from autograder.types import Item, Task
from autograder.verdicts.verdict import Split, decide, parse_reports, reported_text, uses_sympy

MAX_MESSAGE = 600
MAX_DESCRIBED = 160  # a longer description of the parameters is not repeated in front of each message
MAX_LOG_CHARS = 256 * 1024
MAX_KERNEL_LOG_BYTES = 64 * 1024
KERNEL_LOG = "kernel.log"
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


@dataclass(frozen=True)
class StageRequest:
    """What the worker hands a stage (pickled: the worker is trusted): the task, the released notebook of
    its assignment, the folder the stage works in (``/grading`` in the sandbox), whether it is sandboxed, the size
    of the student's notebook and the kernel's control group."""

    task: Task
    released: Path
    root: str
    sandboxed: bool
    notebook_bytes: int
    kernel_group: tuple[int, tuple[str, ...]] | None = None  # the kernel's control group (its launcher joins it)


def grade_in_stage(request: StageRequest) -> dict:
    """Grade the submission of ``request``; the answer as plain data (see the module docstring). Never raises:
    a failure of the grader's own code is answered as ``{"failure": ...}``."""
    log: list[str] = []
    try:
        answer = _within_the_response(_within_the_crossing(_grade(request, log)))
    except Exception:  # noqa: BLE001 (the worker turns it into a grader failure, never kept as a grade)
        log.append(traceback.format_exc())
        answer = {"failure": "the grader failed on this submission (see its log)", "log": _joined(log)}
    return {**answer, "marks": dict(phases.MARKS)}


def _within_the_crossing(answer: dict) -> dict:
    """``answer`` with its notes and reason within what the worker accepts (:mod:`autograder.sandbox.crossing`):
    each cut with a mark, and the notes past :data:`~autograder.sandbox.crossing.MAX_NOTES` counted in the last
    one. Their texts and their number are partly the student's (file names, a kernel's name, one note per cell),
    and an answer past the caps would be a failure of the grader, graded again by every run."""
    notes = [cut_text(note, MAX_NOTE) for note in answer.get("notes", [])]
    if len(notes) > MAX_NOTES:
        notes = [*notes[: MAX_NOTES - 1], f"... and {len(notes) - MAX_NOTES + 1} more notes like these"]
    reason = answer.get("reason")
    return {**answer, "notes": notes, "reason": None if reason is None else cut_text(reason, MAX_REASON)}


RESPONSE_BUDGET = MAX_RESPONSE_BYTES - 1024 * 1024  # the answer's bytes, the stage's marks and a margin aside


def _within_the_response(answer: dict) -> dict:
    """``answer`` within the bytes the worker reads of it (:data:`RESPONSE_BUDGET`, as ASCII JSON: up to 12 bytes
    a character). The budgets of the rebuild count characters, and a notebook of non-ASCII text, shown in both
    the page and the notebook, could pass the bytes: then the page is replaced by a short one, then the
    notebook's outputs are left out (a note says so), and an answer still too large is a reason, never a
    failure of the grader."""
    if _response_bytes(answer) <= RESPONSE_BUDGET:
        return answer
    answer = {**answer, "feedback": _too_large_page(len(answer["feedback"]))}
    if _response_bytes(answer) <= RESPONSE_BUDGET:
        return answer
    notebook = nbformat.reads(answer["autograded"], as_version=4)
    for cell in notebook.cells:
        if cell.cell_type == "code":
            cell.outputs = []
    left_out = ("the notebook's outputs were left out of the copy the instructor sees: with them, the graded "
                "notebook and its page were too large to send")
    # First: a student's own notes can fill the crossing's count, and the cut keeps the first ones.
    notes = _within_the_crossing({"notes": [left_out, *answer["notes"]]})["notes"]
    answer = {**answer, "autograded": nbformat.writes(notebook), "notes": notes}
    if _response_bytes(answer) <= RESPONSE_BUDGET:
        return answer
    return {"reason": "the graded notebook and its page came to more than the grader takes "
                      f"({RESPONSE_BUDGET} bytes): its cells' text is too large", "notes": answer["notes"],
            "log": answer.get("log", ""), "kernel_log": answer.get("kernel_log", "")}


def _response_bytes(answer: dict) -> int:
    """The bytes of ``answer`` as the stage sends it (ASCII JSON), or a bound above them where that bound is
    within the budget (12 bytes a character of its texts, notes and items: a surrogate pair's two escapes), so
    that most answers are not encoded twice."""
    texts = [value for value in answer.values() if isinstance(value, str)] + list(answer.get("notes") or [])
    bound = sum(12 * len(text) for text in texts) + 12 * len(json.dumps(answer.get("items") or [])) + 4 * 1024 * 1024
    return bound if bound <= RESPONSE_BUDGET else len(json.dumps(answer, ensure_ascii=True))


def _page_within_the_crossing(page: str) -> str:
    """``page``, or a short page that says it was too large when it is past the crossing's
    :data:`~autograder.sandbox.crossing.MAX_PAGE`: the rebuild bounds what the renderer reads, and its output
    grows with what it highlights and escapes (a page at every cap comes near the limit), so the grades are sent
    in any case."""
    return page if len(page) <= MAX_PAGE else _too_large_page(len(page))


def _too_large_page(characters: int) -> str:
    return ("<!DOCTYPE html><html><head><title>Feedback</title></head><body><p>This feedback page was not kept: "
            f"it came to {characters} characters, more than the grader takes. Your grades are in the grader's "
            "report, and your notebook holds your work.</p></body></html>")


def cut_text(text: str, limit: int) -> str:
    """``text``, or its beginning and a mark that says how much was cut, in ``limit`` characters."""
    if len(text) <= limit:
        return text
    mark = f" [... {len(text)} characters in all]"
    return text[: limit - len(mark)] + mark


def _grade(request: StageRequest, log: list[str]) -> dict:
    from nbgrader.converters import Autograde, GenerateFeedback

    from autograder.feedback.outputs import sanitize_notebook_file
    from autograder.feedback.template import exporter_config, generate_feedback_config
    from autograder.student.sanitize import prepare

    phases.mark("imported")
    task = request.task
    root = Path(request.root)
    released = nbformat.read(request.released, as_version=4)
    prepared = prepare(task.notebook, released)
    phases.mark("read")
    notes = list(prepared.notes)
    if prepared.notebook is None:
        return {"reason": prepared.reason or "unknown", "notes": notes, "log": _joined(log)}
    if note := _declared_id_note(task, prepared.notebook):
        notes.append(note)
    course_root = root / "course"
    shutil.copytree(task.template / "source" / task.assignment, course_root / "source" / task.assignment)
    shutil.copy2(task.template / "gradebook.db", course_root / "gradebook.db")
    submitted = course_root / "submitted" / task.student / task.assignment
    submitted.mkdir(parents=True)
    # Under the release's name, whatever the student called the file: nbgrader grades the notebook of its source.
    (submitted / f"{task.assignment}.ipynb").write_bytes(nbformat.writes(prepared.notebook).encode("utf-8"))
    kernel = _set_kernel_sandbox(request, root)
    phases.mark("copied")
    try:
        log.append(_nbgrader_step(Autograde, course_root, task, kernel, **_autograde_config(task.limits)))
    except NbgraderError as error:
        log.append(str(error))
        return {
            "reason": _failure_reason(str(error)), "notes": notes, "log": _joined(log), "kernel_failed": True,
            "kernel_log": _kernel_log_tail(kernel),
        }
    phases.mark("autograded")
    notes += _timeout_notes(log[-1])
    if note := parameters_note(task):
        notes.append(note)
    decided = _decide_outside_kernel(course_root, task)
    items = _items_from_gradebook(course_root, task, decided)
    phases.mark("decided")
    autograded = course_root / "autograded" / task.student / task.assignment / f"{task.assignment}.ipynb"
    autograded.chmod(0o600)  # nbgrader leaves it read-only, and the stage holds no capability to override that
    sanitize_notebook_file(autograded)  # the page and the formgrader show the notebook rebuilt from an allowlist
    _show_verdicts(autograded, decided)
    phases.mark("rebuilt")
    log.append(_nbgrader_step(GenerateFeedback, course_root, task, kernel, HTMLExporter=exporter_config(),
                              GenerateFeedback=generate_feedback_config()))
    phases.mark("page")
    page = _page_within_the_crossing(
        (course_root / "feedback" / task.student / task.assignment / f"{task.assignment}.html").read_text(encoding="utf-8"))
    return {
        "items": [dataclasses.asdict(item) for item in items],
        "notes": notes,
        "reason": None,
        "feedback": page,
        "autograded": autograded.read_text(encoding="utf-8"),
        "log": _joined(log),
        "kernel_log": _kernel_log_tail(kernel),
    }


def _declared_id_note(task: Task, notebook: nbformat.NotebookNode) -> str | None:
    """The note for a notebook whose ``STUDENT_ID`` names another student than its folder, when items vary."""
    declared = variants.declared_student_id(notebook)
    if not (task.variants and variants.variants_of(task.assignment)) or declared is None or declared == task.student:
        return None
    return (
        f"the notebook says STUDENT_ID = {declared!r}, but it was submitted in the folder of student "
        f"{task.student!r}: its varied items were graded with the parameters of {task.student!r}"
    )


def _joined(log: list[str]) -> str:
    text = "\n".join(log)
    return text if len(text) <= MAX_LOG_CHARS else "[...]\n" + text[-MAX_LOG_CHARS:]


def _set_kernel_sandbox(request: StageRequest, root: Path) -> Path:
    """The kernel's writable folder, its settings in this process's environment (the launcher reads them);
    returns the folder."""
    task = request.task
    kernel = root / "kernel"
    # Where the kernel has an account of its own, it writes its three folders as that account; sticky, so that it
    # cannot remove or replace what the stage put there (the connection file).
    shared = request.sandboxed and accounts.kernel_account_mapped()
    for name in ("tmp", "shm", "runtime"):
        (kernel / name).mkdir(parents=True, mode=0o700, exist_ok=True)
        if shared:
            (kernel / name).chmod(0o1777)
    settings = Settings(
        scratch=str(kernel / "tmp"),
        runtime=str(kernel / "runtime"),
        log=str(kernel / KERNEL_LOG),
        hidden=task.hidden,
        limits=task.limits,
        use_bwrap=request.sandboxed,
        cgroup=request.kernel_group,
        student=task.student,
        variants=task.variants,
        kernel_view=task.kernel_view,
        writable=str(kernel) if request.sandboxed else "",
    )
    os.environ[ENVIRONMENT_VARIABLE] = settings.to_json()
    os.environ["JUPYTER_RUNTIME_DIR"] = str(kernel / "runtime")
    return kernel


def _nbgrader_step(app_class, course_root: Path, task: Task, kernel: Path, **config_updates) -> str:
    from nbgrader.coursedir import CourseDirectory

    config = load_config(course_root, timeout=task.timeout, sockets=kernel / "runtime" / "kernel")
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
    """nbgrader's autograde steps with :class:`autograder.sandbox.execute.CappedExecute` in place of Execute.

    Once the last cell has answered, the kernel is ended, not asked to end: a shutdown request lets it run what
    the student left for its exit (``atexit``, finalizers) and costs its interpreter's teardown, most of a second
    in a kernel that holds torch; its whole sandbox dies with its launcher (``--die-with-parent``)."""
    from nbgrader.converters import Autograde
    from nbgrader.preprocessors import Execute

    from autograder.sandbox.execute import CappedExecute

    steps = Autograde.class_traits()["autograde_preprocessors"].default()
    return {
        "Autograde": {"autograde_preprocessors": [CappedExecute if step is Execute else step for step in steps]},
        "CappedExecute": {
            "max_output_bytes": limits.output_kb * 1024,
            "max_notebook_bytes": limits.notebook_output_kb * 1024,
            "notebook_seconds": limits.notebook_seconds,
            "shutdown_kernel": "immediate",
        },
    }


def _failure_reason(log: str) -> str:
    """Why nbgrader could not run a notebook, from its log."""
    if "Kernel died" in log or "DeadKernelError" in log:
        return "the kernel died while running the notebook (a cell ended Python or ran out of memory)"
    errors = [
        line.strip() for line in log.splitlines() if line.startswith("[ERROR]") and "Please see" not in line
    ]
    return f"nbgrader could not run the notebook ({errors[-1][8:] if errors else 'see the log'})"


def _timeout_notes(log: str) -> list[str]:
    """A note for every cell that nbgrader interrupted at the time limit, and one when the notebook reached
    its wall-clock cap."""
    from autograder.sandbox.execute import NOTEBOOK_CAP_MARK

    limits = re.findall(r"Timeout waiting for execute reply \((\d+)s\)", log)
    notes = [
        f"a cell ran longer than {limit} seconds and was interrupted; the cells after it still ran"
        for limit in limits
    ]
    if match := re.search(re.escape(NOTEBOOK_CAP_MARK) + r" \((\d+)s\)", log):
        notes.append(
            f"the notebook ran for its {match.group(1)} seconds in all (the grader's cap per notebook): "
            "the cells after that point were not run, and their tests count as failed"
        )
    return notes


def _kernel_log_tail(kernel: Path) -> str:
    """The end (:data:`MAX_KERNEL_LOG_BYTES` at most) of what the kernel wrote on its standard output and error
    (its own log file)."""
    path = kernel / KERNEL_LOG
    try:
        with open(path, "rb") as handle:
            handle.seek(max(0, os.fstat(handle.fileno()).st_size - MAX_KERNEL_LOG_BYTES))
            tail = handle.read(MAX_KERNEL_LOG_BYTES).decode("utf-8", "backslashreplace")
    except OSError:
        return ""
    return tail


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
    autograded = course_root / "autograded" / task.student / task.assignment / f"{task.assignment}.ipynb"
    cells = {}
    if autograded.exists():
        for cell in nbformat.read(autograded, as_version=4).cells:
            grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
            if grade_id in task.splits:
                cells[grade_id] = cell
    kernel_errors = _failure_messages(autograded)
    messages = {}
    points = {item.grade_id: item.points for item in task.layout}
    students = {grade_id: task.student_splits.get(grade_id) or _for_this_student(task, grade_id, split)
                for grade_id, split in task.splits.items()}  # fmt: skip
    preload_sympy = uses_sympy(split for split, _ in students.values())
    with Gradebook(f"sqlite:///{course_root / 'gradebook.db'}") as gradebook:
        for grade_id, split in task.splits.items():
            cell = cells.get(grade_id)
            reports, problem = parse_reports(reported_text(cell) if cell else "", task.marker, split)
            split, parameters = students[grade_id]
            passed, message = decide(split, reports, problem or kernel_errors.get(grade_id),
                                     withhold=task.withhold_answers, preload_sympy=preload_sympy)
            if parameters and not passed:
                message = f"with your parameters ({parameters}): {message}"
            grade = gradebook.find_grade(grade_id, task.assignment, task.assignment, task.student)
            grade.auto_score = points.get(grade_id, 0.0) if passed else 0.0
            if not passed:
                messages[grade_id] = message if len(message) <= MAX_MESSAGE else message[: MAX_MESSAGE - 3] + "..."
        gradebook.db.commit()
    return messages


VERDICT_NAME = "Not right"  # the error name of a verdict shown under its test cell


def _show_verdicts(autograded: Path, decided: dict[str, str]) -> None:
    """Put each failed check's message under its test cell, as an error output, so that the feedback page and the
    formgrader say why an item lost its points (the kernel that ran the cell never knew: its checks ran here).
    The messages are the grader's, built from reported values; the page escapes them like every output."""
    if not decided:
        return
    notebook = nbformat.read(autograded, as_version=4)
    for cell in notebook.cells:
        message = decided.get(cell.metadata.get("nbgrader", {}).get("grade_id"))
        if cell.cell_type == "code" and message is not None:
            cell.outputs.append(nbformat.v4.new_output(
                "error", ename=VERDICT_NAME, evalue=message, traceback=[f"{VERDICT_NAME}: {message}"]
            ))
    nbformat.write(notebook, autograded)


def students_splits(task: Task) -> dict[str, tuple[Split, str]]:
    """Every split of ``task`` as :func:`_for_this_student` gives it, by grade_id."""
    return {grade_id: _for_this_student(task, grade_id, split) for grade_id, split in task.splits.items()}


def _for_this_student(task: Task, grade_id: str, split: Split) -> tuple[Split, str]:
    """The split of a varied item with the expected values of this student's parameters (drawn from the
    student folder, or the one answer key's when variants are off), and those parameters in words ("" when
    every student has the same); the split as it is, and "", for any other item."""
    variant = variants.variant_of_cell(task.assignment, grade_id)
    if variant is None:
        return split, ""
    parameters = variants.parameters_for(task.assignment, task.student, enabled=task.variants)[variant.item]
    constants = f"{split.constants}\n{variants.constants_source(variant, parameters)}"
    described = variant.describe(parameters) if task.variants and variant.varied.in_summary else ""  # a quiz: its letters
    if "\n" in described or len(described) > MAX_DESCRIBED:  # a list of maps: the note on top of the page has it
        described = "listed at the top of this page"
    return dataclasses.replace(split, constants=constants), described


def parameters_note(task: Task) -> str | None:
    """The feedback's line that lists the student's parameters, when the assignment has varied items."""
    varied = [variant for variant in variants.variants_of(task.assignment) if variant.varied.in_summary]
    if not (varied and task.variants):  # a quiz's order of options is shown where it is asked, not listed here
        return None
    drawn = variants.parameters_for(task.assignment, task.student, enabled=True)
    listed = "; ".join(f"{variant.item} {variant.describe(drawn[variant.item])}" for variant in varied)
    return f"the varied items were graded with the parameters of student {task.student}: {listed}"


def _items_from_gradebook(course_root: Path, task: Task, decided: dict[str, str]) -> list[Item]:
    from nbgrader.api import Gradebook

    messages = _failure_messages(
        course_root / "autograded" / task.student / task.assignment / f"{task.assignment}.ipynb"
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
