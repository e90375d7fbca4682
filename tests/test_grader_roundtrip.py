"""Round trip: a planted class (tests/planted), zipped, graded by ``python -m autograder grade``.

The class is graded once for the module (it runs about thirty notebooks in kernels, two at a time on two
cores), then every test reads the outputs. The expected scores, failing items and messages are constants
written here from the exercises' definitions: a full solution earns every autograded point, a blank notebook
none (nor one whose code hides from its visible tests that it is graded), and each planted mistake loses exactly the items it touches, with feedback that names the mistake.
"""

from __future__ import annotations

import csv
import html
import shutil
import zipfile
from pathlib import Path

import nbformat
import pytest
from planted import build_class, grade_id, released, run_module

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
CELL_TIMEOUT = 15  # seconds; the planted endless loop is interrupted after this
EXPORT_HEADER = (
    "assignment,duedate,timestamp,student_id,last_name,first_name,email,raw_score,"
    "late_submission_penalty,score,max_score"
)
MAX_SCORES = {
    "01_permutation": 13,
    "02_sinusoidal": 16,
    "03_learned": 12,
    "04_relative": 16,
    "05_rope": 15,
    "06_comparison": 14,
}
AUTOGRADED = {
    "01_permutation": 13,
    "02_sinusoidal": 16,
    "03_learned": 12,
    "04_relative": 13,
    "05_rope": 12,
    "06_comparison": 14,
}
MANUAL_ITEMS = {"04_relative": "self_bias_answer", "05_rope": "long_context_answer"}
STUDENTS = ("blank", "broken", "cheat", "degrees", "doubled", "full", "halves", "mistakes", "swapped", "unset")
SHALLOW = "shallow"  # sends 04_relative.ipynb right inside the student's folder
SHALLOW_REASON = f"{SHALLOW}/04_relative.ipynb: not graded: a submission must be <student>/<assignment>/<notebook>.ipynb"

EXPECTED_SCORES = {
    ("full", "01_permutation"): 13,
    ("full", "02_sinusoidal"): 16,
    ("full", "03_learned"): 12,
    ("full", "04_relative"): 13,
    ("full", "05_rope"): 12,
    ("full", "06_comparison"): 14,
    ("degrees", "02_sinusoidal"): 13,
    ("degrees", "05_rope"): 11,
    ("doubled", "02_sinusoidal"): 11,
    ("doubled", "05_rope"): 11,
    ("swapped", "02_sinusoidal"): 13,
    ("swapped", "05_rope"): 11,
    ("halves", "02_sinusoidal"): 13,
    ("halves", "05_rope"): 11,
    ("mistakes", "01_permutation"): 4,
    ("mistakes", "03_learned"): 6,
    ("mistakes", "04_relative"): 7,
    ("mistakes", "05_rope"): 6,
    ("mistakes", "06_comparison"): 8,
    ("cheat", "02_sinusoidal"): 0,
    ("cheat", "04_relative"): 9,
    ("broken", "01_permutation"): 11,
    ("broken", "02_sinusoidal"): 0,
    ("broken", "03_learned"): 0,
    ("broken", "04_relative"): 11,
    ("broken", "05_rope"): 0,
    ("broken", "06_comparison"): 0,
    **{("blank", assignment): 0 for assignment in MAX_SCORES},
    **{("unset", assignment): 0 for assignment in MAX_SCORES},
}

