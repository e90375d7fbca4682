"""The grader's copies of a class's files (``received/``): written once, in chunks, bounded in all.

Whatever a class holds, the copies the intake makes fit in what the instructor allows and in what the disk
has: a :class:`Budget` holds the bytes the batch may still copy (``grade --max-class-mb``, default
:data:`DEFAULT_MAX_CLASS_BYTES`) and checks each file's size against the free space of the grader's folder
before its first byte is copied, keeping :data:`RESERVED_FREE_BYTES` free for the grading that follows. A
file is copied by :func:`write_chunks`, a chunk at a time (never read whole into memory) and never beyond
the size it was counted at; a copy that fails (the disk is full, the file grew, the zip's member is corrupt)
is deleted and refused with its reason (:class:`autograder.student.safe_files.Refused`), so that the
submission it belongs to gets 0 with that reason while the batch goes on.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from pathlib import Path

from autograder.student.safe_files import NotReceived, Refused

MEGABYTE = 1024**2
DEFAULT_MAX_CLASS_BYTES = 2048 * MEGABYTE
RESERVED_FREE_BYTES = 256 * MEGABYTE  # the template course, the kernels' view, each task's folder
CHUNK_BYTES = MEGABYTE
_WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def free_bytes(folder: Path) -> int:
    """The bytes an unprivileged process may still write on the file system of ``folder``."""
    status = os.statvfs(folder)
    return status.f_bavail * status.f_frsize


class Budget:
    """The bytes a batch may still copy into ``folder`` (the grader's ``received/``): at most ``limit`` in
    all, and never so many that less than :data:`RESERVED_FREE_BYTES` would stay free there.

    Raises:
        ValueError: ``limit`` is not a positive number of bytes.
    """

    def __init__(self, folder: Path, limit: int = DEFAULT_MAX_CLASS_BYTES) -> None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(f"the class's cap must be a positive number of bytes, got {limit!r}")
        self.folder = folder
        self.limit = limit
        self.used = 0

    def take(self, name: str, size: int) -> None:
        """Count ``size`` bytes of the file ``name`` before it is copied.

        Raises:
            NotReceived: the copy would pass the class's cap, or leave less than :data:`RESERVED_FREE_BYTES` free.
        """
        if self.used + size > self.limit:
            raise NotReceived(
                name,
                f"is {size} bytes and was not copied: the class's files may take at most {self.limit} bytes of "
                f"the grader's folder ({self.used} are taken; grade --max-class-mb sets the cap)",
            )
        free = free_bytes(self.folder)
        if size + RESERVED_FREE_BYTES > free:
            raise NotReceived(
                name,
                f"is {size} bytes and was not copied: the grader's folder has {free} bytes free, and "
                f"{RESERVED_FREE_BYTES} must stay free for the grading",
            )
        self.used += size

    def give_back(self, size: int) -> None:
        """Return ``size`` counted bytes that were not copied after all."""
        self.used -= size


def write_chunks(read: Callable[[int], bytes], name: str, size: int, target: Path, beyond: str) -> int:
    """Copy at most ``size`` bytes, ``read(n)`` giving the next at most ``n`` (``b""`` at the end), into the
    new file ``target``; return how many. ``target`` must not exist; it is deleted when the copy fails.

    Raises:
        Refused: the source holds more than ``size`` bytes (``beyond`` is the reason), or could not be read (what
            ``read`` raised as :class:`Refused`, or its error).
        NotReceived: ``target`` could not be written (``No space left on device``): the grader's folder.
    """
    try:
        sink = os.open(target, _WRITE_FLAGS, 0o600)
    except OSError as error:
        raise NotReceived(name, f"could not be copied into the grader's folder ({error.strerror or error})") from error
    written = 0
    try:
        while True:
            try:
                chunk = read(min(CHUNK_BYTES, size + 1 - written))
            except OSError as error:
                raise Refused(name, f"could not be read ({error.strerror or error})") from error
            if not chunk:
                break
            written += len(chunk)
            if written > size:
                raise Refused(name, beyond)
            view = memoryview(chunk)
            try:
                while view:
                    view = view[os.write(sink, view) :]
            except OSError as error:
                raise NotReceived(
                    name, f"could not be copied into the grader's folder ({error.strerror or error})") from error
    except BaseException:
        _delete(sink, target)
        raise
    os.close(sink)
    return written


def _delete(sink: int, target: Path) -> None:
    os.close(sink)
    with contextlib.suppress(OSError):
        target.unlink()
