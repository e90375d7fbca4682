"""A class's submissions: ``<student>/<assignment>/<notebook>.ipynb`` in a folder, or in a zip of one.

A submission's path is exactly ``<student>/<assignment>/<notebook>.ipynb`` below the class's root; any other
notebook is reported and never matched to a student by the tail of its path. The root is the folder (or the
zip's top level), or the one folder it holds when that folder is not itself a student's (a zip of nbgrader's
``submitted/`` works as well as a zip of its content). Only notebooks are read, never other files a student
put next to them (a ``.py`` file could otherwise shadow a module the tests import). A zip is read member by
member: absolute paths, ``..``, links, and archives beyond the size limits are refused, nothing but
notebooks and folders are extracted, and a member that cannot be written (a name too long, a file where a
folder is, a folder where a file is) is skipped with a warning.

Names are shown as text that can always be written (:func:`shown`): a file name that is not UTF-8 keeps its
bytes as ``\\xNN`` escapes.
"""

from __future__ import annotations

import os
import re
import stat
import zipfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

MAX_ZIP_MEMBERS = 20_000
MAX_ZIP_BYTES = 2 * 1024**3  # uncompressed notebooks, in total
STUDENT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@+-]{0,99}")
_SKIPPED_PARTS = {"__MACOSX", ".ipynb_checkpoints"}
MAX_NAME_BYTES = 255


def shown(name: str | os.PathLike) -> str:
    """A file name as UTF-8 text: bytes that are not UTF-8 (kept by Python as surrogates) become escapes."""
    return os.fspath(name).encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


@dataclass(frozen=True)
class Submission:
    """One student's notebook for one assignment; ``path`` is None when the folder holds no notebook."""

    student: str
    assignment: str
    path: Path | None
    notes: tuple[str, ...] = ()
    folder: Path | None = None  # <student>/<assignment>/, where nbgrader's collect leaves timestamp.txt


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
            if any(len(part.encode("utf-8", "surrogateescape")) > MAX_NAME_BYTES for part in name.parts):
                warnings.append(f"skipped {member.filename[:300]!r} in the zip: a name longer than {MAX_NAME_BYTES} bytes")
                continue
            try:
                _extract(bundle, member, destination.joinpath(*name.parts))
            except (OSError, ValueError, zipfile.BadZipFile) as error:
                reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
                warnings.append(f"skipped {member.filename!r} in the zip: it could not be extracted ({reason})")
    return warnings


def _extract(bundle: zipfile.ZipFile, member: zipfile.ZipInfo, target: Path) -> None:
    if member.is_dir():  # an empty assignment folder still counts: its submission is missing
        target.mkdir(parents=True, exist_ok=True)
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    with bundle.open(member) as source, open(target, "xb") as sink:
        sink.write(source.read())


def _skipped(path: Path, root: Path) -> bool:
    parts = path.relative_to(root).parts
    return any(part in _SKIPPED_PARTS or part.startswith(".") for part in parts)


def class_root(root: Path, assignments: tuple[str, ...]) -> Path:
    """``root``, or the one folder it holds when that folder is not a student's (it has no assignment folder)."""
    entries = [path for path in root.iterdir() if not _skipped(path, root)]
    if len(entries) == 1 and entries[0].is_dir() and not entries[0].is_symlink():
        inner = entries[0]
        if not any((inner / assignment).is_dir() for assignment in assignments):
            return inner
    return root


def _choose_notebook(folder: Path, assignment: str, root: Path) -> tuple[Path | None, tuple[str, ...]]:
    notebooks = sorted(path for path in folder.glob("*.ipynb") if not _skipped(path, root) and path.is_file())
    expected = folder / f"{assignment}.ipynb"
    if expected in notebooks:
        others = [shown(path.name) for path in notebooks if path != expected]
        notes = (f"other notebooks in the folder were not graded: {', '.join(others)}",) if others else ()
        return expected, notes
    if not notebooks:
        return None, ()
    chosen = notebooks[0]
    notes = [f"no {assignment}.ipynb in the folder; {shown(chosen.name)} was graded in its place"]
    if len(notebooks) > 1:
        notes.append(
            f"other notebooks in the folder were not graded: {', '.join(shown(p.name) for p in notebooks[1:])}"
        )
    return chosen, tuple(notes)


def collect(root: Path, assignments: tuple[str, ...]) -> Collection:
    """Every ``<student>/<assignment>/`` folder right under the class's root (:func:`class_root`) whose
    assignment is one of ``assignments``; every notebook elsewhere is reported."""
    collection = Collection()
    root = class_root(root, assignments)
    notebooks = sorted(path for path in root.rglob("*.ipynb") if not _skipped(path, root))
    for path in notebooks:
        if len(path.relative_to(root).parts) != 3:
            collection.warnings.append(
                f"{shown(path.relative_to(root))}: not graded: a submission must be "
                "<student>/<assignment>/<notebook>.ipynb"
            )
    folders = sorted(
        path for path in root.glob("*/*") if path.is_dir() and not path.is_symlink() and not _skipped(path, root)
    )
    for folder in folders:
        relative = shown(folder.relative_to(root))
        assignment, student = folder.name, folder.parent.name
        if assignment not in assignments:
            if any(folder.glob("*.ipynb")):
                collection.warnings.append(
                    f"{relative}: unknown assignment {shown(assignment)!r}; known: {', '.join(assignments)}"
                )
            continue
        if not STUDENT_ID.fullmatch(student):
            collection.warnings.append(
                f"{relative}: {shown(student)!r} is not a valid student id (letters, digits, _.@+-)"
            )
            continue
        path, notes = _choose_notebook(folder, assignment, root)
        collection.submissions.append(Submission(student, assignment, path, notes, folder))
    collection.submissions.sort(key=lambda submission: (submission.assignment, submission.student))
    return collection
