"""A class's zip read as a tree of names, never extracted: each file that gets graded is copied once, straight
from its member into the grader's ``received/`` folder, a chunk at a time.

The members' names make the same entries as a folder's walk (:class:`autograder.student.safe_files.Entry`), so
that :mod:`autograder.intake.submissions` finds the submissions of a zip by the same rules as those of a
folder. A name that is absolute, holds ``..`` or a part longer than :data:`MAX_NAME_BYTES` bytes is left out
with a warning; a member marked as a symbolic link is listed as a link (never read); a name used twice, or as
a file and a folder, is refused when it is read; a name more than :data:`MAX_NAME_PARTS` parts deep is left out
(a folder's walk stops as deep). Students' folders stand at the zip's top, or in a folder ``submitted`` that
holds everything the zip holds (nbgrader's; any other one folder alone is read as a student's: a student's
folder is the student's to fill, so it never decides whose the folders in it are). As in a folder's walk, each
student's folder holds at most
:data:`~autograder.student.safe_files.MAX_ENTRIES_PER_TOP_FOLDER` names (the rest of it is left out, with a
warning naming it): no count is shared between students, so one student's thousands of files hide nothing of
another's. What bounds the whole zip is the size of its directory (:data:`MAX_DIRECTORY_BYTES`), which zipfile
parses before anyone's work can be found: a zip past it is refused whole, with the reason.

A member is read (:meth:`ZipTree.copy`) only after what its header declares passes: not encrypted, compressed
by a method Python reads (:data:`READABLE_METHODS`), a declared size of at most the cap, counted in the
class's :class:`autograder.student.received.Budget`. It is then copied at most its declared size (zipfile stops
there and checks the CRC), and refused if it holds another number of bytes than it declares. Whatever a member
raises while it is read (``RuntimeError``, ``NotImplementedError``, ``zipfile.BadZipFile``, ``zlib.error``,
``EOFError``...) refuses that member with the reason, and the copy is deleted: the student gets 0 with that
reason, and the batch goes on.
"""

from __future__ import annotations

import lzma
import stat
import zipfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from autograder.student import safe_files
from autograder.student.received import Budget, write_chunks
from autograder.student.safe_files import Entry, Refused, shown

MAX_ZIP_MEMBERS = 20_000
MAX_NAME_BYTES = 255
# A name's parts: a folder's walk reads MAX_DEPTH folders below its root, and a zip may hold its class in one
# folder more. A name deeper is left out before it is stored (each of its parts is a folder of the tree).
MAX_NAME_PARTS = safe_files.MAX_DEPTH + 2
WRAPPER_FOLDER = "submitted"  # nbgrader's folder of the class's submissions: a zip may hold its students in it
# The directory of members that zipfile parses whole into memory (about 0.5 kB a member): checked in the zip's
# end records before it is parsed, room for MAX_ZIP_MEMBERS members of 300 bytes (a 46-byte header, a name,
# the usual extra fields), so that at most about 130,000 of the smallest members are ever parsed.
MAX_DIRECTORY_BYTES = 300 * MAX_ZIP_MEMBERS
READABLE_METHODS = {
    zipfile.ZIP_STORED: "stored",
    zipfile.ZIP_DEFLATED: "deflate",
    zipfile.ZIP_BZIP2: "bzip2",
    zipfile.ZIP_LZMA: "lzma",
}
MEMBER_ERRORS = (
    RuntimeError, NotImplementedError, zipfile.BadZipFile, zlib.error, lzma.LZMAError, EOFError, OSError, ValueError,
)  # fmt: skip


