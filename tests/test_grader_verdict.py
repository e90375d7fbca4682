"""Grades decided outside the kernel (autograder.verdict): the split of hidden tests, the strict reading of
reports, and the decision; plus the sandbox's command line (autograder.sandbox). No kernel runs here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from autograder import ASSIGNMENTS, source_notebook
from autograder.sandbox import Limits, Settings, bwrap_argv, bwrap_problem
from autograder.verdict import decide, hidden_section, parse_reports, split_hidden_tests

ROOT = Path(__file__).resolve().parents[1]
MARKER = "AUTOGRADER-REPORT-" + "0" * 32
QUIZ = '''
from autograder.answers import AnswerError, as_choice

if as_choice(quiz, "quiz", "ABCD") != "B":
    raise AnswerError("quiz: not the best answer")
'''
VALUES = '''
from autograder.answers import as_numbers, call, check_close

TOLERANCE = 0.005 + 1e-9
INPUT = [1.0, 2.0]
EXPECTED = [0.25, 0.5]
values = as_numbers(call(halve, "halve", INPUT), "halve(INPUT)", 2)
check_close(values, EXPECTED, atol=TOLERANCE, name="halve", mistakes=[("doubled instead", [2.0, 4.0])])
'''
# Hidden tests that check objects only the kernel holds stay whole (graded in the kernel, as before).
WHOLE = {"learned_test", "length_test"}


def _line(step: int, values: dict) -> str:
    return f"{MARKER} {json.dumps({'step': step, 'values': values})}"


def test_expected_values_and_checks_never_reach_the_kernel():
    split = split_hidden_tests(VALUES)
    assert "EXPECTED" not in split.kernel_source and "check_close(" not in split.kernel_source.split("import")[-1]
    assert "0.25" not in split.kernel_source and "doubled instead" not in split.kernel_source
    assert "call(halve" in split.kernel_source and "_autograder_report(0, {'values': values})" in split.kernel_source
    assert [step.names for step in split.steps] == [("values",), ()]  # the last says the part ran to its end


def test_every_source_hidden_test_is_split_but_the_two_that_check_kernel_objects():
    whole = set()
    for assignment in ASSIGNMENTS:
        for cell in nbformat.read(source_notebook(assignment), as_version=4).cells:
            hidden = hidden_section(cell.source)
            if hidden is None:
                continue
            split = split_hidden_tests(hidden)
            if split is None:
                whole.add(cell.metadata["nbgrader"]["grade_id"])
                continue
            for secret in ("EXPECTED", "MISTAKES", "FIRST_VALUE", "EQUIVARIANT"):
                assert secret not in split.kernel_source, (assignment, secret)
    assert whole == WHOLE


def test_right_values_pass_and_wrong_values_fail_with_the_named_mistake():
    split = split_hidden_tests(VALUES)
    right, _ = parse_reports(f"{_line(0, {'values': [0.25, 0.5]})}\n{_line(1, {})}", MARKER, split)
    assert decide(split, right, None) == (True, "")
    wrong, _ = parse_reports(f"{_line(0, {'values': [2.0, 4.0]})}\n{_line(1, {})}", MARKER, split)
    passed, message = decide(split, wrong, None)
    assert not passed and "doubled instead" in message


def test_right_values_fail_when_the_kernel_part_did_not_run_to_its_end():
    split = split_hidden_tests(VALUES)
    reports, _ = parse_reports(_line(0, {"values": [0.25, 0.5]}), MARKER, split)
    assert decide(split, reports, "ValueError: late")[0] is False


def test_a_missing_report_fails_with_the_kernel_error():
    split = split_hidden_tests(QUIZ)
    assert decide(split, {}, "NameError: quiz") == (False, "NameError: quiz")


@pytest.mark.parametrize(
    "text",
    [
        f"{MARKER} {{\"step\": 0, \"values\": {{\"quiz\": NaN}}}}",  # not JSON of plain numbers
        f"{MARKER} {{\"step\": 1, \"values\": {{\"quiz\": \"B\"}}}}",  # out of order
        f"{MARKER} {{\"step\": 0, \"values\": {{\"other\": \"B\"}}}}",  # not the names asked for
        f"{MARKER} [\"B\"]",
        f"{MARKER} {{\"step\": 0, \"values\": {{\"quiz\": \"B\"}}, \"passed\": true}}",
    ],
)
def test_malformed_reports_are_refused_and_the_check_fails(text):
    split = split_hidden_tests(QUIZ)
    reports, problem = parse_reports(text, MARKER, split)
    assert problem is not None and reports == {}
    assert decide(split, reports, problem)[0] is False


def test_lines_without_the_marker_of_this_run_are_ignored():
    split = split_hidden_tests(QUIZ)
    forged = f"AUTOGRADER-REPORT-{'1' * 32} {json.dumps({'step': 0, 'values': {'quiz': 'B'}})}"
    reports, problem = parse_reports(forged, MARKER, split)
    assert reports == {} and problem is None
    assert decide(split, reports, None)[0] is False


def test_an_object_the_kernel_could_not_report_is_rejected_by_name():
    split = split_hidden_tests(QUIZ)
    reports, _ = parse_reports(_line(0, {"quiz": {"__unreadable__": "__main__.AnyText"}}), MARKER, split)
    passed, message = decide(split, reports, None)
    assert not passed and "__main__.AnyText" in message


def test_the_sandbox_hides_paths_mounts_scratch_and_has_no_network(tmp_path):
    hidden, scratch, runtime = tmp_path / "gradebook", tmp_path / "scratch", tmp_path / "runtime"
    for folder in (hidden, scratch, runtime):
        folder.mkdir()
    argv = bwrap_argv(Settings(str(scratch), str(runtime), (str(hidden),), Limits()), ["python"])
    text = " ".join(argv)
    assert "--ro-bind / /" in text and "--unshare-all" in text and "--die-with-parent" in text
    assert f"--tmpfs {hidden}" in text and f"--remount-ro {hidden}" in text
    assert f"--bind {scratch} {scratch}" in text and f"--chdir {scratch}" in text
    assert argv[-1] == "python"


def test_limits_stop_an_allocation_beyond_the_memory_limit(tmp_path):
    code = (
        "from autograder.sandbox import Limits, apply_limits\n"
        "apply_limits(Limits(memory_mb=1024, cpu_seconds=30, processes=0, file_size_mb=1))\n"
        "try:\n    bytearray(2 * 1024 ** 3)\nexcept MemoryError:\n    print('refused')\n"
        "try:\n    open('big', 'wb').write(b'0' * 2 * 1024 ** 2)\nexcept OSError:\n    print('too big')\n"
    )
    completed = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=tmp_path, check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert completed.stdout.split() == ["refused", "too", "big"], completed.stderr
    assert (tmp_path / "big").stat().st_size == 1024**2  # cut at the 1 MiB file-size limit


@pytest.mark.skipif(bwrap_problem() is not None, reason="bubblewrap cannot run here")
def test_the_sandbox_hides_a_folder_forbids_writes_and_has_no_network(tmp_path):
    hidden, scratch, runtime = tmp_path / "gradebook", tmp_path / "scratch", tmp_path / "runtime"
    for folder in (hidden, scratch, runtime):
        folder.mkdir()
    (hidden / "gradebook.db").write_text("secret")
    code = (
        "import os, socket\n"
        f"print(os.listdir({str(hidden)!r}))\n"
        f"for path in ({str(hidden / 'x')!r}, '/tmp/x', {str(ROOT / 'x')!r}, 'mine'):\n"
        "    try:\n        open(path, 'w').close(); print('wrote', os.path.basename(path))\n"
        "    except OSError:\n        pass\n"
        "try:\n    socket.create_connection(('127.0.0.1', 22), timeout=1); print('connected')\n"
        "except OSError:\n    pass\n"
    )
    argv = bwrap_argv(Settings(str(scratch), str(runtime), (str(hidden),), Limits()), [sys.executable, "-c", code])
    completed = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert completed.stdout.split("\n")[:2] == ["[]", "wrote mine"], completed.stderr
    assert "connected" not in completed.stdout
    assert (scratch / "mine").exists() and not (ROOT / "x").exists()
