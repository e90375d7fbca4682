"""Grades decided outside the kernel (autograder.verdicts.verdict): the split of hidden tests, the strict reading of
reports, and the decision, which runs in a child process under a time and memory limit. No kernel runs here."""

from __future__ import annotations

import ast
import decimal
import fractions
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import nbformat
import pytest
import sympy

from autograder import ASSIGNMENTS, REPOSITORY, source_notebook
from autograder.verdicts import verdict
from autograder.verdicts.verdict import decide, hidden_section, parse_reports, split_hidden_tests

ROOT = Path(__file__).resolve().parents[1]
MARKER = "AUTOGRADER-REPORT-" + "0" * 32
QUIZ = '''
from autograder.student.answers import AnswerError, as_choice

if as_choice(quiz, "quiz", "ABCD") != "B":
    raise AnswerError("quiz: not the best answer")
'''
VALUES = '''
from autograder.student.answers import as_numbers, call, check_close

TOLERANCE = 0.005 + 1e-9
INPUT = [1.0, 2.0]
EXPECTED = [0.25, 0.5]
values = as_numbers(call(halve, "halve", INPUT), "halve(INPUT)", 2)
check_close(values, EXPECTED, atol=TOLERANCE, name="halve", mistakes=[("doubled instead", [2.0, 4.0])])
'''
EXPRESSIONS = '''
from autograder.student.answers import check_expressions

EXPECTED = ["sin(2)", "sin(2*10000**(-1/3))"]
check_expressions(pe, EXPECTED, name="PE(2)")
'''
# A check whose work the answer chooses: a stand-in for sympy that never ends, or a huge allocation.
LOOP = '''
from autograder.student.answers import AnswerError, as_integer

for index in range(as_integer(count, "count")):
    if index < 0:
        raise AnswerError("count: a negative index")
'''
ALLOCATION = '''
from autograder.student.answers import AnswerError, as_integer

if len("x" * as_integer(size, "size")) != size:
    raise AnswerError("size: not the length asked for")
'''
SECONDS = 2  # the time limit of these tests (20 s in grading)
# Hidden tests that check objects only the kernel holds stay whole (graded in the kernel, as before).
def _line(step: int, values: dict) -> str:
    return f"{MARKER} {json.dumps({'step': step, 'values': values})}"


def _reports(source: str, **values) -> tuple:
    """The split of ``source`` and its reports: ``values`` for the first step, and the final empty one."""
    split = split_hidden_tests(source)
    reports, problem = parse_reports(f"{_line(0, values)}\n{_line(1, {})}", MARKER, split)
    assert problem is None
    return split, reports


@pytest.fixture
def small_limits(monkeypatch):
    """Limits of 2 s and 256 MB, and a fork server already started (its start is not part of a check's time)."""
    monkeypatch.setattr(verdict, "CHECK_SECONDS", SECONDS)
    monkeypatch.setattr(verdict, "CHECK_MEMORY_MB", 256)
    assert decide(*_reports(QUIZ, quiz="B"), None) == (True, "")


def _timed_decide(split, reports) -> tuple[bool, str, float]:
    start = time.perf_counter()
    passed, message = decide(split, reports, None)
    return passed, message, time.perf_counter() - start


def test_expected_values_and_checks_never_reach_the_kernel():
    split = split_hidden_tests(VALUES)
    assert "EXPECTED" not in split.kernel_source and "check_close(" not in split.kernel_source.split("import")[-1]
    assert "0.25" not in split.kernel_source and "doubled instead" not in split.kernel_source
    assert "call(halve" in split.kernel_source and "_autograder_report(0, {'values': values})" in split.kernel_source
    assert [step.names for step in split.steps] == [("values",), ()]  # the last says the part ran to its end


def test_every_source_hidden_test_is_split():
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
    assert whole == set()


TRICKY_SOURCES = (
    "x = 1\r\ny = [\r\n  'é',\r\n  2]\r\n",  # Windows line ends, a non-ASCII character before an offset
    "a = 'ü' + 'ß'; b = a\rc = (a,\r b)\r",  # old Mac line ends, two statements on a line
    "f = lambda: 1\x0c\ng = {'k': [1,\n\t2]}  # \u2028 in a comment\nh = g",  # a form feed, a tab
    's = """one\ntwo"""\nt = s',  # a string across lines
    "EXPECTED = [" + ", ".join(str(value) for value in range(3000)) + "]\nz = EXPECTED",  # a long line
)


