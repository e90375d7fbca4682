"""The red team's tamper attacks under PLAIN nbgrader: evidence that the red-team suite has teeth.

tests/test_grader_redteam.py shows that ``python -m autograder grade`` gives every attack 0 (its
``test_attack_earns_no_point_and_leaks_nothing`` is parametrized over all of ``ATTACKS``, so it covers every
attack named here; this module does not regrade them with our grader). Here the attacks that patch Python
objects or the kernel's machinery are graded the way ``autograder/bench.py`` grades: one ``nbgrader
autograde`` run in a temporary course, kernels unsandboxed, the hidden tests run in the student's own kernel.
The scores are read from nbgrader's gradebook. A blank released notebook, graded in the same run, is the
control: it earns 0, so every point an attack earns comes from its attack.

Only attacks that tamper with the kernel are run here, never the destructive or probing ones
(``kill_every_process`` sends SIGKILL to every process it may signal: unsandboxed, it would take down the
machine). The expected scores are derived from the hidden tests of
``autograder/source/01_permutation/01_permutation.ipynb`` (points: attention_test 2, causal_test 1,
equivariance_test 1, conclusions_test 1, maps_test 2, blind_test 2, count_test 2, quiz_attention_symmetry_test 1,
quiz_bag_of_words_test 1; 13 in all).
"""

from __future__ import annotations

import os
import re
import textwrap

import pytest
from planted import write_submission
from redteam import ASSIGNMENT, ATTACKS, attack_notebook, released

from autograder.course import NbgraderError, TemporaryCourse, run_app
from autograder.sandbox.launcher import ENVIRONMENT_VARIABLE
from autograder.student.kernels import kernel_environment_set

pytestmark = [
    pytest.mark.slow,
    # nbgrader's own use of SQLAlchemy warns when it records a submission; not ours to fix.
    pytest.mark.filterwarnings("ignore::sqlalchemy.exc.SAWarning"),
]

CELL_TIMEOUT = 20  # seconds; no selected notebook needs it (each runs in about 3 s)
MAX_SCORE = 13.0
CONTROL = "blank"  # the released notebook, no answer written
GRADED_CELLS = (
    "attention_test",
    "causal_test",
    "equivariance_test",
    "conclusions_test",
    "maps_test",
    "blind_test",
    "count_test",
    "quiz_attention_symmetry_test",
    "quiz_bag_of_words_test",
)

# The attacks graded here: those whose code patches Python objects or the kernel's machinery. Left out:
# ``patch_builtins`` (replacing builtins.isinstance and builtins.type breaks ipykernel's own messaging, so
# the first cell never gets a reply: under plain nbgrader it only costs a full cell timeout plus the IOPub
# timeout, about 25 s, then nbgrader gives up on the notebook like ``patch_json_and_display`` below, earning
# 0) and every destructive or probing attack.
SELECTED = (
    "patch_answers_module",
    "patch_torch_and_numpy",
    "patch_json_and_display",
    "rewrite_later_cells",
    "forge_reports",
    "hide_errors",
)

