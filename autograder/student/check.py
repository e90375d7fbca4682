"""``python -m autograder check NOTEBOOK``: a student's self-check with the visible tests.

The notebook runs from top to bottom in a fresh kernel (the Python running this command), in its own folder,
as *Restart & Run All* would. Its test cells are first reset to the released version of the assignment, so an
accidental edit of a test cannot make the check lie. The visible tests check the form of the answers only;
the hidden tests that decide the grade are not in a student's notebook.

A test cell passes, fails (it raised), or finds its item not answered yet: :func:`autograder.student.progress.visible_test`
then shows the status as data of :data:`autograder.student.progress.STATUS_MIME`, which is read here. The words and
lines are those of the notebook's own last cell (:func:`autograder.student.progress.status_line`), and every line names
its item as the notebook does, "2.2" or "Quiz 1" (:func:`autograder.student.progress.item_labels`).

Everything it prints that a notebook wrote (names, grade ids, messages) is shown escaped
(:func:`autograder.student.terminal.terminal_text`: no escape sequence, carriage return or bidirectional
character reaches the terminal), and the kernel is started with its standard output and error on
``/dev/null``. That holds only for a notebook that does not try: the kernel runs as the user who calls this
command, with no sandbox, and can still open the caller's terminal by another road (``/proc/<parent>/fd/1``).
It is the student's tool for their own notebook, never the grader's (``python -m autograder grade`` runs
submissions in its sandbox).

This module and what it imports are on the student's side: the student edition's ``python -m autograder``
(:mod:`autograder.authoring.publish`) offers this command only, through :func:`main`.
"""

from __future__ import annotations

import argparse
import math
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import nbformat

from autograder import ASSIGNMENTS, released_notebook
from autograder.student.kernels import (
    KERNEL_NAME,
    execute_in_own_loop,
    kernel_environment_set,
    write_kernelspec,
)
from autograder.student.progress import NOT_ANSWERED, STATUS_MIME, item_labels
from autograder.student.sanitize import read_notebook
from autograder.student.terminal import terminal_text

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


@dataclass(frozen=True)
class CheckedItem:
    grade_id: str
    points: float
    status: str  # "passed", "failed", "not answered", "written answer"
    message: str = ""
    label: str = ""  # the item as the notebook numbers it ("2.2", "Quiz 1"); the grade id where it has none


def _nbgrader(cell) -> dict:
    """The cell's nbgrader metadata, or ``{}`` where the notebook holds something else there."""
    metadata = cell.get("metadata")
    nbgrader = metadata.get("nbgrader") if isinstance(metadata, dict) else None
    return nbgrader if isinstance(nbgrader, dict) else {}


def _grade_id(cell) -> str | None:
    """The cell's nbgrader grade id, or None where its metadata does not hold one as text."""
    grade_id = _nbgrader(cell).get("grade_id")
    return grade_id if isinstance(grade_id, str) else None


def _points(cell) -> float:
    """The cell's points, 0 where its metadata holds no finite number."""
    points = _nbgrader(cell).get("points", 0)
    number = isinstance(points, int | float) and not isinstance(points, bool) and math.isfinite(points)
    return float(points) if number else 0.0


def matching_release(notebook: nbformat.NotebookNode, path: Path) -> nbformat.NotebookNode | None:
    """The released notebook of the same assignment: by file name, else the one sharing most grade ids."""
    ids = {_grade_id(cell) for cell in notebook.cells} - {None}
    best, best_overlap = None, 0
    for assignment in ASSIGNMENTS:
        candidate_path = released_notebook(assignment)
        if not candidate_path.exists():
            continue
        candidate = nbformat.read(candidate_path, as_version=4)
        if path.stem == assignment:
            return candidate
        overlap = len(ids & ({_grade_id(cell) for cell in candidate.cells} - {None}))
        if overlap > best_overlap:
            best, best_overlap = candidate, overlap
    return best


def reset_tests(notebook: nbformat.NotebookNode, released: nbformat.NotebookNode) -> list[str]:
    """Give every test cell its released source; return the grade ids that had been edited."""
    tests = {
        _grade_id(cell): cell.source
        for cell in released.cells
        if _nbgrader(cell).get("grade") is True and cell.cell_type == "code"
    }
    edited = []
    for cell in notebook.cells:
        grade_id = _grade_id(cell)
        if grade_id in tests and cell.source != tests[grade_id]:
            cell.source = tests[grade_id]
            edited.append(grade_id)
    return edited


def _statuses_shown(cell) -> list[str]:
    """The statuses a test cell showed with :data:`autograder.student.progress.STATUS_MIME`."""
    statuses = []
    for output in cell.get("outputs", []):
        data = output.get("data", {}).get(STATUS_MIME) if output.get("output_type") == "display_data" else None
        if isinstance(data, dict) and isinstance(data.get("status"), str):
            statuses.append(data["status"])
    return statuses