@dataclass
class ZipTree:
    """The names of an open zip as entries of a tree, and its members by their parts."""

    bundle: zipfile.ZipFile
    entries: list[Entry] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    files: dict[tuple[str, ...], list[zipfile.ZipInfo]] = field(default_factory=dict)
    folders: set[tuple[str, ...]] = field(default_factory=set)
    student_level: int = 0  # where students' folders stand: 1 in a zip whose members all lie in `submitted/`
    names_below: dict[tuple[str, ...], int] = field(default_factory=dict)
    too_deep: set[str] = field(default_factory=set)  # the folders at the top warned of for names too deep

    @classmethod
    @contextmanager
    def open(cls, archive: Path, skipped) -> Iterator[ZipTree]:
        """The tree of the zip ``archive``; names ``skipped`` says are left out with all below them.

        Raises:
            ValueError: ``archive`` is not a zip, or its directory cannot be read or is larger than
                :data:`MAX_DIRECTORY_BYTES`.
        """
        declared = directory_bytes(archive)
        if declared is not None and declared > MAX_DIRECTORY_BYTES:
            raise ValueError(f"{archive} declares a directory of members of {declared} bytes; at most "
                             f"{MAX_DIRECTORY_BYTES} are read (about {MAX_ZIP_MEMBERS} members)")
        try:
            bundle = zipfile.ZipFile(archive)
        except (zipfile.BadZipFile, OSError, ValueError, EOFError) as error:
            raise ValueError(f"{archive} is not a zip file that can be read ({type(error).__name__}: {error})") from error
        with bundle:
            tree = cls(bundle)
            kept = [(member, parts) for member in bundle.infolist() if (parts := tree._parts(member, skipped))]
            # Where students stand, from the names kept only (a __MACOSX/ or a .DS_Store beside the one folder
            # changes nothing): in the one folder all of them lie in, when it is nbgrader's `submitted`.
            tops = {parts[0] for _, parts in kept}
            tree.student_level = 1 if tops == {WRAPPER_FOLDER} else 0
            for member, parts in kept:
                tree._add(member, parts)
            tree._list()
            yield tree

    def _parts(self, member: zipfile.ZipInfo, skipped) -> tuple[str, ...] | None:
        """The parts of ``member``'s name, or None for a name left out: not a plain relative path, a part longer
        than :data:`MAX_NAME_BYTES` (both with a warning), one ``skipped`` leaves out, or deeper than a
        folder's walk reads (:data:`MAX_NAME_PARTS`: one warning for each folder at the top)."""
        name = PurePosixPath(member.filename.replace("\\", "/"))
        if name.is_absolute() or ".." in name.parts or not name.parts:
            self.warnings.append(f"skipped {shown(member.filename[:300])!r} in the zip: not a plain relative path")
            return None
        if any(len(part.encode("utf-8", "surrogateescape")) > MAX_NAME_BYTES for part in name.parts):
            self.warnings.append(
                f"skipped {shown(member.filename[:300])!r} in the zip: a name longer than {MAX_NAME_BYTES} bytes"
            )
            return None
        if any(skipped(part) for part in name.parts):
            return None
        if len(name.parts) > MAX_NAME_PARTS:
            if name.parts[0] not in self.too_deep:
                self.too_deep.add(name.parts[0])
                self.warnings.append(f"{shown(name.parts[0])}: names more than {MAX_NAME_PARTS} parts deep in the "
                                     f"zip were not read (the first: {shown('/'.join(name.parts[:MAX_NAME_PARTS]))}/...)")
            return None
        return name.parts

    def _add(self, member: zipfile.ZipInfo, parts: tuple[str, ...]) -> None:
        student = parts[: self.student_level + 1]
        if len(parts) > len(student):  # a name below a student's folder counts against that folder's bound only
            if self.names_below.get(student, 0) >= safe_files.MAX_ENTRIES_PER_TOP_FOLDER:
                if self.names_below[student] == safe_files.MAX_ENTRIES_PER_TOP_FOLDER:  # warned once
                    self.names_below[student] += 1
                    self.warnings.append(f"{shown('/'.join(student))} holds more than "
                                         f"{safe_files.MAX_ENTRIES_PER_TOP_FOLDER} names below it in the zip; the "
                                         f"rest of it was not read")
                return
            self.names_below[student] = self.names_below.get(student, 0) + 1
        self.folders.update(parts[:end] for end in range(1, len(parts)))
        if member.is_dir():
            self.folders.add(parts)
        else:
            self.files.setdefault(parts, []).append(member)

    def _list(self) -> None:
        kinds = {parts: "folder" for parts in self.folders}
        for parts, members in self.files.items():
            if parts not in kinds:
                kinds[parts] = _kind(members[0])
        self.entries = [Entry(parts, kind) for parts, kind in sorted(kinds.items())]

    def folder(self, parts: tuple[str, ...]) -> ZipFolder:
        """The folder of ``parts`` in this zip, whose files :meth:`ZipFolder.copy` copies by name."""
        return ZipFolder(self, parts)

    def copy(self, parts: tuple[str, ...], cap: int, target: Path, budget: Budget) -> int:
        """Copy the member ``parts``, at most ``cap`` bytes, into the new file ``target``; return its size.

        Raises:
            Refused: the member is a link, a name used twice, encrypted, compressed by another method than
                :data:`READABLE_METHODS`, declared larger than ``cap``, past the budget, or it failed while it was
                read (a corrupt header or stream, fewer or more bytes than it declares); ``target`` is deleted.
        """
        name = parts[-1]
        member = self._member(parts, cap)
        budget.take(name, member.file_size)
        try:
            with self.bundle.open(member) as source:
                written = write_chunks(
                    source.read, name, member.file_size, target,
                    f"holds more than the {member.file_size} bytes it declares; it was not copied",
                )
            if written != member.file_size:
                target.unlink()
                raise Refused(name, f"holds {written} bytes but declares {member.file_size}; it was not copied")
        except MEMBER_ERRORS as error:
            budget.give_back(member.file_size)
            target.unlink(missing_ok=True)
            raise Refused(name, f"could not be read from the zip ({type(error).__name__}: {error})") from error
        except Refused:
            budget.give_back(member.file_size)
            raise
        return written

    def _member(self, parts: tuple[str, ...], cap: int) -> zipfile.ZipInfo:
        name = parts[-1]
        members = self.files.get(parts, [])
        if parts in self.folders or len(members) != 1:
            raise Refused(name, "is a name used more than once in the zip (twice, or as a file and a folder); not read")
        [member] = members
        if (why := _kind(member)) != "file":
            raise Refused(name, "is a symbolic link; links are not followed" if why == "link" else "is not a regular file; only regular files are read")
        if member.flag_bits & 0x1:
            raise Refused(name, "is encrypted in the zip; encrypted files are not read")
        if member.compress_type not in READABLE_METHODS:
            raise Refused(
                name,
                f"is compressed by method {member.compress_type} in the zip (Deflate64 is 9); only "
                f"{', '.join(READABLE_METHODS.values())} are read",
            )
        if member.file_size > cap:
            raise Refused(name, f"declares {member.file_size} bytes in the zip; files larger than {cap} bytes are not read")
        return member