# The attacks that gain points under plain nbgrader, with the cells they are credited for. Deterministic:
# nbgrader credits a graded code cell in full when it runs without an error output.
# - rewrite_later_cells: its input transformer turns every later cell into ``pass``, hidden tests included, so
#   every graded cell runs without error: all 13 points.
# - patch_answers_module: ``check_close`` does nothing, so its wrong answers of the right shapes pass: a
#   self_attention that returns zeros (attention_test, 2 points; not causal_test: its rows of zeros do not change
#   when the first token does either, which 1.2 requires since round 12) and an equivariance_error that returns
#   0.0 (equivariance_test, 1).
#   It also sets ``quiz_attention_symmetry = "A"`` and replaces ``as_choice`` by a function that returns "B":
#   plain nbgrader runs the hidden tests with the source's letters (it knows no per-student order), where "B"
#   is wrong for Quiz 1 (the source's "C") and right for Quiz 2 (the source's "B"), 1 point; conclusions_test,
#   maps_test, blind_test and count_test fail on names the attack never defines: 4 points.
GAINING_SCORES = {"rewrite_later_cells": 13.0, "patch_answers_module": 4.0}
GAINING_CELLS = {
    "rewrite_later_cells": set(GRADED_CELLS),
    "patch_answers_module": {"attention_test", "equivariance_test", "quiz_bag_of_words_test"},
}
# The others earn 0 under plain nbgrader as well, each for its own reason:
# - forge_reports rewrites only cells holding our grader's AUTOGRADER-REPORT marker, which plain nbgrader's
#   cells never hold, so every graded cell fails on a name the blank notebook does not define;
# - hide_errors swallows the error output, but ipykernel still replies with status "error", and nbgrader's
#   Execute.on_cell_executed then appends an error output of its own;
# - patch_torch_and_numpy defines a self_attention that returns zeros and patches Tensor.tolist; the hidden
#   tests read the tensor through autograder.student.answers, get the forged [[1.1, 1.7]] * 3 and compare it with
#   the expected values (1.1 is not 1.09953... within 1e-5) and shapes ((3, 2) is not (4, 3));
# - patch_json_and_display replaces json.dumps, with which jupyter_client packs every message the kernel
#   sends: the replies carry no msg_id, nbgrader fails on that notebook and records the submission with 0.
NO_GAIN = ("forge_reports", "hide_errors", "patch_torch_and_numpy", "patch_json_and_display")
UNGRADABLE = {"patch_json_and_display"}
FAILED_NOTEBOOK = re.compile(r"There was an error processing assignment '[^']+' for student '([^']+)'")


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    """Grade the control and the selected attacks in one plain ``nbgrader autograde`` run."""
    from nbgrader.api import Gradebook
    from nbgrader.converters import Autograde
    from nbgrader.coursedir import CourseDirectory

    course = TemporaryCourse(tmp_path_factory.mktemp("plain"), [ASSIGNMENT])
    course.generate(ASSIGNMENT)
    submitted = course.directory / "submitted"
    write_submission(submitted, CONTROL, ASSIGNMENT, released(ASSIGNMENT))
    for name in SELECTED:
        write_submission(submitted, name, ASSIGNMENT, attack_notebook(textwrap.dedent(ATTACKS[name][1]).strip()))
    with pytest.MonkeyPatch.context() as patch:
        # Without this variable the kernel launcher (autograder.sandbox.main) starts a plain ipykernel.
        patch.delenv(ENVIRONMENT_VARIABLE, raising=False)
        with kernel_environment_set(course.jupyter_directory):
            assert ENVIRONMENT_VARIABLE not in os.environ
            config = course.config(timeout=CELL_TIMEOUT)
            directory = CourseDirectory(config=config)
            directory.assignment_id = ASSIGNMENT
            app = Autograde(coursedir=directory, config=config)
            app.create_student = True
            try:
                log = run_app(app)
            except NbgraderError as error:  # nbgrader grades every notebook it can, then reports the others
                log = str(error)
    with Gradebook(f"sqlite:///{course.gradebook}") as gradebook:
        scores, credited = {}, {}
        for student in (CONTROL, *SELECTED):
            submission = gradebook.find_submission(ASSIGNMENT, student)
            scores[student] = (submission.score, submission.max_score)
            credited[student] = {
                grade.name for notebook in submission.notebooks for grade in notebook.grades if grade.score
            }
    return {"scores": scores, "credited": credited, "failed": set(FAILED_NOTEBOOK.findall(log))}


def test_the_selection_is_red_team_attacks_and_leaves_out_the_dangerous_ones():
    assert set(SELECTED) <= set(ATTACKS)
    assert CONTROL not in ATTACKS
    assert set(GAINING_SCORES) | set(NO_GAIN) == set(SELECTED)
    assert not set(GAINING_SCORES) & set(NO_GAIN)
    never = {
        "kill_every_process",
        "fork_bomb",
        "allocate_without_bound",
        "read_files_nearby",
        "write_gradebook_and_outputs",
        "open_sockets",
        "loop_forever",
        "huge_output_and_files",
        "kill_own_kernel",
        "exit_the_interpreter",
    }
    assert never <= set(ATTACKS)
    assert not never & set(SELECTED)


def test_a_blank_notebook_earns_nothing_under_plain_nbgrader(plain):
    assert plain["scores"][CONTROL] == (0.0, MAX_SCORE)
    assert plain["credited"][CONTROL] == set()


@pytest.mark.parametrize("attack", sorted(GAINING_SCORES))
def test_the_attack_gains_points_under_plain_nbgrader(plain, attack):
    score, max_score = plain["scores"][attack]
    assert max_score == MAX_SCORE
    assert score > 0
    assert score == GAINING_SCORES[attack]
    assert plain["credited"][attack] == GAINING_CELLS[attack]


@pytest.mark.parametrize("attack", NO_GAIN)
def test_the_attack_gains_nothing_under_plain_nbgrader_either(plain, attack):
    assert plain["scores"][attack] == (0.0, MAX_SCORE)
    assert plain["credited"][attack] == set()


def test_only_the_attack_on_the_kernels_messages_stops_plain_nbgrader(plain):
    assert plain["failed"] == UNGRADABLE
