"""The folder an instructor works in: an nbgrader course directory that ``grade`` fills and the formgrader serves.

``python -m autograder grade PATH --out DIR`` makes DIR a complete nbgrader course directory:

- ``nbgrader_config.py``: the course's configuration (``autograder/nbgrader_config.py``) with the course root
  set to DIR and ``db_url`` to the class's gradebook. A password in the URL is not written (PostgreSQL's
  ``PGPASSWORD`` or ``~/.pgpass`` supply it to the commands that read this file);
- ``source/<assignment>/<assignment>.ipynb``: the exercises as they were graded;
- ``autograded/<student>/<assignment>/<assignment>.ipynb``: each submission as the grader ran it, its outputs
  cleaned like a feedback page's (:func:`autograder.feedback.outputs.sanitize_notebook`): the notebooks the
  formgrader shows, so no script a student printed runs in the instructor's Jupyter;
- ``feedback/<student>/<assignment>/``: the feedback page, with nbgrader's ``timestamp.txt`` and
  ``submission_secret.txt`` when the submission was collected from nbgrader's exchange (``nbgrader
  release_feedback`` reads them).

``python -m autograder course --out DIR`` starts such a folder for nbgrader's exchange: the configuration, the
sources and ``release/<assignment>/<assignment>.ipynb`` (the student notebooks, for ``nbgrader
release_assignment``); ``python -m autograder collect`` (:mod:`autograder.intake.exchange`) then fills
``DIR/submitted/``, which ``grade`` reads.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
from collections.abc import Iterable
from pathlib import Path

from autograder import ASSIGNMENTS, CONFIG_FILE, source_notebook

CONFIG_NAME = "nbgrader_config.py"
# What nbgrader's collect leaves next to a submitted notebook and release_feedback needs next to its page.
EXCHANGE_FILES = ("timestamp.txt", "submission_secret.txt")
MAX_EXCHANGE_FILE_BYTES = 200


def url_without_password(db_url: str) -> str:
    """``db_url`` with its password (if any) removed, e.g. ``postgresql://grader@host/posenc``."""
    from sqlalchemy.engine import make_url

    url = make_url(db_url)
    return db_url if url.password is None else url.set(password=None).render_as_string(hide_password=False)


def config_text(root: Path, db_url: str) -> str:
    """The course's ``nbgrader_config.py`` for the course directory ``root`` whose gradebook is ``db_url``."""
    return (
        CONFIG_FILE.read_text(encoding="utf-8").rstrip("\n")
        + "\n\n# This folder is the course directory; its gradebook is the class's (written by python -m autograder).\n"
        + f"c.CourseDirectory.root = {str(root)!r}\n"
        + f"c.CourseDirectory.db_url = {url_without_password(db_url)!r}\n"
    )


def write_course_files(folder: Path, root: Path, db_url: str, assignments: Iterable[str] = ASSIGNMENTS) -> None:
    """Write ``folder/nbgrader_config.py`` (course root ``root``, gradebook ``db_url``) and ``folder/source/``."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / CONFIG_NAME).write_text(config_text(root, db_url), encoding="utf-8")
    for assignment in assignments:
        destination = folder / "source" / assignment
        destination.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source_notebook(assignment), destination / f"{assignment}.ipynb")


def start_course(out: Path, assignments: Iterable[str] = ASSIGNMENTS) -> list[Path]:
    """``python -m autograder course --out DIR``: the configuration, ``source/`` and ``release/`` of a course
    directory whose gradebook will be ``DIR/gradebook.db``; returns the released notebooks written."""
    from autograder.authoring.release import generate

    out = Path(out).resolve()
    assignments = tuple(assignments)
    write_course_files(out, out, f"sqlite:///{out / 'gradebook.db'}")
    written = []
    for assignment, text in generate(assignments).items():
        path = out / "release" / assignment / f"{assignment}.ipynb"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


def private_folder(path: Path, *, create: bool = True) -> list[str]:
    """Where the instructor's commands write (``--out``): made when missing (with ``create``) as the
    instructor's account's alone (0700), since it will hold the answer key, the hidden tests, the gradebook,
    every student's work and nbgrader's secrets, and on a machine where students have accounts (nbgrader's
    exchange) the folders above it may let them through. An existing folder keeps its mode (a course shared
    with a group stays shared); the warnings returned name one that other accounts can enter or read.

    Raises:
        OSError: the folder could not be made.
    """
    path = Path(path)
    if not path.exists():
        if create:
            path.mkdir(parents=True)
            path.chmod(0o700)
        return []
    mode = stat.S_IMODE(path.stat().st_mode)
    if not path.is_dir() or not mode & 0o077:
        return []
    return [(
        f"{path} can be entered by accounts other than yours (mode {mode:04o}): the answer key, the gradebook "
        f"and every student's work will be there; `chmod go= {path}` keeps them yours alone"
    )]


def configured_db_url(out: Path) -> str:
    """The gradebook named in ``out/nbgrader_config.py`` (written by ``grade``).

    Raises:
        ValueError: ``out`` holds no such file, or the file names no gradebook.
    """
    from traitlets.config.loader import PyFileConfigLoader

    if not (out / CONFIG_NAME).is_file():
        raise ValueError(
            f"out {str(out)!r} holds no {CONFIG_NAME}: it must be the folder that "
            "`python -m autograder grade PATH --out DIR` wrote"
        )
    config = PyFileConfigLoader(CONFIG_NAME, path=str(out)).load_config()
    db_url = config.CourseDirectory.get("db_url")
    if not db_url:
        raise ValueError(f"{out / CONFIG_NAME} sets no c.CourseDirectory.db_url; run grade into {out} again")
    return str(db_url)


def copy_exchange_files(submission_folder: Path | None, destinations: Iterable[Path],
                        collected_timestamp: str | None = None) -> list[str]:
    """Copy ``timestamp.txt`` and ``submission_secret.txt`` from a collected submission's folder into each of
    ``destinations``; returns notes about files that were refused.

    They are the student's files: only a regular file (no link) of at most
    :data:`MAX_EXCHANGE_FILE_BYTES` bytes of printable ASCII is copied, and ``timestamp.txt`` (the time the
    gradebook records, which lateness reads) only when its SHA-256 is ``collected_timestamp``, the digest of the
    one ``python -m autograder collect`` wrote (:func:`autograder.intake.exchange.collected_timestamps`).
    """
    notes = []
    if submission_folder is None:
        return notes
    for name in EXCHANGE_FILES:
        path = submission_folder / name
        if not path.exists() and not path.is_symlink():
            continue
        content = _small_text_file(path)
        if content is None:
            notes.append(f"{name} next to the notebook was not used: not a short text file")
            continue
        if name == "timestamp.txt" and hashlib.sha256(content).hexdigest() != collected_timestamp:
            notes.append("timestamp.txt next to the notebook was not used: python -m autograder collect did not "
                         "write it, so it says nothing of when the work was submitted (no time is recorded)")
            continue
        for destination in destinations:
            destination.mkdir(parents=True, exist_ok=True)
            (destination / name).write_bytes(content)
    return notes


def _small_text_file(path: Path) -> bytes | None:
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(descriptor, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            return None
        content = handle.read(MAX_EXCHANGE_FILE_BYTES + 1)
    text = content.strip()
    if len(content) > MAX_EXCHANGE_FILE_BYTES or not text or not all(32 <= byte < 127 for byte in text):
        return None
    return content
