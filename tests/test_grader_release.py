"""From source to release: nbgrader accepts every source notebook, and notebooks/ is what nbgrader generates.

Both tests start nbgrader (the validation runs every source notebook in a kernel), hence ``slow``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from autograder import ASSIGNMENTS, source_notebook

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]


def environment() -> dict[str, str]:
    """Hidden tests import autograder.answers; nbgrader runs the alembic executable of this interpreter."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")]))
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["PYTHONUNBUFFERED"] = "1"  # keep nbgrader's per-notebook lines in order on the merged stream
    return env


def test_nbgrader_validate_passes_on_every_source_notebook(tmp_path):
    paths = [str(source_notebook(assignment)) for assignment in ASSIGNMENTS]
    completed = subprocess.run(
        [sys.executable, "-m", "nbgrader", "validate", *paths],
        cwd=tmp_path,
        env=environment(),
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
    completed = subprocess.run(
        [sys.executable, "-m", "autograder", "release", "--check"],
        cwd=ROOT,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert completed.returncode == 0, (
        f"notebooks/ is out of date; run `python -m autograder release`:\n{completed.stderr[-3000:]}"
    )