def run_visible_tests(notebook: nbformat.NotebookNode, folder: Path, timeout: int) -> list[CheckedItem]:
    """Execute the notebook in a fresh kernel; return the outcome of each graded cell."""
    from nbclient import NotebookClient
    from traitlets.config import Config

    with tempfile.TemporaryDirectory(prefix="autograder-check-") as jupyter_name:
        jupyter_directory = Path(jupyter_name)
        write_kernelspec(jupyter_directory)
        with kernel_environment_set(jupyter_directory):
            # Unix sockets in a private folder rather than TCP ports on loopback: no other user of the machine
            # can connect to the kernel, and the kernel has no reason to warn about unencrypted TCP.
            sockets = jupyter_directory / "sockets"
            sockets.mkdir(mode=0o700)
            transport = Config({"KernelManager": {"transport": "ipc", "ip": str(sockets / "kernel")}})
            client = NotebookClient(
                notebook,
                config=transport,
                timeout=timeout,
                kernel_name=KERNEL_NAME,
                allow_errors=True,
                resources={"metadata": {"path": str(folder)}},
            )
            # The kernel's own standard output and error are the notebook's to write: not this terminal's.
            execute_in_own_loop(client, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    labels = item_labels(notebook.cells)
    items = []
    for cell in notebook.cells:
        grade_id = _grade_id(cell)
        if _nbgrader(cell).get("grade") is not True or grade_id is None:
            continue
        points = _points(cell)
        label = labels.get(grade_id, grade_id)
        if cell.cell_type != "code":
            items.append(CheckedItem(grade_id, points, "written answer", label=label))
            continue
        errors = [output for output in cell.get("outputs", []) if output.get("output_type") == "error"]
        if errors:
            message = _ANSI.sub("", f"{errors[0].get('ename')}: {errors[0].get('evalue')}")
            items.append(CheckedItem(grade_id, points, "failed", message, label))
        elif NOT_ANSWERED in _statuses_shown(cell):
            items.append(CheckedItem(grade_id, points, NOT_ANSWERED, "scores 0 as it is", label))
        else:
            items.append(CheckedItem(grade_id, points, "passed", label=label))
    return items


def check(path: Path, *, timeout: int = 120, stream: TextIO | None = None) -> int:
    """Run the visible tests of the notebook at ``path`` and print what passes.

    Returns:
        0 when every visible test passes, 1 when one fails, 2 when the file is not a readable notebook.
    """
    import sys

    stream = stream or sys.stdout
    path = Path(path).resolve()
    notebook, reason = read_notebook(path) if path.is_file() else (None, "there is no such file")
    if notebook is None:
        print(terminal_text(f"{path}: cannot be checked: {reason}"), file=stream)
        return 2
    released = matching_release(notebook, path)
    if released is not None:
        edited = reset_tests(notebook, released)
        labels = item_labels(notebook.cells)  # from the released test cells
        for grade_id in edited:
            print(
                f"note: the test cell of {terminal_text(labels.get(grade_id, grade_id))} had been edited; the "
                "released version was run",
                file=stream,
            )
    items = run_visible_tests(notebook, path.parent, timeout)
    names = [terminal_text(item.label or item.grade_id) for item in items]
    width = max((len(name) for name in names), default=10)
    for item, name in zip(items, names, strict=True):
        points = f"{item.points:g} point" + ("" if item.points == 1 else "s")
        line = f"{item.status.upper():>14}  {name:<{width}}  ({points})"
        print(line + (f"  {terminal_text(item.message)}" if item.message else ""), file=stream)
    tested = [item for item in items if item.status != "written answer"]
    passed = sum(item.status == "passed" for item in tested)
    unanswered = sum(item.status == NOT_ANSWERED for item in tested)
    print(
        f"{passed} of {len(tested)} visible tests pass"
        + (f" ({unanswered} not answered yet)" if unanswered else "")
        + ". They check the form of your answers only; hidden tests decide the grade."
        + (" Written answers are graded by an instructor." if len(tested) < len(items) else ""),
        file=stream,
    )
    return 0 if passed == len(tested) else 1


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The arguments of ``check``: the notebook and ``--timeout``."""
    parser.add_argument("notebook", type=Path)
    parser.add_argument("--timeout", type=positive_int, default=120, help="seconds a cell may run")
    return parser


def positive_int(text: str) -> int:
    """An argument that must be a whole number >= 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text}")
    return value


def main(argv: list[str] | None = None) -> int:
    """``python -m autograder check NOTEBOOK`` where ``check`` is the only command (the student edition)."""
    parser = argparse.ArgumentParser(prog="python -m autograder", description="The course's commands for students.")
    commands = parser.add_subparsers(dest="command", required=True)
    add_arguments(commands.add_parser("check", help="run a notebook's visible tests in a fresh kernel"))
    arguments = parser.parse_args(argv)
    return check(arguments.notebook, timeout=arguments.timeout)
