"""Results kept as they arrive, so that a batch that stopped (a cluster's scheduler lost, the machine
restarted) resumes where it stopped.

The main process writes each result, with its feedback page and log, under ``<out>/.autograder-records/
<student>/<assignment>/`` as soon as it arrives, with a key: the hash of the submitted file, the course's
version (:func:`autograder.course.course_version`) and the options that change a grade (limits, timeout,
sandbox). A later ``grade`` into the same output folder takes a submission whose key is unchanged from there
instead of grading it again; ``--regrade`` grades everything.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
from pathlib import Path

from autograder.types import Item, Result

FOLDER = ".autograder-records"


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

    def save(self, result: Result, key: str, feedback: Path, log: Path) -> None:
        """Keep ``result`` (and copies of its feedback page and log) under ``key``; the record is complete only
        once its ``result.json`` is written, last."""
        folder = self._folder(result.student, result.assignment)
        folder.mkdir(parents=True, exist_ok=True)
        for source, name in ((feedback, "feedback.html"), (log, "log.txt")):
            if source.exists():
                shutil.copyfile(source, folder / name)
        partial = folder / "result.json.partial"
        partial.write_text(json.dumps({"key": key, "result": dataclasses.asdict(result)}))
        partial.replace(folder / "result.json")

    def load(self, student: str, assignment: str, key: str, feedback: Path, log: Path) -> Result | None:
        """The result kept for this submission under ``key`` (its page and log copied to ``feedback`` and
        ``log``), or None when there is none or it was made from another file, course or options."""
        folder = self._folder(student, assignment)
        try:
            data = json.loads((folder / "result.json").read_text())
        except (OSError, ValueError):
            return None
        if data.get("key") != key:
            return None
        fields = data["result"]
        result = Result(
            fields["student"],
            fields["assignment"],
            [Item(**item) for item in fields["items"]],
            list(fields["notes"]),
            fields["reason"],
        )
        for name, target in (("feedback.html", feedback), ("log.txt", log)):
            if (folder / name).exists():
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(folder / name, target)
        return result
