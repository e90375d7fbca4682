"""The course's notebooks as files, how the grader splits their hidden tests, and how submissions are found
and repaired; no kernel runs here.

The points per assignment are written below by hand: they are the ones announced in the students' guide
(book/guide_students.md) and in each notebook's table, and the tests check that the guide's table and the
nbgrader metadata give the same numbers.
"""

from __future__ import annotations

import ast
import json
import os
import re
import sys
import zipfile
from pathlib import Path

import nbformat
import pytest

from autograder import ASSIGNMENTS, REPOSITORY, released_notebook, source_notebook
from autograder.authoring.release import COLAB_CELL_ID
from autograder.course import TemporaryCourse, write_kernelspec
from autograder.intake.submissions import collect
from autograder.student.kernels import kernel_environment
from autograder.student.sanitize import prepare, read_notebook
from autograder.verdicts.template import harden_gradebook
from autograder.verdicts.verdict import CHECKS, SECRET_PREFIXES, Split, hidden_section, reporter_source

# (autograded points, manually graded points) per assignment.
POINTS = {
    "01_permutation": (13, 0),
    "02_sinusoidal": (16, 0),
    "03_learned": (12, 0),
    "04_relative": (13, 3),
    "05_rope": (12, 3),
    "06_comparison": (14, 0),
}
QUIZ_QUESTIONS = 15


def nbgrader(cell) -> dict:
    return cell["metadata"].get("nbgrader", {})


def hidden_part(source: str) -> str:
    start, end = source.index("### BEGIN HIDDEN TESTS"), source.index("### END HIDDEN TESTS")
    return source[start:end]


@pytest.fixture(scope="module")
def sources() -> dict[str, nbformat.NotebookNode]:
    return {
        assignment: nbformat.read(source_notebook(assignment), as_version=4) for assignment in ASSIGNMENTS
    }


@pytest.fixture(scope="module")
def releases() -> dict[str, nbformat.NotebookNode]:
    return {
        assignment: nbformat.read(released_notebook(assignment), as_version=4) for assignment in ASSIGNMENTS
    }


# ------------------------------------------------------------------------------------------- the sources


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_points_per_assignment_are_the_announced_ones(sources, assignment):
    auto = sum(
        nbgrader(c)["points"]
        for c in sources[assignment].cells
        if nbgrader(c).get("grade") and c.cell_type == "code"
    )
    manual = sum(
        nbgrader(c)["points"]
        for c in sources[assignment].cells
        if nbgrader(c).get("grade") and c.cell_type == "markdown"
    )
    assert (auto, manual) == POINTS[assignment]
    # the total's row, with or without an empty cell for the column of kinds
    table_total = re.search(r"\| \*\*total\*\* \|(?: \|)? \*\*(\d+)\*\* \|", sources[assignment].cells[0].source)
    assert table_total and int(table_total.group(1)) == auto + manual


def test_the_students_guide_announces_the_points_of_every_notebook():
    text = (REPOSITORY / "book" / "guide_students.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `notebooks/(\w+)\.ipynb` \| (\d+) \| (\d+) \| (\d+) \|$", text, flags=re.MULTILINE)
    assert {name: (int(auto), int(manual)) for name, auto, manual, _ in rows} == POINTS
    assert all(int(total) == int(auto) + int(manual) for _, auto, manual, total in rows), rows


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_every_cell_carries_nbgrader_metadata_with_unique_ids_and_the_python3_kernel(sources, assignment):
    notebook = sources[assignment]
    ids = [nbgrader(cell).get("grade_id") for cell in notebook.cells]
    assert None not in ids and len(ids) == len(set(ids))
    assert all(nbgrader(cell).get("schema_version") == 3 for cell in notebook.cells)
    assert notebook.metadata.kernelspec.name == "python3"


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_every_test_cell_has_hidden_tests_that_import_nothing_the_answers_come_from(sources, assignment):
    for cell in sources[assignment].cells:
        meta = nbgrader(cell)
        if meta.get("grade") and cell.cell_type == "code":
            assert meta["locked"] and meta["points"] > 0
            hidden = hidden_part(cell.source)
            assert "posenc_ref" not in hidden, (
                f"{meta['grade_id']}: an expected value must not come from posenc_ref"
            )
            imports = re.findall(r"^(?:from|import) (\S+)", hidden, flags=re.MULTILINE)
            assert set(imports) <= {"autograder.student.answers"}, f"{meta['grade_id']} imports {imports}"


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_every_answer_is_a_solution_region_and_every_written_answer_has_a_mark_scheme(sources, assignment):
    for cell in sources[assignment].cells:
        meta = nbgrader(cell)
        if meta.get("solution"):
            assert "### BEGIN SOLUTION" in cell.source and "### END SOLUTION" in cell.source
            if cell.cell_type == "markdown":
                assert meta["grade"] and "**Mark scheme" in cell.source