# The autograded items that fail, each with a fragment of its feedback message.
DEGREES, DOUBLED = "angles were treated as degrees", "exponent is doubled"
SWAPPED, HALVES = "sin and cos are swapped", "halves layout"
EXPECTED_FAILURES = {
    ("degrees", "02_sinusoidal"): {"pe_d4_at_p_test": DEGREES, "pe_d6_at_p_test": DEGREES},
    ("degrees", "05_rope"): {"rope_test": DEGREES},
    ("doubled", "02_sinusoidal"): {
        "pe_d4_at_p_test": DOUBLED,
        "pe_d6_at_p_test": DOUBLED,
        "first_turn_test": DOUBLED,
    },
    ("doubled", "05_rope"): {"rope_test": DOUBLED},
    ("swapped", "02_sinusoidal"): {
        "pe_d4_at_p_test": SWAPPED,
        "pe_d6_at_p_test": SWAPPED,
    },
    ("swapped", "05_rope"): {"rope_test": SWAPPED},
    ("halves", "02_sinusoidal"): {
        "pe_d4_at_p_test": HALVES,
        "pe_d6_at_p_test": HALVES,
    },
    ("halves", "05_rope"): {"rope_test": "pairs (i, i + d/2) of the half layout"},
    ("mistakes", "01_permutation"): {
        "attention_test": "not scaled",
        "equivariance_test": "this measures invariance",
        "conclusions_test": "leaves in place",
        "maps_test": "missing ['h']",
        "blind_test": "do not hold the same tokens",
        "quiz_attention_symmetry_test": "not the best answer",
    },
    ("mistakes", "03_learned"): {
        "length_test": "a padded place takes no row",
        "extend_test": "frozen random rows never learn",
        "packed_counts_test": "the rows cut documents",
        "offset_test": "the offset is ignored",
    },
    ("mistakes", "04_relative"): {
        "bias_test": "the wrong way round",
        "bucket_test": "direction is reversed",
        "alibi_other_test": "not one geometric sequence",
        "t5_shared_test": "bucket of an encoder",
        "quiz_absolute_relative_test": "not the best answer",
    },
    ("mistakes", "05_rope"): {
        "relative_test": "the absolute value",
        "to_half_test": "the other conversion",
        "to_interleaved_test": "the other conversion",
        "slow_pairs_test": "do complete a turn in training",
        "quiz_raised_base_test": "not the best answer",
    },
    ("mistakes", "06_comparison"): {
        "choice_b_test": "choice_b is t5, which does not meet every constraint of your case",
        "parameters_test": "['shaw']",
        "shaw_memory_test": "these are bits",
        "seeds_test": "this is Bonferroni's correction",
    },
    ("cheat", "02_sinusoidal"): {
        item: "is an object of type __main__."
        for item in (
            "most_moved_test",
            "pe_d4_at_p_test",
            "pe_d6_at_p_test",
            "decode_test",
            "first_turn_test",
            "planted_bug_test",
            "dot_test",
            "quiz_formula_test",
            "quiz_frequencies_test",
            "quiz_combining_test",
        )
    },
    ("cheat", "04_relative"): {
        item: "is an object of type __main__."
        for item in (
            "bias_test",
            "bucket_test",
            "alibi_power_test",
            "alibi_other_test",
        )
    },
    ("broken", "04_relative"): {"alibi_power_test": "alibi_slopes", "alibi_other_test": "alibi_slopes"},
    ("broken", "01_permutation"): {"maps_test": "equivariant_maps"},
    ("full", "01_permutation"): {},
    ("full", "02_sinusoidal"): {},
    ("full", "03_learned"): {},
    ("full", "04_relative"): {},
    ("full", "05_rope"): {},
    ("full", "06_comparison"): {},
}
NOT_GRADED = {
    ("broken", "06_comparison"): "not valid JSON",
    ("broken", "02_sinusoidal"): "holds no notebook",
    ("broken", "03_learned"): "not a Jupyter notebook",
    ("broken", "05_rope"): "the kernel died",
}
NOTES = {
    ("broken", "04_relative"): [
        "the notebook asked for the kernel 'ir'",
        "the test cell 'bias_test' was missing",
        "the answer cell 'alibi_answer' was missing",
        "the read-only cell 'quiz_intro' was edited",
    ],
    ("broken", "01_permutation"): [f"a cell ran longer than {CELL_TIMEOUT} seconds and was interrupted"],
    ("degrees", "02_sinusoidal"): ["02_sinusoidal-Copy1.ipynb was graded in its place"],
}


