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

    def save(self, result: Result, key: str, files: dict[str, Path]) -> None:
        """Keep ``result`` (and copies of its ``files``: feedback page, log, autograded notebook, by name) under
        ``key``; the record is complete only once its ``result.json`` is written, last."""
        folder = self._folder(result.student, result.assignment)
        folder.mkdir(parents=True, exist_ok=True)
        for name, source in files.items():
            if source.exists():
                shutil.copyfile(source, folder / name)
            else:
                (folder / name).unlink(missing_ok=True)
        partial = folder / "result.json.partial"
        partial.write_text(json.dumps({"key": key, "result": dataclasses.asdict(result)}))
        partial.replace(folder / "result.json")

    def load(self, student: str, assignment: str, key: str, files: dict[str, Path]) -> Result | None:
        """The result kept for this submission under ``key`` (its kept files copied to ``files``' paths), or
        None when there is none or it was made from another file, course or options."""
        folder = self._folder(student, assignment)
        try:
            data = json.loads((folder / "result.json").read_text())
        except (OSError, ValueError):
            return None
        if data.get("key") != key:
            return None
        for name, target in files.items():
            if (folder / name).exists():
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(folder / name, target)
        return result_from_json(data["result"])

    def kept(self) -> list[Result]:
        """Every result kept here, whatever its key (the last grade of each submission into this folder)."""
        results = []
        for path in sorted(self.root.glob("*/*/result.json")):
            try:
                results.append(result_from_json(json.loads(path.read_text())["result"]))
            except (OSError, ValueError, KeyError, TypeError):
                continue
        return results

    def file(self, result: Result, name: str) -> Path:
        """Where the kept copy of ``name`` (``feedback.html``, ``log.txt``, ``autograded.ipynb``) of a result lies."""
        return self._folder(result.student, result.assignment) / name


def result_from_json(fields: dict) -> Result:
    return Result(
        fields["student"],
        fields["assignment"],
        [Item(**item) for item in fields["items"]],
        list(fields["notes"]),
        fields["reason"],
    )
