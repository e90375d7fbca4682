"""A hand-graded feedback page is made in a child process under the grading stage's limits
(autograder.feedback.limited), and the formgrader's server runs under its memory and file-size limits; a child
that is stopped or fails is a RenderFailed with its reason, never a page.

The page itself, made this way with an instructor's hand grade, is checked in tests/test_grader_formgrader.py
(test_grading_again_and_regrading_keep_a_hand_grade_in_every_output runs `python -m autograder feedback`).
"""

from __future__ import annotations

import pytest

from autograder.feedback import limited
from autograder.sandbox.launcher import Limits


def test_a_render_past_its_time_is_stopped_and_named(tmp_path, monkeypatch):
    monkeypatch.setattr(limited, "RENDER_SECONDS", 0.2)  # the child's imports alone take longer
    with pytest.raises(limited.RenderFailed, match=r"longer than 0\.2 seconds in all and was stopped"):
        limited.render_page(tmp_path / "none.ipynb", "ana", "04_relative", "sqlite:///" + str(tmp_path / "gb.db"),
                            [], Limits())


def test_a_render_that_fails_names_its_last_line(tmp_path):
    with pytest.raises(limited.RenderFailed, match=r"the renderer ended with code 1 \(.*none\.ipynb"):
        limited.render_page(tmp_path / "none.ipynb", "ana", "04_relative", "sqlite:///" + str(tmp_path / "gb.db"),
                            [], Limits())


def test_the_formgrader_server_runs_under_the_stages_memory_and_file_size_limits():
    import subprocess
    import sys

    from autograder.formgrader.server import server_limits

    probe = "import resource; print(resource.getrlimit(resource.RLIMIT_AS), resource.getrlimit(resource.RLIMIT_FSIZE))"
    shown = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                           preexec_fn=server_limits(Limits(memory_mb=2048, file_size_mb=100))).stdout
    # 2048 MB for the kernel's share and 2048 MB of the stage's own; 100 MB files.
    assert shown.split() == ["(4294967296,", "4294967296)", "(104857600,", "104857600)"]