def test_the_quiz_questions_are_spread_over_the_chapters_with_varied_answers(sources):
    quizzes = {
        assignment: [
            nbgrader(cell)["grade_id"]
            for cell in notebook.cells
            if re.fullmatch(r"quiz_\w+_test", nbgrader(cell).get("grade_id", ""))
        ]
        for assignment, notebook in sources.items()
    }
    assert sum(len(ids) for ids in quizzes.values()) == QUIZ_QUESTIONS
    assert all(quizzes.values()), f"a chapter without quiz questions: {quizzes}"
    letters = []
    for notebook in sources.values():
        for cell in notebook.cells:
            if re.fullmatch(r"quiz_\w+_test", nbgrader(cell).get("grade_id", "")):
                letters += re.findall(r'^EXPECTED_CHOICE = "([ABCD])"', cell.source, flags=re.MULTILINE)
    assert len(letters) == QUIZ_QUESTIONS and len(set(letters)) == 4


def test_only_the_chapter_that_builds_on_posenc_ref_imports_it(sources):
    """The exercises import posenc_ref only in chapter 6; the locked explorer cells import its widgets only."""
    importing, explorer_imports = set(), set()
    for assignment, notebook in sources.items():
        for cell in notebook.cells:
            if cell.cell_type != "code" or not ("import" in cell.source and "posenc_ref" in cell.source):
                continue
            if nbgrader(cell).get("grade_id", "").startswith("explore_"):
                explorer_imports |= set(re.findall(r"^\s*(?:from|import) (\S+.*)$", cell.source, re.MULTILINE))
            else:
                importing.add(assignment)
    assert importing == {"06_comparison"}
    assert explorer_imports == {"posenc_ref import widgets"}


# ------------------------------------------------------------------------------------------- grading time

MARKER = "AUTOGRADER-REPORT-" + "0" * 32
LITERAL_NODES = (ast.Constant, ast.List, ast.Tuple, ast.Set, ast.BinOp, ast.UnaryOp)
OPERATOR_NODES = (ast.operator, ast.unaryop, ast.expr_context)


@pytest.fixture(scope="module")
def hardened(tmp_path_factory) -> dict[str, tuple[dict[str, Split], list[str], dict[str, str]]]:
    """Per assignment, as the grader prepares it: the splits, the cells left whole, and each test cell's
    source in the template gradebook (what the student's kernel runs and the feedback page shows)."""
    from nbgrader.api import Gradebook

    course = TemporaryCourse(tmp_path_factory.mktemp("hardened"), ASSIGNMENTS)
    prepared = {}
    for assignment in ASSIGNMENTS:
        released = nbformat.read(course.generate(assignment), as_version=4)
        splits, whole = harden_gradebook(course.gradebook, assignment, released, MARKER)
        with Gradebook(f"sqlite:///{course.gradebook}") as gradebook:
            notebook = gradebook.find_notebook(assignment, assignment)
            sources = {cell.name: cell.source for cell in notebook.source_cells}
        prepared[assignment] = (splits, whole, sources)
    return prepared


def _literal(node: ast.AST):
    """The value of an expression written with literals only (``17 / 64`` included), else None."""
    if not all(isinstance(sub, LITERAL_NODES + OPERATOR_NODES) for sub in ast.walk(node)):
        return None
    return eval(compile(ast.Expression(node), "<literal>", "eval"), {"__builtins__": {}})


def _canonical(value):
    return tuple(_canonical(item) for item in value) if isinstance(value, list | tuple) else value


def _pieces(value, whole: bool = True):
    """What of a grader-side value must not be written in the kernel's part: the value itself, every sequence
    of two or more items in it and every string (a single number in a sequence can be an input too: 0.5)."""
    if isinstance(value, list | tuple | set | frozenset):
        if whole or len(value) >= 2:
            yield repr(_canonical(sorted(value, key=repr) if isinstance(value, set | frozenset) else value))
        for item in value:
            yield from _pieces(item, whole=False)
    elif whole or isinstance(value, str):
        yield repr(value)


