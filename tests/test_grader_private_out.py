"""The instructor's folders (course_directory.private_folder): made as the instructor's alone, and an existing
one that other accounts can enter is named on the terminal (round 23: on a machine where students have accounts,
the answer key, the gradebook and every student's work were readable by all of them)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest
from planted import ROOT, run_module

from autograder.course_directory import private_folder


def _mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_new_folder_is_the_instructors_alone_and_an_open_one_is_named(tmp_path):
    made = tmp_path / "a" / "course"
    assert private_folder(made) == [] and _mode(made) == 0o700
    assert private_folder(tmp_path / "missing", create=False) == [] and not (tmp_path / "missing").exists()
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o750)
    (warning,) = private_folder(shared)
    assert "mode 0750" in warning and f"chmod go= {shared}" in warning
    assert _mode(shared) == 0o750  # a course shared with a group stays shared


def test_course_makes_its_folder_private_and_says_when_it_is_open(tmp_path):
    completed = run_module("autograder", "course", "--out", str(tmp_path / "course"), cwd=tmp_path)
    assert completed.returncode == 0, completed.stderr
    assert _mode(tmp_path / "course") == 0o700 and "can be entered" not in completed.stderr
    opened = tmp_path / "opened"
    opened.mkdir()
    opened.chmod(0o755)
    completed = run_module("autograder", "course", "--out", str(opened), cwd=tmp_path)
    assert completed.returncode == 0, completed.stderr
    assert f"course: {opened} can be entered by accounts other than yours (mode 0755)" in completed.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="reading as another account needs root")
def test_another_account_cannot_read_the_answer_key_that_course_writes(tmp_path):
    tmp_path.chmod(0o755)  # the folders above the course let everyone through, as many home folders do
    completed = run_module("autograder", "course", "--out", str(tmp_path / "course"), cwd=tmp_path)
    assert completed.returncode == 0, completed.stderr
    key = tmp_path / "course" / "source" / "01_permutation" / "01_permutation.ipynb"
    assert key.is_file()
    as_nobody = subprocess.run(
        [sys.executable, "-c", f"import os; os.setgid(65534); os.setuid(65534); open({str(key)!r}).read()"],
        capture_output=True, text=True, cwd=ROOT, check=False,
    )
    assert as_nobody.returncode != 0 and "PermissionError" in as_nobody.stderr
