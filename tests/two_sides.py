"""The two sides of the course as the tests see them: the answer key as texts to search for, which a file given to
students (the kernel's view, the student edition) must not hold, and the modules a Python file imports.

The texts are computed here with the grader's side, outside whatever is searched: the expected values and named
mistakes of every varied item (:mod:`autograder.variants`, for the one answer key and two students), the constants
of every hidden test, the solutions and the mark schemes of ``autograder/source/``. Each needle is searched for
as it is and as a notebook's JSON holds it.
"""

from __future__ import annotations

import ast
import json
import pickle
import re
import subprocess
import sys
from pathlib import Path

import nbformat

from autograder import ASSIGNMENTS, source_notebook

SOLUTION = re.compile(r"### BEGIN SOLUTION\n(.*?)### END SOLUTION", re.DOTALL)
HIDDEN_BEGIN = "### BEGIN HIDDEN TESTS"
MARK_SCHEME = "**Mark scheme"
# A whole solution shorter than this is one short statement (`answer = 3`, `maps_answer = "b"`), whose text can
# stand in any file; a longer one is an answer written out. Solutions are searched whole, not line by line:
# single lines of a solution also stand, rightly, in posenc_ref and in the code a notebook gives
# (`cos, sin = torch.cos(angles), torch.sin(angles)`).
MIN_SOLUTION_CHARACTERS = 40
# A line of a mark scheme or a model answer shorter than this is a heading or a point count ("(3 points).**").
MIN_PROSE_CHARACTERS = 30


def needles_of(value, found: set[str]) -> None:
    """Texts by which an expected value or a mistake's description would show in a file: long strings as they
    are, floats as Python and the hidden tests write them (repr, 12 significant digits), and lists whole. A
    single word or name (a choice the notebook offers, such as "sinusoidal" or "half_layout") and a short list
    ([0, 0]) say nothing of an answer."""
    if type(value) is str:
        if len(value) >= 8 and not value.isidentifier():
            _add_text(value, found)
    elif type(value) is float:
        for text in (repr(value), f"{value:.12g}"):
            if len(text.lstrip("-0.")) >= 8:  # enough digits to be this value and no other
                found.add(text)
    elif type(value) in (list, tuple):
        if len(value) > 1 and all(type(item) in (int, float) for item in value) and len(repr(list(value))) >= 12:
            found.add(repr(list(value)))
        for item in value:
            needles_of(item, found)
    elif type(value) is dict:
        for item in value.values():
            needles_of(item, found)


def _add_text(text: str, found: set[str]) -> None:
    found.add(text)
    found.add(json.dumps(text)[1:-1])  # as a notebook's JSON holds it


def _searched(path: Path) -> bytes:
    """The bytes of ``path``, and for a notebook the text of its cells too: a notebook's JSON holds a cell's
    source as a list of lines, where a needle of several lines does not show whole."""
    data = path.read_bytes()
    if path.suffix == ".ipynb":
        try:
            cells = json.loads(data).get("cells", [])
        except (ValueError, AttributeError):
            return data
        texts = ["".join(source) if isinstance(source := cell.get("source", ""), list) else str(source)
                 for cell in cells if isinstance(cell, dict)]
        data += "\n".join(["", *texts]).encode()
    return data


def holding(folder: Path, needles: set[str]) -> dict[str, list[str]]:
    """The files under ``folder`` that contain any of ``needles``, with the needles they contain."""
    hits = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            data = _searched(path)
            inside = sorted(needle for needle in needles if needle.encode() in data)
            if inside:
                hits[str(path.relative_to(folder))] = inside
    return hits


def variant_needles(variant, students=("", "ana", "ben")) -> set[str]:
    """The expected values and mistakes of one varied item, for the one answer key and ``students``."""
    from autograder.student.parameters import draw

    found: set[str] = set()
    for student in students:
        parameters = draw(variant, student) if student else variant.answer_key
        needles_of(variant.constants(parameters), found)
    return found


def every_variant_needle() -> dict[str, set[str]]:
    """:func:`variant_needles` of every varied item, by item number."""
    from autograder.variants import variants_of

    return {variant.item: variant_needles(variant) for assignment in ASSIGNMENTS for variant in variants_of(assignment)}


