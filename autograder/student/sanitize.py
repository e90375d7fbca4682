"""What is wrong with a submission, and the notebook that gets graded.

nbgrader restores the content of read-only cells, the points and the kernelspec from its gradebook, but it
cannot grade a file that is not a notebook, and a deleted test cell would simply not run. Before grading,
each submission is compared with the released notebook of its assignment:

- a file that is not UTF-8 JSON, or not a valid notebook, cannot be graded: every item gets 0 and the
  feedback gives the reason; so does a link, a pipe or a device, a file larger than
  :data:`MAX_NOTEBOOK_BYTES` (:func:`read_notebook` never follows a link nor reads past that size), or a
  notebook of more than :data:`MAX_CELLS` cells (each cell costs the kernel's run and every renderer a step:
  200,000 empty cells within the size cap would cost each of them minutes);
- a deleted cell of the release (an instruction, an answer or a test cell, recognised by its nbgrader
  ``grade_id``) is put back after the cell that precedes it in the release: a restored test cell runs as
  usual, a restored answer cell holds the empty stub, so its item gets 0;
- an edited read-only cell, a duplicated ``grade_id`` and a kernel other than Python 3 are noted (nbgrader
  restores the first, ignores the second, replaces the third);
- a cell of the release whose nbgrader flags (``grade``, ``solution``, ``locked``, ``points``, ``task``) or
  type were changed (nbgrader's Create Assignment toolbar does it in two clicks) gets the release's back, and a
  cell whose ``grade_id`` the release does not have loses its nbgrader metadata, each with a note: nbgrader
  would otherwise stop on the whole notebook (a grade cell its gradebook does not know), where the change
  concerns one item at most;
- code that names the grader's helpers or the interpreter's module table (``autograder``, ``sys.modules``,
  ``builtins``) is noted for an instructor to read: the hidden tests run in the student's kernel, so such code
  could try to change how they judge.

Every finding becomes a note on the student's feedback.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nbformat
from nbformat import NotebookNode

from autograder.student.safe_files import DESCRIPTOR_RELATIVE, Folder, Refused, read_by_path

MAX_NOTEBOOK_BYTES = 50 * 1024**2
MAX_CELLS = 2_000  # the releases hold 40 to 54 cells; every cell costs each renderer and the kernel's run a step
_SURROGATE = re.compile("[\ud800-\udfff]")


@dataclass
class Prepared:
    """The notebook to grade (None when it cannot be graded), the reason if so, and the notes."""

    notebook: NotebookNode | None
    reason: str | None = None
    notes: list[str] = field(default_factory=list)


def _nbgrader(cell: Any) -> dict:
    metadata = cell.get("metadata", {}) if isinstance(cell, dict) else {}
    value = metadata.get("nbgrader", {}) if isinstance(metadata, dict) else {}
    return value if isinstance(value, dict) else {}


def _grade_id(cell: Any) -> str | None:
    grade_id = _nbgrader(cell).get("grade_id")
    return grade_id if isinstance(grade_id, str) else None


def describe(cell: NotebookNode) -> str:
    """How a cell of the release is named in a note: its role and its grade_id."""
    meta = _nbgrader(cell)
    if meta.get("grade") and meta.get("solution"):
        role = "the written answer"
    elif meta.get("grade"):
        role = "the test cell"
    elif meta.get("solution"):
        role = "the answer cell"
    else:
        role = "the read-only cell"
    return f"{role} '{meta.get('grade_id')}'"


def read_notebook(path: Path) -> tuple[NotebookNode | None, str | None]:
    """The notebook in ``path`` as nbformat 4, or None and the reason it cannot be read.

    ``path`` is opened without following a link in its last name, and only a regular file of at most
    :data:`MAX_NOTEBOOK_BYTES` bytes is read (its size is checked on the open file, before reading).
    """
    try:
        if DESCRIPTOR_RELATIVE:
            with Folder.open(path.parent) as folder:
                content = folder.read(path.name, MAX_NOTEBOOK_BYTES)
        else:  # a student's own machine without descriptor-relative opens (Windows)
            content = read_by_path(path, MAX_NOTEBOOK_BYTES)
    except Refused as error:
        return None, f"the file {error.why}"
    except OSError as error:
        return None, f"the file could not be opened ({error.strerror or type(error).__name__})"
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError as error:
        return None, f"the file is not UTF-8 text ({error.reason} at byte {error.start})"
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError as error:
        return None, f"the file is not valid JSON ({error.msg}: line {error.lineno}, column {error.colno})"
    except (RecursionError, MemoryError):  # JSON nested deeper than Python's parser goes
        return None, "the file is JSON nested too deeply to be read as a notebook"
    except ValueError:  # an integer longer than Python converts (4,300 digits)
        return None, "the file holds a number too long to be read as a notebook's"
    version = parsed.get("nbformat") if isinstance(parsed, dict) else None
    if type(version) is not int:
        return None, "the file is JSON but not a Jupyter notebook (no nbformat version number)"
    if version != 4:  # older formats hold their cells elsewhere (worksheets), past the count below
        shown = version if abs(version) < 1000 else "out of range"
        return None, (f"the notebook's format is nbformat {shown}; only nbformat 4 is graded (the format of the "
                      "released notebook, which JupyterLab writes)")
    cells = parsed.get("cells")
    if isinstance(cells, list) and len(cells) > MAX_CELLS:
        return None, (f"the notebook holds {len(cells)} cells; at most {MAX_CELLS} are graded (the released "
                      "notebook holds about 50)")
    try:
        notebook = nbformat.reads(text, as_version=4)
    except Exception as error:  # noqa: BLE001 (nbformat raises many types for JSON that is no notebook)
        return None, f"the file is JSON but not a Jupyter notebook ({type(error).__name__}: {error})"
    try:
        nbformat.validate(notebook)
    except nbformat.ValidationError as error:
        return None, f"the file is not a valid Jupyter notebook: {error.message}"
    return notebook, None


def _ensure_cell_ids(notebook: NotebookNode) -> None:
    """nbformat 4.5 cell ids on every cell, unique, so that restored cells (which carry ids) validate."""
    notebook.nbformat_minor = max(notebook.nbformat_minor, 5)
    seen: set[str] = set()
    for index, cell in enumerate(notebook.cells):
        cell_id = cell.get("id")
        if not isinstance(cell_id, str) or cell_id in seen:
            cell_id = f"cell-{index}"
            while cell_id in seen:
                cell_id += "-1"
            cell["id"] = cell_id
        seen.add(cell_id)


MAX_NAME_IN_NOTE = 80  # characters of a student's grade_id that a note repeats


def _named(grade_id: str) -> str:
    """A student's ``grade_id`` as a note shows it: quoted, cut at :data:`MAX_NAME_IN_NOTE` characters."""
    return f"'{grade_id[:MAX_NAME_IN_NOTE]}'" + ("..." if len(grade_id) > MAX_NAME_IN_NOTE else "")


