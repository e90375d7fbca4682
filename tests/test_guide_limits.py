"""The grader's limits that the instructors' guide quotes come from the code that holds them.

The guide reads each limit from its module at build time (a hidden cell glues them into the text, another writes
the table of the kernel's limits), so the built page must print exactly the values the grader uses, and its
source must not write them by hand.
"""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest

from autograder.feedback.limited import RENDER_SECONDS
from autograder.formgrader.rendering import VIEW_SECONDS
from autograder.grade import configured_limits
from autograder.intake.exchange import MAX_COLLECTED_BYTES
from autograder.intake.zip_tree import MAX_DIRECTORY_BYTES
from autograder.sandbox import cgroups
from autograder.sandbox.launcher import KERNEL_OPEN_FILES
from autograder.sandbox.stage import KERNEL_FILES, STARTUP_SECONDS
from autograder.student.received import DEFAULT_MAX_CLASS_BYTES, RESERVED_FREE_BYTES
from autograder.student.safe_files import MAX_ENTRIES_PER_TOP_FOLDER
from autograder.student.sanitize import MAX_NOTEBOOK_BYTES
from autograder.verdicts.verdict import CHECK_MEMORY_MB, CHECK_SECONDS

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "book" / "guide_instructors.md"
GUIDE = ROOT / "_build" / "html" / "book" / "guide_instructors.html"
MIB = 1024 * 1024


def _guide_text() -> str:
    if not GUIDE.is_file():
        pytest.fail(f"no built guide at {GUIDE}: run `make book` first (`make test` does)")
    text = html.unescape(re.sub(r"<[^>]+>", "", GUIDE.read_text(encoding="utf-8")))
    return " ".join(text.replace("\u2019", "'").split())


def test_the_built_guide_prints_the_limits_the_grader_holds():
    text = _guide_text()
    wanted = [
        (f"{cgroups.READ_BYTES_PER_SECOND // MIB} MiB/s, {cgroups.WRITE_BYTES_PER_SECOND // MIB} MiB/s and "
         f"{cgroups.OPERATIONS_PER_SECOND:,} operations a second each way"),
        f"a notebook over {MAX_NOTEBOOK_BYTES // MIB} MB are refused",
        f"capped at {MAX_COLLECTED_BYTES // 1024**3} GB in all",
        f"({DEFAULT_MAX_CLASS_BYTES // MIB} MB by default) in all",
        f"{RESERVED_FREE_BYTES // MIB} MB kept free for the grading",
        f"({CHECK_SECONDS:g} s and {CHECK_MEMORY_MB // 1024} GiB,",
        f"plus {STARTUP_SECONDS} s its whole process group",
        f"one tmpfs of --tmp-mb and {KERNEL_FILES:,} files",
        f"stopped after {RENDER_SECONDS // 60} minutes",
        f"limits and {VIEW_SECONDS} seconds of CPU time and of wall clock",
        f"under the stage's limits and {VIEW_SECONDS} seconds (autograder/formgrader/views.py)",
        f"a kernel within its {KERNEL_OPEN_FILES} open files and {configured_limits().processes} processes",
        f"({MAX_ENTRIES_PER_TOP_FOLDER:,} names below each student's folder",
        f"the whole zip by its directory ({MAX_DIRECTORY_BYTES // 1000**2} MB,",
    ]
    missing = [phrase for phrase in wanted if phrase not in text]
    assert not missing, missing


def test_the_built_guides_table_gives_every_kernel_limit_its_default():
    text = _guide_text()
    for field, default in vars(configured_limits()).items():
        assert f"--{field.replace('_', '-')} {default} " in text, field


@pytest.mark.parametrize("number", ["64 MiB/s", "1,000 operations", "2048 MB", "256 MB kept", "10,000 files",
                                    "| 4096 |", "50 MB", "after 5 minutes",
                                    "and 60 seconds", "256 open files and 64 processes"])
def test_the_guides_source_writes_no_limit_by_hand(number):
    assert number not in SOURCE.read_text(encoding="utf-8")
