"""A class's submissions: ``<student>/<assignment>/<notebook>.ipynb`` in a folder, or in a zip of one.

A submission's path is exactly ``<student>/<assignment>/<notebook>.ipynb`` below the class's root; any other
notebook is reported and never matched to a student by the tail of its path. The root is the folder (or the
zip's top level), or the one folder it holds when that folder is not itself a student's (a zip of nbgrader's
``submitted/`` works as well as a zip of its content). Only notebooks are read, and the two small files
nbgrader's collect leaves next to them, never other files a student put there (a ``.py`` file could otherwise
shadow a module the tests import).

A folder's tree is read by :mod:`autograder.student.safe_files` and never followed: the notebooks that get
graded are the grader's copies (``collect(..., received=...)``), made from regular files with one link only,
never from a mount point inside the class's folder, so a symbolic or hard link to the released sources or to
another student's notebook, a named pipe or a device is refused with its reason and nothing after the intake
reads a student's file again. A zip is never extracted: its names make the same tree
(:mod:`autograder.intake.zip_tree`), and each chosen member is copied once, straight into ``received``.

The copies are bounded in all (:class:`autograder.student.received.Budget`: the class's cap, checked with the
free space of ``received`` before each file is copied). A submission that cannot be received (a file refused,
past the cap, a disk full, a zip member that is encrypted, compressed by an unknown method or corrupt) gets no
path and its reason, which grades it 0 with that reason; the other submissions are received all the same.

Names are shown as text that can always be written (:func:`shown`): a file name that is not UTF-8 keeps its
bytes as ``\\xNN`` escapes.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from autograder.course_directory import EXCHANGE_FILES, MAX_EXCHANGE_FILE_BYTES
from autograder.intake.zip_tree import MAX_DIRECTORY_BYTES, MAX_ZIP_MEMBERS, WRAPPER_FOLDER, ZipTree
from autograder.student.received import DEFAULT_MAX_CLASS_BYTES, Budget
from autograder.student.safe_files import Entry, Folder, NotReceived, Refused, shown, walk
from autograder.student.sanitize import MAX_NOTEBOOK_BYTES

__all__ = ["MAX_DIRECTORY_BYTES", "MAX_ZIP_MEMBERS", "Collection", "Skipped", "Submission", "class_root", "collect"]

STUDENT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@+-]{0,99}")
_SKIPPED_PARTS = {"__MACOSX", ".ipynb_checkpoints"}


@dataclass(frozen=True)
class Submission:
    """One student's notebook for one assignment, as the grader's copy.

    ``path`` is None when the folder holds no notebook, or when its notebook was not received (``reason`` says
    why: a link, a pipe, a file too large, the class's cap, a disk full, a zip member that cannot be read).
    ``folder`` holds the copies of the exchange files nbgrader's collect left next to the notebook
    (``timestamp.txt``).
    """

    student: str
    assignment: str
    path: Path | None
    notes: tuple[str, ...] = ()
    folder: Path | None = None
    reason: str | None = None
    grader_failure: bool = False  # not received for a reason of the grader's (NotReceived), not of the student's


@dataclass(frozen=True)
class Skipped:
    """A student's file or folder that was not read as a submission: ``reason`` is its warning, ``assignment``
    the assignment it seems meant for (its folder's or notebook's name), None when nothing tells."""

    student: str
    assignment: str | None
    reason: str


@dataclass
class Collection:
    """What :func:`collect` found: the submissions, every warning, and which of the warnings belong to a
    student (the student's folder is right under the class's root), so that the student gets a row."""

    submissions: list[Submission] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)

    def skip(self, parts: tuple[str, ...], assignments: tuple[str, ...], warning: str) -> None:
        """Warn about the entry at ``parts`` (below the class's root) and, where it lies in a student's folder
        or is that folder (``parts`` of one name: the caller passes only a folder so), remember it as that
        student's."""
        self.warnings.append(warning)
        if not STUDENT_ID.fullmatch(parts[0]):
            return
        stem = None if len(parts) == 1 else parts[1].removesuffix(".ipynb") if len(parts) == 2 else parts[1]
        self.skipped.append(Skipped(parts[0], stem if stem in assignments else None, warning))


def _skipped(name: str) -> bool:
    return name in _SKIPPED_PARTS or name.startswith(".")


def _inner_folder(top: Folder) -> str | None:
    """The one folder ``top`` holds when it is nbgrader's :data:`WRAPPER_FOLDER` (whatever its folders are named:
    a student's ID may be an assignment's). Any other one folder is a student's: what is in it is that student's
    to choose, so it never decides whose the folders in it are."""
    names = [(name, kind) for name, kind in top.entries()[0] if not _skipped(name)]
    return WRAPPER_FOLDER if names == [(WRAPPER_FOLDER, "folder")] else None


def class_root(root: Path) -> Path:
    """``root``, or the one folder it holds when that is nbgrader's ``submitted`` (:func:`_inner_folder`).

    Raises:
        Refused: that one folder was replaced by a link while it was looked at.
    """
    with Folder.open(root) as top:
        inner = _inner_folder(top)
    return root if inner is None else root / inner


def _choose_notebook(names: list[str], assignment: str) -> tuple[str | None, tuple[str, ...]]:
    """The notebook of an assignment folder holding ``names`` (sorted): ``<assignment>.ipynb``, else the first;
    and the notes that say so. What the chosen name is (a link, a pipe) is decided when it is read."""
    notebooks = [name for name in names if name.endswith(".ipynb")]
    expected = f"{assignment}.ipynb"
    if expected in notebooks:
        others = [name for name in notebooks if name != expected]
        notes = (f"other notebooks in the folder were not graded: {_some_names(others)}",) if others else ()
        return expected, notes
    if not notebooks:
        return None, ()
    chosen = notebooks[0]
    notes = [f"no {assignment}.ipynb in the folder; {shown(chosen)} was graded in its place"]
    if len(notebooks) > 1:
        notes.append(f"other notebooks in the folder were not graded: {_some_names(notebooks[1:])}")
    return chosen, tuple(notes)


MAX_NAMED = 10  # names a note lists; the others are counted (how many there are is the student's choice)


def _some_names(names: list[str]) -> str:
    """The first :data:`MAX_NAMED` of ``names``, shown, and how many more there are."""
    listed = ", ".join(map(shown, names[:MAX_NAMED]))
    return listed + (f" and {len(names) - MAX_NAMED} more" if len(names) > MAX_NAMED else "")


def _empty_folder(received: Path) -> None:
    received.mkdir(parents=True, exist_ok=True)
    if next(received.iterdir(), None) is not None:
        raise ValueError(f"received {str(received)!r} must be an empty folder; it holds files already")


def _zip_root(tree: ZipTree) -> tuple[str, ...]:
    """The parts of a zip's class root: ``()``, or nbgrader's ``submitted`` when it holds everything the zip
    holds (the same rule as :func:`_inner_folder`, decided by :class:`ZipTree` from the names it kept)."""
    return (WRAPPER_FOLDER,) if tree.student_level == 1 else ()


def collect(
    root: Path, assignments: tuple[str, ...], received: Path, max_bytes: int = DEFAULT_MAX_CLASS_BYTES
) -> Collection:
    """Every ``<student>/<assignment>/`` folder right under the class's root (:func:`class_root`) of the folder
    or zip ``root`` whose assignment is one of ``assignments``, copied into ``received``; every notebook
    elsewhere is reported.

    ``received`` is a folder the grader owns (created if missing). Each chosen notebook is copied into
    ``received/<student>/<assignment>/``, with the exchange files nbgrader's collect leaves next to it, read
    without following anything (:mod:`autograder.student.safe_files`) or straight from the zip's member
    (:mod:`autograder.intake.zip_tree`): a submission's ``path`` and ``folder`` are the copies. At most
    ``max_bytes`` are copied in all, and never more than the free space of ``received`` allows
    (:class:`autograder.student.received.Budget`). A notebook that is not a regular file of at most
    ``MAX_NOTEBOOK_BYTES`` bytes, or that cannot be copied, is not received: its submission has no path, and
    its ``reason`` (also a note) says why. A student or assignment folder that is a link or a mount point is
    not read, with a warning.

    Raises:
        ValueError: ``received`` holds files already; ``max_bytes`` is not a positive number; ``root`` is a
            file that is not a zip, or a zip whose directory is larger than :data:`MAX_DIRECTORY_BYTES`.
        OSError: ``root`` is no folder or file that can be opened.
    """
    _empty_folder(received)
    budget = Budget(received, max_bytes)
    collection = Collection()
    if Path(root).is_file():
        with ZipTree.open(root, _skipped) as tree:
            collection.warnings += tree.warnings
            prefix = _zip_root(tree)
            entries = [
                Entry(entry.parts[len(prefix) :], entry.kind)
                for entry in tree.entries
                if entry.parts[: len(prefix)] == prefix and len(entry.parts) > len(prefix)
            ]

            @contextmanager
            def open_zip_folder(student: str, assignment: str) -> Iterator:
                yield tree.folder((*prefix, student, assignment))

            _collect_entries(entries, open_zip_folder, assignments, received, budget, collection)
    else:
        with Folder.open(root) as top:
            inner = _inner_folder(top)
            if inner is None:
                _collect_tree(top, assignments, received, budget, collection)
            else:
                with top.child(inner, new_root=True) as tree:
                    _collect_tree(tree, assignments, received, budget, collection)
    collection.submissions.sort(key=lambda submission: (submission.assignment, submission.student))
    return collection


def _collect_tree(tree: Folder, assignments: tuple[str, ...], received: Path, budget: Budget, collection: Collection) -> None:
    found = walk(tree, _skipped)
    collection.warnings += found.warnings

    @contextmanager
    def open_folder(student: str, assignment: str) -> Iterator[Folder]:
        with tree.child(student) as student_folder, student_folder.child(assignment) as folder:
            yield folder

    _collect_entries(found.entries, open_folder, assignments, received, budget, collection)


def _collect_entries(
    entries: list[Entry], open_folder: Callable, assignments, received: Path, budget: Budget, collection: Collection
) -> None:
    """The submissions of a tree's ``entries``; ``open_folder(student, assignment)`` opens an assignment's
    folder (a context manager of an object whose ``copy(name, cap, target, budget)`` copies a file of it)."""
    tops = [entry for entry in entries if len(entry.parts) == 1]
    if len(tops) == 1 and tops[0].kind == "folder" and not any(
            len(entry.parts) == 2 and entry.name in assignments for entry in entries):
        collection.warnings.append(
            f"{shown(tops[0].name)} is the only folder of the class's root and holds no assignment folder: it was "
            f"read as a student's folder; the students' folders stand at the top of the folder or zip graded, or "
            f"in one folder named {WRAPPER_FOLDER} that holds them all")
    contents: dict[tuple[str, ...], list[str]] = {}
    for entry in entries:
        relative = shown("/".join(entry.parts))
        if entry.name.endswith(".ipynb") and len(entry.parts) != 3:
            warning = f"{relative}: not graded: a submission must be <student>/<assignment>/<notebook>.ipynb"
            if len(entry.parts) == 1:  # a notebook at the class's top: no student's
                collection.warnings.append(warning)
            else:
                collection.skip(entry.parts, assignments, warning)
        if entry.kind == "link" and len(entry.parts) <= 2:
            what = "a student's" if len(entry.parts) == 1 else "an assignment"
            collection.skip(entry.parts, assignments,
                            f"{relative}: not read: {what} folder that is a symbolic link; links are not followed")
        contents.setdefault(entry.parts[:-1], []).append(entry.name)
    for entry in entries:
        if len(entry.parts) == 2 and entry.kind == "folder":
            names = sorted(contents.get(entry.parts, []))
            _collect_folder(open_folder, entry.parts, names, assignments, received, budget, collection)


def _collect_folder(
    open_folder: Callable, parts: tuple[str, ...], names: list[str], assignments, received: Path, budget: Budget,
    collection: Collection,
) -> None:
    relative = shown("/".join(parts))
    student, assignment = parts
    if assignment not in assignments:
        if any(name.endswith(".ipynb") for name in names):
            collection.skip(parts, assignments,
                            f"{relative}: unknown assignment {shown(assignment)!r}; known: {', '.join(assignments)}")
        return
    if not STUDENT_ID.fullmatch(student):
        collection.warnings.append(f"{relative}: {shown(student)!r} is not a valid student id (letters, digits, _.@+-)")
        return
    destination = received / student / assignment
    try:
        with open_folder(student, assignment) as folder:
            submission = _receive(folder, student, assignment, names, destination, budget)
    except Refused as error:  # a mount point, or replaced by a link since the walk
        collection.skip(parts, assignments, f"{relative}: not read: {error}")
        return
    except OSError as error:  # the grader's own folder could not be made (a disk full): 0, with the reason
        reason = f"the submission could not be received ({error.strerror or type(error).__name__})"
        submission = Submission(student, assignment, None, (f"not graded: {reason}",), None, reason, True)
    collection.submissions.append(submission)


def _receive(
    folder, student: str, assignment: str, names: list[str], destination: Path, budget: Budget
) -> Submission:
    """The submission of one assignment folder, its notebook and exchange files copied into ``destination``."""
    destination.mkdir(parents=True)
    chosen, notes = _choose_notebook(names, assignment)
    path = reason = None
    grader_failure = False
    if chosen is not None:
        try:
            folder.copy(chosen, MAX_NOTEBOOK_BYTES, destination / chosen, budget)
        except Refused as error:
            reason = str(error)
            grader_failure = isinstance(error, NotReceived)
            notes = (f"not graded: {reason}", *notes)
        else:
            path = destination / chosen
    for name in EXCHANGE_FILES:
        if name not in names:
            continue
        try:
            folder.copy(name, MAX_EXCHANGE_FILE_BYTES, destination / name, budget)
        except Refused as error:
            notes = (*notes, f"{name} next to the notebook was not used: it {error.why}")
    return Submission(student, assignment, path, notes, destination, reason, grader_failure)
