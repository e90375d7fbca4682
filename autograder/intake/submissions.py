"""A class's submissions: ``<student>/<assignment>/<notebook>.ipynb`` in a folder, or in a zip of one.

A submission's path is exactly ``<student>/<assignment>/<notebook>.ipynb`` below the class's root; any other
notebook is reported and never matched to a student by the tail of its path. The root is the folder (or the
zip's top level), or the one folder it holds when that folder is not itself a student's (a zip of nbgrader's
``submitted/`` works as well as a zip of its content). Only notebooks are read, and the two small files
nbgrader's collect leaves next to them, never other files a student put there (a ``.py`` file could otherwise
shadow a module the tests import). A zip is read member by
member: absolute paths, ``..``, links, and archives beyond the size limits are refused, nothing but
notebooks and folders are extracted, and a member that cannot be written (a name too long, a file where a
folder is, a folder where a file is) is skipped with a warning.

A folder's tree is read by :mod:`autograder.intake.safe_files` and never followed: the notebooks that get
graded are the grader's copies (``collect(..., received=...)``), made from regular files only, so a link to
the released sources or to another student's notebook, a named pipe or a device is refused with its reason
and nothing after the intake reads a student's file again.

Names are shown as text that can always be written (:func:`shown`): a file name that is not UTF-8 keeps its
bytes as ``\\xNN`` escapes.
"""

from __future__ import annotations

import re
import stat
import zipfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from autograder.course_directory import EXCHANGE_FILES, MAX_EXCHANGE_FILE_BYTES
from autograder.intake.safe_files import Folder, Refused, shown, walk
from autograder.intake.sanitize import MAX_NOTEBOOK_BYTES

MAX_ZIP_MEMBERS = 20_000
MAX_ZIP_BYTES = 2 * 1024**3  # uncompressed notebooks, in total
STUDENT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@+-]{0,99}")
_SKIPPED_PARTS = {"__MACOSX", ".ipynb_checkpoints"}
MAX_NAME_BYTES = 255


@dataclass(frozen=True)
class Submission:
    """One student's notebook for one assignment, as the grader's copy.

    ``path`` is None when the folder holds no notebook, or when its notebook was refused (``reason`` says why:
    a link, a pipe, a file too large). ``folder`` holds the copies of the exchange files nbgrader's collect
    left next to the notebook (``timestamp.txt``).
    """

    student: str
    assignment: str
    path: Path | None
    notes: tuple[str, ...] = ()
    folder: Path | None = None
    reason: str | None = None


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


def _skipped(name: str) -> bool:
    return name in _SKIPPED_PARTS or name.startswith(".")


def _inner_folder(top: Folder, assignments: tuple[str, ...]) -> str | None:
    """The one folder ``top`` holds when that folder is not a student's (it has no assignment folder)."""
    names = [(name, kind) for name, kind in top.entries()[0] if not _skipped(name)]
    if len(names) != 1 or names[0][1] != "folder":
        return None
    with top.child(names[0][0]) as inner:
        # a link named after an assignment is still an assignment folder: it is refused later, with a warning
        if any(name in assignments and kind in ("folder", "link") for name, kind in inner.entries()[0]):
            return None
    return names[0][0]


def class_root(root: Path, assignments: tuple[str, ...]) -> Path:
    """``root``, or the one folder it holds when that folder is not a student's (it has no assignment folder).

    Raises:
        Refused: that one folder was replaced by a link while it was looked at.
    """
    with Folder.open(root) as top:
        inner = _inner_folder(top, assignments)
    return root if inner is None else root / inner


def _choose_notebook(names: list[str], assignment: str) -> tuple[str | None, tuple[str, ...]]:
    """The notebook of an assignment folder holding ``names`` (sorted): ``<assignment>.ipynb``, else the first;
    and the notes that say so. What the chosen name is (a link, a pipe) is decided when it is read."""
    notebooks = [name for name in names if name.endswith(".ipynb")]
    expected = f"{assignment}.ipynb"
    if expected in notebooks:
        others = [shown(name) for name in notebooks if name != expected]
        notes = (f"other notebooks in the folder were not graded: {', '.join(others)}",) if others else ()
        return expected, notes
    if not notebooks:
        return None, ()
    chosen = notebooks[0]
    notes = [f"no {assignment}.ipynb in the folder; {shown(chosen)} was graded in its place"]
    if len(notebooks) > 1:
        notes.append(f"other notebooks in the folder were not graded: {', '.join(map(shown, notebooks[1:]))}")
    return chosen, tuple(notes)


