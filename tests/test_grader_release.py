"""From source to release: nbgrader accepts every source notebook, and notebooks/ is what nbgrader generates.

Both tests start nbgrader (the validation runs every source notebook in a kernel), hence ``slow``.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from planted import command_environment, run_module

from autograder import ASSIGNMENTS, source_notebook

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]


def test_nbgrader_validate_passes_on_every_source_notebook(tmp_path):
    paths = [str(source_notebook(assignment)) for assignment in ASSIGNMENTS]
    completed = subprocess.run(
        [sys.executable, "-m", "nbgrader", "validate", *paths],
        cwd=tmp_path,
        env=command_environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=600,
        check=False,
    )
    output = completed.stdout
    reports = re.split(r"Validating '", output)[1:]
    assert len(reports) == len(ASSIGNMENTS), output[-3000:]
    for path, report in zip(paths, reports):
        assert report.startswith(path), report[:200]
        assert "Success! Your notebook passes all the tests." in report, f"{path}:\n{report[-3000:]}"


def test_released_notebooks_are_exactly_what_nbgrader_generates_from_the_sources():
    completed = run_module("autograder", "release", "--check")
    assert completed.returncode == 0, (
        f"notebooks/ is out of date; run `python -m autograder release`:\n{completed.stderr[-3000:]}"
    )
