"""A sandboxed kernel's start and end, as the log of an honest submission shows them.

- Its start: IPython keeps its history in an SQLite file, whose byte-range locks the sandbox refuses
  (:mod:`autograder.sandbox.seccomp`). SQLite then waits out its busy timeout three times before IPython moves
  the file aside ("Failed to open SQLite history ... database is locked") and keeps the history in memory: 15 s
  of every kernel's start. The grader starts its kernels with the history off, so the log holds no such line.
- Its end: the kernel is ended once its last cell has answered, not asked to end, so nothing a student left to
  run at exit (``atexit``, a finalizer) runs after the last cell: it can neither hold the stage up nor write
  to the log after the grade was decided.
"""

from __future__ import annotations

import pytest
from planted import filled, solutions, write_submission

from autograder.grade import grade
from autograder.sandbox.launcher import Limits, bwrap_problem

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(bwrap_problem() is not None, reason="the kernel's sandbox needs bwrap: " + str(bwrap_problem())),
]

ASSIGNMENT = "01_permutation"
AT_EXIT = "written-at-the-kernels-exit"
LEAVES_CODE_FOR_THE_EXIT = (
    "import atexit as _atexit, os as _os\n"
    f"_atexit.register(lambda: _os.write(1, b'{AT_EXIT}\\n'))\n"  # descriptor 1: the kernel's own log file
    f"_os.write(1, b'the first cell ran\\n')\n"
)


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    root = tmp_path_factory.mktemp("kernel-lifetime")
    answers = solutions(ASSIGNMENT)
    answers["attention_answer"] = LEAVES_CODE_FOR_THE_EXIT + answers["attention_answer"]
    write_submission(root / "class", "ada", ASSIGNMENT, filled(ASSIGNMENT, answers))
    (result,) = grade(root / "class", root / "out", jobs=1, timeout=300, limits=Limits(), regrade=True)
    kernel_lines = [
        line for line in (root / "out" / "logs" / "ada" / f"{ASSIGNMENT}.log").read_text().splitlines()
        if line.startswith("  kernel | ")
    ]
    return result, kernel_lines


def test_the_kernel_starts_with_no_history_file_to_wait_for(graded):
    result, kernel_lines = graded
    assert result.score == result.max_score > 0
    assert "  kernel | the first cell ran" in kernel_lines  # the log read here is the kernel's own
    assert not any("SQLite" in line or "history" in line.lower() for line in kernel_lines), kernel_lines


def test_the_kernel_runs_nothing_of_the_student_s_after_its_last_cell(graded):
    result, kernel_lines = graded
    assert result.score == result.max_score  # every output of the last cell was kept before the kernel ended
    assert not any(AT_EXIT in line for line in kernel_lines), kernel_lines