def test_source_segments_equal_the_standard_librarys():
    """verdict.SourceSegments cuts the source once; ast.get_source_segment is the reference, for every node."""
    sources = list(TRICKY_SOURCES)
    for assignment in ASSIGNMENTS:
        for cell in nbformat.read(source_notebook(assignment), as_version=4).cells:
            hidden = hidden_section(cell.source)
            if hidden is not None:
                sources.append(hidden)
    compared = 0
    for source in sources:
        segment_of = verdict.SourceSegments(source)
        for node in ast.walk(ast.parse(source)):
            assert segment_of(node) == ast.get_source_segment(source, node), (source[:60], ast.dump(node)[:80])
            compared += 1
    assert compared > 10_000  # the course's hidden sections were read, not only the strings above


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


# ---------------------------------------------------------------------------------------------------------
# decide runs the grader part in a child process, under a time and a memory limit
# ---------------------------------------------------------------------------------------------------------


def test_a_right_expression_passes_through_the_child_and_a_wrong_one_fails_with_its_message(small_limits):
    assert decide(*_reports(EXPRESSIONS, pe=["sin(2)", "sin(2/10000^(1/3))"]), None) == (True, "")
    passed, message = decide(*_reports(EXPRESSIONS, pe=["sin(2)", "cos(2)"]), None)
    assert not passed and message == "PE(2): entry 1 ('cos(2)') is wrong: it evaluates to -0.4161468365"


def test_twelve_nested_sines_are_decided_failed_within_twice_the_time_limit(small_limits):
    nested = "sin(" * 12 + "1" + ")" * 12  # sympy's simplify never ends on it
    passed, message, seconds = _timed_decide(*_reports(EXPRESSIONS, pe=["sin(2)", nested]))
    assert not passed and seconds < 2 * SECONDS
    assert "nests 12 function calls" in message or f"within {SECONDS} seconds" in message


def test_a_check_that_does_not_end_is_killed_at_the_time_limit(small_limits):
    passed, message, seconds = _timed_decide(*_reports(LOOP, count=10**15))
    assert (passed, message) == (False, f"the answer could not be checked within {SECONDS} seconds")
    assert SECONDS <= seconds < 2 * SECONDS
    assert not multiprocessing.active_children()  # killed and waited for


def test_an_answer_that_allocates_beyond_the_memory_limit_is_a_failed_check(small_limits):
    passed, message, seconds = _timed_decide(*_reports(ALLOCATION, size=2 * 1024**3))
    assert (passed, message) == (False, "the answer could not be checked within the grader's memory limit (256 MB)")
    assert seconds < SECONDS
    assert decide(*_reports(ALLOCATION, size=10 * 1024**2), None) == (True, "")  # 10 MB is within it


def test_checks_run_from_threads_each_get_their_own_verdict(small_limits):
    cases = {
        "right": _reports(EXPRESSIONS, pe=["sin(2)", "sin(2*10**(-4/3))"]),
        "wrong": _reports(QUIZ, quiz="A"),
        "endless": _reports(LOOP, count=10**15),
    }
    verdicts = {}
    threads = [
        threading.Thread(target=lambda key=key: verdicts.setdefault(key, decide(*cases[key], None)))
        for key in cases
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=4 * SECONDS)
    assert verdicts == {
        "right": (True, ""),
        "wrong": (False, "quiz: not the best answer"),
        "endless": (False, f"the answer could not be checked within {SECONDS} seconds"),
    }


@pytest.mark.parametrize("number, fragment", [(signal.SIGSEGV, "SIGSEGV"), (signal.SIGKILL, "out of memory")])
def test_a_child_killed_by_a_signal_is_a_failed_check_not_an_exception(small_limits, monkeypatch, number, fragment):
    monkeypatch.setattr(verdict, "CHECK_SECONDS", 30)
    verdicts = []
    thread = threading.Thread(target=lambda: verdicts.append(decide(*_reports(LOOP, count=10**15), None)))
    thread.start()
    deadline = time.monotonic() + 10
    while not (children := [c for c in multiprocessing.active_children() if c.name == "autograder-check"]):
        assert time.monotonic() < deadline, "the check's child process never started"
        time.sleep(0.01)
    os.kill(children[0].pid, number)
    thread.join(timeout=10)
    [(passed, message)] = verdicts
    assert not passed and fragment in message and "stopped by" in message


def test_an_unreadable_value_crosses_to_the_child_with_its_type_name(small_limits):
    passed, message = decide(*_reports(QUIZ, quiz={"__unreadable__": "__main__.AnyText"}), None)
    assert not passed and "__main__.AnyText" in message



