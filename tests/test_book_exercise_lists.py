"""Each chapter lists what its notebook grades, item by item: the list must be the notebook's own."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import nbformat
import pytest
from sphinx.errors import ExtensionError

ROOT = Path(__file__).resolve().parents[1]
# book/_ext is not a package: the extension is imported from its folder, as Sphinx imports it.
sys.path.insert(0, str(ROOT / "book" / "_ext"))
import graded_items

ASSIGNMENTS = ("01_permutation", "02_sinusoidal", "03_learned", "04_relative", "05_rope", "06_comparison")
LEAD = "It grades:"
HEADER = ["| exercise | points |", "| --- | --- |"]
# The table with each item's kind (prediction, diagnosis, ..., recall) as a column of its own.
KIND_HEADER = ["| exercise | kind | points |", "| --- | --- | --- |"]


def table_after(text: str, lead: str) -> list[str]:
    """The rows of the Markdown table that starts on the line after the blank line after ``lead``."""
    assert text.count(lead) == 1, f"{lead!r} must appear exactly once"
    lines = text.split(lead, 1)[1].splitlines()  # the rest of the lead's line, a blank line, the table
    assert lines[:2] == ["", ""] and lines[2:4] in (HEADER, KIND_HEADER), lines[:4]
    rows = []
    for line in lines[4:]:
        if not line.startswith("|"):
            break
        rows.append(line)
    return rows


def notebook_table(assignment: str) -> list[str]:
    intro = nbformat.read(ROOT / "autograder" / "source" / assignment / f"{assignment}.ipynb", as_version=4).cells[0]
    lines = intro.source.splitlines()
    header = KIND_HEADER if KIND_HEADER[0] in lines else HEADER
    start = lines.index(header[0])
    assert lines[start + 1] == header[1]
    return [line for line in lines[start + 2 :] if line.startswith("|")]


def points(rows: list[str]) -> list[float]:
    return [float(row.strip("|").split("|")[-1].strip().strip("*")) for row in rows]


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_the_chapter_lists_the_items_and_points_of_its_notebook(assignment):
    book = (ROOT / "book" / f"{assignment}.md").read_text()
    listed = table_after(book, LEAD)
    assert listed == notebook_table(assignment)
    assert sum(points(listed[:-1])) == points(listed)[-1]  # the rows add up to the total
    assert f"{{download}}`notebooks/{assignment}.ipynb <../notebooks/{assignment}.ipynb>`" in book
    assert f"python -m autograder check notebooks/{assignment}.ipynb" in book


def test_a_list_that_lost_a_row_is_caught():
    rows = notebook_table("02_sinusoidal")
    text = "\n".join([LEAD, "", *HEADER, *rows[1:], "", "More text."])
    assert table_after(text, LEAD) != rows


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_the_build_accepts_each_chapter_with_its_released_notebook_and_not_one_row_less(assignment):
    text = (ROOT / "book" / f"{assignment}.md").read_text()
    app = SimpleNamespace(srcdir=str(ROOT))
    graded_items._check_the_list(app, f"book/{assignment}", [text])  # no error
    first_item = table_after(text, LEAD)[0]
    with pytest.raises(ExtensionError, match="is not the one of"):
        graded_items._check_the_list(app, f"book/{assignment}", [text.replace(first_item + "\n", "", 1)])


def test_the_build_fails_on_a_chapter_list_that_lost_a_row_or_names_no_notebook(tmp_path):
    (tmp_path / "notebooks").mkdir()
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(
        "# Chapter 9\n\n" + "\n".join([*HEADER, "| 9.1 one | 1 |", "| 9.2 two | 2 |", "| **total** | **3** |"]))])
    nbformat.write(notebook, tmp_path / "notebooks" / "09_test.ipynb")
    app = SimpleNamespace(srcdir=str(tmp_path))
    whole = "\n".join([*HEADER, "| 9.1 one | 1 |", "| 9.2 two | 2 |", "| **total** | **3** |"])
    graded_items._check_the_list(app, "book/09_test", [f"{LEAD}\n\n{whole}\n\nMore text."])
    short = "\n".join([*HEADER, "| 9.1 one | 1 |", "| **total** | **3** |"])
    with pytest.raises(ExtensionError, match="is not the one of"):
        graded_items._check_the_list(app, "book/09_test", [f"{LEAD}\n\n{short}\n\nMore text."])
    with pytest.raises(ExtensionError, match="there is no"):
        graded_items._check_the_list(app, "book/10_none", [f"{LEAD}\n\n{whole}\n"])