def _drop_duplicate_ids(notebook: NotebookNode, notes: list[str]) -> None:
    seen: set[str] = set()
    for cell in notebook.cells:
        grade_id = _grade_id(cell)
        if grade_id is None:
            continue
        if grade_id in seen:
            del cell.metadata["nbgrader"]
            notes.append(f"a copy of the cell {_named(grade_id)} was found; only the first copy was graded")
        seen.add(grade_id)


FLAGS = ("grade", "solution", "locked", "points", "task")


def _restore_release_flags(notebook: NotebookNode, released: NotebookNode, notes: list[str]) -> None:
    """Each cell of the release: its type and nbgrader flags as released; a cell with a ``grade_id`` the release
    does not have: no nbgrader metadata."""
    originals = {_grade_id(cell): cell for cell in released.cells if _grade_id(cell)}
    for index, cell in enumerate(notebook.cells):
        grade_id = _grade_id(cell)
        if grade_id is None:
            continue
        original = originals.get(grade_id)
        if original is None:
            del cell.metadata["nbgrader"]
            notes.append(f"the cell {_named(grade_id)} carries nbgrader metadata that no cell of the release has; it was "
                         "graded as a plain cell")
            continue
        changed = cell.get("cell_type") != original.cell_type
        if changed:
            make = nbformat.v4.new_code_cell if original.cell_type == "code" else nbformat.v4.new_markdown_cell
            cell = notebook.cells[index] = make(source=cell.get("source", ""), metadata=cell.metadata, id=cell.get("id"))
        flags, released_flags = _nbgrader(cell), _nbgrader(original)
        for flag in FLAGS:
            if flags.get(flag) != released_flags.get(flag):
                changed = True
                if flag in released_flags:
                    flags[flag] = released_flags[flag]
                else:
                    flags.pop(flag, None)
        if changed:
            notes.append(f"the type or nbgrader flags of {describe(original)} were changed; the release's were used")