def test_a_long_message_of_the_child_crosses_back_cut_to_its_limit(small_limits):
    passed, message = decide(*_reports(QUIZ, quiz="\N{GRINNING FACE}" * 100_000), None)
    assert not passed and message.startswith("quiz is '\N{GRINNING FACE}") and len(message) == verdict.MAX_MESSAGE


# ---------------------------------------------------------------------------------------------------------
# Exact numbers: reported as text by the kernel, read into floats by the grader
# ---------------------------------------------------------------------------------------------------------

EXACT = '''
from autograder.student.answers import AnswerError, as_integer, as_numbers, check_close

EXPECTED = [0.75, 0.5, 0.841470984808]
values = as_numbers(answer, "answer", 3)
check_close(values, EXPECTED, atol=1e-6, name="answer")
if as_integer(count, "count") != 12:
    raise AnswerError("count: not 12")
'''


def _kernel_reports(source: str, monkeypatch, **answers) -> tuple:
    """Run the kernel part of ``source`` with its reporter here, on ``answers``; return the split and the
    reports the grader reads from what it displayed."""
    split = split_hidden_tests(source)
    shown = []
    monkeypatch.setattr("IPython.display.display", lambda data, raw: shown.append(data[verdict.REPORT_MIME]))
    exec(f"{verdict.reporter_source(MARKER)}\n{split.kernel_source}", dict(answers))  # noqa: S102
    reports, problem = parse_reports("\n".join(shown), MARKER, split)
    assert problem is None
    return split, reports, shown


def test_fractions_decimals_and_sympy_numbers_pass_as_floats_read_by_the_grader(monkeypatch):
    answer = [fractions.Fraction(3, 4), decimal.Decimal("0.5"), sympy.sin(1)]
    split, reports, shown = _kernel_reports(EXACT, monkeypatch, answer=answer, count=sympy.Integer(12))
    assert '"fraction", "3/4"' in shown[0] and '"sympy", "sin(1)"' in shown[0]  # text, not a float
    assert decide(split, reports, None) == (True, "")
    split, reports, _ = _kernel_reports(EXACT, monkeypatch, answer=answer, count=fractions.Fraction(24, 2))
    assert decide(split, reports, None) == (True, "")


def test_a_wrong_exact_number_still_fails(monkeypatch):
    answer = [fractions.Fraction(3, 4), decimal.Decimal("0.5"), sympy.cos(1)]
    passed, message = decide(*_kernel_reports(EXACT, monkeypatch, answer=answer, count=12)[:2], None)
    assert not passed and "entry 2" in message
    answer = [fractions.Fraction(3, 4), decimal.Decimal("0.5"), sympy.sin(1)]
    half = decimal.Decimal("12.5")
    passed, message = decide(*_kernel_reports(EXACT, monkeypatch, answer=answer, count=half)[:2], None)
    assert (passed, message) == (False, "count is 12.5, which is not a whole number")


@pytest.mark.parametrize(
    "entry, fragment",
    [
        (decimal.Decimal("NaN"), "answer[1] is Decimal('NaN'), which is not a finite number"),
        (decimal.Decimal("Infinity"), "answer[1] is Decimal('Infinity'), which is not a finite number"),
        (sympy.I, "answer[1] is I, which is not a real number"),
        (1 + sympy.I, "answer[1] is 1 + I, which is not a real number"),
        (sympy.zoo, "answer[1] is the sympy value zoo, which is not a finite number"),
        (sympy.oo, "answer[1] is the sympy value oo, which is not a finite number"),
        (1 + 2j, "answer[1] is the complex number (1+2j); give a real number"),
    ],
)
def test_exact_numbers_that_are_not_finite_or_not_real_fail_with_a_message_naming_the_entry(
    monkeypatch, entry, fragment
):
    answer = [fractions.Fraction(3, 4), entry, sympy.sin(1)]
    split = split_hidden_tests(EXACT)
    shown = []
    monkeypatch.setattr("IPython.display.display", lambda data, raw: shown.append(data[verdict.REPORT_MIME]))
    try:
        kernel = f"{verdict.reporter_source(MARKER)}\n{split.kernel_source}"
        exec(kernel, {"answer": answer, "count": 12})  # noqa: S102
        kernel_error = None
    except Exception as error:  # noqa: BLE001 (a coercion in the kernel may refuse it there already)
        kernel_error = str(error)
    reports, problem = parse_reports("\n".join(shown), MARKER, split)
    passed, message = decide(split, reports, problem or kernel_error)
    assert not passed and message == fragment