def _kernel_literals(tree: ast.AST) -> set[str]:
    values = (_literal(node) for node in ast.walk(tree) if isinstance(node, ast.expr))
    return {repr(_canonical(value)) for value in values if value is not None}


def _checked_literals(source: str):
    """The literal values a check compares an answer with: operands of comparisons, and the expected values
    and mistakes given to check_close / check_expressions."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in CHECKS:
            mistakes = [keyword.value for keyword in node.keywords if keyword.arg == "mistakes"]
            operands = [*node.args[1:], *mistakes]
        else:
            continue
        for operand in operands:
            value = _literal(operand)
            if value is not None:
                yield value


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_every_hidden_test_is_split_and_decided_outside_the_students_kernel(sources, hardened, assignment):
    splits, whole, gradebook_sources = hardened[assignment]
    tests = set()
    for cell in sources[assignment].cells:
        if nbgrader(cell).get("grade") and hidden_section(cell.source) is not None:
            tests.add(nbgrader(cell)["grade_id"])
    assert whole == [], f"{assignment}: the hidden tests of {whole} would run whole in the student's kernel"
    assert set(splits) == tests
    for grade_id, split in splits.items():
        ran = hidden_section(gradebook_sources[grade_id])
        assert ran.strip() == f"{reporter_source(MARKER)}\n{split.kernel_source}".strip(), grade_id


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_no_expected_value_or_named_mistake_is_written_in_the_kernels_part(hardened, assignment):
    splits, _, _ = hardened[assignment]
    for grade_id, split in splits.items():
        where = f"{assignment} {grade_id}"
        assert not re.search(rf"\b(?:{'|'.join(SECRET_PREFIXES)})", split.kernel_source), where
        kernel = ast.parse(split.kernel_source)
        in_kernel = _kernel_literals(kernel)
        kernel_names = {node.id for node in ast.walk(kernel) if isinstance(node, ast.Name)}
        constants = {}
        exec(compile(split.constants, "<constants>", "exec"), {}, constants)  # noqa: S102 (source/: trusted)
        grader_only = {name: value for name, value in constants.items() if name not in kernel_names}
        assert {name for name in constants if name.startswith(SECRET_PREFIXES)} <= set(grader_only), where
        checked = [value for step in split.steps for value in _checked_literals(step.source)]
        for value in [*grader_only.values(), *checked]:
            leaked = set(_pieces(value)) & in_kernel
            assert not leaked, f"{where}: the kernel's part holds {sorted(leaked)[:3]}"


# ------------------------------------------------------------------------------------------- the releases


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_released_notebooks_hold_no_solution_hidden_test_or_mark_scheme(releases, assignment):
    text = nbformat.writes(releases[assignment])
    for secret in (
        "BEGIN SOLUTION",
        "END SOLUTION",
        "BEGIN HIDDEN TESTS",
        "Mark scheme",
        "Model answer",
        "autograder.student.answers",
    ):
        assert secret not in text
    for cell in releases[assignment].cells:
        meta = nbgrader(cell)
        if cell.get("id") == COLAB_CELL_ID:  # outside nbgrader (autograder/authoring/release.py), read-only in JupyterLab
            assert not meta and cell.metadata["editable"] is False and cell.metadata["deletable"] is False
            continue
        if meta.get("solution"):
            assert cell.source == ("# YOUR CODE HERE" if cell.cell_type == "code" else "YOUR ANSWER HERE")
        if meta.get("grade_id") == "student_id":  # the one line a student writes outside the answers
            assert not meta.get("locked") and not meta.get("grade") and cell.source.startswith('STUDENT_ID = ""')
            continue
        if not meta.get("solution"):
            assert meta.get("locked"), f"{meta.get('grade_id')} should be read-only"


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_released_notebooks_have_the_cells_and_points_of_their_source(sources, releases, assignment):
    def layout(notebook):
        return [(nbgrader(c)["grade_id"], c.cell_type, nbgrader(c).get("points")) for c in notebook.cells
                if c.get("id") != COLAB_CELL_ID]  # the released notebooks' one cell outside nbgrader

    assert layout(releases[assignment]) == layout(sources[assignment])


# ------------------------------------------------------------------------------------------- submissions


def write_notebook(path: Path, notebook) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(notebook, path)
    return path


def test_collect_finds_student_assignment_folders_and_reports_the_rest(tmp_path):
    released = nbformat.read(released_notebook("04_relative"), as_version=4)
    write_notebook(tmp_path / "class" / "ada" / "04_relative" / "04_relative.ipynb", released)
    write_notebook(tmp_path / "class" / "bob" / "04_relative" / "Untitled.ipynb", released)
    write_notebook(tmp_path / "class" / "bob" / "04_relative" / ".ipynb_checkpoints" / "x.ipynb", released)
    write_notebook(tmp_path / "class" / "eve" / "homework" / "04_relative.ipynb", released)
    write_notebook(tmp_path / "class" / "bad id!" / "04_relative" / "04_relative.ipynb", released)
    (tmp_path / "class" / "carl" / "03_learned").mkdir(parents=True)
    collection = collect(tmp_path / "class", ASSIGNMENTS, tmp_path / "received")
    found = {(s.student, s.assignment): s for s in collection.submissions}
    assert set(found) == {("ada", "04_relative"), ("bob", "04_relative"), ("carl", "03_learned")}
    assert found["bob", "04_relative"].path.name == "Untitled.ipynb"
    assert "Untitled.ipynb was graded in its place" in found["bob", "04_relative"].notes[0]
    assert found["carl", "03_learned"].path is None
    assert any("unknown assignment 'homework'" in warning for warning in collection.warnings)
    assert any("'bad id!' is not a valid student id" in warning for warning in collection.warnings)


def test_a_zip_is_read_for_notebooks_only_and_never_outside_its_folder(tmp_path):
    archive = tmp_path / "class.zip"
    with zipfile.ZipFile(archive, "w") as bundle:
        bundle.writestr("submitted/ada/04_relative/04_relative.ipynb", "{}")
        bundle.writestr("submitted/ada/04_relative/autograder/student/answers.py", "print('shadow')")
        bundle.writestr("../escape.ipynb", "{}")
        bundle.writestr("/absolute.ipynb", "{}")
    received = tmp_path / "received"
    collection = collect(archive, ("04_relative",), received)
    copied = sorted(str(path.relative_to(received)) for path in received.rglob("*") if path.is_file())
    assert copied == ["ada/04_relative/04_relative.ipynb"]
    assert len(collection.warnings) == 2 and not (tmp_path / "escape.ipynb").exists()
    with pytest.raises(ValueError, match="is not a zip file"):
        collect(received / "ada" / "04_relative" / "04_relative.ipynb", ("04_relative",), tmp_path / "again")


# ------------------------------------------------------------------------------------------- repairs


@pytest.mark.parametrize(
    "content, fragment",
    [
        ('{"cells": [', "not valid JSON"),
        ('{"cells": "none"}', "not a Jupyter notebook"),
        (
            '{"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [{"cell_type": "code"}]}',
            "missing an expected key",
        ),
        (b"\xff\xfe\x00", "not UTF-8"),
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),  # round 16: RecursionError, a grader's failure
        ('{"nbformat": 4, "x": ' + "9" * 5000 + "}", "a number too long"),  # round 20: ValueError, the same
    ],
)
def test_files_that_are_not_notebooks_cannot_be_graded_and_say_why(tmp_path, content, fragment):
    path = tmp_path / "submission.ipynb"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    notebook, reason = read_notebook(path)
    assert notebook is None and fragment in reason


def test_deleted_cells_are_restored_after_their_predecessor_and_noted(tmp_path):
    released = nbformat.read(released_notebook("04_relative"), as_version=4)
    submission = json.loads(json.dumps(released))
    ids = [nbgrader(cell).get("grade_id") for cell in released.cells]
    submission["cells"] = [
        cell
        for cell in submission["cells"]
        if nbgrader(cell).get("grade_id") not in ("bias_test", "alibi_answer")
    ]
    submission["metadata"]["kernelspec"] = {"name": "ir", "display_name": "R", "language": "R"}
    path = tmp_path / "04_relative.ipynb"
    path.write_text(json.dumps(submission))
    prepared = prepare(path, released)
    assert [nbgrader(cell).get("grade_id") for cell in prepared.notebook.cells] == ids
    notes = " | ".join(prepared.notes)
    assert "the test cell 'bias_test' was missing" in notes
    assert "the answer cell 'alibi_answer' was missing" in notes and "no answer" in notes
    assert "kernel 'ir'" in notes


def test_edited_read_only_cells_and_duplicated_ids_are_noted(tmp_path):
    released = nbformat.read(released_notebook("04_relative"), as_version=4)
    submission = json.loads(json.dumps(released))
    test_cell = next(c for c in submission["cells"] if nbgrader(c).get("grade_id") == "bias_test")
    test_cell["source"] = "pass  # I made the test pass"
    submission["cells"].append({**json.loads(json.dumps(test_cell)), "id": "copy-of-test"})
    path = tmp_path / "04_relative.ipynb"
    path.write_text(json.dumps(submission))
    prepared = prepare(path, released)
    assert any("the test cell 'bias_test' was edited" in note for note in prepared.notes)
    assert any("a copy of the cell 'bias_test'" in note for note in prepared.notes)
    assert sum(nbgrader(cell).get("grade_id") == "bias_test" for cell in prepared.notebook.cells) == 1


def test_code_that_reaches_for_the_grader_is_flagged_for_an_instructor(tmp_path):
    released = nbformat.read(released_notebook("04_relative"), as_version=4)
    submission = json.loads(json.dumps(released))
    answer = next(c for c in submission["cells"] if nbgrader(c).get("grade_id") == "bias_answer")
    answer["source"] = (
        "import sys\nsys.modules['autograder.student.answers'] = None\nrelative_bias_weights = [0, 0, 0]"
    )
    path = tmp_path / "04_relative.ipynb"
    path.write_text(json.dumps(submission))
    notes = prepare(path, released).notes
    assert notes == [
        "the code of cell 'bias_answer' mentions autograder, sys.modules: an instructor should read it"
    ]


def test_kernels_resolve_to_this_interpreter_and_see_the_repository(tmp_path, monkeypatch):
    from jupyter_client.kernelspec import KernelSpecManager

    write_kernelspec(tmp_path)
    environment = kernel_environment(tmp_path, {"PATH": "/usr/bin", "JUPYTER_PATH": "/elsewhere"})
    assert environment["JUPYTER_PATH"].split(os.pathsep) == [str(tmp_path), "/elsewhere"]
    assert environment["PYTHONPATH"].split(os.pathsep)[0] == str(REPOSITORY)
    assert environment["PATH"].split(os.pathsep)[0] == str(Path(sys.executable).parent)  # nbgrader's alembic
    monkeypatch.setenv("JUPYTER_PATH", environment["JUPYTER_PATH"])
    assert KernelSpecManager().get_kernel_spec("python3").argv[0] == sys.executable


def _quiz_items(notebook) -> list[tuple[str, dict[str, str], str]]:
    """``(stem, options by letter, right letter)`` of each lettered quiz question of a source notebook, read from
    the question's markdown, its options cell (``my_parameters.show_options("Quiz 1", [...])``, the source's
    order A to D) and its hidden test's expected letter (``EXPECTED_CHOICE``, in the source's order)."""
    import ast

    cells = {nbgrader(cell).get("grade_id"): cell for cell in notebook.cells}
    items = []
    for grade_id, cell in cells.items():
        if not re.fullmatch(r"quiz_\w+_question", grade_id or ""):
            continue
        call = ast.parse(cells[grade_id.replace("_question", "_options")].source).body[0].value
        options = dict(zip("ABCD", (element.value for element in call.args[1].elts), strict=True))
        stem = cell.source
        [right] = re.findall(r'^EXPECTED_CHOICE = "([ABCD])"', cells[grade_id.replace("_question", "_test")].source,
                             flags=re.MULTILINE)
        items.append((stem, options, right))
    return items


def test_the_right_option_of_a_quiz_is_not_given_away_by_its_length_or_its_letter(sources):
    """A test-wise student who picks the longest option, or always the same letter, must gain little.

    With four options of unrelated lengths the right one is the longest in a quarter of the questions. The
    limits leave room for small numbers without letting length become a signal: at most 40% of a notebook's
    questions (none of one or two, one of three) and at most 35% of the course's (4 of 12), ties counted as
    longest. The right letters are spread: every letter is right somewhere and none in more than half.
    """
    longest_by_notebook, letters = {}, []
    for assignment, notebook in sources.items():
        items = _quiz_items(notebook)
        assert items, assignment
        longest = 0
        for stem, options, right in items:
            assert sorted(options) == ["A", "B", "C", "D"], (assignment, stem[:60])
            lengths = {letter: len(text) for letter, text in options.items()}
            longest += lengths[right] >= max(lengths.values())
            letters.append(right)
        assert longest <= 0.4 * len(items), f"{assignment}: the right option is the longest in {longest}"
        longest_by_notebook[assignment] = longest
    assert sum(longest_by_notebook.values()) <= 0.35 * len(letters), longest_by_notebook
    assert set(letters) == set("ABCD") and max(letters.count(letter) for letter in "ABCD") <= len(letters) / 2


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


def test_no_quiz_stem_holds_a_phrase_of_its_right_option_that_the_wrong_ones_lack(sources):
    """Four consecutive words shared by a question and its right option alone point at the answer."""
    for assignment, notebook in sources.items():
        for stem, options, right in _quiz_items(notebook):
            words = _words(options[right])
            stem_text = " ".join(_words(stem))
            wrong_text = " ".join(" ".join(_words(text)) for letter, text in options.items() if letter != right)
            for start in range(len(words) - 3):
                phrase = " ".join(words[start : start + 4])
                assert phrase not in stem_text or phrase in wrong_text, (assignment, phrase)


def test_the_choice_of_a_position_kind_is_not_named_in_its_case():
    """Each case of 6.1 states constraints; none describes its kind by the kind's own mechanism, not even in the
    name of the variable it sets (cases and variables are lettered: `choice_c`)."""
    notebook = nbformat.read(source_notebook("06_comparison"), as_version=4)
    cases = {nbgrader(cell)["grade_id"]: cell.source.lower() for cell in notebook.cells
             if re.fullmatch(r"choice_\w+_question", nbgrader(cell).get("grade_id", ""))}
    giveaways = {"slope", "alibi", "rotat", "bucket", "bins", "rope", "t5", "shaw", "sinusoid"}
    assert sorted(cases) == [f"choice_{letter}_question" for letter in "abcde"]
    for grade_id, text in cases.items():
        assert not {word for word in giveaways if word in text}, grade_id


def test_mark_schemes_and_explanations_speak_of_the_course_only(sources):
    for assignment, notebook in sources.items():
        text = nbformat.writes(notebook).lower()
        assert "seed text" not in text and "the seed" not in text, assignment


def test_a_course_directory_made_in_the_repository_is_not_committed():
    """The guide has the instructor run `python -m autograder course --out course/` at the repository's root: the
    students' notebooks collected there stay out of the repository's commits."""
    import subprocess

    root = Path(__file__).resolve().parents[1]
    ignored = subprocess.run(["git", "check-ignore", "-q", "course/submitted/ana/01_permutation/01_permutation.ipynb"],
                             cwd=root, check=False)
    assert ignored.returncode == 0


@pytest.mark.parametrize(
    ("command", "out", "words"),
    [
        ("grade", "README.md", "--out must be a folder (new or existing), got README.md, which is a file"),
        ("grade", "autograder/out", "--out must lie outside"),
        ("grade", "posenc_ref/graded", "--out must lie outside"),
        ("grade", "/proc/no-such-folder/graded", "--out /proc/no-such-folder/graded cannot be created"),
        ("publish", "/proc/no-such-folder/edition", "--out /proc/no-such-folder/edition cannot be written"),
        ("publish", "README.md", "--out must be a new or an empty folder"),
    ],
)
def test_a_bad_output_folder_gets_one_line_naming_it_and_exit_2(tmp_path, command, out, words):
    """The instructors' commands as typed from the repository's root, with an --out they cannot use: one line on
    standard error that names --out and its value, exit status 2, no traceback, nothing written."""
    import subprocess

    root = Path(__file__).resolve().parents[1]
    status = ["git", "status", "--porcelain"]
    before = subprocess.run(status, cwd=root, capture_output=True, text=True, check=True).stdout
    arguments = [str(tmp_path)] if command == "grade" else []
    completed = subprocess.run([sys.executable, "-m", "autograder", command, *arguments, "--out", out], cwd=root,
                               capture_output=True, text=True, timeout=120, check=False)
    assert completed.returncode == 2, completed.stderr
    lines = completed.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0] and "Traceback" not in completed.stderr, completed.stderr
    assert subprocess.run(status, cwd=root, capture_output=True, text=True, check=True).stdout == before