def _note_kernel(notebook: NotebookNode, notes: list[str]) -> None:
    kernelspec = notebook.metadata.get("kernelspec", {})
    name = kernelspec.get("name") if isinstance(kernelspec, dict) else None
    if name != "python3":
        notes.append(f"the notebook asked for the kernel {name!r}; it was run with Python 3 as released")


def _restore_missing_cells(notebook: NotebookNode, released: NotebookNode, notes: list[str]) -> None:
    present = {_grade_id(cell) for cell in notebook.cells} - {None}
    for released_index, released_cell in enumerate(released.cells):
        grade_id = _grade_id(released_cell)
        if grade_id is None or grade_id in present:
            continue
        position = 0
        for previous in reversed(released.cells[:released_index]):
            previous_id = _grade_id(previous)
            if previous_id in present:
                position = 1 + next(
                    i for i, cell in enumerate(notebook.cells) if _grade_id(cell) == previous_id
                )
                break
        restored = nbformat.from_dict(json.loads(json.dumps(released_cell)))
        restored["id"] = f"restored-{grade_id}"
        notebook.cells.insert(position, restored)
        present.add(grade_id)
        meta = _nbgrader(released_cell)
        consequence = " (the stub counts as no answer)" if meta.get("solution") else ""
        notes.append(f"{describe(released_cell)} was missing; it was restored from the release{consequence}")


def _note_edited_read_only_cells(notebook: NotebookNode, released: NotebookNode, notes: list[str]) -> None:
    locked = {
        _grade_id(cell): cell for cell in released.cells if _nbgrader(cell).get("locked") and _grade_id(cell)
    }
    for cell in notebook.cells:
        original = locked.get(_grade_id(cell))
        if original is not None and cell.get("source") != original.source:
            notes.append(f"{describe(original)} was edited; the original was used for grading")


SUSPICIOUS_NAMES = ("autograder", "sys.modules", "builtins", "__builtins__")


def _note_suspicious_code(notebook: NotebookNode, notes: list[str]) -> None:
    for index, cell in enumerate(notebook.cells):
        if cell.get("cell_type") != "code" or _nbgrader(cell).get("locked"):
            continue
        names = [name for name in SUSPICIOUS_NAMES if name in cell.get("source", "")]
        if names:
            where = f"'{_grade_id(cell)}'" if _grade_id(cell) else f"number {index}"
            notes.append(
                f"the code of cell {where} mentions {', '.join(names)}: an instructor should read it"
            )


def _replace_lone_surrogates(value: Any) -> tuple[Any, int]:
    """``value`` with every lone surrogate (JSON's ``"\\ud800"``, which no UTF-8 file can hold) replaced by
    U+FFFD; and how many strings changed."""
    if isinstance(value, str):
        fixed = _SURROGATE.sub("\ufffd", value)
        return fixed, int(fixed != value)
    if isinstance(value, list):
        pairs = [_replace_lone_surrogates(item) for item in value]
        return [item for item, _ in pairs], sum(count for _, count in pairs)
    if isinstance(value, dict):
        changed = 0
        for key in list(value):
            value[key], count = _replace_lone_surrogates(value[key])
            changed += count
        return value, changed
    return value, 0


def prepare(path: Path, released: NotebookNode) -> Prepared:
    """Read a submission and make it gradable against its released notebook; see the module docstring."""
    notebook, reason = read_notebook(path)
    if notebook is None:
        return Prepared(None, reason)
    notes: list[str] = []
    notebook, replaced = _replace_lone_surrogates(notebook)
    if replaced:
        notes.append(f"{replaced} text(s) held characters no file can store (lone surrogates); each became \ufffd")
    if not any(_grade_id(cell) for cell in notebook.cells):
        notes.append(
            "no cell of the notebook carries nbgrader's metadata (was it copied into a new notebook?)"
        )
    _ensure_cell_ids(notebook)
    _drop_duplicate_ids(notebook, notes)
    _restore_release_flags(notebook, released, notes)
    _note_kernel(notebook, notes)
    _note_edited_read_only_cells(notebook, released, notes)
    _note_suspicious_code(notebook, notes)
    _restore_missing_cells(notebook, released, notes)
    try:
        nbformat.validate(notebook)
    except nbformat.ValidationError as error:  # a restored cell or a repaired id did not fit the notebook
        return Prepared(None, f"the notebook could not be repaired for grading: {error.message}", notes)
    return Prepared(notebook, None, notes)
