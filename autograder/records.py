"""Results kept as they arrive, so that a batch that stopped (a cluster's scheduler lost, the machine
restarted) resumes where it stopped.

The main process writes each result, with its feedback page and log, under ``<out>/.autograder-records/
<student>/<assignment>/`` as soon as it arrives, with a key: the hash of the submitted file, the course's
version (:func:`autograder.course.course_version`) and the options that change a grade (limits, timeout,
sandbox, control group, variants). A later ``grade`` into the same output folder takes a submission whose key is unchanged from there
instead of grading it again; ``--regrade`` grades everything.

Only verdicts on a submission are reused. A result of the grader's own failure (``Result.grader_failure``: a
worker that died, an exception in the grader, a full disk, a control group that could not be made) replaces
any earlier record of its submission, so that the reports of this folder (:meth:`Records.kept`) show it, but
without a key: the next ``grade`` grades that submission again.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
from collections.abc import Iterable
from pathlib import Path

from autograder.types import Item, Result

FOLDER = ".autograder-records"
BATCH = ".autograder-batch.json"  # beside FOLDER, in the output folder
# How the grader's failures began their reasons before results said so (``grader_failure``): a record written
# then with one of these reasons is a failure too.
OLD_GRADER_FAILURES = (
    "the grader failed on this submission",
    "the grader's worker process failed (",
    "the grader's worker failed (",
    "the grader could not read this submission (",
    "grading it ended ",
)


def record_key(submitted: bytes, version: str, options: dict) -> str:
    """The key of a result: what was submitted, with which course, under which options."""
    digest = hashlib.sha256(submitted)
    digest.update(version.encode() + json.dumps(options, sort_keys=True, default=str).encode())
    return digest.hexdigest()


class Records:
    """The results kept in ``<out>/.autograder-records``."""

    def __init__(self, out: Path) -> None:
        self.root = out / FOLDER

    def _folder(self, student: str, assignment: str) -> Path:
        return self.root / student / assignment

    def save(self, result: Result, key: str, files: dict[str, Path]) -> None:
        """Keep ``result`` (and copies of its ``files``: feedback page, log, autograded notebook, by name) under
        ``key``; the record is complete only once its ``result.json`` is written, last. A grader failure is
        written without a key, in place of any earlier record: :meth:`load` never returns it."""
        folder = self._folder(result.student, result.assignment)
        folder.mkdir(parents=True, exist_ok=True)
        for name, source in files.items():
            if source.exists():
                shutil.copyfile(source, folder / name)
            else:
                (folder / name).unlink(missing_ok=True)
        partial = folder / "result.json.partial"
        kept_key = None if result.grader_failure else key
        partial.write_text(json.dumps({"key": kept_key, "result": dataclasses.asdict(result)}))
        partial.replace(folder / "result.json")

    def load(self, student: str, assignment: str, key: str, files: dict[str, Path]) -> Result | None:
        """The result kept for this submission under ``key`` (its kept files copied to ``files``' paths), or
        None when there is none, it was made from another file, course or options, or it is a grader failure."""
        folder = self._folder(student, assignment)
        try:
            data = json.loads((folder / "result.json").read_text())
            result = result_from_json(data["result"])
        except (OSError, ValueError, KeyError, TypeError):
            return None
        if data.get("key") != key or result.grader_failure:
            return None
        for name, target in files.items():
            if (folder / name).exists():
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(folder / name, target)
        return result

    def save_batch(self, results: Iterable[Result], unrecorded: Iterable[Result] = ()) -> None:
        """Note which rows the last ``grade`` into this folder reported (:data:`BATCH`, beside the records: the
        records' folder holds one folder per student id, which a student names): what it wrote into
        ``grades.csv``, which :meth:`kept` then keeps to. ``unrecorded``: its rows that no submission made (a
        file the intake refused, an assignment not submitted), which have no record of their own, kept whole
        in the batch file instead."""
        pairs = sorted({(result.student, result.assignment) for result in results})
        rows = [dataclasses.asdict(result) for result in unrecorded]
        batch = self.root.parent / BATCH
        partial = batch.with_name(BATCH + ".partial")
        partial.write_text(json.dumps({"submissions": [list(pair) for pair in pairs], "unrecorded": rows}))
        partial.replace(batch)

    def kept(self) -> list[Result]:
        """The rows the last ``grade`` reported (:meth:`save_batch`): the result kept here of each submission,
        and the batch's rows that no submission made (which an earlier record of the same pair does not
        replace); a submission graded earlier and left out since (taken out of the class folder, or a folder that
        holds no notebook any more) is not brought back. In a folder whose last grade noted no batch, every
        result.

        Raises:
            ValueError: the batch file is there but cannot be read as one.
        """
        path = self.root.parent / BATCH
        try:
            data = json.loads(path.read_text())
            if isinstance(data, list):  # written before the batch kept its unrecorded rows
                data = {"submissions": data, "unrecorded": []}
            batch = {tuple(pair) for pair in data["submissions"]}
            unrecorded = [result_from_json(fields) for fields in data["unrecorded"]]
        except FileNotFoundError:
            batch, unrecorded = None, []
        except (OSError, ValueError, TypeError, KeyError) as error:
            raise ValueError(f"{path} cannot be read ({type(error).__name__}); grade into the folder again") from error
        without_record = {(result.student, result.assignment) for result in unrecorded}
        results = list(unrecorded)
        for path in sorted(self.root.glob("*/*/result.json")):
            try:
                result = result_from_json(json.loads(path.read_text())["result"])
            except (OSError, ValueError, KeyError, TypeError):
                continue
            pair = (result.student, result.assignment)
            if (batch is None or pair in batch) and pair not in without_record:
                results.append(result)
        return sorted(results, key=lambda result: (result.assignment, result.student))

    def file(self, result: Result, name: str) -> Path:
        """Where the kept copy of ``name`` (``feedback.html``, ``log.txt``, ``autograded.ipynb``) of a result lies."""
        return self._folder(result.student, result.assignment) / name


def result_from_json(fields: dict) -> Result:
    """The result that ``dataclasses.asdict`` wrote; one written before ``grader_failure`` existed is a grader
    failure when its reason is one of :data:`OLD_GRADER_FAILURES`."""
    reason = fields["reason"]
    old_failure = isinstance(reason, str) and reason.startswith(OLD_GRADER_FAILURES)
    return Result(
        fields["student"],
        fields["assignment"],
        [Item(**item) for item in fields["items"]],
        list(fields["notes"]),
        reason,
        bool(fields.get("grader_failure", old_failure)),
        {str(name): float(seconds) for name, seconds in fields.get("seconds", {}).items()},
    )
