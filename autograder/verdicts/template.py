"""The template gradebook that every submission is graded against, prepared once per run.

nbgrader's autograde puts every locked cell of a submission back from the gradebook's copy of the source (a
student cannot change them), so what the student's kernel runs in those cells is decided here:

- test cells whose hidden part can be split (:mod:`autograder.verdicts.verdict`) keep only the calls of the student's
  code and the reporter; the expected values and the checks stay in the grader's process;
- explorer cells (``explore_*``: interactive figures for the student, no points) become a comment: they
  import matplotlib and ipywidgets and draw figures, which is most of a kernel's work besides torch, and no
  grade depends on them.
"""

from __future__ import annotations

import copy

import nbformat

from autograder.verdicts.verdict import Split, hidden_section, kernel_cell_source, split_hidden_tests

EXPLORER_PREFIX = "explore_"


def _put_back_source(released_cell, source_cell, source: str) -> None:
    """Replace a locked cell's source in the gradebook, with the checksum nbgrader checks it against."""
    from nbgrader.utils import compute_checksum

    source_cell.source = source
    cell = copy.deepcopy(released_cell)
    cell.source = source
    source_cell.checksum = compute_checksum(cell)


def harden_gradebook(
    gradebook_path, assignment: str, released: nbformat.NotebookNode, marker: str
) -> tuple[dict[str, Split], list[str]]:
    """Put the kernel part of every hidden test that can be split into the template gradebook.

    Returns the splits by grade_id (decided in the grader) and the test cells left whole (graded in the
    kernel, as in plain nbgrader).
    """
    from nbgrader.api import Gradebook

    released_cells = {cell.metadata.get("nbgrader", {}).get("grade_id"): cell for cell in released.cells}
    splits, whole = {}, []
    with Gradebook(f"sqlite:///{gradebook_path}") as gradebook:
        notebook = gradebook.find_notebook(assignment, assignment)
        for grade_cell in notebook.grade_cells:
            source_cell = gradebook.find_source_cell(grade_cell.name, assignment, assignment)
            hidden = hidden_section(source_cell.source or "")
            if hidden is None:
                continue
            split = split_hidden_tests(hidden)
            if split is None:
                whole.append(grade_cell.name)
                continue
            source = kernel_cell_source(source_cell.source, split, marker)
            _put_back_source(released_cells[grade_cell.name], source_cell, source)
            splits[grade_cell.name] = split
        gradebook.db.commit()
    return splits, sorted(whole)


def quiet_explorers(gradebook_path, assignment: str, released: nbformat.NotebookNode) -> list[str]:
    """Make every locked explorer cell of ``assignment`` a comment in the template gradebook.

    A locked code cell whose grade_id starts with ``explore_`` and that carries no points becomes
    ``# <its first line>: an explorer, not run while grading``. Returns the grade_ids changed.
    """
    from nbgrader.api import Gradebook

    explorers = {}
    for cell in released.cells:
        meta = cell.metadata.get("nbgrader", {})
        grade_id = meta.get("grade_id", "")
        if (
            cell.cell_type == "code"
            and grade_id.startswith(EXPLORER_PREFIX)
            and meta.get("locked")
            and not meta.get("grade")
            and not meta.get("solution")
        ):
            explorers[grade_id] = cell
    with Gradebook(f"sqlite:///{gradebook_path}") as gradebook:
        for grade_id, cell in explorers.items():
            source_cell = gradebook.find_source_cell(grade_id, assignment, assignment)
            calls = [line for line in cell.source.splitlines() if line.strip() and not line.startswith("from ")]
            source = f"# {calls[-1] if calls else grade_id}: an explorer, not run while grading"
            _put_back_source(cell, source_cell, source)
        gradebook.db.commit()
    return sorted(explorers)
