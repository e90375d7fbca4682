"""``python -m autograder check NOTEBOOK`` as the students' guide (book/guide_students.md) writes it: its whole
output is about the notebook, and its last line is the one the guide quotes. The kernel talks to the command over Unix sockets in a private folder, so nothing (no warning about
unencrypted TCP, no kernel left behind) reaches the student's terminal."""

from __future__ import annotations

import pytest
from planted import ROOT, run_module

pytestmark = pytest.mark.slow

GUIDE = ROOT / "book" / "guide_students.md"
COMMAND = "python -m autograder check notebooks/02_sinusoidal.ipynb"
LAST_LINE = "0 of 10 visible tests pass (10 not answered yet)"


def test_the_students_guide_writes_the_command_and_its_last_line():
    text = GUIDE.read_text(encoding="utf-8")
    assert f"```bash\n{COMMAND}\n```" in text
    assert f"`{LAST_LINE}`" in " ".join(text.split())


def test_check_prints_the_tests_and_no_warning_of_the_kernel():
    completed = run_module(*COMMAND.split()[2:], cwd=ROOT, timeout=300)
    output = completed.stdout + completed.stderr
    assert completed.returncode == 1, output  # the released notebook has no answers yet
    assert "visible tests pass" in completed.stdout
    assert "TCP" not in output and "WARNING" not in output and "Parent appears to have exited" not in output, output
    lines = [line for line in output.splitlines() if line.strip()]
    assert all(line.lstrip().startswith("NOT ANSWERED") for line in lines[:-1]), output
    assert LAST_LINE in lines[-1]