def _empty_folder(received: Path) -> None:
    received.mkdir(parents=True, exist_ok=True)
    if next(received.iterdir(), None) is not None:
        raise ValueError(f"received {str(received)!r} must be an empty folder; it holds files already")


def collect(root: Path, assignments: tuple[str, ...], received: Path) -> Collection:
    """Every ``<student>/<assignment>/`` folder right under the class's root (:func:`class_root`) whose
    assignment is one of ``assignments``, copied into ``received``; every notebook elsewhere is reported.

    ``received`` is a folder the grader owns (created if missing). Each chosen notebook is copied into
    ``received/<student>/<assignment>/``, with the exchange files nbgrader's collect leaves next to it, read
    without following anything (:mod:`autograder.intake.safe_files`): a submission's ``path`` and ``folder`` are
    the copies. A notebook that is not a regular file of at most ``MAX_NOTEBOOK_BYTES`` bytes is not copied: its
    submission has no path, and its ``reason`` (also a note) says why. A student or assignment folder that is a
    link is not read, with a warning.

    Raises:
        ValueError: ``received`` holds files already.
        OSError: ``root`` is no folder that can be opened.
    """
    _empty_folder(received)
    collection = Collection()
    with Folder.open(root) as top:
        inner = _inner_folder(top, assignments)
        if inner is None:
            _collect_tree(top, assignments, received, collection)
        else:
            with top.child(inner) as tree:
                _collect_tree(tree, assignments, received, collection)
    collection.submissions.sort(key=lambda submission: (submission.assignment, submission.student))
    return collection


def _collect_tree(tree: Folder, assignments: tuple[str, ...], received: Path, collection: Collection) -> None:
    found = walk(tree, _skipped)
    collection.warnings += found.warnings
    contents: dict[tuple[str, ...], list[str]] = {}
    for entry in found.entries:
        relative = shown("/".join(entry.parts))
        if entry.name.endswith(".ipynb") and len(entry.parts) != 3:
            collection.warnings.append(
                f"{relative}: not graded: a submission must be <student>/<assignment>/<notebook>.ipynb"
            )
        if entry.kind == "link" and len(entry.parts) <= 2:
            what = "a student's" if len(entry.parts) == 1 else "an assignment"
            collection.warnings.append(f"{relative}: not read: {what} folder that is a symbolic link; links are not followed")
        contents.setdefault(entry.parts[:-1], []).append(entry.name)
    for entry in found.entries:
        if len(entry.parts) == 2 and entry.kind == "folder":
            _collect_folder(tree, entry.parts, contents.get(entry.parts, []), assignments, received, collection)


def _collect_folder(
    tree: Folder, parts: tuple[str, ...], names: list[str], assignments, received: Path, collection: Collection
) -> None:
    relative = shown("/".join(parts))
    student, assignment = parts
    if assignment not in assignments:
        if any(name.endswith(".ipynb") for name in names):
            collection.warnings.append(
                f"{relative}: unknown assignment {shown(assignment)!r}; known: {', '.join(assignments)}"
            )
        return
    if not STUDENT_ID.fullmatch(student):
        collection.warnings.append(f"{relative}: {shown(student)!r} is not a valid student id (letters, digits, _.@+-)")
        return
    try:
        with tree.child(student) as student_folder, student_folder.child(assignment) as folder:
            submission = _receive(folder, student, assignment, names, received / student / assignment)
    except Refused as error:  # replaced by a link since the walk
        collection.warnings.append(f"{relative}: not read: {error}")
        return
    collection.submissions.append(submission)


def _receive(folder: Folder, student: str, assignment: str, names: list[str], destination: Path) -> Submission:
    """The submission of one assignment folder, its notebook and exchange files copied into ``destination``."""
    destination.mkdir(parents=True)
    chosen, notes = _choose_notebook(names, assignment)
    path = reason = None
    if chosen is not None:
        try:
            content = folder.read(chosen, MAX_NOTEBOOK_BYTES)
        except Refused as error:
            reason = str(error)
            notes = (f"not graded: {reason}", *notes)
        else:
            path = destination / chosen
            _write_new(path, content)
    for name in EXCHANGE_FILES:
        if name not in names:
            continue
        try:
            _write_new(destination / name, folder.read(name, MAX_EXCHANGE_FILE_BYTES))
        except Refused as error:
            notes = (*notes, f"{name} next to the notebook was not used: it {error.why}")
    return Submission(student, assignment, path, notes, destination, reason)


def _write_new(path: Path, content: bytes) -> None:
    with open(path, "xb") as sink:
        sink.write(content)
