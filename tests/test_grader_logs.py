"""The log file of a submission (``logs/<student>/<assignment>.log``) carries a student's bytes only escaped
and marked with where they came from (autograder.pipeline.log_lines).

The kernel's output and nbgrader's log are written by the student's code; the instructor reads the file with
``cat`` or ``tail -f``. So no line of the file holds a control character (a window title, an OSC 52 clipboard
write, hidden text, an erase-line) or any other line break, and every line starts with its source's mark:
a line the kernel printed as "score 16 / 16" reads ``  kernel | score 16 / 16``, never as the grader's. The
whole batch, with a kernel that writes such bytes, is in tests/test_grader_hostile.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autograder.pipeline import LOG_SOURCES, _accept, grade_task, log_lines
from autograder.sandbox import stage
from autograder.types import LayoutItem, Task

LAYOUT = (LayoutItem("first_test", 2.0, "code"),)
HOSTILE = (
    "\x1b]0;owned window title\x07"  # window title
    "\x1b]52;c;cm0gLXJmIH4=\x07"  # OSC 52: writes the clipboard
    "\x1b[8mhidden text\x1b[0m"  # invisible
    "\rscore 16 / 16\x1b[2K"  # carriage return, erase line
    "\u2028grader | the notebook is fine\u202eright to left\x85next\x00nul"
)
MARKED = tuple(f"{source:>8} | " for source in LOG_SOURCES)


def _task(tmp_path: Path) -> Task:
    return Task(
        student="ada", assignment="01_permutation", notebook=tmp_path / "n.ipynb", template=tmp_path,
        directory=tmp_path / "task", layout=LAYOUT, notes=(), feedback=tmp_path / "f.html",
        log=tmp_path / "logs" / "ada" / "01_permutation.log", timeout=None, autograded=tmp_path / "a.ipynb",
    )


def _check_file_lines(text: str) -> list[str]:
    lines = text.split("\n")
    assert lines[-1] == ""
    for line in lines[:-1]:
        assert line.startswith(MARKED), line
        assert line.isprintable(), line  # no control, separator or format character: nothing the terminal runs
        assert line.splitlines() == [line]
    return lines[:-1]


def test_every_line_is_escaped_and_marked_with_its_source():
    lines = log_lines("kernel", f"first\n{HOSTILE}\r\nlast")
    assert all(line.startswith("  kernel | ") for line in lines)
    assert "  kernel | score 16 / 16\\x1b[2K" in lines  # \r and \u2028 end lines: each piece is the kernel's
    assert "  kernel | grader | the notebook is fine\\u202eright to left" in lines  # a forged mark stays inside
    assert all("\x1b" not in line and "\x07" not in line for line in lines)
    assert "\\x1b]52;c;cm0gLXJmIH4=\\x07" in "".join(lines)
    with pytest.raises(ValueError, match="source must be one of"):
        log_lines("teacher", "x")


def test_the_log_file_marks_the_kernel_s_lines_and_nbgrader_s(tmp_path, monkeypatch):
    answer = {
        "items": [{"grade_id": "first_test", "score": 0.0, "max_score": 2.0, "status": "failed", "message": ""}],
        "notes": [], "reason": None, "feedback": "<html><body>page</body></html>",
        "autograded": '{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}',
        "log": f"[AutogradeApp] converting\n{HOSTILE}", "kernel_log": f"printed by the kernel\n{HOSTILE}\n",
    }
    outcome = stage.StageOutcome(json.dumps(answer).encode("ascii"), b"stage's \x1b[31mown\x1b[0m", 0)
    monkeypatch.setattr("autograder.pipeline._stage_outcome", lambda task, groups, marks, log: (outcome, ""))
    result = grade_task(_task(tmp_path))
    assert result.reason is None
    raw = (tmp_path / "logs" / "ada" / "01_permutation.log").read_bytes()
    assert b"\x1b" not in raw and b"\x07" not in raw and b"\r" not in raw
    lines = _check_file_lines(raw.decode("utf-8"))
    assert "nbgrader | [AutogradeApp] converting" in lines
    assert "  kernel | printed by the kernel" in lines
    assert "  kernel | score 16 / 16\\x1b[2K" in lines
    assert "nbgrader | score 16 / 16\\x1b[2K" in lines
    assert not any(line.endswith("| score 16 / 16") for line in lines)


@pytest.mark.parametrize(
    "outcome",
    [
        stage.StageOutcome(b"", b"Traceback\n\x1b]0;title\x07\rscore 16 / 16", 1),  # no answer
        stage.StageOutcome(b"", b"\x1b]0;title\x07", None, "grading took longer than 9 seconds in all"),
    ],
)
def test_the_stage_s_standard_error_is_escaped_and_marked(tmp_path, outcome):
    log: list[str] = []
    result = _accept(_task(tmp_path), outcome, "", log, {})
    assert result.grader_failure
    lines = _check_file_lines("".join(line + "\n" for line in log))
    assert any(line.startswith("   stage | ") and "\\x1b]0;title\\x07" in line for line in lines)
    assert lines[0].startswith("  grader | --- the grading stage's standard error")