@dataclass(frozen=True)
class ZipFolder:
    """A folder of a :class:`ZipTree`, as :class:`autograder.student.safe_files.Folder` copies by name."""

    tree: ZipTree
    parts: tuple[str, ...]

    def copy(self, name: str, cap: int, target: Path, budget: Budget) -> int:
        """:meth:`ZipTree.copy` of the member ``name`` of this folder."""
        return self.tree.copy((*self.parts, name), cap, target, budget)


def _kind(member: zipfile.ZipInfo) -> str:
    """What a file member says it is: ``"link"``, ``"file"`` (regular, or no Unix type at all) or ``"other"``."""
    mode = member.external_attr >> 16
    if stat.S_ISLNK(mode):
        return "link"
    return "file" if stat.S_IFMT(mode) in (0, stat.S_IFREG) else "other"


def directory_bytes(archive: Path) -> int | None:
    """The size of the zip's directory of members as its end records declare it (the zip64 record's where
    the classic one says so), read before anything parses the directory; None when no end record is found
    (zipfile then says the file is no zip).

    The end records are found by zipfile's own search (``zipfile._EndRecData``, which ``ZipFile`` calls
    before it reads exactly this many bytes of directory), not by one of this module's: a search of its own
    could be led to another record than zipfile's (a field of the real record that holds the record's
    signature), and then check a size that zipfile never reads.
    """
    with open(archive, "rb") as handle:
        record = zipfile._EndRecData(handle)  # the search ZipFile itself makes
    return None if record is None else record[zipfile._ECD_SIZE]
