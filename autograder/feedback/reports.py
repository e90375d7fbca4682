"""The class's reports: ``grades.csv`` (the columns of ``nbgrader export``), ``items.csv`` and ``report.txt``.

``report.txt`` names items as the notebooks number them ("4.6", "Quiz 1": :func:`autograder.student.progress.item_labels`),
and says which written answers still wait for a hand grade; the CSV files keep nbgrader's cell ids, which
``nbgrader export`` and the formgrader use. Every cell and line a student could choose is written safely
(:mod:`autograder.feedback.escape`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from autograder.feedback.escape import csv_row, csv_writer, report_text
from autograder.gradebook import HAND_GRADED_STATUS, MANUAL_STATUS
from autograder.types import NOT_SUBMITTED, Result

# Per assignment: grade id -> the item as the notebook numbers it.
Labels = Mapping[str, Mapping[str, str]]
MAX_NAMED = 10  # students named in a line of waiting items; the others are counted

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


def export_row(result: Result, times: tuple[str, str] = ("", "")) -> dict[str, str]:
    """The row of ``nbgrader export`` for one result, with its ``(due date, submission time)``
    (:func:`autograder.gradebook.submission_times`; no names or late penalties here)."""
    score = str(float(result.score))
    row = dict.fromkeys(EXPORT_COLUMNS, "")
    row.update(
        assignment=result.assignment,
        duedate=times[0],
        timestamp=times[1],
        student_id=result.student,
        raw_score=score,
        late_submission_penalty="0.0",
        score=score,
        max_score=str(float(result.max_score)),
    )
    return row


def write_csvs(results: list[Result], out: Path,
               times: Mapping[tuple[str, str], tuple[str, str]] | None = None) -> None:
    """``grades.csv`` and ``items.csv``; every cell a student could choose is neutralized (:func:`csv_row`).
    ``times``: each result's due date and submission time (:func:`autograder.gradebook.submission_times`)."""
    with open(out / "grades.csv", "w", newline="", encoding="utf-8") as handle:
        writer = csv_writer(handle)
        writer.writerow(EXPORT_COLUMNS)
        for result in results:
            row = export_row(result, (times or {}).get((result.student, result.assignment), ("", "")))
            writer.writerow(csv_row(row[column] for column in EXPORT_COLUMNS))
    with open(out / "items.csv", "w", newline="", encoding="utf-8") as handle:
        writer = csv_writer(handle)
        writer.writerow(ITEM_COLUMNS)
        for result in results:
            if result.reason == NOT_SUBMITTED:
                continue
            for item in result.items:
                scores = (str(float(item.score)), str(float(item.max_score)))
                writer.writerow(
                    csv_row([result.student, result.assignment, item.grade_id, *scores, item.status, item.message])
                )


def _label(labels: Labels, assignment: str, grade_id: str) -> str:
    return labels.get(assignment, {}).get(grade_id, grade_id)


def waiting_for_hand_grades(results: list[Result], labels: Labels | None = None) -> list[str]:
    """One line per written answer that some submissions still wait for an instructor to grade, naming them:
    ``04_relative 4.6 waits for a hand grade in 1 of 2 submissions: mistakes``. Scores count such an item 0."""
    labels = labels or {}
    waiting: dict[tuple[str, str], list[str]] = {}
    graded: dict[str, int] = {}
    for result in results:
        if result.reason is not None:
            continue
        graded[result.assignment] = graded.get(result.assignment, 0) + 1
        for item in result.items:
            if item.status == MANUAL_STATUS:
                waiting.setdefault((result.assignment, item.grade_id), []).append(result.student)
    lines = []
    for (assignment, grade_id), students in waiting.items():
        named = ", ".join(students[:MAX_NAMED]) + (f" and {len(students) - MAX_NAMED} more" if len(students) > MAX_NAMED else "")
        lines.append(
            f"{assignment} {_label(labels, assignment, grade_id)} waits for a hand grade in {len(students)} of "
            f"{graded[assignment]} submissions: {named}"
        )
    return lines


def _hand_grade_lines(result: Result, labels: Labels) -> list[str]:
    """Under a submission of ``report.txt``: its items graded by hand, and those that wait for it."""
    if result.reason is not None:
        return []
    hand = [item for item in result.items if item.status == HAND_GRADED_STATUS]
    waiting = [item for item in result.items if item.status == MANUAL_STATUS]
    lines = []
    if hand:
        graded = ", ".join(
            f"{_label(labels, result.assignment, item.grade_id)} ({item.score:g} / {item.max_score:g})" for item in hand
        )
        lines.append(f"  graded by hand: {graded}")
    if waiting:
        names = ", ".join(_label(labels, result.assignment, item.grade_id) for item in waiting)
        points = sum(item.max_score for item in waiting)
        lines.append(f"  waiting for a hand grade: {names} ({points:g} points, counted 0 until graded)")
    return lines


def report_warnings(report: Path) -> list[str]:
    """The warnings of a ``report.txt`` that :func:`write_report` wrote (its ``Warnings:`` block), as written;
    none if the file is missing. Every warning is one line there (:func:`report_text`), so the block ends at
    the first line that is not ``- <warning>``."""
    if not report.is_file():
        return []
    lines = report.read_text(encoding="utf-8").splitlines()
    if not lines or lines[0] != "Warnings:":
        return []
    warnings = []
    for line in lines[1:]:
        if not line.startswith("- "):
            break
        warnings.append(line[2:])
    return warnings


def write_report(results: list[Result], warnings_found: list[str], out: Path, labels: Labels | None = None) -> None:
    """``report.txt``: one line per warning, per written answer waiting for a hand grade, per submission (its
    score, with the hand grades given so far) and per note, control characters escaped. ``labels``: per
    assignment, the number of each item (by grade id) that the report names it by; default the grade ids."""
    labels = labels or {}
    lines = ["Warnings:", *(f"- {report_text(warning)}" for warning in warnings_found)] if warnings_found else []
    if waiting := waiting_for_hand_grades(results, labels):
        lines += ["Waiting for a hand grade (python -m autograder formgrader):", *(f"- {report_text(line)}" for line in waiting)]
    for result in results:
        header = f"{result.student}/{result.assignment}: {result.score:g} / {result.max_score:g}"
        lines.append(report_text(header + (f" (not graded: {result.reason})" if result.reason else "")))
        lines += [report_text(line) for line in _hand_grade_lines(result, labels)]
        lines += [f"  note: {report_text(note)}" for note in result.notes]
    (out / "report.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
