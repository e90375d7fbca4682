"""Reading a student's tree without following anything.

Every name below a class's folder was chosen by a student, and a path is looked up again by the kernel each
time it is used: a check on a path (``is_file()``) and the read that follows it can meet two different files,
and a name can be a symbolic link to anything the grader may read (the released sources, another student's
notebook, ``/proc/kmsg``), a named pipe or a device whose read never ends.

So nothing here opens a path below the class's folder. The folder is opened once (:meth:`Folder.open`: the
instructor named it), and every folder below it is opened relative to its parent's descriptor with
``O_NOFOLLOW | O_DIRECTORY`` (:meth:`Folder.child`), every file relative to its folder's descriptor with
``O_NOFOLLOW | O_NONBLOCK`` (:meth:`Folder.read`, :meth:`Folder.copy`). What is checked is the opened
descriptor (``fstat``): only a regular file is read; a symbolic link, a named pipe, a socket, a device or a
folder is refused with a reason (:class:`Refused`, e.g. ``x.ipynb is a symbolic link; links are not
followed``). The intake's copy of a class's file (:meth:`Folder.copy`) also refuses a hard link (a file with a
second name: another student's notebook, the released sources) and a file on another file system; a folder on
another file system than the tree's root (a mount point) is not entered. A file's size is checked before its first byte is read, and at
most ``cap + 1`` bytes are read, so a file that grows while it is read is refused too.

A listing (:func:`walk`) never follows a link either, and it is bounded: at most
:data:`MAX_ENTRIES_PER_FOLDER` names per folder, :data:`MAX_DEPTH` folders deep and
:data:`MAX_ENTRIES_PER_TOP_FOLDER` names below each folder at the tree's top (a student's), with a warning
naming the folder when a bound is reached. No bound is shared between two top folders: a student who fills
their own folder with names loses the rest of their own folder, never another student's (a class-wide count
once let the first student in the listing hide every student after them).
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Self

if TYPE_CHECKING:
    from autograder.student.received import Budget

MAX_ENTRIES_PER_FOLDER = 10_000
MAX_DEPTH = 16  # folders below the tree's root
MAX_ENTRIES_PER_TOP_FOLDER = 2_000  # names below one folder at the tree's top: a student's six assignments
# With at most MAX_ENTRIES_PER_FOLDER folders at the top, a walk holds at most this many names.
MAX_TOTAL_ENTRIES = MAX_ENTRIES_PER_FOLDER * (1 + MAX_ENTRIES_PER_TOP_FOLDER)
_READ_CHUNK = 1024**2


def _flags(*names: str) -> int:
    """``os.O_RDONLY`` with the named flags of ``os`` that this system has (Windows lacks POSIX's)."""
    value = os.O_RDONLY
    for name in names:
        value |= getattr(os, name, 0)
    return value


_FILE_FLAGS = _flags("O_NOFOLLOW", "O_NONBLOCK", "O_CLOEXEC", "O_NOCTTY")
_FOLDER_FLAGS = _flags("O_NOFOLLOW", "O_DIRECTORY", "O_CLOEXEC")
DESCRIPTOR_RELATIVE = os.open in os.supports_dir_fd and hasattr(os, "O_NOFOLLOW") and hasattr(os, "O_DIRECTORY")
"""Whether files can be opened relative to a folder's descriptor without following a link (Linux, macOS): the
grader's machine must; a student's own check falls back to :func:`read_by_path` where it cannot."""
_ONLY_FILES = "only regular files are read"
HARD_LINK = "files with more than one name are not read, like symbolic links"
MOUNT_POINT = "is a mount point (another file system); mount points in a class's folder are not entered"
_WHAT_IT_IS = (
    (stat.S_ISLNK, "is a symbolic link; links are not followed"),
    (stat.S_ISFIFO, f"is a named pipe (FIFO); {_ONLY_FILES}"),
    (stat.S_ISSOCK, f"is a socket; {_ONLY_FILES}"),
    (stat.S_ISCHR, f"is a character device; {_ONLY_FILES}"),
    (stat.S_ISBLK, f"is a block device; {_ONLY_FILES}"),
    (stat.S_ISDIR, f"is a folder; {_ONLY_FILES}"),
)


def shown(name: str | os.PathLike) -> str:
    """A file name as UTF-8 text: bytes that are not UTF-8 (kept by Python as surrogates) become escapes."""
    return os.fspath(name).encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


class Refused(Exception):
    """A file or folder that was not read. ``str()`` is the whole reason, ``why`` the part after the name.

    Example: ``Refused("x.ipynb", "is a symbolic link; links are not followed")``.
    """

    def __init__(self, name: str, why: str) -> None:
        super().__init__(f"{shown(name)} {why}")
        self.name = name
        self.why = why


class NotReceived(Refused):
    """A file the grader did not keep a copy of for a reason of its own, not of the file's: the class's cap, or
    its own folder's free space or a write to it that failed. Its submission is the grader's failure (its earlier
    results and hand grades stay), never the student's 0."""


def _not_a_regular_file(mode: int) -> str | None:
    """Why a file of this mode is not read, or None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    return next((why for test, why in _WHAT_IT_IS if test(mode)), f"is not a regular file; {_ONLY_FILES}")


def _not_read(status: os.stat_result, cap: int) -> str | None:
    """Why the open file of ``status`` is not read (not a regular file, larger than ``cap`` bytes), or None."""
    if why := _not_a_regular_file(status.st_mode):
        return why
    if status.st_size > cap:
        return f"is {status.st_size} bytes; files larger than {cap} bytes are not read"
    return None


def _not_copied(status: os.stat_result, cap: int, device: int) -> str | None:
    """Why the open file of ``status`` in a class's folder on ``device`` is not copied: as :func:`_not_read`,
    and a file with a second name (a hard link) or on another file system; or None."""
    if why := _not_read(status, cap):
        return why
    if status.st_nlink > 1:
        return f"has {status.st_nlink} hard links; {HARD_LINK}"
    return MOUNT_POINT if status.st_dev != device else None


def _could_not(action: str, error: OSError) -> str:
    return f"could not be {action} ({error.strerror or type(error).__name__})"


@dataclass(frozen=True)
class Entry:
    """A name found by :func:`walk`: the names from the tree's root down to it, and what it is (not followed):
    ``"file"`` (regular), ``"folder"``, ``"link"`` or ``"other"`` (a pipe, a socket, a device)."""

    parts: tuple[str, ...]
    kind: str

    @property
    def name(self) -> str:
        return self.parts[-1]


@dataclass
class Walk:
    """Every name :func:`walk` found, sorted by path, and the warnings about bounds it reached."""

    entries: list[Entry] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


class Folder:
    """An open folder of a student's tree; every file or folder in it is opened relative to it.

    Use as a context manager: the descriptor is closed on exit. ``device`` is the file system of the tree's
    root: a folder or file on another one is not entered (:meth:`child`) or copied (:meth:`copy`).
    """

    def __init__(self, descriptor: int, device: int | None = None) -> None:
        self.descriptor = descriptor
        self.device = os.fstat(descriptor).st_dev if device is None else device

    @classmethod
    def open(cls, path: Path) -> Folder:
        """The tree's root, named by the grader or the instructor (a link in ``path`` itself is followed).

        Raises:
            OSError: ``path`` is no folder or cannot be opened.
        """
        return cls(os.open(path, _flags("O_DIRECTORY", "O_CLOEXEC")))

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info) -> None:
        os.close(self.descriptor)

    def _lstat(self, name: str) -> os.stat_result:
        try:
            return os.stat(name, dir_fd=self.descriptor, follow_symlinks=False)
        except OSError as error:
            raise Refused(name, _could_not("found", error)) from error

    def child(self, name: str, *, new_root: bool = False) -> Folder:
        """The folder ``name`` in this one, never through a link, nor on another file system unless
        ``new_root`` (the folder is then the root of a tree of its own: the one folder the instructor's class
        folder holds).

        Raises:
            Refused: ``name`` is a link, not a folder, a mount point, or cannot be opened.
        """
        mode = self._lstat(name).st_mode
        if not stat.S_ISDIR(mode):
            raise Refused(name, _not_a_regular_file(mode) if stat.S_ISLNK(mode) else "is not a folder")
        try:
            descriptor = os.open(name, _FOLDER_FLAGS, dir_fd=self.descriptor)
        except OSError as error:  # replaced by a link or a file since the lstat
            why = _WHAT_IT_IS[0][1] if error.errno == errno.ELOOP else _could_not("opened", error)
            raise Refused(name, why) from error
        if new_root:
            return Folder(descriptor)
        if os.fstat(descriptor).st_dev != self.device:
            os.close(descriptor)
            raise Refused(name, MOUNT_POINT)
        return Folder(descriptor, self.device)

    def _open_file(self, name: str) -> int:
        if why := _not_a_regular_file(self._lstat(name).st_mode):  # a pipe or a device is never even opened
            raise Refused(name, why)
        try:
            return os.open(name, _FILE_FLAGS, dir_fd=self.descriptor)
        except OSError as error:  # replaced since the lstat: ELOOP is O_NOFOLLOW meeting a link
            why = _WHAT_IT_IS[0][1] if error.errno == errno.ELOOP else _could_not("opened", error)
            raise Refused(name, why) from error

    def read(self, name: str, cap: int) -> bytes:
        """The bytes of the regular file ``name`` in this folder, at most ``cap`` of them.

        Raises:
            Refused: ``name`` is not a regular file (a link, a pipe, a device, a folder), is larger than
                ``cap`` bytes (or grows beyond it while read), or cannot be opened.
        """
        descriptor = self._open_file(name)
        try:
            return _read_open_file(descriptor, name, cap)
        finally:
            os.close(descriptor)

    def read_owned(self, name: str, cap: int, uid: int) -> tuple[bytes, float]:
        """:meth:`read`, and refused besides when the file has a second name (a hard link) or belongs to
        another account than ``uid`` (nbgrader's exchange, where a student's files are those of their account);
        with the bytes, the file's last change (its status change time, which its owner cannot set back, read
        after the bytes: a write during the read counts).

        Raises:
            Refused: as :meth:`read`; a hard link; another owner.
        """
        descriptor = self._open_file(name)
        try:
            status = os.fstat(descriptor)
            if stat.S_ISREG(status.st_mode) and status.st_nlink > 1:
                raise Refused(name, f"has {status.st_nlink} hard links; links of either kind are not followed")
            if stat.S_ISREG(status.st_mode) and status.st_uid != uid:
                raise Refused(name, f"is owned by {account_name(status.st_uid)}, not by the student's account")
            content = _read_open_file(descriptor, name, cap)
            return content, os.fstat(descriptor).st_ctime
        finally:
            os.close(descriptor)

    def copy(self, name: str, cap: int, target: Path, budget: Budget) -> int:
        """Copy the regular file ``name`` of this folder, at most ``cap`` bytes, into the new file ``target``, a
        chunk at a time, its size counted in ``budget`` first; return its size.

        Raises:
            Refused: as :meth:`read`, and also when the file has more than one link (a hard link), lies on
                another file system than the tree's root, passes the budget, grows while it is copied or cannot be written (``target`` is then
                deleted).
        """
        from autograder.student.received import write_chunks  # it builds on Refused, defined here

        descriptor = self._open_file(name)
        try:
            status = os.fstat(descriptor)
            if why := _not_copied(status, cap, self.device):
                raise Refused(name, why)
            budget.take(name, status.st_size)
            try:
                return write_chunks(
                    lambda size: os.read(descriptor, size), name, status.st_size, target,
                    f"grew beyond {status.st_size} bytes while it was copied; it was not copied",
                )
            except Refused:
                budget.give_back(status.st_size)
                raise
        finally:
            os.close(descriptor)

    def entries(self, limit: int | None = None) -> tuple[list[tuple[str, str]], bool]:
        """(name, kind) of at most ``limit`` (default :data:`MAX_ENTRIES_PER_FOLDER`) names in this folder,
        sorted (kinds as :class:`Entry`'s), and whether more were left out."""
        limit = MAX_ENTRIES_PER_FOLDER if limit is None else limit
        found = []
        with os.scandir(self.descriptor) as listing:
            for item in listing:
                if len(found) == limit:
                    return sorted(found), True
                found.append((item.name, _kind(item)))
        return sorted(found), False


    def entries_matching(self, keep: Callable[[str, os.stat_result | None], bool],
                         limit: int) -> tuple[list[tuple[str, str]], int, bool]:
        """(name, kind) of the names of this folder that ``keep`` accepts, at most ``limit`` of them, sorted;
        how many names it did not accept; and whether accepted names were left out. ``keep`` is given each name
        and its status (of the entry itself, a link not followed; None when it is gone since the listing). The whole listing is read (its time grows with the folder), but only accepted names are kept
        (its memory with ``limit``)."""
        found, ignored = [], 0
        with os.scandir(self.descriptor) as listing:
            for item in listing:
                if not keep(item.name, _status(item)):
                    ignored += 1
                    continue
                if len(found) == limit:
                    return sorted(found), ignored, True
                found.append((item.name, _kind(item)))
        return sorted(found), ignored, False


def _status(item: os.DirEntry) -> os.stat_result | None:
    try:
        return item.stat(follow_symlinks=False)
    except OSError:  # gone since the listing
        return None


def _kind(item: os.DirEntry) -> str:
    try:
        if item.is_symlink():
            return "link"
        if item.is_dir(follow_symlinks=False):
            return "folder"
        return "file" if item.is_file(follow_symlinks=False) else "other"
    except OSError:  # gone since the listing
        return "other"


def account_name(uid: int) -> str:
    """``'alice' (uid 1001)``, or ``uid 1001 (no account)``."""
    import pwd  # POSIX only, and needed only on the grader's side

    try:
        return f"{pwd.getpwuid(uid).pw_name!r} (uid {uid})"
    except KeyError:
        return f"uid {uid} (no account)"


def read_by_path(path: Path, cap: int) -> bytes:
    """The bytes of the regular file ``path``, at most ``cap`` of them, where :data:`DESCRIPTOR_RELATIVE` is
    false: ``path`` is looked up without following a link in its last name and refused as :meth:`Folder.read`
    refuses, then opened, and read only when the open file is the one looked up. Meant for a student reading
    their own notebook (``python -m autograder check``); the grader reads a class with :class:`Folder` only.

    Raises:
        Refused: as :meth:`Folder.read`, or the file was replaced between the lookup and the open.
    """
    name = Path(path).name
    try:
        looked_up = os.lstat(path)
    except OSError as error:
        raise Refused(name, _could_not("found", error)) from error
    if why := _not_a_regular_file(looked_up.st_mode):
        raise Refused(name, why)
    try:
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_BINARY", 0))
    except OSError as error:
        raise Refused(name, _could_not("opened", error)) from error
    try:
        opened = os.fstat(descriptor)
        if (opened.st_dev, opened.st_ino) != (looked_up.st_dev, looked_up.st_ino):
            raise Refused(name, "was replaced while it was opened; only the file looked up is read")
        return _read_open_file(descriptor, name, cap)
    finally:
        os.close(descriptor)


def _read_open_file(descriptor: int, name: str, cap: int) -> bytes:
    if why := _not_read(os.fstat(descriptor), cap):
        raise Refused(name, why)
    chunks, total = [], 0
    while total <= cap:
        chunk = os.read(descriptor, min(_READ_CHUNK, cap + 1 - total))
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        total += len(chunk)
    raise Refused(name, f"grew beyond {cap} bytes while it was read; files larger than {cap} bytes are not read")


def walk(root: Folder, skipped: Callable[[str], bool] = lambda name: False) -> Walk:
    """Every name below ``root`` (links are listed, never followed), except those ``skipped`` says and what is
    below them; bounded by :data:`MAX_ENTRIES_PER_FOLDER`, :data:`MAX_DEPTH` and, for each folder at the top,
    :data:`MAX_ENTRIES_PER_TOP_FOLDER` (so by :data:`MAX_TOTAL_ENTRIES` in all)."""
    result = Walk()
    bounds: dict[str, str] = {}
    _walk_folder(root, (), skipped, result, bounds, {})
    result.entries.sort(key=lambda entry: entry.parts)
    result.warnings.extend(bounds.values())
    return result


def _walk_folder(folder: Folder, parts: tuple[str, ...], skipped, result: Walk, bounds: dict[str, str],
                 below_top: dict[str, int]) -> None:
    where = shown("/".join(parts)) if parts else "the class's folder"
    names, cut = folder.entries()
    if cut:
        bounds.setdefault(
            f"folder {where}", f"{where} holds more than {MAX_ENTRIES_PER_FOLDER} names; only {MAX_ENTRIES_PER_FOLDER} were read"
        )
    for name, kind in names:
        if skipped(name):
            continue
        if parts:  # a name below a top folder counts against that folder's bound only
            top = parts[0]
            if below_top.get(top, 0) >= MAX_ENTRIES_PER_TOP_FOLDER:
                bounds.setdefault(f"top {top}", f"{shown(top)} holds more than {MAX_ENTRIES_PER_TOP_FOLDER} names "
                                                f"below it; the rest of it was not read")
                return
            below_top[top] = below_top.get(top, 0) + 1
        result.entries.append(Entry((*parts, name), kind))
        if kind != "folder":
            continue
        if len(parts) + 1 >= MAX_DEPTH:
            bounds.setdefault(
                "depth", f"folders more than {MAX_DEPTH} levels deep were not read (the first: {where}/{shown(name)})"
            )
            continue
        try:
            with folder.child(name) as inner:
                _walk_folder(inner, (*parts, name), skipped, result, bounds, below_top)
        except Refused as error:  # replaced by a link or removed since the listing
            bounds.setdefault(f"refused {where}/{name}", f"{where}: {error}; not read")