def hidden_test_needles() -> dict[str, set[str]]:
    """The constants of every hidden test of every assignment (the fixed items' answers too), read from source/,
    by ``<assignment>/<grade id>``."""
    from item_grading import hidden_constants, source_cells

    found = {}
    for assignment in ASSIGNMENTS:
        for grade_id, source in source_cells(assignment).items():
            if HIDDEN_BEGIN in source:
                needles: set[str] = set()
                needles_of(hidden_constants(assignment, grade_id), needles)
                found[f"{assignment}/{grade_id}"] = needles
    return found


def written_answer_needles() -> dict[str, set[str]]:
    """The solutions (whole, :data:`MIN_SOLUTION_CHARACTERS`), and the lines of the model answers and mark
    schemes (:data:`MIN_PROSE_CHARACTERS`), of every source notebook, by ``<assignment>/<grade id>``."""
    found = {}
    for assignment in ASSIGNMENTS:
        for cell in nbformat.read(source_notebook(assignment), as_version=4).cells:
            needles: set[str] = set()
            for solution in SOLUTION.findall(cell.source):
                if cell.cell_type == "markdown":  # a written answer: its model answer and mark scheme, line by line
                    for line in solution.splitlines():
                        if len(line.strip()) >= MIN_PROSE_CHARACTERS:
                            _add_text(line.strip(), needles)
                elif len(solution.strip()) >= MIN_SOLUTION_CHARACTERS:
                    _add_text(solution.strip(), needles)
            if needles:
                found[f"{assignment}/{cell.metadata['nbgrader']['grade_id']}"] = needles
    return found


def hidden_section_needles() -> dict[str, set[str]]:
    """The code of every hidden test, whole (between its markers), by ``<assignment>/<grade id>``."""
    from item_grading import source_cells

    from autograder.verdicts.verdict import hidden_section

    return {
        f"{assignment}/{grade_id}": _text_needles(hidden_section(source))
        for assignment in ASSIGNMENTS
        for grade_id, source in source_cells(assignment).items()
        if HIDDEN_BEGIN in source
    }


def _text_needles(text: str) -> set[str]:
    found: set[str] = set()
    _add_text(text.strip(), found)
    return found


def submission_bug_needles() -> set[str]:
    """Which bug each planted submission of 2.6 has, as :mod:`autograder.variants.sinusoidal` writes it."""
    from autograder.variants.sinusoidal import SUBMISSIONS, WRONG_LETTER

    needles = {f"{number}: {letter!r}" for number, (letter, _) in SUBMISSIONS.items()}
    needles |= {f'{number}: "{letter}"' for number, (letter, _) in SUBMISSIONS.items()}
    needles |= {f"{number}: ({letter!r}" for number, (letter, _) in SUBMISSIONS.items()}
    needles |= {f'{number}: ("{letter}"' for number, (letter, _) in SUBMISSIONS.items()}
    needles |= {why[:40] for why in WRONG_LETTER.values()}
    return needles


def is_module(name: str, root: Path) -> bool:
    """Whether ``name`` is a module or package under ``root`` (``autograder.variants``, not ``autograder.ASSIGNMENTS``)."""
    path = root.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def parsed(source: str) -> ast.Module:
    """``ast.parse(source)``; where this interpreter fails to build the tree (CPython 3.11 raises SystemError, "AST
    constructor recursion depth mismatch", on large modules in a test process that has run much before), the
    tree is built by a fresh interpreter and sent back pickled (unpickling makes the nodes in Python)."""
    try:
        return ast.parse(source)
    except SystemError:
        script = "import ast, pickle, sys; sys.stdout.buffer.write(pickle.dumps(ast.parse(sys.stdin.read())))"
        built = subprocess.run([sys.executable, "-c", script], input=source.encode(), capture_output=True, check=True)
        return pickle.loads(built.stdout)


def imported_names(path: Path, root: Path) -> set[str]:
    """Every name that ``path`` (a file under ``root``) imports, at its top or inside a function: ``import x.y``
    gives x.y, ``from x import y`` gives x and x.y (y may be a module or a name of x); relative imports resolved."""
    package = path.relative_to(root).with_suffix("").parts[:-1]
    found = set()
    for node in ast.walk(parsed(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            parent = list(package[: len(package) - node.level + 1]) if node.level else []
            base = ".".join([*parent, *([node.module] if node.module else [])])
            found |= {base} | {f"{base}.{alias.name}" for alias in node.names}
    return found
