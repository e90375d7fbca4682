"""From a class's folder or zip to the notebooks that get graded: exact paths, archives that fight back, file
names and text that are not valid Unicode, and a batch whose failure deletes nothing (autograder.intake.submissions,
autograder.student.sanitize, autograder.grade). No kernel runs here but where a test says so."""

from __future__ import annotations

import csv
import json
import os
import zipfile
from pathlib import Path

import nbformat
import pytest

from autograder import grade as grade_module
from autograder.grade import grade
from autograder.intake.submissions import collect
from autograder.student.sanitize import prepare

ROOT = Path(__file__).resolve().parents[1]
ASSIGNMENTS = ("01_permutation", "02_sinusoidal", "03_learned", "04_relative", "05_rope", "06_comparison")
RELEASED = ROOT / "notebooks" / "01_permutation.ipynb"


def _put(root: Path, relative: str, content: bytes | None = None) -> Path:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(RELEASED.read_bytes() if content is None else content)
    return path


def test_only_student_assignment_notebook_paths_are_submissions(tmp_path):
    root = tmp_path / "class"
    _put(root, "victim/01_permutation/01_permutation.ipynb")
    forged = "aaron/01_permutation/victim/01_permutation/01_permutation.ipynb"
    _put(root, forged)
    _put(root, "stray.ipynb")
    received = tmp_path / "received"
    collection = collect(root, ASSIGNMENTS, received)
    found = {(s.student, s.assignment): s.path for s in collection.submissions}
    assert found == {
        ("victim", "01_permutation"): received / "victim" / "01_permutation" / "01_permutation.ipynb",
        ("aaron", "01_permutation"): None,  # his folder holds no notebook of its own
    }
    assert found["victim", "01_permutation"].read_bytes() == RELEASED.read_bytes()
    assert any(warning.startswith(forged) and "not graded" in warning for warning in collection.warnings)
    assert any(warning.startswith("stray.ipynb") for warning in collection.warnings)


def test_a_wrapping_folder_is_the_class_root_but_a_single_student_is_not(tmp_path):
    _put(tmp_path / "wrapped", "submitted/ada/01_permutation/01_permutation.ipynb")
    _put(tmp_path / "single", "ada/01_permutation/01_permutation.ipynb")
    for root in (tmp_path / "wrapped", tmp_path / "single"):
        collection = collect(root, ASSIGNMENTS, tmp_path / "received" / root.name)
        assert [(s.student, s.assignment) for s in collection.submissions] == [("ada", "01_permutation")], root


def test_a_zip_that_fights_back_loses_only_its_own_members(tmp_path):
    archive = tmp_path / "class.zip"
    notebook = RELEASED.read_bytes()
    with zipfile.ZipFile(archive, "w") as bundle:
        bundle.writestr("ada/01_permutation/01_permutation.ipynb", notebook)
        bundle.writestr("clash/01_permutation/01_permutation.ipynb", notebook)  # a file ...
        bundle.writestr("clash/01_permutation/01_permutation.ipynb/inner.ipynb", notebook)  # ... used as a folder
        bundle.writestr("dan/x.ipynb", notebook)  # a file ...
        bundle.writestr("dan/x.ipynb/01_permutation/01_permutation.ipynb", notebook)  # ... with a file under it
        bundle.writestr(zipfile.ZipInfo("eve/01_permutation/01_permutation.ipynb/"), b"")  # a folder ...
        bundle.writestr("eve/01_permutation/01_permutation.ipynb", notebook)  # ... and a file of one name
        bundle.writestr("long/01_permutation/" + "x" * 300 + ".ipynb", notebook)
        bundle.writestr("cy/01_permutation/01_permutation.ipynb", notebook)
    received = tmp_path / "received"
    collection = collect(archive, ASSIGNMENTS, received)
    found = {s.student: s for s in collection.submissions}
    assert set(found) == {"ada", "clash", "cy", "eve"}
    for student in ("ada", "cy"):
        assert found[student].path.read_bytes() == notebook
    for student in ("clash", "eve"):  # a name that is a file and a folder is not read
        assert found[student].path is None
        assert "used more than once in the zip" in found[student].reason
    assert any("longer than 255 bytes" in warning for warning in collection.warnings)
    assert any(warning.startswith("dan/x.ipynb/01_permutation") for warning in collection.warnings)
    assert not (received / "dan").exists()


def test_file_names_that_are_not_utf8_are_shown_escaped(tmp_path):
    folder = tmp_path / "class" / "ada" / "01_permutation"
    folder.mkdir(parents=True)
    name = os.fsdecode(b"r\xe9sum\xe9.ipynb")  # Latin-1 bytes: not UTF-8
    (folder / name).write_bytes(RELEASED.read_bytes())
    collection = collect(tmp_path / "class", ASSIGNMENTS, tmp_path / "received")
    [submission] = collection.submissions
    assert submission.notes == ("no 01_permutation.ipynb in the folder; r\\xe9sum\\xe9.ipynb was graded in its place",)
    "".join(submission.notes).encode("utf-8")  # can be written anywhere


