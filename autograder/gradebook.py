"""The class's gradebook: one nbgrader database that only the grader's main process writes.

Each worker grades a submission against a scratch copy of the template gradebook (SQLite, deleted with the
worker's folder); the grades it returns are written here, one submission at a time, by the main process, so
there is one writer whatever ``--jobs`` is. The database is any that nbgrader (SQLAlchemy) reaches through a
URL: SQLite by default (``sqlite:///OUT/gradebook.db``), PostgreSQL for a course shared by several graders
(``postgresql://user:password@host:port/name``; the driver is psycopg 3). Its contents are nbgrader's own, so
``nbgrader export --db URL``, the formgrader (manual grading of the written answers) and nbgrader's Python API
read it as they would read a gradebook that ``nbgrader autograde`` wrote.

Grading again updates the automatic scores of the submissions graded; the manual scores given by an
instructor, and the submissions of other students and assignments, are left as they were.
:func:`with_hand_grades` reads those manual scores (and comments) back into a result, for the reports and the
feedback pages.

New databases: nbgrader stamps a new gradebook with its schema version (alembic's head) by running the
``alembic`` program, a few seconds per database; :func:`open_gradebook` writes the same stamp in-process.
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:  # nbgrader is imported lazily: it takes a second
    from nbgrader.api import Gradebook

    from autograder.types import Result

MANUAL_STATUS = "manual"  # the status of an item that waits for an instructor (autograder.grade)
HAND_GRADED_STATUS = "hand-graded"  # an item an instructor scored (in the formgrader, or through nbgrader's API)


@functools.cache
def alembic_head() -> str:
    """The schema version of this nbgrader's gradebook (the head of its alembic migrations)."""
    from alembic.config import Config
    from alembic.script import ScriptDirectory
    from nbgrader.dbutil import _temp_alembic_ini

    with _temp_alembic_ini("sqlite://") as alembic_ini:
        return ScriptDirectory.from_config(Config(alembic_ini)).get_current_head()


def stamp_if_new(db_url: str) -> None:
    """Give an empty database nbgrader's schema stamp (what ``Gradebook(db_url)`` would do by running alembic)."""
    from sqlalchemy import create_engine, inspect, text

    engine = create_engine(db_url, future=True)
    try:
        with engine.begin() as connection:
            if inspect(connection).get_table_names():
                return
            connection.execute(text("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL)"))
            connection.execute(
                text("INSERT INTO alembic_version (version_num) VALUES (:head)"), {"head": alembic_head()}
            )
    finally:
        engine.dispose()


def open_gradebook(db_url: str, course_id: str = "default_course") -> Gradebook:
    """nbgrader's ``Gradebook`` of ``course_id`` at ``db_url``, created (tables and stamp) if the database is
    empty."""
    from nbgrader.api import Gradebook

    stamp_if_new(db_url)
    return Gradebook(db_url, course_id=course_id)


@contextlib.contextmanager
def one_transaction(gradebook: Gradebook):
    """nbgrader's gradebook commits after every row it writes (one wait for the disk each, about 3 ms on this
    machine's disk, for each of an assignment's cells); in the block, its commits only flush, and what the
    block wrote is committed once at its end, or rolled back when the block raises."""
    session = gradebook.db
    session.commit = session.flush  # an attribute of this scoped session, over the proxy of its class
    try:
        yield
    except BaseException:
        del session.commit
        session.rollback()
        raise
    del session.commit
    session.commit()


def copy_assignments(source: Gradebook, target: Gradebook, assignments: Iterable[str]) -> None:
    """Create or update, in ``target``, the assignments, notebooks and cells that ``source`` defines, in one
    transaction (:func:`one_transaction`).

    ``source`` is the gradebook that ``nbgrader generate_assignment`` filled (before any change made for
    grading), so ``target`` holds the exercises exactly as released.
    """
    with one_transaction(target):
        _copy_assignments(source, target, assignments)


def _copy_assignments(source: Gradebook, target: Gradebook, assignments: Iterable[str]) -> None:
    for assignment in assignments:
        target.update_or_create_assignment(assignment)
        for notebook in source.find_assignment(assignment).notebooks:
            target.update_or_create_notebook(notebook.name, assignment)
            for cell in notebook.grade_cells:
                target.update_or_create_grade_cell(
                    cell.name, notebook.name, assignment, max_score=cell.max_score, cell_type=cell.cell_type
                )
            for cell in notebook.solution_cells:
                target.update_or_create_solution_cell(cell.name, notebook.name, assignment)
            for cell in notebook.task_cells:
                target.update_or_create_task_cell(
                    cell.name, notebook.name, assignment, max_score=cell.max_score, cell_type=cell.cell_type
                )
            for cell in notebook.source_cells:
                target.update_or_create_source_cell(
                    cell.name,
                    notebook.name,
                    assignment,
                    cell_type=cell.cell_type,
                    locked=cell.locked,
                    source=cell.source,
                    checksum=cell.checksum,
                )


