"""The class's reports: ``grades.csv`` (the columns of ``nbgrader export``), ``items.csv`` and ``report.txt``.

Every cell and line a student could choose is written safely (:mod:`autograder.feedback.escape`).
"""

from __future__ import annotations

import csv
from pathlib import Path

from autograder.feedback.escape import csv_row, report_text
from autograder.types import NOT_SUBMITTED, Result

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


def export_row(result: Result) -> dict[str, str]:
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


def write_csvs(results: list[Result], out: Path) -> None:
    """``grades.csv`` and ``items.csv``; every cell a student could choose is neutralized (:func:`csv_row`)."""
    with open(out / "grades.csv", "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(EXPORT_COLUMNS)
        for result in results:
            row = export_row(result)
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


def write_report(results: list[Result], warnings_found: list[str], out: Path) -> None:
    """``report.txt``: one line per warning, per submission and per note, control characters escaped."""
    lines = ["Warnings:", *(f"- {report_text(warning)}" for warning in warnings_found)] if warnings_found else []
    for result in results:
        header = f"{result.student}/{result.assignment}: {result.score:g} / {result.max_score:g}"
        lines.append(report_text(header + (f" (not graded: {result.reason})" if result.reason else "")))
        lines += [f"  note: {report_text(note)}" for note in result.notes]
    (out / "report.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