def test_a_lone_surrogate_is_replaced_and_noted(tmp_path):
    notebook = json.loads(RELEASED.read_text())
    notebook["cells"][0]["source"] = ["text \\ud800 more"]
    path = tmp_path / "n.ipynb"
    path.write_text(json.dumps(notebook).replace("\\\\ud800", "\\ud800"))
    prepared = prepare(path, nbformat.read(RELEASED, as_version=4))
    assert prepared.notebook is not None
    assert prepared.notebook.cells[0].source == "text \ufffd more"
    assert any("lone surrogates" in note for note in prepared.notes)
    nbformat.writes(prepared.notebook).encode("utf-8")


def test_a_notebook_of_more_cells_than_the_cap_is_not_graded_and_says_why(tmp_path):
    released = nbformat.read(RELEASED, as_version=4)
    notebook = json.loads(RELEASED.read_text())
    def markdown(count):
        return [{"cell_type": "markdown", "id": f"x{index}", "metadata": {}, "source": "x"} for index in range(count)]

    path = tmp_path / "n.ipynb"
    path.write_text(json.dumps({**notebook, "cells": notebook["cells"] + markdown(2000 - len(notebook["cells"]))}))
    assert prepare(path, released).notebook is not None  # 2000 cells: graded
    path.write_text(json.dumps({**notebook, "cells": notebook["cells"] + markdown(200_000)}))
    prepared = prepare(path, released)
    assert prepared.notebook is None
    assert prepared.reason == (f"the notebook holds {len(notebook['cells']) + 200_000} cells; at most 2000 are "
                               "graded (the released notebook holds about 50)")


def test_a_notebook_of_another_format_than_nbformat_4_is_not_graded_and_says_why(tmp_path):
    """nbformat 3 keeps its cells under worksheets, past a count of "cells"; nbformat converts it whole."""
    released = nbformat.read(RELEASED, as_version=4)
    v3 = nbformat.v3.new_notebook(worksheets=[nbformat.v3.new_worksheet(
        cells=[nbformat.v3.new_text_cell("markdown", source="x") for _ in range(2500)])])
    path = tmp_path / "n.ipynb"
    path.write_text(nbformat.v3.writes_json(v3))
    prepared = prepare(path, released)
    assert prepared.notebook is None
    assert prepared.reason == ("the notebook's format is nbformat 3; only nbformat 4 is graded (the format of the "
                               "released notebook, which JupyterLab writes)")
    for version in (5, 10**9):
        path.write_text(json.dumps({**json.loads(RELEASED.read_text()), "nbformat": version}))
        prepared = prepare(path, released)
        assert prepared.notebook is None and "only nbformat 4 is graded" in prepared.reason, version
        assert str(10**9) not in prepared.reason
    for version in ("4", 4.0, None):
        path.write_text(json.dumps({**json.loads(RELEASED.read_text()), "nbformat": version}))
        prepared = prepare(path, released)
        assert prepared.notebook is None, version
        assert prepared.reason == "the file is JSON but not a Jupyter notebook (no nbformat version number)"


def test_changed_nbgrader_flags_and_cell_types_get_the_releases_back(tmp_path):
    released = nbformat.read(RELEASED, as_version=4)
    flags_of = {cell.metadata["nbgrader"]["grade_id"]: dict(cell.metadata["nbgrader"]) for cell in released.cells
                if "nbgrader" in cell.metadata}
    tests = [grade_id for grade_id, flags in flags_of.items() if flags.get("grade") and not flags.get("solution")]
    answers = [grade_id for grade_id, flags in flags_of.items() if flags.get("solution") and not flags.get("grade")]
    notebook = nbformat.read(RELEASED, as_version=4)
    by_id = {cell.metadata["nbgrader"]["grade_id"]: cell for cell in notebook.cells if "nbgrader" in cell.metadata}
    by_id[tests[0]].metadata["nbgrader"].update(grade=False, solution=True, locked=False)  # a test made an answer
    by_id[answers[0]].metadata["nbgrader"].update(grade=True, points=100)  # an answer made a 100-point test
    markdown = nbformat.v4.new_markdown_cell(by_id[tests[1]].source, metadata=by_id[tests[1]].metadata)
    notebook.cells[notebook.cells.index(by_id[tests[1]])] = markdown  # a test cell turned into markdown
    notebook.cells.append(nbformat.v4.new_code_cell("x = 1", metadata={"nbgrader": {
        "grade_id": "invented_test", "grade": True, "points": 50, "solution": False, "locked": True}}))
    notebook.cells.append(nbformat.v4.new_code_cell("y = 2", metadata={"nbgrader": {"grade_id": "z" * 100_000}}))
    path = tmp_path / "n.ipynb"
    nbformat.write(notebook, path)
    prepared = prepare(path, released)
    assert prepared.notebook is not None and prepared.reason is None
    graded = {cell.metadata["nbgrader"]["grade_id"]: cell for cell in prepared.notebook.cells
              if "nbgrader" in cell.metadata}
    for grade_id in (tests[0], answers[0], tests[1]):
        assert {flag: graded[grade_id].metadata["nbgrader"].get(flag) for flag in ("grade", "solution", "locked",
                "points", "task")} == {flag: flags_of[grade_id].get(flag) for flag in ("grade", "solution",
                                                                                      "locked", "points", "task")}
    assert graded[tests[1]].cell_type == "code" and graded[tests[1]].outputs == []
    assert "invented_test" not in graded and prepared.notebook.cells[-2].source == "x = 1"
    assert any(note.startswith(f"the cell '{'z' * 80}'... carries") for note in prepared.notes)
    assert max(len(note) for note in prepared.notes) < 300  # a student's name for a cell is cut in a note
    assert sum("were changed; the release's were used" in note for note in prepared.notes) == 3
    assert any("'invented_test' carries nbgrader metadata" in note for note in prepared.notes)
    nbformat.validate(prepared.notebook)