def submitted_timestamp(folder: Path) -> datetime.datetime | None:
    """The time of the submission whose nbgrader files are in ``folder`` (its ``timestamp.txt``, which ``grade``
    copies beside the autograded notebook from the submission's folder), read as ``nbgrader autograde`` reads
    it (``nbgrader.utils.parse_utc``, a naive UTC time); None where there is none or it is no time.

    The formgrader counts a submission as autograded only when the gradebook's time of the submission equals
    the one of ``submitted/<student>/<assignment>/timestamp.txt`` in the course directory
    (``NbGraderAPI.get_autograded_students``); otherwise Manage Submissions says "needs autograding".
    """
    from nbgrader.utils import parse_utc

    path = folder / "timestamp.txt"
    try:
        text = path.read_text(encoding="ascii").strip() if path.is_file() and not path.is_symlink() else ""
        # dateutil raises more than ValueError for a text it cannot read, its warnings among them (as errors
        # under some filters): a submission's file must not stop the batch, so any of them means no time.
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            return parse_utc(text) if text else None
    except Exception:  # noqa: BLE001 (see above)
        return None


def answer_digests(notebook: Path, grade_ids: Iterable[str]) -> dict[str, str]:
    """SHA-256 of the source of each cell of ``notebook`` (the autograded notebook, as the formgrader shows
    it) whose nbgrader ``grade_id`` is in ``grade_ids``; a cell that is missing or unreadable is left out."""
    import hashlib
    import json

    wanted = set(grade_ids)
    try:
        cells = json.loads(notebook.read_text(encoding="utf-8")).get("cells", [])
    except (OSError, ValueError, AttributeError):
        return {}
    digests = {}
    for cell in cells if isinstance(cells, list) else []:
        grade_id = ((cell.get("metadata") or {}).get("nbgrader") or {}).get("grade_id") if isinstance(cell, dict) else None
        if grade_id in wanted:
            source = cell.get("source", "")
            text = "".join(source) if isinstance(source, list) else str(source)
            digests[grade_id] = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    return digests


ANSWER_DIGESTS_TABLE = "autograder_answer_digests"


@functools.cache
def _digest_table():
    from sqlalchemy import Column, MetaData, String, Table

    return Table(
        ANSWER_DIGESTS_TABLE, MetaData(),
        Column("student", String(128), primary_key=True), Column("assignment", String(128), primary_key=True),
        Column("grade_id", String(128), primary_key=True), Column("course", String(64), nullable=False),
        Column("digest", String(64), nullable=False),
    )


def recorded_digests(gradebook: Gradebook, student: str, assignment: str, course: str) -> dict[str, str]:
    """The digest of each graded cell of this submission as ``grade`` last recorded it under the course version
    ``course``: a table of the course's own in the gradebook, beside the hand grades it protects (a gradebook
    shared by several output folders shares them). The digests are of the autograded notebook, which the
    course's code rebuilds: another version of the course may rebuild the same answer otherwise, so they are
    compared under the version that recorded them only, and no hand grade is lost to an update."""
    from sqlalchemy import select

    table = _digest_table()
    table.create(gradebook.engine, checkfirst=True)
    rows = gradebook.db.execute(select(table.c.grade_id, table.c.digest).where(
        table.c.student == student, table.c.assignment == assignment, table.c.course == course))
    return {grade_id: digest for grade_id, digest in rows}


def earlier_digests(gradebook: Gradebook, student: str, assignment: str, course: str) -> dict[str, str]:
    """The digests of this submission that ``grade`` recorded under a course version other than ``course``."""
    from sqlalchemy import select

    table = _digest_table()
    table.create(gradebook.engine, checkfirst=True)
    rows = gradebook.db.execute(select(table.c.grade_id, table.c.digest).where(
        table.c.student == student, table.c.assignment == assignment, table.c.course != course))
    return {grade_id: digest for grade_id, digest in rows}


class HandGradeChanges(NamedTuple):
    """What :func:`record` did to the submission's hand grades, each as ``"grade_id (score)"``."""

    removed: list[str]  # given to an earlier answer: removed
    kept_across_update: list[str]  # kept, though the cell's digest under an earlier course version differs


def _store_digests(gradebook: Gradebook, student: str, assignment: str, course: str, digests: dict[str, str]) -> None:
    from sqlalchemy import delete, insert

    table = _digest_table()
    for grade_id, digest in digests.items():
        gradebook.db.execute(delete(table).where(table.c.student == student, table.c.assignment == assignment,
                                                 table.c.grade_id == grade_id))
        gradebook.db.execute(insert(table).values(student=student, assignment=assignment, grade_id=grade_id,
                                                  course=course, digest=digest))


