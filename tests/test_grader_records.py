"""The records a resumed ``grade`` reads keep verdicts on submissions, never the grader's own failures.

A verdict (a grade, or a notebook that could not be graded because of what it is) is reused by a later grade
of the same file with the same course and options. A failure of the grader (a worker that died, an exception
in the grader) is reported once and graded again the next time, and so is a record kept before results said
which they were, when its reason is one of the grader's failures.
"""

import datetime
import json
import os
from pathlib import Path

import pytest

from autograder.executors import local
from autograder.records import FOLDER, Records, record_key
from autograder.types import Item, LayoutItem, Result, Task

KEY = "a" * 64
OPTIONS = {"limits": "Limits(memory_mb=2048)", "timeout": 60, "sandbox": True, "variants": True}


def _verdict(student: str = "s1") -> Result:
    return Result(
        student,
        "01_permutation",
        [Item("perm-1", 2.0, 2.0, "passed"), Item("perm-2", 0.0, 3.0, "failed", "AssertionError: wrong order")],
        ["a note"],
    )


def _failure(student: str = "s1") -> Result:
    reason = "the grader failed on this submission (see its log)"
    items = [Item("perm-1", 0.0, 2.0, "not graded", reason), Item("perm-2", 0.0, 3.0, "not graded", reason)]
    return Result(student, "01_permutation", items, [], reason, grader_failure=True)


