"""Each chapter's list of what its notebook grades must be the notebook's own list, or the build fails.

A chapter's exercises section ends its paragraph on the notebook with "It grades:" and a Markdown table of
the graded items and their points; the released notebook, ``notebooks/<chapter>.ipynb``, opens with a cell
holding the same table. When Sphinx reads a chapter (``source-read``), the rows of the chapter's table are
compared with the rows of the notebook's: a chapter whose table differs, or that names no notebook there is,
fails the build with both lists. (tests/test_book_exercise_lists.py checks the same against the notebooks'
sources.)
"""

from pathlib import Path
from typing import Any

import nbformat
from sphinx.application import Sphinx
from sphinx.errors import ExtensionError

LEAD = "It grades:\n\n"


def table_rows(text: str) -> list[str]:
    """The lines of the Markdown table at the start of ``text`` (up to the first line that is not a row)."""
    rows = []
    for line in text.splitlines():
        if not line.startswith("|"):
            break
        rows.append(line)
    return rows


def notebook_rows(path: Path) -> list[str]:
    """The table lines of the notebook's opening cell (the one that starts with "# Chapter")."""
    cells = nbformat.read(path, as_version=4).cells
    intro = next((cell.source for cell in cells if cell.source.startswith("# Chapter")), "")
    return [line for line in intro.splitlines() if line.startswith("|")]


def _check_the_list(app: Sphinx, docname: str, source: list[str]) -> None:
    if LEAD not in source[0]:
        return
    chapter = table_rows(source[0].split(LEAD, 1)[1])
    notebook = Path(app.srcdir) / "notebooks" / f"{Path(docname).name}.ipynb"
    if not notebook.is_file():
        raise ExtensionError(f"{docname}: lists what a notebook grades, but there is no {notebook}")
    expected = notebook_rows(notebook)
    if chapter != expected:
        raise ExtensionError(f"{docname}: the list after {LEAD.strip()!r} is not the one of {notebook}:\n"
                             + "\n".join(chapter) + "\n-- the notebook's:\n" + "\n".join(expected))


def setup(app: Sphinx) -> dict[str, Any]:
    app.connect("source-read", _check_the_list)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