def _outputs(out: Path) -> dict[Path, bytes]:
    """The published outputs (not the gradebook, nor the records kept for a resumed run)."""
    return {
        path: path.read_bytes()
        for path in out.rglob("*")
        if path.is_file() and path.suffix != ".db" and ".autograder-records" not in path.parts
    }


def test_a_failed_batch_deletes_none_of_the_previous_results(tmp_path, monkeypatch):
    _put(tmp_path / "class", "ada/01_permutation/01_permutation.ipynb", b"not json")
    out = tmp_path / "out"
    grade(tmp_path / "class", out, jobs=1)
    before = _outputs(out)
    _put(tmp_path / "class", "bob/01_permutation/01_permutation.ipynb", b"not json either")

    def crash(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(grade_module, "write_report", crash)
    with pytest.raises(RuntimeError, match="disk full"):
        grade(tmp_path / "class", out, jobs=1)
    after = _outputs(out)
    assert after == before
    assert not any(path.name.startswith(".autograder-new") for path in out.iterdir())
    with open(out / "grades.csv") as handle:
        assert [row["student_id"] for row in csv.DictReader(handle)] == ["ada"]


def test_a_row_names_a_few_of_a_student_s_misplaced_files_and_counts_the_rest():
    """Round 19: the reasons of one student's misplaced files were joined whole: 1,990 of them made a reason of
    565 kB, repeated in every item's message, on the terminal and in items.csv. A row names five and counts the
    others, in at most 2,000 characters."""
    from autograder.grade import MAX_ROW_REASON, _rows_without_a_submission
    from autograder.intake.submissions import Skipped
    from autograder.types import LayoutItem

    skipped = [Skipped("mal", "01_permutation", f"mal/01_permutation/x/{number:04d}.ipynb: not graded: a "
                       "submission must be <student>/<assignment>/<notebook>.ipynb") for number in range(1990)]
    layout = (LayoutItem("perm-1", 2.0, "code"), LayoutItem("perm-2", 3.0, "code"))
    (row,) = _rows_without_a_submission([], skipped, ["01_permutation"], {"01_permutation": layout})
    assert row.reason.startswith(skipped[0].reason) and "; and 1985 more like these" in row.reason
    assert len(row.reason) <= MAX_ROW_REASON and all(item.message == row.reason for item in row.items)
    long = Skipped("ana", None, "ana/" + "n" * 5000 + ": not read")
    (row,) = _rows_without_a_submission([], [long], ["01_permutation"], {"01_permutation": layout})
    assert len(row.reason) == MAX_ROW_REASON and row.reason.endswith(f"[... {len(long.reason)} characters in all]")


def test_a_note_names_ten_of_the_other_notebooks_and_counts_the_rest(tmp_path):
    """Round 20: the note on the other notebooks of an assignment folder named them all (402,025 characters for a
    student's thousands of files, in report.txt and on the page)."""
    folder = tmp_path / "class" / "ada" / "01_permutation"
    folder.mkdir(parents=True)
    (folder / "01_permutation.ipynb").write_bytes(RELEASED.read_bytes())
    for number in range(500):
        (folder / f"other{number:03d}.ipynb").write_bytes(b"{}")
    collection = collect(tmp_path / "class", ASSIGNMENTS, tmp_path / "received")
    (submission,) = collection.submissions
    (note,) = [note for note in submission.notes if note.startswith("other notebooks")]
    assert note == ("other notebooks in the folder were not graded: "
                    + ", ".join(f"other{number:03d}.ipynb" for number in range(10)) + " and 490 more")
