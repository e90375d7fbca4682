"""``python -m autograder collect ASSIGNMENT --roster FILE --out DIR``: nbgrader's exchange read as an intake.

nbgrader's exchange authenticates nobody: its ``inbound/`` folder is writable by every account, a submission
is a folder named ``<student>+<assignment>+<timestamp>[+<random>]`` that whoever wrote it named, and
``nbgrader collect`` takes each name's newest timestamp (it only logs "cheating attempt?" when the folder's
owner is another account) and copies the folder with ``shutil.copytree``, which follows links, into the
folder where it runs, next to the answer key (``source/``). This module replaces it for the course:

- the inbound folder is read with the intake's rules (:mod:`autograder.student.safe_files`): nothing is
  followed (a submission folder or a file that is a link is refused), only regular files are read, a file
  with more than one hard link is refused like a link, each file is read within its cap (the notebook's
  :data:`~autograder.student.sanitize.MAX_NOTEBOOK_BYTES`, nbgrader's short text files'
  :data:`~autograder.course_directory.MAX_EXCHANGE_FILE_BYTES`), the whole listing is read but only the names
  of this assignment's rostered students kept that their own accounts own (a name another account made is
  refused there and then, and only the first :data:`MAX_NAMED_IMPOSTORS` of those are named one by one; at most
  :data:`MAX_ROSTER_SUBMISSIONS` of one student's own, past which that student alone is refused and the command
  says so: names that anyone can create never push a student out of the listing, nor stop another's
  collection), and the whole class within :data:`MAX_COLLECTED_BYTES` and the free space of the destination;
- a submission is accepted only when its folder, and every file read from it, is owned by the account the
  roster gives the student it names (:func:`read_roster`: a CSV ``student_id,account`` that the instructor
  writes); a mismatch is refused with a reason that names both accounts;
- its timestamp (the folder's name, which ``timestamp.txt`` must repeat) is refused when it lies in the
  future, and so is a submission later than ``deadline`` (its timestamp, or the status change time of its
  folder or of a file read from it, which the kernel sets at each change and nobody can set to a chosen time,
  whichever is latest) unless the instructor allows late work. The first collection after the deadline is
  recorded (:func:`write_final`, ``DIR/.autograder-final/<assignment>.json``: the deadline and the digest of
  each rostered student's notebook it left, or none): every later collection into DIR keeps that deadline,
  with or without ``--deadline`` (another one is refused), and takes a notebook that differs from the record,
  or any notebook of a student of whom nothing was collected then, as late, whatever its times say. A
  collection after the deadline that could not write every submission is not final, but records what it read
  (:func:`record_read_after_deadline`): until one is final, a notebook that differs from it is late too;
- the folders from the exchange's root to the course's ``inbound/`` are opened one by one, never through a
  link, and refused (nothing is collected, and the command says why) when one of them is owned by an account
  other than the instructor's (who runs ``collect``) or root, or when the root or the course's folder is
  writable by other accounts without the sticky bit: any account could then rename the course's folder and put
  its own in its place, and receive the class's submissions (:func:`open_inbound`);
- each student's newest accepted submission is written into ``DIR/<student>/<assignment>/``: the notebook
  (``<assignment>.ipynb``, or the folder's only other notebook, written as ``<assignment>.ipynb``) and ``timestamp.txt`` and
  ``submission_secret.txt`` as checked text, nothing else a student put there; a folder without the secret is
  refused (nbgrader's ``release_feedback`` stops the whole class's release on a submission without one). A
  secret that is also in another rostered student's own inbound folder (any of them, not only the newest), or
  in another student's copy collected before, was copied by one of the two (nbgrader keeps it in the student's
  home): the submission is collected under a new secret that nobody holds, so that ``release_feedback`` (which
  names a page by it) delivers neither page, and :attr:`Collected.new_secrets` names the other student and
  where that secret lies. DIR must not hold ``source/``
  (the folder of the answer key), and nothing here reads the folder the command runs in.

Every name and reason shown is escaped like a line of ``report.txt`` by the caller.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import datetime
import errno
import grp
import hashlib
import json
import os
import pwd
import re
import secrets
import shlex
import shutil
import stat
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from autograder.course_directory import MAX_EXCHANGE_FILE_BYTES, private_folder
from autograder.intake.zip_tree import WRAPPER_FOLDER
from autograder.student.safe_files import Folder, Refused, account_name, shown
from autograder.student.sanitize import MAX_NOTEBOOK_BYTES

MAX_ROSTER_SUBMISSIONS = 1_000  # inbound folders of one assignment read per rostered student, at most
MAX_NAMED_IMPOSTORS = 100  # folders named after a student but owned by another account, named one by one
MAX_COLLECTED_BYTES = 2 * 1024**3  # notebooks written into DIR by one collect, in total
MAX_ROSTER_BYTES = 10 * 1024**2
# nbgrader refuses '+' and '*' in a student id it is given; the folder's name separates its fields by '+'.
STUDENT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@-]{0,99}")
# What nbgrader's submit writes with its timestamp_format ("%Y-%m-%d %H:%M:%S.%f %Z") in any time zone a student
# may configure: the zone as a name of letters (UTC, CET) or an offset, or none. A zone word reaches dateutil's
# gettz, which reads it as a path under the system's zone folder: letters alone name no other place.
RESERVED_STUDENT_ID = WRAPPER_FOLDER  # nbgrader's folder of submissions, which grade's intake reads as such
_TIMESTAMP_TEXT = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,6})?( ([A-Za-z]{1,10}|[+-][0-9]{2}:?[0-9]{2}))?"
)
_SECRET = re.compile(r"[0-9a-f]{16,160}")


@dataclass(frozen=True)
class Inbound:
    """One folder of the exchange's ``inbound/``: its name, the student and the time it claims."""

    name: str
    student: str
    timestamp: datetime.datetime  # UTC, naive like nbgrader's
    timestamp_text: str