@pytest.mark.parametrize(
    "fields",
    [
        ["x", "complex", "1+2j"],  # not a kind the kernel reports
        ["x", "fraction"],
        ["x", "fraction", 0.75],  # a float where text is read
        "3/4",
    ],
)
def test_malformed_exact_numbers_in_a_report_are_refused(fields):
    split = split_hidden_tests(QUIZ)
    reports, problem = parse_reports(_line(0, {"quiz": {"__exact__": fields}}), MARKER, split)
    assert problem is not None and reports == {}


def test_withheld_feedback_says_a_wrong_answer_is_wrong_and_nothing_that_gives_it_away():
    split = split_hidden_tests(VALUES)
    right, _ = parse_reports(f"{_line(0, {'values': [0.25, 0.5]})}\n{_line(1, {})}", MARKER, split)
    assert decide(split, right, None, withhold=True) == (True, "")
    for wrong_values in ([2.0, 4.0], [0.3, 0.5]):  # a named mistake, then a value that misses
        wrong, _ = parse_reports(f"{_line(0, {'values': wrong_values})}\n{_line(1, {})}", MARKER, split)
        shown = decide(split, wrong, None)[1]
        assert "doubled instead" in shown or "expected 0.25" in shown  # what full feedback gives away
        assert decide(split, wrong, None, withhold=True) == (False, verdict.WITHHELD)
    passed, message = decide(*_reports(QUIZ, quiz="C"), None, withhold=True)
    assert (passed, message) == (False, verdict.WITHHELD)


def test_withheld_feedback_still_says_what_form_is_asked_for():
    split = split_hidden_tests(VALUES)
    short, _ = parse_reports(f"{_line(0, {'values': [0.25]})}\n{_line(1, {})}", MARKER, split)
    passed, message = decide(split, short, None, withhold=True)
    assert not passed and "1 values, 2 are asked for" in message
    passed, message = decide(*_reports(QUIZ, quiz="E"), None, withhold=True)
    assert not passed and "answer with one of" in message
    assert decide(split, {}, "NameError: halve", withhold=True) == (False, "NameError: halve")


def test_the_fork_server_imports_sympy_only_for_notebooks_whose_checks_need_it():
    """sympy costs every stage 0.3 s of CPU in its fork server; only notebooks whose checks name a function
    that builds sympy values preload it (the course's: those whose source names ``check_expressions``)."""
    for assignment in ASSIGNMENTS:
        source = source_notebook(assignment).read_text(encoding="utf-8")
        splits = [split_hidden_tests(hidden) for cell in nbformat.read(source_notebook(assignment), as_version=4).cells
                  if (hidden := hidden_section(cell.source)) is not None]
        assert verdict.uses_sympy(splits) == ("check_expressions" in source), assignment
    assert "sympy" in verdict._preloaded(True) and not any("sympy" in name for name in verdict._preloaded(False))


def test_a_check_that_needs_sympy_is_decided_alike_when_the_fork_server_did_not_preload_it():
    """The preload changes a check's time only: in a fresh process whose fork server left sympy out, the
    expression check still passes the right answer and fails a wrong one."""
    program = textwrap.dedent(f'''
        import json, sys
        from autograder.verdicts.verdict import decide, parse_reports, split_hidden_tests
        split = split_hidden_tests({EXPRESSIONS!r})
        def verdict(pe):
            lines = [f"{MARKER} " + json.dumps({{"step": 0, "values": {{"pe": pe}}}}),
                     f"{MARKER} " + json.dumps({{"step": 1, "values": {{}}}})]
            reports, problem = parse_reports("\\n".join(lines), {MARKER!r}, split)
            return decide(split, reports, problem, preload_sympy=False)
        if __name__ == "__main__":
            right, wrong = verdict(["sin(2)", "sin(2/10000**(1/3))"]), verdict(["sin(2)", "cos(2)"])
            print(json.dumps([right, wrong, "sympy" in sys.modules]))
    ''')
    completed = subprocess.run([sys.executable, "-c", program], check=False, capture_output=True, text=True,
                               timeout=120, cwd=REPOSITORY)
    assert completed.returncode == 0, completed.stderr[-2000:]
    right, wrong, parent_imported_sympy = json.loads(completed.stdout)
    assert right == [True, ""] and wrong[0] is False and "PE(2)" in wrong[1]
    assert parent_imported_sympy is False  # the check's child imported sympy itself
