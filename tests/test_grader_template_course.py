"""The grader's template course is made faster without changing what it holds.

- The template's gradebook, written without waiting for the disk, holds the same rows as one written the
  usual way, and only the template's database is changed: another SQLite file opened in the block, and the
  template's after it, keep SQLite's defaults.
- The class's gradebook gets the template's exercises in one transaction: the same rows as nbgrader's own
  commit-per-row writes, one commit, and nothing written when the copy fails half-way.
"""

from __future__ import annotations

import pytest
from sqlalchemy import create_engine, event, text

from autograder.course import TemporaryCourse
from autograder.gradebook import copy_assignments, open_gradebook

ASSIGNMENTS = ("01_permutation", "04_relative")
def _rows(database) -> dict[str, list[tuple]]:
    """Every exercise row of the gradebook at ``database``, as nbgrader's API reads it."""
    found: dict[str, list[tuple]] = {"assignments": [], "grade": [], "solution": [], "task": [], "source": []}
    with open_gradebook(f"sqlite:///{database}") as gradebook:
        for assignment in gradebook.assignments:
            found["assignments"].append((assignment.name, tuple(notebook.name for notebook in assignment.notebooks)))
            for notebook in assignment.notebooks:
                where = (assignment.name, notebook.name)
                found["grade"] += [(*where, cell.name, cell.max_score, cell.cell_type) for cell in notebook.grade_cells]
                found["solution"] += [(*where, cell.name) for cell in notebook.solution_cells]
                found["task"] += [(*where, cell.name, cell.max_score, cell.cell_type) for cell in notebook.task_cells]
                found["source"] += [(*where, cell.name, cell.cell_type, cell.locked, cell.source, cell.checksum)
                                    for cell in notebook.source_cells]
    return {kind: sorted(rows, key=repr) for kind, rows in found.items()}


def _pragmas(url: str) -> tuple[int, str]:
    engine = create_engine(url)
    with engine.connect() as connection:
        synchronous = connection.execute(text("PRAGMA synchronous")).scalar()
        journal = connection.execute(text("PRAGMA journal_mode")).scalar()
    engine.dispose()
    return synchronous, journal


@pytest.fixture(scope="module")
def two_templates(tmp_path_factory):
    root = tmp_path_factory.mktemp("templates")
    usual = TemporaryCourse(root / "usual", ASSIGNMENTS)
    for assignment in ASSIGNMENTS:
        usual.generate(assignment)
    fast = TemporaryCourse(root / "fast", ASSIGNMENTS)
    inside = {}
    with fast.gradebook_in_memory_only():
        for assignment in ASSIGNMENTS:
            fast.generate(assignment)
        inside["template"] = _pragmas(f"sqlite:///{fast.gradebook}")
        inside["another"] = _pragmas(f"sqlite:///{root / 'another.db'}")
    return usual, fast, inside


def test_the_template_written_in_memory_only_holds_the_same_exercises(two_templates):
    usual, fast, _ = two_templates
    expected = _rows(usual.gradebook)
    assert sum(map(len, expected.values())) > 20  # cells of both assignments
    assert _rows(fast.gradebook) == expected


def test_only_the_template_database_skips_the_disk_and_only_in_the_block(two_templates):
    _, fast, inside = two_templates
    assert inside["template"] == (0, "memory")  # synchronous OFF, journal in memory
    assert inside["another"][0] != 0 and inside["another"][1] != "memory"
    synchronous, journal = _pragmas(f"sqlite:///{fast.gradebook}")
    assert synchronous != 0 and journal != "memory"


def _commits(gradebook) -> list[int]:
    counted = []
    event.listen(gradebook.db.bind, "commit", lambda connection: counted.append(1))
    return counted


def test_the_class_gradebook_gets_the_exercises_in_one_commit(two_templates, tmp_path):
    usual, _, _ = two_templates
    with open_gradebook(f"sqlite:///{usual.gradebook}") as template, \
            open_gradebook(f"sqlite:///{tmp_path / 'class.db'}") as one_commit:
        commits = _commits(one_commit)
        copy_assignments(template, one_commit, ASSIGNMENTS)
        assert len(commits) == 1
    assert _rows(tmp_path / "class.db") == _rows(usual.gradebook)


def test_a_copy_that_fails_half_way_writes_nothing(two_templates, tmp_path, monkeypatch):
    usual, _, _ = two_templates
    with open_gradebook(f"sqlite:///{usual.gradebook}") as template, \
            open_gradebook(f"sqlite:///{tmp_path / 'class.db'}") as target:
        calls = []
        real = target.update_or_create_source_cell

        def fails_at_the_tenth(*args, **kwargs):
            calls.append(1)
            if len(calls) == 10:
                raise RuntimeError("the disk went away")
            return real(*args, **kwargs)

        monkeypatch.setattr(target, "update_or_create_source_cell", fails_at_the_tenth)
        with pytest.raises(RuntimeError, match="went away"):
            copy_assignments(template, target, ASSIGNMENTS)
        assert "commit" not in vars(target.db)  # the session commits again as nbgrader expects
    assert all(rows == [] for rows in _rows(tmp_path / "class.db").values())