def _files(folder: Path, page: str) -> dict[str, Path]:
    """A feedback page and a log, as a grade writes them before it keeps them."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "feedback.html").write_text(page)
    (folder / "log.txt").write_text("the log")
    return {"feedback.html": folder / "feedback.html", "log.txt": folder / "log.txt"}


def _targets(folder: Path) -> dict[str, Path]:
    return {"feedback.html": folder / "feedback.html", "log.txt": folder / "log.txt"}


def test_a_verdict_is_kept_and_reused_with_its_files(tmp_path):
    records = Records(tmp_path / "out")
    records.save(_verdict(), KEY, _files(tmp_path / "first", "<p>2 of 5</p>"))
    loaded = records.load("s1", "01_permutation", KEY, _targets(tmp_path / "second"))
    assert loaded == _verdict()
    assert loaded.grader_failure is False
    assert (tmp_path / "second" / "feedback.html").read_text() == "<p>2 of 5</p>"


def test_only_the_submissions_of_the_last_batch_are_kept_for_feedback(tmp_path):
    records = Records(tmp_path / "out")
    for student in ("s1", "s2"):
        records.save(_verdict(student), KEY, _files(tmp_path / student, "<p>page</p>"))
    assert [result.student for result in records.kept()] == ["s1", "s2"]  # no batch noted: every result
    records.save_batch([_verdict("s2")])  # the last grade left s1 out (its folder taken out of the class)
    assert [result.student for result in records.kept()] == ["s2"]
    records.save_batch([_verdict("s1"), _verdict("s2")])
    assert [result.student for result in records.kept()] == ["s1", "s2"]
    # a student named like the grader's files cannot take their place: the batch lies outside the records
    records.save(_verdict("batch.json"), KEY, _files(tmp_path / "b", "<p>page</p>"))
    records.save_batch([_verdict("s2"), _verdict("batch.json")])
    assert [result.student for result in records.kept()] == ["batch.json", "s2"]
    (tmp_path / "out" / ".autograder-batch.json").write_text("{not json")
    with pytest.raises(ValueError, match="cannot be read"):
        records.kept()


def test_the_rows_no_submission_made_are_kept_with_the_batch_and_replace_an_earlier_record(tmp_path):
    """Round 18: ``feedback`` rebuilt the reports from the records only; a student whose files the intake refused
    (a row of 0 with the reason, which no submission made and so no record holds) vanished from grades.csv and
    report.txt, or became "not submitted". The batch keeps those rows whole, and an earlier record of the same
    submission does not take their place."""
    records = Records(tmp_path / "out")
    for student in ("s1", "s2"):
        records.save(_verdict(student), KEY, _files(tmp_path / student, "<p>page</p>"))
    refused = Result("s1", "01_permutation", [Item("perm-1", 0.0, 2.0, "not graded")], [], "a notebook one folder too deep")
    only_refused = Result("s3", "01_permutation", [Item("perm-1", 0.0, 2.0, "not graded")], [], "a link, not read")
    records.save_batch([refused, _verdict("s2"), only_refused], unrecorded=[refused, only_refused])
    kept = {result.student: result for result in records.kept()}
    assert set(kept) == {"s1", "s2", "s3"}
    assert kept["s1"] == refused and kept["s3"] == only_refused  # not s1's earlier record
    assert kept["s2"] == _verdict("s2")
    # a batch file written before the rows were kept (a list of pairs) is still read
    (tmp_path / "out" / ".autograder-batch.json").write_text('[["s2", "01_permutation"]]')
    assert [result.student for result in records.kept()] == ["s2"]


def test_a_grader_failure_is_not_reused(tmp_path):
    records = Records(tmp_path / "out")
    records.save(_failure(), KEY, _files(tmp_path / "first", "<p>not graded</p>"))
    assert records.load("s1", "01_permutation", KEY, _targets(tmp_path / "second")) is None
    assert not (tmp_path / "second" / "feedback.html").exists()


def test_a_grader_failure_replaces_the_earlier_verdict_of_its_submission(tmp_path):
    # A --regrade whose grader failed: the verdict kept before is no longer the submission's last grade.
    records = Records(tmp_path / "out")
    records.save(_verdict(), KEY, _files(tmp_path / "first", "<p>2 of 5</p>"))
    records.save(_failure(), KEY, _files(tmp_path / "second", "<p>not graded</p>"))
    assert records.load("s1", "01_permutation", KEY, _targets(tmp_path / "third")) is None
    # The reports of the folder (feedback.handgraded) still show the failure, not the older grade.
    assert records.kept() == [_failure()]


def test_a_verdict_after_a_grader_failure_is_reused(tmp_path):
    records = Records(tmp_path / "out")
    records.save(_failure(), KEY, _files(tmp_path / "first", "<p>not graded</p>"))
    records.save(_verdict(), KEY, _files(tmp_path / "second", "<p>2 of 5</p>"))
    assert records.load("s1", "01_permutation", KEY, _targets(tmp_path / "third")) == _verdict()


def _old_record(out: Path, reason: str | None) -> None:
    """A record as the grader wrote it before results carried ``grader_failure``."""
    folder = out / FOLDER / "s1" / "01_permutation"
    folder.mkdir(parents=True)
    result = {
        "student": "s1",
        "assignment": "01_permutation",
        "items": [{"grade_id": "perm-1", "score": 0.0, "max_score": 2.0, "status": "not graded", "message": ""}],
        "notes": [],
        "reason": reason,
    }
    (folder / "result.json").write_text(json.dumps({"key": KEY, "result": result}))


@pytest.mark.parametrize(
    "reason",
    [
        "the grader failed on this submission (see its log)",
        "the grader's worker process failed (BrokenProcessPool)",
        "the grader's worker failed (OSError: [Errno 28] No space left on device)",
        "grading it ended 4 worker(s), more than the scheduler allows (3)",
        "the grader could not read this submission (PermissionError)",
    ],
)
def test_an_old_record_of_a_grader_failure_is_not_reused(tmp_path, reason):
    _old_record(tmp_path / "out", reason)
    assert Records(tmp_path / "out").load("s1", "01_permutation", KEY, {}) is None


@pytest.mark.parametrize(
    "reason", [None, "the file is not a notebook (it is not JSON)", "the folder holds no notebook"]
)
def test_an_old_record_of_a_verdict_is_reused(tmp_path, reason):
    _old_record(tmp_path / "out", reason)
    loaded = Records(tmp_path / "out").load("s1", "01_permutation", KEY, {})
    assert loaded == Result("s1", "01_permutation", [Item("perm-1", 0.0, 2.0, "not graded")], [], reason)


@pytest.mark.parametrize(
    "changed",
    [
        {"submitted": b'{"cells": [1]}'},
        {"version": "course-2"},
        {"options": {**OPTIONS, "timeout": 120}},
        {"options": {**OPTIONS, "limits": "Limits(memory_mb=4096)"}},
        {"options": {**OPTIONS, "sandbox": False}},
        {"options": {**OPTIONS, "variants": False}},
        {"options": {**OPTIONS, "cgroup": False}},
    ],
    ids=["file", "course", "timeout", "limits", "sandbox", "variants", "new option"],
)
def test_a_verdict_made_from_another_file_course_or_options_is_not_reused(tmp_path, changed):
    kept_with = {"submitted": b'{"cells": []}', "version": "course-1", "options": OPTIONS}
    records = Records(tmp_path / "out")
    records.save(_verdict(), record_key(**kept_with), {})
    assert records.load("s1", "01_permutation", record_key(**kept_with), {}) == _verdict()
    asked_with = {**kept_with, **changed}
    assert records.load("s1", "01_permutation", record_key(**asked_with), {}) is None


def _worker_dies(task: Task) -> Result:
    """Stands in for grade_task in a worker process: the process ends at once, as one killed by the system."""
    os._exit(9)


def _task(tmp_path: Path, student: str) -> Task:
    return Task(
        student=student,
        assignment="01_permutation",
        notebook=tmp_path / student / "01_permutation.ipynb",
        template=tmp_path / "template",
        directory=tmp_path / student / "work",
        layout=(LayoutItem("perm-1", 2.0, "code"), LayoutItem("perm-2", 3.0, "code")),
        notes=(),
        feedback=tmp_path / "feedback" / student / "01_permutation.html",
        log=tmp_path / "logs" / student / "01_permutation.log",
        timeout=60,
    )


def test_a_submission_whose_worker_died_is_graded_again(tmp_path, monkeypatch):
    monkeypatch.setattr(local, "grade_task", _worker_dies)
    (tmp_path / "worker-logs").mkdir()
    delivered: list[Result] = []
    local.run_local([_task(tmp_path, "s1")], 1, tmp_path / "jupyter", tmp_path / "worker-logs", delivered.append)
    assert [(result.student, result.grader_failure) for result in delivered] == [("s1", True)]
    assert delivered[0].reason.startswith("the grader's worker process failed (")
    assert [item.status for item in delivered[0].items] == ["not graded", "not graded"]
    records = Records(tmp_path / "out")
    records.save(delivered[0], KEY, {"feedback.html": tmp_path / "feedback" / "s1" / "01_permutation.html"})
    assert records.load("s1", "01_permutation", KEY, {}) is None


def _gradebook_with_a_written_answer(tmp_path, monkeypatch):
    import sys

    from nbgrader.api import Gradebook

    # nbgrader makes a new gradebook with the alembic program installed beside this interpreter
    monkeypatch.setenv("PATH", os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))

    gradebook = Gradebook(f"sqlite:///{tmp_path / 'gradebook.db'}", course_id="posenc")
    gradebook.add_assignment("04_relative")
    gradebook.add_notebook("04_relative", "04_relative")
    gradebook.add_grade_cell("written", "04_relative", "04_relative", max_score=3.0, cell_type="markdown")
    gradebook.add_student("s1")
    gradebook.add_submission("04_relative", "s1")
    return gradebook


def _hand_grade(gradebook, score):
    grade = gradebook.find_grade("written", "04_relative", "04_relative", "s1")
    grade.manual_score, grade.needs_manual_grade = score, False
    gradebook.db.commit()


def _written(reason=None, grader_failure=False) -> Result:
    status = "not graded" if reason else "manual"
    return Result("s1", "04_relative", [Item("written", 0.0, 3.0, status)], [], reason, grader_failure)


def test_a_hand_grade_is_removed_when_its_answer_changes_or_is_gone_and_kept_otherwise(tmp_path, monkeypatch):
    from autograder.gradebook import record

    gradebook = _gradebook_with_a_written_answer(tmp_path, monkeypatch)
    try:
        assert record(gradebook, _written(), answers={"written": "A"}, course="v1").removed == []
        _hand_grade(gradebook, 2.0)
        assert record(gradebook, _written(), answers={"written": "A"}, course="v1").removed == []  # the same answer
        failure = _written("the grader's worker failed", grader_failure=True)
        assert record(gradebook, failure, answers={}, course="v1").removed == []  # the grader's failure changes nothing
        assert record(gradebook, _written(), answers={"written": "B"}, course="v1").removed == ["written (2)"]
        grade = gradebook.find_grade("written", "04_relative", "04_relative", "s1")
        assert (grade.manual_score, grade.needs_manual_grade) == (None, True)
        _hand_grade(gradebook, 3.0)  # given to answer B
        unreadable = _written("the file is not valid JSON")
        assert record(gradebook, unreadable, answers={}, course="v1").removed == ["written (3)"]  # no answer now
        assert record(gradebook, _written(), answers={"written": "B"}, course="v1").removed == []  # nothing to remove
        _hand_grade(gradebook, 1.0)
        # another version of the course rebuilds the notebook otherwise: the hand grade is kept, and named, for
        # its digest under the earlier version differs (round 16: it was kept silently, also for a changed answer)
        assert record(gradebook, _written(), answers={"written": "B rebuilt"}, course="v2") == ([], ["written (1)"])
        assert gradebook.find_grade("written", "04_relative", "04_relative", "s1").manual_score == 1.0
        assert record(gradebook, _written(), answers={"written": "B rebuilt"}, course="v2") == ([], [])  # recorded
        assert record(gradebook, _written(), answers={"written": "B rebuilt"}, course="v3") == ([], [])  # same cell
    finally:
        gradebook.close()


def test_answer_digests_are_read_from_the_graded_cells(tmp_path):
    from autograder.gradebook import answer_digests

    notebook = tmp_path / "autograded.ipynb"
    notebook.write_text(json.dumps({"cells": [
        {"cell_type": "markdown", "metadata": {"nbgrader": {"grade_id": "written"}}, "source": ["An ", "answer"]},
        {"cell_type": "code", "metadata": {}, "source": "x = 1"}]}))
    digests = answer_digests(notebook, ["written", "absent"])
    assert set(digests) == {"written"} and len(digests["written"]) == 64
    assert answer_digests(tmp_path / "missing.ipynb", ["written"]) == {}


@pytest.mark.parametrize("warning_filter", ["error", "ignore", "default"])
def test_a_submissions_timestamp_that_the_parser_refuses_in_any_way_is_no_time(tmp_path, warning_filter):
    # nbgrader's parser hands a zone word to dateutil, which raises its own warning for ".." (a path outside
    # its zone folder): the time of such a file is none, whatever the process's filters, and never an exception
    # in the batch's process.
    import warnings

    from autograder.gradebook import submitted_timestamp

    (tmp_path / "timestamp.txt").write_text("2026-01-01 11:00:00 ..", encoding="ascii")
    with warnings.catch_warnings():
        warnings.simplefilter(warning_filter)
        assert submitted_timestamp(tmp_path) is None
    (tmp_path / "timestamp.txt").write_text("2026-01-01 11:00:00.250000 UTC", encoding="ascii")
    assert submitted_timestamp(tmp_path) == datetime.datetime(2026, 1, 1, 11, 0, 0, 250000)