def record(gradebook: Gradebook, result: Result, timestamp: datetime.datetime | None = None, *,
           answers: dict[str, str] | None = None, course: str | None = None) -> HandGradeChanges:
    """Write one submission's grades: every item's automatic score, or that it waits for an instructor.

    A written answer still to be graded by hand has no automatic score and needs a manual grade, as after
    ``nbgrader autograde``, unless an instructor already gave it one -- to this answer. ``answers``: the
    digest of each graded cell of the notebook the formgrader shows now (:func:`answer_digests`; an empty
    dict when the submission could not be graded and has none), kept in the gradebook's own table
    (:func:`recorded_digests`) under the course version ``course``. When an item has a manual score and its
    digest recorded earlier differs from the one now, or there is none now, the score was given to an earlier
    answer and is removed (the instructor's comment stays): a written answer waits for a hand grade again, one
    left blank or a notebook that could not be graded gets the grader's 0. A grader's failure changes no hand
    grade and records no digest. Every other item gets its score (0 for a submission that could not be
    graded). The submission gets ``timestamp`` (:func:`submitted_timestamp`: None where the submission came
    with none), as ``nbgrader autograde`` gives it, so that the formgrader reads it as autograded.

    Under a new course version no digest of this one was recorded yet; one recorded under an earlier version
    cannot tell a changed answer from the same answer rebuilt otherwise by the new code. The hand grade is kept
    then (an update loses none), but where that earlier digest differs it is named in
    ``kept_across_update``, for the instructor to look at the answer again.

    Returns:
        The hand grades removed, and those kept across an update of the course whose cell's digest changed.
    """
    from sqlalchemy.exc import SAWarning

    gradebook.update_or_create_student(result.student)
    with warnings.catch_warnings():
        # nbgrader's add_submission builds its rows before adding them to the session, which SQLAlchemy 2
        # reports while autoflushing; the rows are added all the same (the tests read them back).
        warnings.filterwarnings("ignore", "Object of type", SAWarning)
        gradebook.update_or_create_submission(result.assignment, result.student, timestamp=timestamp)
    checked = answers is not None and course is not None and not result.grader_failure
    graded = recorded_digests(gradebook, result.student, result.assignment, course) if checked else {}
    earlier = earlier_digests(gradebook, result.student, result.assignment, course) if checked else {}
    removed, kept_across_update = [], []
    for item in result.items:
        grade = gradebook.find_grade(item.grade_id, result.assignment, result.assignment, result.student)
        before = graded.get(item.grade_id)
        changed = checked and before is not None and answers.get(item.grade_id) != before
        if changed and grade.manual_score is not None:  # also an answer now left blank, which scores 0 itself
            removed.append(f"{item.grade_id} ({float(grade.manual_score):g})")
            grade.manual_score = grade.extra_credit = None
        elif checked and before is None and grade.manual_score is not None:
            was = earlier.get(item.grade_id)
            if was is not None and answers.get(item.grade_id) != was:
                kept_across_update.append(f"{item.grade_id} ({float(grade.manual_score):g})")
        if item.status == MANUAL_STATUS:
            grade.auto_score, grade.needs_manual_grade = None, grade.manual_score is None
        else:
            grade.auto_score, grade.needs_manual_grade = float(item.score), False
    if checked:
        _store_digests(gradebook, result.student, result.assignment, course, answers)
    gradebook.db.commit()
    return HandGradeChanges(removed, kept_across_update)


def submission_times(gradebook: Gradebook, results: Iterable[Result]) -> dict[tuple[str, str], tuple[str, str]]:
    """``(student, assignment) -> (due date, submission time)`` as ``nbgrader export`` writes them in its CSV: the
    text of each datetime the gradebook holds, ``""`` where it holds none (no due date set, a submission that
    came without a ``timestamp.txt``, or no submission)."""
    from nbgrader.api import MissingEntry

    times = {}
    for result in results:
        try:
            due = gradebook.find_assignment(result.assignment).duedate
        except MissingEntry:
            due = None
        try:
            submitted = gradebook.find_submission(result.assignment, result.student).timestamp
        except MissingEntry:
            submitted = None
        times[result.student, result.assignment] = ("" if due is None else str(due),
                                                    "" if submitted is None else str(submitted))
    return times


def with_hand_grades(gradebook: Gradebook, result: Result) -> Result:
    """``result`` with every score an instructor gave by hand in the gradebook in place of the grader's.

    An item with a manual score (nbgrader's ``Grade.manual_score``, set in the formgrader) gets
    score = manual score + extra credit, status :data:`HAND_GRADED_STATUS` and, as its message, the
    instructor's comment on the cell; every other item stays as it is.
    """
    import dataclasses

    from nbgrader.api import MissingEntry

    from autograder.types import Item

    if result.reason is not None:  # nothing was graded: a hand grade was given to another notebook
        return result
    try:
        submitted = gradebook.find_submission_notebook(result.assignment, result.assignment, result.student)
    except MissingEntry:
        return result
    grades = {grade.name: grade for grade in submitted.grades}
    comments = {comment.name: comment.manual_comment or "" for comment in submitted.comments}
    items = []
    for item in result.items:
        grade = grades.get(item.grade_id)
        if grade is None or grade.manual_score is None:
            items.append(item)
            continue
        score = float(grade.manual_score) + float(grade.extra_credit or 0.0)
        items.append(Item(item.grade_id, score, item.max_score, HAND_GRADED_STATUS, comments.get(item.grade_id, "")))
    return dataclasses.replace(result, items=items)