def zip_folder(folder: Path, archive: Path) -> None:
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as bundle:
        for path in sorted(folder.rglob("*")):
            bundle.write(path, Path("submitted") / path.relative_to(folder))
        bundle.writestr("__MACOSX/submitted/full/02_sinusoidal/._02_sinusoidal.ipynb", "resource fork")


@pytest.fixture(scope="module")
def planted_class(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("planted")
    build_class(root / "submitted")
    shutil.copy(ROOT / "notebooks" / "04_relative.ipynb", root / "submitted" / "stray.ipynb")
    # A student's notebook one folder too high: never graded, but the student is found and gets rows.
    (root / "submitted" / SHALLOW).mkdir()
    shutil.copy(ROOT / "notebooks" / "04_relative.ipynb", root / "submitted" / SHALLOW / "04_relative.ipynb")
    return root


@pytest.fixture(scope="module")
def graded(planted_class) -> Path:
    archive = planted_class / "class.zip"
    zip_folder(planted_class / "submitted", archive)
    out = planted_class / "out"
    # The planted mistakes are written for the one answer key (variants off), so that the feedback can be
    # checked to name them; per-student variants are graded in tests/test_grader_variants.py.
    completed = run_module(
        "autograder", "grade", str(archive), "--out", str(out), "--timeout", str(CELL_TIMEOUT), "--variants", "off",
        timeout=1200,
    )
    assert completed.returncode == 0, completed.stderr[-4000:]
    (planted_class / "terminal.txt").write_text(completed.stdout, encoding="utf-8")
    return out


def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


@pytest.fixture(scope="module")
def grades(graded) -> dict[tuple[str, str], dict[str, str]]:
    return {(row["student_id"], row["assignment"]): row for row in read_csv(graded / "grades.csv")}


@pytest.fixture(scope="module")
def items(graded) -> dict[tuple[str, str], dict[str, dict[str, str]]]:
    table: dict[tuple[str, str], dict[str, dict[str, str]]] = {}
    for row in read_csv(graded / "items.csv"):
        table.setdefault((row["student_id"], row["assignment"]), {})[row["item"]] = row
    return table


def feedback_page(graded: Path, student: str, assignment: str) -> str:
    return (graded / "feedback" / student / assignment / f"{assignment}.html").read_text()


# -------------------------------------------------------------------------------------------- grades.csv


def test_grades_csv_has_nbgrader_export_columns_and_a_row_per_student_and_assignment(graded, grades):
    assert (graded / "grades.csv").read_text().splitlines()[0] == EXPORT_HEADER
    assert set(grades) == {(student, assignment) for student in (*STUDENTS, SHALLOW) for assignment in MAX_SCORES}


def test_every_planted_submission_gets_exactly_its_expected_score(grades):
    for (student, assignment), row in grades.items():
        expected = EXPECTED_SCORES.get((student, assignment), 0)  # 0: nothing submitted
        assert float(row["score"]) == expected, f"{student}/{assignment}"
        assert float(row["raw_score"]) == expected and float(row["late_submission_penalty"]) == 0
        assert float(row["max_score"]) == MAX_SCORES[assignment]


# -------------------------------------------------------------------------------------------- items


def test_wrong_answers_lose_exactly_their_items_with_feedback_naming_the_mistake(items):
    for key, failures in EXPECTED_FAILURES.items():
        graded_items = items[key]
        failed = {name for name, row in graded_items.items() if row["status"] == "failed"}
        assert failed == set(failures), f"{key}: failed {sorted(failed)}"
        for name, fragment in failures.items():
            assert fragment in graded_items[name]["message"], f"{key} {name}: {graded_items[name]['message']}"
        for name, row in graded_items.items():
            if name not in failures and row["status"] != "manual":
                assert row["status"] == "passed" and float(row["score"]) == float(row["max_score"]), (
                    key,
                    name,
                )


def test_every_released_notebook_fails_every_autograded_item(items):
    """nbgrader's stub left in every answer cell scores 0, and the feedback says which item is not answered;
    it still scores 0 when the student's own code hides from the visible tests that they are graded (the
    hidden tests fail then)."""
    for assignment in MAX_SCORES:
        graded_items = items["blank", assignment]
        for name, row in graded_items.items():
            assert row["status"] == "failed" and float(row["score"]) == 0, (assignment, name)
            if name != MANUAL_ITEMS.get(assignment):
                assert row["message"].startswith("NotAnswered: ") and "is not answered" in row["message"]
        for name, row in items["unset", assignment].items():
            assert row["status"] == "failed" and float(row["score"]) == 0, (assignment, name)
        autograded = sum(
            float(row["max_score"])
            for name, row in graded_items.items()
            if name != MANUAL_ITEMS.get(assignment)
        )
        assert autograded == AUTOGRADED[assignment]
        if assignment in MANUAL_ITEMS:
            assert graded_items[MANUAL_ITEMS[assignment]]["message"] == "no answer was written"


def test_written_answers_of_full_solutions_wait_for_an_instructor(items):
    for assignment, item in MANUAL_ITEMS.items():
        row = items["full", assignment][item]
        assert row["status"] == "manual" and float(row["score"]) == 0 and float(row["max_score"]) == 3


def test_objects_that_override_comparison_earn_no_point(grades, items):
    for assignment in ("02_sinusoidal", "04_relative"):
        cheated = [row for row in items["cheat", assignment].values() if "object of type" in row["message"]]
        assert cheated and all(float(row["score"]) == 0 for row in cheated)
    assert float(grades["cheat", "02_sinusoidal"]["score"]) == 0


# -------------------------------------------------------------------------------------------- robustness


def test_files_that_cannot_be_graded_get_zero_and_their_reason_in_the_feedback(graded, items):
    for (student, assignment), reason in NOT_GRADED.items():
        rows = items[student, assignment].values()
        assert all(row["status"] == "not graded" and reason in row["message"] for row in rows), (
            assignment,
            reason,
        )
        page = feedback_page(graded, student, assignment)
        assert "could not be graded" in page and html.escape(reason) in page


def test_repairs_and_interruptions_are_noted_on_the_feedback_and_in_the_report(graded):
    report = (graded / "report.txt").read_text()
    for (student, assignment), notes in NOTES.items():
        page = feedback_page(graded, student, assignment)
        for note in notes:
            assert html.escape(note) in page, (student, assignment, note)
            assert note in report


def test_every_submission_has_a_feedback_page_with_its_scores(graded, grades):
    for (student, assignment), row in grades.items():
        page = graded / "feedback" / student / assignment / f"{assignment}.html"
        submitted = (student, assignment) in EXPECTED_SCORES
        assert page.exists() == submitted, (student, assignment)
        if submitted and (student, assignment) not in NOT_GRADED:
            assert f"Score: {float(row['score'])} / {float(row['max_score'])}" in page.read_text()


def test_notebooks_outside_student_assignment_folders_are_reported_not_graded(graded):
    report = (graded / "report.txt").read_text()
    assert "stray.ipynb: not graded: a submission must be <student>/<assignment>/<notebook>.ipynb" in report
    assert "__MACOSX" not in report


def test_a_student_whose_notebook_was_not_read_has_rows_and_the_terminal_lists_it(planted_class, graded, grades,
                                                                                  items):
    for assignment, points in MAX_SCORES.items():
        row = grades[SHALLOW, assignment]
        assert (float(row["score"]), float(row["max_score"])) == (0.0, float(points))
    assert all(row["status"] == "not graded" and row["message"] == SHALLOW_REASON
               for row in items[SHALLOW, "04_relative"].values())
    assert (SHALLOW, "02_sinusoidal") not in items  # nothing of theirs was meant for 02: no submission
    assert f"{SHALLOW}/04_relative: 0 / {MAX_SCORES['04_relative']} (not graded: {SHALLOW_REASON})" in (
        graded / "report.txt").read_text()
    terminal = (planted_class / "terminal.txt").read_text()
    listed = terminal.split("Not graded (", 1)[1].split("\nWaiting for a hand grade", 1)[0].splitlines()
    assert f"- {SHALLOW}/04_relative: {SHALLOW_REASON}" in listed
    assert "- stray.ipynb: not graded: a submission must be <student>/<assignment>/<notebook>.ipynb" in listed
    for (student, assignment), reason in NOT_GRADED.items():
        assert any(line.startswith(f"- {student}/{assignment}: ") and reason in line for line in listed), reason


# -------------------------------------------------------------------------------------------- check


def test_check_runs_the_released_visible_tests_and_reports_what_passes(planted_class, tmp_path):
    notebook = nbformat.read(planted_class / "submitted" / "full" / "04_relative" / "04_relative.ipynb", 4)
    for cell in notebook.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == "bias_test":
            cell.source = "assert False, 'an edited test'"
    path = tmp_path / "04_relative.ipynb"
    nbformat.write(notebook, path)
    completed = run_module("autograder", "check", str(path))
    assert completed.returncode == 0, completed.stdout + completed.stderr[-3000:]
    assert "the test cell of 4.1 had been edited" in completed.stdout
    assert "10 of 10 visible tests pass" in completed.stdout
    assert "WRITTEN ANSWER  4.6" in completed.stdout


def test_check_of_a_blank_notebook_fails_and_names_each_test(planted_class):
    path = planted_class / "submitted" / "blank" / "04_relative" / "04_relative.ipynb"
    completed = run_module("autograder", "check", str(path))
    assert completed.returncode == 1
    assert "0 of 10 visible tests pass (10 not answered yet)" in completed.stdout
    assert "NOT ANSWERED  4.1" in completed.stdout and "NameError" not in completed.stdout


# -------------------------------------------------------------------------------------------- a folder


def test_a_folder_of_files_that_cannot_be_graded_is_graded_without_running_a_kernel(tmp_path):
    from autograder.grade import grade

    (tmp_path / "class" / "ada" / "01_permutation").mkdir(parents=True)
    (tmp_path / "class" / "ada" / "01_permutation" / "01_permutation.ipynb").write_text('{"cells": [')
    (tmp_path / "class" / "bob" / "03_learned").mkdir(parents=True)
    results = grade(tmp_path / "class", tmp_path / "out")
    outcome = {
        (result.student, result.assignment): (result.score, result.max_score, result.reason)
        for result in results
    }
    assert outcome == {
        ("ada", "01_permutation"): (0, 13, outcome["ada", "01_permutation"][2]),
        ("bob", "01_permutation"): (0, 13, "no submission"),
        ("ada", "03_learned"): (0, 12, "no submission"),
        ("bob", "03_learned"): (0, 12, "the folder holds no notebook"),
    }
    assert "not valid JSON" in outcome["ada", "01_permutation"][2]
    assert "could not be graded" in feedback_page(tmp_path / "out", "ada", "01_permutation")
    assert not (tmp_path / "out" / "feedback" / "bob" / "01_permutation").exists()


def test_explorer_cells_are_a_comment_while_grading(graded):
    # The full 02_sinusoidal submission keeps the released explorer cells (widgets.*_explorer()); its grade is
    # the full score above, and its feedback shows them as comments, with no widget or figure in the output.
    explorers = [
        cell
        for cell in released("02_sinusoidal").cells
        if cell.cell_type == "code" and (grade_id(cell) or "").startswith("explore_")
    ]
    assert len(explorers) == 3
    page = feedback_page(graded, "full", "02_sinusoidal")
    assert page.count("an explorer, not run while grading") == len(explorers)
    assert "application/vnd.jupyter.widget-view+json" not in page