@dataclass
class Collected:
    """What :func:`collect` did: each student's accepted submission (the inbound folder's name), every
    refused folder with its reason, and warnings about the listing."""

    accepted: dict[str, str] = field(default_factory=dict)
    refused: list[tuple[str, str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    late: dict[str, datetime.timedelta] = field(default_factory=dict)  # accepted after the deadline, by how much
    no_room: list[str] = field(default_factory=list)  # students whose submission could not be written: the grader's
    # students whose collected copy got a new secret -> the other students who hold that secret -> where
    new_secrets: dict[str, dict[str, list[str]]] = field(default_factory=dict)


def read_roster(path: Path) -> dict[str, str]:
    """The roster ``path``: a CSV file with the header ``student_id,account``, one student a line; returns
    student id -> account.

    Raises:
        ValueError: the file is missing or too large, its header is not ``student_id,account``, or a row has
            an empty field, a student id that is not a valid one or is reserved (:data:`RESERVED_STUDENT_ID`), or
            a student listed twice.
    """
    try:
        text = Path(path).read_bytes()[: MAX_ROSTER_BYTES + 1].decode("utf-8-sig")
    except (OSError, UnicodeDecodeError) as error:
        raise ValueError(f"roster {str(path)!r} cannot be read: {error}") from error
    if len(text) > MAX_ROSTER_BYTES:
        raise ValueError(f"roster {str(path)!r} is larger than {MAX_ROSTER_BYTES} bytes")
    rows = list(csv.reader(text.splitlines()))
    if not rows or [cell.strip() for cell in rows[0]] != ["student_id", "account"]:
        raise ValueError(f"roster {str(path)!r} must start with the header 'student_id,account'")
    roster: dict[str, str] = {}
    for number, row in enumerate(rows[1:], start=2):
        if not row:
            continue
        cells = [cell.strip() for cell in row]
        if len(cells) != 2 or not all(cells):
            raise ValueError(f"roster {str(path)!r}, line {number}: {row!r} is not 'student_id,account'")
        student, account = cells
        if not STUDENT_NAME.fullmatch(student):
            raise ValueError(
                f"roster {str(path)!r}, line {number}: student_id {student!r} is not a valid one "
                "(letters, digits, _.@-)"
            )
        if student == RESERVED_STUDENT_ID:
            raise ValueError(
                f"roster {str(path)!r}, line {number}: student_id {student!r} is reserved: `grade` reads a class "
                "folder that holds one folder of that name alone as nbgrader's folder of submissions"
            )
        if student in roster:
            raise ValueError(f"roster {str(path)!r}, line {number}: student_id {student!r} is listed twice")
        roster[student] = account
    return roster


def parse_utc(text: str) -> datetime.datetime:
    """A timestamp as nbgrader writes it (``2026-11-27 08:40:00.123456 UTC``) as a naive UTC datetime.

    Raises:
        ValueError: ``text`` is no such timestamp.
    """
    from nbgrader.utils import parse_utc as nbgrader_parse_utc

    if not _TIMESTAMP_TEXT.fullmatch(text):
        raise ValueError(f"{shown(text)!r} is not a timestamp (YYYY-MM-DD HH:MM:SS[.ffffff] [ZONE])")
    try:
        # A warning the parser gives is an error here, whatever the process's filters: a text it only warns
        # about is not a time to record.
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            return nbgrader_parse_utc(text)
    except Exception as error:  # dateutil raises more than ValueError: its warnings, as errors
        raise ValueError(f"{shown(text)!r} is not a timestamp ({type(error).__name__})") from error


def inbound_record(name: str, assignment: str) -> Inbound | None:
    """The fields of an inbound folder's name ``<student>+<assignment>+<timestamp>[+<random>]``, or None when
    the name is of another assignment.

    Raises:
        ValueError: the name is of ``assignment`` but its student or timestamp is not valid.
    """
    parts = name.split("+")
    if len(parts) not in (3, 4) or parts[1] != assignment:
        return None
    student, timestamp_text = parts[0], parts[2]
    if not STUDENT_NAME.fullmatch(student):
        raise ValueError(f"{shown(student)!r} is not a valid student id")
    return Inbound(name, student, parse_utc(timestamp_text), timestamp_text)


def _account_uid(account: str) -> int:
    try:
        return pwd.getpwnam(account).pw_uid
    except KeyError:
        raise ValueError(f"the roster's account {account!r} does not exist on this machine") from None


def _read_own_file(folder: Folder, name: str, cap: int, uid: int, changes: list[float]) -> bytes:
    """The regular file ``name`` of ``folder``, of one name and of the account ``uid``
    (:meth:`Folder.read_owned`); its last change is added to ``changes``."""
    if name not in dict(folder.entries()[0]):
        raise Refused(name, "is missing")
    content, changed = folder.read_owned(name, cap, uid)
    changes.append(changed)
    return content


def _utc(seconds: float) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(seconds, datetime.UTC).replace(tzinfo=None)


def _check_timestamp(record: Inbound, changed: datetime.datetime, now, deadline, allow_late: bool,
                     what: str = "its folder made or changed") -> None:
    """Refuse a timestamp in the future, and work past ``deadline`` (unless ``allow_late``): the latest of the
    folder's timestamp and ``changed``, the last change of what is read (``what`` says which)."""
    if record.timestamp > now:
        raise ValueError(f"its timestamp {record.timestamp_text} lies in the future")
    latest = max(record.timestamp, changed)
    if deadline is not None and latest > deadline and not allow_late:
        raise ValueError(
            f"it came after the deadline {deadline:%Y-%m-%d %H:%M:%S} UTC (its timestamp {record.timestamp_text}, "
            f"{what} {changed:%Y-%m-%d %H:%M:%S} UTC); late work is refused without --allow-late"
        )


@dataclass(frozen=True)
class _Files:
    notebook: bytes
    timestamp: bytes
    secret: bytes
    received: datetime.datetime  # the latest of the name's timestamp and the changes of what was read


SUBMIT_SECONDS = 60  # nbgrader's submit writes the folder within this of the timestamp it names it by


def recorded_timestamp(record: Inbound, received: datetime.datetime,
                       deadline: datetime.datetime | None = None) -> str:
    """The ``timestamp.txt`` a collected submission gets: its name's timestamp, unless what was read changed
    more than :data:`SUBMIT_SECONDS` after it (an old name on new work), or after ``deadline`` (late work, by
    however little): then the time of that change, in nbgrader's format, so that nbgrader's lateness reads the
    real time."""
    late = deadline is not None and received > deadline
    if not late and received - record.timestamp <= datetime.timedelta(seconds=SUBMIT_SECONDS):
        return record.timestamp_text
    return f"{received:%Y-%m-%d %H:%M:%S.%f} UTC"


def _read_submission(inbound: Folder, record: Inbound, assignment: str, uid: int, account: str, now,
                     deadline, allow_late: bool) -> _Files:
    """The files of one inbound folder, every check passed. Raises ValueError or Refused with the reason."""
    with inbound.child(record.name) as folder:
        status = os.fstat(folder.descriptor)
        if status.st_uid != uid:
            raise ValueError(
                f"it names student {record.student!r}, whose account is {account!r} (uid {uid}), but is owned by "
                f"{account_name(status.st_uid)}"
            )
        _check_timestamp(record, _utc(status.st_ctime), now, deadline, allow_late)
        changes: list[float] = []
        names = [name for name, kind in folder.entries()[0] if kind == "file" or kind == "link"]
        notebooks = sorted(name for name in names if name.endswith(".ipynb"))
        expected = f"{assignment}.ipynb"
        if expected in notebooks:
            chosen = expected
        elif len(notebooks) == 1:
            chosen = notebooks[0]
        else:
            raise ValueError(f"it holds no {expected}" + (f" but {len(notebooks)} other notebooks" if notebooks else ""))
        timestamp = _read_own_file(folder, "timestamp.txt", MAX_EXCHANGE_FILE_BYTES, uid, changes).decode(
            "ascii", "replace")
        if timestamp.strip() != record.timestamp_text:
            raise ValueError(f"its timestamp.txt says {shown(timestamp.strip())!r}, its name {record.timestamp_text!r}")
        if "submission_secret.txt" not in names:
            # nbgrader's release_feedback reads it for every submission and stops the whole release without it.
            raise ValueError("it holds no submission_secret.txt, which nbgrader submit writes and release_feedback "
                             "needs for every student")
        text = _read_own_file(folder, "submission_secret.txt", MAX_EXCHANGE_FILE_BYTES, uid, changes)
        if not _SECRET.fullmatch(text.decode("ascii", "replace").strip()):
            raise ValueError("its submission_secret.txt is not the hexadecimal secret nbgrader writes")
        secret = text.strip()
        notebook = _read_own_file(folder, chosen, MAX_NOTEBOOK_BYTES, uid, changes)
        # A file written in place after the deadline changes the file, not its folder: the deadline reads the
        # last change of every file read, and of the folder again after the reads.
        changes.append(os.fstat(folder.descriptor).st_ctime)
        _check_timestamp(record, _utc(max(changes)), now, deadline, allow_late,
                         "its folder or a file read from it last changed")
        received = max(record.timestamp, _utc(max(changes)), _utc(status.st_ctime))
        return _Files(notebook, recorded_timestamp(record, received, deadline).encode("ascii"), secret,
                      received)


def _student_and_assignment(name: str) -> str:
    """``alice+04_relative+`` of an inbound name ``alice+04_relative+<timestamp>...``; empty for another name."""
    parts = name.split("+", 2)
    return f"{parts[0]}+{parts[1]}+" if len(parts) == 3 else ""


def _owned_by(uid: int | None, account: str, expected: int, student: str) -> str | None:
    """Why a folder named after ``student`` is refused for its owner ``uid``; None when ``expected`` owns it."""
    if uid == expected:
        return None
    owner = "nobody (it is gone)" if uid is None else account_name(uid)
    return f"it names student {student!r}, whose account is {account!r} (uid {expected}), but is owned by {owner}"


def _listing(inbound: Folder, assignment: str, roster: dict[str, str], uids: dict[str, int],
             collected: Collected) -> list[Inbound]:
    """The inbound folders of ``assignment`` that name a student of ``roster`` and are owned by that student's
    account, newest first. The whole listing is read, whatever it holds (any account can put names there), but
    only those names are kept, at most :data:`MAX_ROSTER_SUBMISSIONS` per student: a student past it is refused
    alone, with the reason (their newest work could be among the names left out). A name owned by another
    account is refused with both accounts named (the first :data:`MAX_NAMED_IMPOSTORS`; the rest counted)."""
    students = {f"{student}+{assignment}+": student for student in roster}
    counts = dict.fromkeys(roster, 0)
    impostors: list[tuple[str, str]] = []
    unnamed_impostors = 0

    def keep(name: str, status: os.stat_result | None) -> bool:
        nonlocal unnamed_impostors
        student = students.get(_student_and_assignment(name))
        if student is None:
            return False
        if why := _owned_by(status and status.st_uid, roster[student], uids[student], student):
            if len(impostors) < MAX_NAMED_IMPOSTORS:
                impostors.append((name, why))
            else:
                unnamed_impostors += 1
            return False
        counts[student] += 1
        return counts[student] <= MAX_ROSTER_SUBMISSIONS

    names, ignored, _ = inbound.entries_matching(keep, MAX_ROSTER_SUBMISSIONS * max(1, len(roster)))
    collected.refused.extend(impostors)
    if unnamed_impostors:
        collected.warnings.append(f"{unnamed_impostors} more folders named after students of the roster but owned by "
                                  "other accounts were refused")
    flooded = {student for student, count in counts.items() if count > MAX_ROSTER_SUBMISSIONS}
    for student in sorted(flooded):
        collected.refused.append((f"{student}+{assignment}+...", (
            f"{counts[student]} submissions of {assignment} owned by {roster[student]!r} lie in the inbound folder, "
            f"more than the {MAX_ROSTER_SUBMISSIONS} read: nothing of this student's was collected; remove the old ones")))
    names = [(name, kind) for name, kind in names if students[_student_and_assignment(name)] not in flooded]
    ignored -= len(impostors) + unnamed_impostors + sum(count - MAX_ROSTER_SUBMISSIONS for count in counts.values()
                                                        if count > MAX_ROSTER_SUBMISSIONS)
    if ignored:
        collected.warnings.append(f"{ignored} other names in the inbound folder (other assignments, or no student "
                                  "of the roster) were not read")
    records = []
    for name, kind in names:
        try:
            record = inbound_record(name, assignment)
        except ValueError as error:
            collected.refused.append((name, str(error)))
            continue
        if record is None:
            continue
        if kind != "folder":
            what = "a symbolic link; links are not followed" if kind == "link" else "not a folder"
            collected.refused.append((name, f"it is {what}"))
            continue
        records.append(record)
    # Newest first by the names' timestamps: a student's choice, which orders only that student's own folders
    # (an old name on new work is recorded at the time of the work: recorded_timestamp).
    return sorted(records, key=lambda record: (record.timestamp, record.name), reverse=True)


def open_inbound(exchange: Path, course_id: str) -> Folder:
    """The course's ``inbound/`` folder of ``exchange``, opened level by level from the exchange's root (as the
    instructor names it) without following a link, each level checked as the module's docstring says.

    Raises:
        FileNotFoundError: the exchange has no inbound folder for ``course_id``.
        ValueError: a level is a link, not a folder, owned by another account, or (the root, the course's folder)
            writable by other accounts without the sticky bit; the message names the folder and what to do.
    """
    trusted = {os.geteuid(), 0}
    path = Path(exchange)
    descriptor = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for name in (None, course_id, "inbound"):
            if name is not None:
                path = path / name
                try:
                    child = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                                    dir_fd=descriptor)
                except FileNotFoundError:
                    raise FileNotFoundError(f"the exchange {str(exchange)!r} has no inbound folder for course "
                                            f"{course_id!r} ({str(path)!r} is missing)") from None
                except OSError as error:
                    raise ValueError(f"nothing collected: {str(path)!r} is not a folder of its own (a link, or "
                                     f"another kind of file: {error.strerror}); the exchange's course folders must "
                                     "be the ones nbgrader release_assignment made") from error
                os.close(descriptor)
                descriptor = child
            status = os.fstat(descriptor)
            if status.st_uid not in trusted:
                raise ValueError(
                    f"nothing collected: {str(path)!r} is owned by {account_name(status.st_uid)}, not by you "
                    f"({account_name(os.geteuid())}) or root: another account made it or put it in place of "
                    "yours, and may read what students submit into it. Move it aside, release the assignment "
                    "again, and make the exchange's root sticky (chmod 1777)")
            shared = status.st_mode & stat.S_IWOTH and not status.st_mode & stat.S_ISVTX
            if name != "inbound" and shared:
                raise ValueError(
                    f"nothing collected: {str(path)!r} (mode {stat.S_IMODE(status.st_mode):o}) is writable by other "
                    "accounts without the sticky bit, so any account can rename the folder in it and put its own "
                    f"in its place; make it sticky: chmod +t {shlex.quote(str(path))}")
        return Folder(descriptor)
    except BaseException:
        os.close(descriptor)
        raise


def check_destination(out: Path) -> None:
    """Refuse a destination that holds ``source/``: student files never go where the answer key lies.

    Raises:
        ValueError: ``out`` holds ``source/``, or is a file.
    """
    if (out / "source").exists() or (out / "source").is_symlink():
        raise ValueError(
            f"out {str(out)!r} holds source/, the answer key: submissions are collected into a folder of their "
            "own (course/submitted)"
        )
    if out.exists() and not out.is_dir():
        raise ValueError(f"out {str(out)!r} is not a folder")


def collect(
    exchange: Path,
    course_id: str,
    assignment: str,
    roster: dict[str, str],
    out: Path,
    *,
    deadline: datetime.datetime | None = None,
    allow_late: bool = False,
    now: datetime.datetime | None = None,
) -> Collected:
    """Each rostered student's newest accepted submission of ``assignment`` in ``exchange/course_id/inbound``,
    written into ``out/<student>/<assignment>/`` (replacing what was there); see the module's docstring.

    Raises:
        ValueError: ``out`` holds ``source/``, a roster's account does not exist, or a folder from the exchange's
            root to its ``inbound/`` cannot be trusted (:func:`open_inbound`).
        FileNotFoundError: the exchange has no inbound folder for ``course_id``.
    """
    out = Path(out)
    check_destination(out)
    uids = {student: _account_uid(account) for student, account in roster.items()}
    now = now or datetime.datetime.now(datetime.UTC).replace(tzinfo=None)
    final = read_final(out, assignment)
    if final is not None:
        if deadline is not None and deadline != final.deadline:
            raise ValueError(
                f"--deadline {deadline:%Y-%m-%d %H:%M:%S} UTC differs from {assignment}'s deadline "
                f"{final.deadline:%Y-%m-%d %H:%M:%S} UTC, which the collection at {final.collected_at:%Y-%m-%d %H:%M:%S} "
                f"UTC made final; to collect against another deadline, remove {final_path(out, assignment)}")
        deadline = final.deadline  # a later collection keeps it, whatever its options
    inbound = open_inbound(exchange, course_id)
    collected = Collected()
    if opened := open_homes(roster):
        shown = ", ".join(opened[:5]) + (f" and {len(opened) - 5} more" if len(opened) > 5 else "")
        collected.warnings.append(
            f"the home of {len(opened)} rostered account(s) lets other accounts in: {shown}. There any student can "
            "read another's work before it is submitted, and nbgrader's copy of each submission with its "
            "submission_secret.txt, which names that student's released feedback page in the exchange; make each "
            "home private (chmod 700 HOME; HOME_MODE 0700 in /etc/login.defs for accounts made later)")
    written = 0
    private_folder(out)  # the instructor's alone when new: it holds every student's work and nbgrader's secrets
    # Each student's newest acceptable submission, written into a folder of its own beside its destination
    # (its notebook is not kept in memory), put in place once the class's secrets are known to be their own.
    chosen: dict[str, tuple[Inbound, _Files, Path]] = {}
    # SHA-256 of each secret in a rostered student's own inbound folder, or collected for one before -> them
    holders: dict[str, dict[str, list[str]]] = {}  # ... -> student -> where (shown to the instructor)
    for digest, students in collected_secrets(out, assignment).items():
        for student in students:
            holders.setdefault(digest, {}).setdefault(student, []).append("a submission of theirs collected before")
    # After the deadline, until a collection is final: what an earlier attempt read (read_after_deadline).
    after_deadline = final is None and deadline is not None and now > deadline
    earlier = read_after_deadline(out, assignment, deadline) if after_deadline else {}
    read_now: dict[str, str] = {}
    try:
        with inbound:
            for record in _listing(inbound, assignment, roster, uids, collected):
                if (secret := _folder_secret(inbound, record, uids[record.student])) is not None:
                    holders.setdefault(_digest(secret), {}).setdefault(record.student, []).append(
                        f"their inbound folder {record.name!r}")
                if record.student in chosen or record.student in collected.no_room:
                    continue  # an older submission of a student already chosen, or one the grader has no room for
                try:
                    files = _read_submission(
                        inbound, record, assignment, uids[record.student], roster[record.student], now, deadline,
                        allow_late,
                    )
                except (ValueError, Refused) as error:
                    collected.refused.append((record.name, str(error)))
                    continue
                if after_deadline and (first := earlier.get(record.student)) and _digest(files.notebook) != first[0]:
                    # Read by an earlier collection after the deadline that could not write it: changed since.
                    reason = (f"it differs from what the collection at {first[1]:%Y-%m-%d %H:%M:%S} UTC, after the "
                              f"deadline {deadline:%Y-%m-%d %H:%M:%S} UTC, read but could not write, so it changed "
                              "after the deadline")
                    if not allow_late:
                        collected.refused.append((record.name, reason + "; late work is refused without --allow-late"))
                        continue
                    received = max(files.received, first[1])
                    files = dataclasses.replace(
                        files, received=received, timestamp=f"{received:%Y-%m-%d %H:%M:%S.%f} UTC".encode("ascii"))
                if after_deadline:
                    read_now[record.student] = _digest(files.notebook)
                if final is not None and _digest(files.notebook) != final.notebooks.get(record.student):
                    # Not what the first collection after the deadline took: changed since, whatever its times say.
                    collected_at = f"{final.collected_at:%Y-%m-%d %H:%M:%S} UTC"
                    if record.student not in final.notebooks:
                        reason = (f"this student was not on the roster of the collection at {collected_at}, after "
                                  f"the deadline, so nothing of theirs was kept then")
                    elif final.notebooks[record.student] is None:
                        reason = f"nothing of this student's was collected at {collected_at}, after the deadline"
                    else:
                        reason = f"it differs from the copy collected at {collected_at}, after the deadline"
                    reason += f" {final.deadline:%Y-%m-%d %H:%M:%S} UTC, so it changed after the deadline"
                    if not allow_late:
                        reason += "; late work is refused without --allow-late (what was collected then is kept)"
                        collected.refused.append((record.name, reason))
                        continue
                    received = max(files.received, final.collected_at)
                    files = dataclasses.replace(
                        files, received=received, timestamp=f"{received:%Y-%m-%d %H:%M:%S.%f} UTC".encode("ascii"))
                size = len(files.notebook)
                try:
                    if written + size > MAX_COLLECTED_BYTES or size * 2 > free_bytes(out):
                        raise OSError(errno.ENOSPC, "the class's cap, or the free space")
                    staged = _staged(out / record.student, assignment, files, now)
                except OSError as error:  # the instructor's side, no student's doing: this collection is not final
                    collected.refused.append((record.name, (
                        f"its {size} bytes could not be written into {out} ({error.strerror or error}); the "
                        "grader's failure, not the student's")))
                    collected.no_room.append(record.student)
                    continue
                written += size
                chosen[record.student] = (record, dataclasses.replace(files, notebook=b""), staged)
        for student, secret in _secrets_in_place(out, assignment).items():
            holders.setdefault(_digest(secret), {}).setdefault(student, []).append(
                f"their copy collected before in {out}")
        try:
            record_secrets(out, assignment, {student: files.secret for student, (_, files, _) in chosen.items()})
        except OSError as error:
            collected.warnings.append(
                f"the record of the secrets collected could not be written into {out} ({error.strerror or error}): "
                "a later copy of one of them is found only while its inbound folder or its collected copy is there")
        for student, (record, files, staged) in chosen.items():
            if sharing := {other: places for other, places in sorted(holders.get(_digest(files.secret), {}).items())
                           if other != student}:
                # nbgrader's release_feedback names a page by the secret, and its fetch_feedback fetches every
                # page named by a secret in the student's cache: one student's page would reach the other. Which
                # one copied cannot be told from the files (a write through a memory mapping keeps a file's
                # times), but each folder is its owner's own work: it is collected under a new secret nobody holds.
                (staged / "submission_secret.txt").write_text(secrets.token_hex(64))
                collected.new_secrets[student] = sharing
            _put(staged, out / student / assignment)
            record_collected(out, assignment, student, files.timestamp)
            collected.accepted[student] = record.name
            if deadline is not None and files.received > deadline:
                collected.late[student] = files.received - deadline
        for student, sharing in sorted(collected.new_secrets.items()):
            collected.warnings.append(
                f"{student}'s submission {collected.accepted[student]!r} was collected under a new secret that nobody "
                f"holds: its submission_secret.txt is also {_sharing_text(sharing)}. One of the two copied the "
                "other's (nbgrader keeps it in the student's home, readable where others may enter); nbgrader's "
                f"release_feedback will deliver {student}'s page to no one, so give it yourself, and make the homes "
                "private")
    finally:
        for _, _, staged in chosen.values():
            shutil.rmtree(staged, ignore_errors=True)  # what was put in place is no longer there
    if after_deadline and collected.no_room:
        try:
            record_read_after_deadline(out, assignment, deadline, now, read_now)
        except OSError as error:
            collected.warnings.append(
                f"what this collection read could not be recorded in {out} ({error.strerror or error}): a notebook "
                "changed before the next collection, through a memory mapping that keeps its times, would pass "
                "for on time")
        collected.warnings.append(
            f"this collection after the deadline could not write {len(collected.no_room)} submission(s) into "
            f"{out} ({', '.join(sorted(collected.no_room))}), so it is not final (only what it read was recorded: the "
            "next collection takes as on time only a notebook that is still what was read now): make room and collect again with the same --deadline at once")
    elif after_deadline:
        write_final(out, assignment, Final(deadline, now, {
            student: _digest(copy) if (copy := _collected_notebook(out / student / assignment)) is not None else None
            for student in roster}))
        if now - deadline > FINAL_GRACE:
            collected.warnings.append(
                f"this first collection after the deadline ran {_duration(now - deadline)} after it, and what it took "
                "is final for on-time work: a notebook changed in that time by a program that kept it mapped in "
                "memory keeps its change time, and was taken as on time (on a file system held in memory, such as "
                "tmpfs, however long after); collect with --deadline at the deadline itself (at, cron)")
    return collected


def open_homes(roster: dict[str, str]) -> list[str]:
    """``ACCOUNT (HOME, mode MODE)`` of each rostered account whose home gives another account any permission:
    others any, or its group any when the group has another member (read, or enter: a file at a path known in
    advance, such as nbgrader's cache, is then read by its name)."""
    opened = []
    for account in sorted(set(roster.values())):
        try:
            home = pwd.getpwnam(account).pw_dir
            status = os.stat(home)
        except (KeyError, OSError):  # no such account (refused elsewhere), or no home
            continue
        mode = stat.S_IMODE(status.st_mode)
        if mode & 0o007 or (mode & 0o070 and _group_has_others(status.st_gid, account)):
            opened.append(f"{account} ({home}, mode {mode:04o})")
    return opened


def _group_has_others(gid: int, account: str) -> bool:
    """Whether group ``gid`` has a member other than ``account`` (listed, or by its primary group); an unknown
    group is taken to have."""
    try:
        members = set(grp.getgrgid(gid).gr_mem)
    except KeyError:
        return True
    members |= {entry.pw_name for entry in pwd.getpwall() if entry.pw_gid == gid}
    return bool(members - {account})


def free_bytes(path: Path) -> int:
    """Bytes this process may still write on ``path``'s file system: for root, the free blocks with those the
    file system keeps for root (``f_bfree``; ext4 keeps 5% by default), which no student's account can fill;
    for another account, those it may use (``f_bavail``)."""
    status = os.statvfs(path)
    return status.f_frsize * (status.f_bfree if os.geteuid() == 0 else status.f_bavail)


def _folder_secret(inbound: Folder, record: Inbound, uid: int) -> bytes | None:
    """The ``submission_secret.txt`` of the inbound folder ``record``, read with the intake's rules when the
    folder and the file are the account ``uid``'s own; None when it cannot be read so."""
    try:
        with inbound.child(record.name) as folder:
            if os.fstat(folder.descriptor).st_uid != uid:
                return None
            text = _read_own_file(folder, "submission_secret.txt", MAX_EXCHANGE_FILE_BYTES, uid, [])
    except (OSError, ValueError, Refused):
        return None
    secret = text.strip()
    return secret if _SECRET.fullmatch(secret.decode("ascii", "replace")) else None


def _secrets_in_place(out: Path, assignment: str) -> dict[str, bytes]:
    """student -> ``submission_secret.txt`` of the copy collected before into ``out`` (none for a new class)."""
    found = {}
    for folder in sorted(out.iterdir()) if out.is_dir() else ():
        if folder.name.startswith("."):
            continue
        with contextlib.suppress(OSError):
            found[folder.name] = (folder / assignment / "submission_secret.txt").read_bytes().strip()
    return found


def _sharing_text(sharing: dict[str, list[str]], shown_places: int = 3) -> str:
    """``bob's: their inbound folder '...', ...`` for each other student, at most ``shown_places`` places each."""
    texts = []
    for other, places in sharing.items():
        more = f" and {len(places) - shown_places} more" if len(places) > shown_places else ""
        texts.append(f"{other}'s: {', '.join(places[:shown_places])}{more}")
    return "; ".join(texts)


def _duration(span: datetime.timedelta) -> str:
    """``span`` in whole seconds, as ``H:MM:SS`` (with days when there are any)."""
    return str(datetime.timedelta(seconds=int(span.total_seconds())))


# How long after the deadline its first collection may run before collect warns that a notebook changed in that
# time through a memory mapping (its change time unmoved) was taken as on time: a collection started by `at` or
# `cron` at the deadline's minute.
FINAL_GRACE = datetime.timedelta(seconds=60)
FINAL_FOLDER = ".autograder-final"  # in the destination: one record per assignment, written by the grader only


@dataclass(frozen=True)
class Final:
    """The first collection of an assignment after its deadline: the deadline, when it ran, and the SHA-256 of
    each rostered student's notebook it left in the destination (None: nothing of that student's)."""

    deadline: datetime.datetime
    collected_at: datetime.datetime
    notebooks: dict[str, str | None]


def final_path(out: Path, assignment: str) -> Path:
    return Path(out) / FINAL_FOLDER / f"{assignment}.json"


def read_final(out: Path, assignment: str) -> Final | None:
    """The final record of ``assignment`` in ``out``, or None when no collection after its deadline ran there."""
    path = final_path(out, assignment)
    if not path.is_file():
        return None
    data = json.loads(path.read_text(encoding="utf-8"))
    return Final(datetime.datetime.fromisoformat(data["deadline"]), datetime.datetime.fromisoformat(data["collected_at"]),
                 dict(data["notebooks"]))


def write_final(out: Path, assignment: str, final: Final) -> None:
    """Record the first collection after the deadline. From then on, what it holds is final for on-time work:
    what a student's folder held then was there at the deadline or came later, and a file can change without
    its times moving (a store through a shared memory mapping leaves ``st_ctime`` as it was), so only this
    record, which the grader wrote, tells that a submission changed since. A student of whom nothing was
    collected then (no submission, or one refused, a flooded listing included) has nothing on time, and so has a
    student added to the roster since (what their folder held at the deadline was never read)."""
    _write_record(final_path(out, assignment), {
        "deadline": final.deadline.isoformat(), "collected_at": final.collected_at.isoformat(),
        "notebooks": final.notebooks})


def _read_path(out: Path, assignment: str) -> Path:
    return Path(out) / FINAL_FOLDER / f"{assignment}.read.json"


def record_read_after_deadline(out: Path, assignment: str, deadline: datetime.datetime, now: datetime.datetime,
                               read: dict[str, str]) -> None:
    """Record what a collection after ``deadline`` that is not final (it could not write every submission) read:
    student -> SHA-256 of the notebook, with ``now``. A student's first record is kept: the next collection,
    once there is room, takes as on time only the notebook read then (a notebook changed since through a memory
    mapping keeps its times, and a student who fills the disk would otherwise gain the time until it)."""
    kept = {student: [digest, at.isoformat()] for student, (digest, at) in
            read_after_deadline(out, assignment, deadline).items()}
    for student, digest in read.items():
        kept.setdefault(student, [digest, now.isoformat()])
    _write_record(_read_path(out, assignment), {"deadline": deadline.isoformat(), "read": kept})


def read_after_deadline(out: Path, assignment: str, deadline: datetime.datetime) -> dict[str, tuple[str, datetime.datetime]]:
    """student -> (SHA-256 of the notebook, when) that collections after ``deadline`` read before one was final
    (:func:`record_read_after_deadline`); empty when none did, or for another deadline."""
    path = _read_path(out, assignment)
    if path.is_symlink() or not path.is_file():
        return {}
    data = json.loads(path.read_text(encoding="utf-8"))
    if data.get("deadline") != deadline.isoformat():
        return {}
    return {str(student): (str(digest), datetime.datetime.fromisoformat(at)) for student, (digest, at)
            in data["read"].items()}


COLLECTED_FOLDER = ".autograder-collected"  # in the destination: the timestamps this command wrote


def record_collected(out: Path, assignment: str, student: str, timestamp: bytes) -> None:
    """Note the digest of the ``timestamp.txt`` written for ``student``: ``grade`` records a submission time only
    from a file that this command wrote (:func:`collected_timestamps`); a student's own says nothing of when."""
    digests = collected_timestamps(out, assignment)
    digests[student] = _digest(timestamp)
    _write_record(Path(out) / COLLECTED_FOLDER / f"{assignment}.json", digests)


def collected_timestamps(class_folder: Path, assignment: str) -> dict[str, str]:
    """``student -> SHA-256 of the timestamp.txt`` that ``collect`` wrote into ``class_folder`` for
    ``assignment``; empty where it wrote none (a class folder from elsewhere, a zip)."""
    data = _read_record(Path(class_folder) / COLLECTED_FOLDER / f"{assignment}.json")
    return {str(student): str(digest) for student, digest in data.items()} if isinstance(data, dict) else {}


def record_secrets(out: Path, assignment: str, chosen: dict[str, bytes]) -> None:
    """Add to the record of ``assignment``'s secrets the one of each ``chosen`` submission (student -> secret, as
    the student handed it in), by SHA-256: a copy of it handed in later by another student is found by it, even
    when the inbound folder that held it is gone (:func:`collect`)."""
    ledger = collected_secrets(out, assignment)
    for student, secret in chosen.items():
        ledger.setdefault(_digest(secret), set()).add(student)
    _write_record(Path(out) / COLLECTED_FOLDER / f"{assignment}.secrets.json",
                  {digest: sorted(students) for digest, students in ledger.items()})


def collected_secrets(class_folder: Path, assignment: str) -> dict[str, set[str]]:
    """SHA-256 of each secret ``collect`` ever took for ``assignment`` into ``class_folder`` -> the students
    who handed it in (:func:`record_secrets`); empty where it took none."""
    data = _read_record(Path(class_folder) / COLLECTED_FOLDER / f"{assignment}.secrets.json")
    if not isinstance(data, dict):
        return {}
    return {str(digest): {str(student) for student in students} for digest, students in data.items()
            if isinstance(students, list)}


def _write_record(path: Path, data) -> None:
    """Write ``data`` as JSON at ``path`` (its folder made if need be) through a file beside it, renamed over it:
    a reader finds the old record or the new one, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_suffix(".tmp")
    staging.write_text(json.dumps(data, indent=1, sort_keys=True), encoding="utf-8")
    staging.rename(path)


def _read_record(path: Path):
    """The JSON at ``path``; None where there is no such regular file or it cannot be read as JSON."""
    if path.is_symlink() or not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _digest(notebook: bytes) -> str:
    return hashlib.sha256(notebook).hexdigest()


def _collected_notebook(destination: Path) -> bytes | None:
    """The notebook a collection left at ``destination`` (the folder's only ``.ipynb``), or None."""
    notebooks = sorted(destination.glob("*.ipynb")) if destination.is_dir() else []
    return notebooks[0].read_bytes() if len(notebooks) == 1 else None


def _staged(folder: Path, assignment: str, files: _Files, now: datetime.datetime) -> Path:
    """A new folder in ``folder`` holding the notebook and nbgrader's two text files (removed if a write fails);
    ``timestamp.txt``'s modification time is ``now``, the time of the collection. OSError if it cannot be
    written."""
    folder.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".collect-", dir=folder))
    try:
        # Under nbgrader's name for it, never the student's: a name may hold escape sequences, which would reach
        # the instructor's terminal through any program that prints the folder's listing raw.
        (staging / f"{assignment}.ipynb").write_bytes(files.notebook)
        (staging / "timestamp.txt").write_bytes(files.timestamp)
        seconds = now.replace(tzinfo=datetime.UTC).timestamp()
        os.utime(staging / "timestamp.txt", (seconds, seconds))
        (staging / "submission_secret.txt").write_bytes(files.secret)
        staging.chmod(0o700)  # the instructor's alone: it holds nbgrader's secret
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return staging


def _put(staging: Path, destination: Path) -> None:
    """Put the folder ``staging`` at ``destination``, replacing what was collected there before."""
    if destination.is_dir() and not destination.is_symlink():
        shutil.rmtree(destination)
    elif destination.exists() or destination.is_symlink():
        destination.unlink()
    staging.rename(destination)
