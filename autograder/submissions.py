"""A class's submissions: ``<student>/<assignment>/<notebook>.ipynb`` in a folder, or in a zip of one.

The folder may sit inside other folders (a zip of ``submitted/`` works as well as a zip of its content):
only the last three parts of a notebook's path count. Only notebooks are read, never other files a student
put next to them (a ``.py`` file could otherwise shadow a module the tests import). A zip is read member by
member: absolute paths, ``..``, links, and archives beyond the size limits are refused, and nothing but
notebooks and folders are extracted.
"""

from __future__ import annotations

import re
import stat
import zipfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

MAX_ZIP_MEMBERS = 20_000
MAX_ZIP_BYTES = 2 * 1024**3  # uncompressed notebooks, in total
STUDENT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@+-]{0,99}")
_SKIPPED_PARTS = {"__MACOSX", ".ipynb_checkpoints"}


@dataclass(frozen=True)
class Submission:
    """One student's notebook for one assignment; ``path`` is None when the folder holds no notebook."""

    student: str
    assignment: str
    path: Path | None
    notes: tuple[str, ...] = ()


@dataclass
class Collection:
    submissions: list[Submission] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def extract_notebooks(archive: Path, destination: Path) -> list[str]:
    """Extract the ``.ipynb`` members of a zip into ``destination``; return warnings about skipped members.

    Raises:
        ValueError: the file is not a zip, or it holds more members or more bytes than allowed.
    """
    if not zipfile.is_zipfile(archive):
        raise ValueError(f"{archive} is not a zip file")
    warnings = []
    with zipfile.ZipFile(archive) as bundle:
        members = bundle.infolist()
        if len(members) > MAX_ZIP_MEMBERS:
            raise ValueError(f"{archive} holds {len(members)} files; at most {MAX_ZIP_MEMBERS} are read")
        notebooks = [member for member in members if member.filename.endswith(".ipynb")]
        # A zip member cannot expand beyond its declared size: zipfile stops reading there.
        if sum(member.file_size for member in notebooks) > MAX_ZIP_BYTES:
            raise ValueError(f"the notebooks in {archive} exceed {MAX_ZIP_BYTES} bytes uncompressed")
        folders = [member for member in members if member.is_dir()]
        for member in folders + notebooks:
            name = PurePosixPath(member.filename.replace("\\", "/"))
            is_link = stat.S_ISLNK(member.external_attr >> 16)
            if name.is_absolute() or ".." in name.parts or is_link:
                warnings.append(f"skipped {member.filename!r} in the zip: not a plain relative path")
                continue
            target = destination.joinpath(*name.parts)
            if member.is_dir():  # an empty assignment folder still counts: its submission is missing
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            with bundle.open(member) as source, open(target, "wb") as sink:
                sink.write(source.read())
    return warnings


def _skipped(path: Path, root: Path) -> bool:
    parts = path.relative_to(root).parts
    return any(part in _SKIPPED_PARTS or part.startswith(".") for part in parts)


def _choose_notebook(folder: Path, assignment: str, root: Path) -> tuple[Path | None, tuple[str, ...]]:
    notebooks = sorted(path for path in folder.glob("*.ipynb") if not _skipped(path, root))
    expected = folder / f"{assignment}.ipynb"
    if expected in notebooks:
        others = [path.name for path in notebooks if path != expected]
        notes = (f"other notebooks in the folder were not graded: {', '.join(others)}",) if others else ()
        return expected, notes
    if not notebooks:
        return None, ()
    chosen = notebooks[0]
    notes = [f"no {assignment}.ipynb in the folder; {chosen.name} was graded in its place"]
    if len(notebooks) > 1:
        notes.append(
            f"other notebooks in the folder were not graded: {', '.join(p.name for p in notebooks[1:])}"
        )
    return chosen, tuple(notes)


def collect(root: Path, assignments: tuple[str, ...]) -> Collection:
    """Every ``<student>/<assignment>/`` folder under ``root`` whose assignment is one of ``assignments``."""
    collection = Collection()
    seen: set[tuple[str, str]] = set()
    folders = sorted({path.parent for path in root.rglob("*.ipynb") if not _skipped(path, root)})
    folders += sorted(
        path
        for path in root.rglob("*")
        if path.is_dir() and path.name in assignments and not _skipped(path, root)
    )
    for folder in dict.fromkeys(folders):
        relative = folder.relative_to(root)
        if folder == root or folder.parent == root:
            collection.warnings.append(f"{relative}/: notebooks must be in <student>/<assignment>/ folders")
            continue
        assignment, student = folder.name, folder.parent.name
        if assignment not in assignments:
            collection.warnings.append(
                f"{relative}: unknown assignment {assignment!r}; known: {', '.join(assignments)}"
            )
            continue
        if not STUDENT_ID.fullmatch(student):
            collection.warnings.append(
                f"{relative}: {student!r} is not a valid student id (letters, digits, _.@+-)"
            )
            continue
        if (student, assignment) in seen:
            collection.warnings.append(
                f"{relative}: a second folder for {student}/{assignment}; only the first was graded"
            )
            continue
        seen.add((student, assignment))
        path, notes = _choose_notebook(folder, assignment, root)
        collection.submissions.append(Submission(student, assignment, path, notes))
    collection.submissions.sort(key=lambda submission: (submission.assignment, submission.student))
    return collection
