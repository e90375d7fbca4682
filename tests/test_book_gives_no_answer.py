"""The book gives away no graded answer: every graded item of every notebook is mapped to what the built book
prints, and a match fails.

Each graded item is read from its source notebook (the answer key) in one or more of three forms:

- **numbers**: the expected values of its hidden test (the constants named ``EXPECTED...``), for the one answer
  key and, for a varied item, for many students. The item is printed on a page when every one of its
  distinctive numbers is printed there (:func:`distinctive`: a value with enough digits to be itself); an
  answer of one number is looked for on its own chapter's page only, where it would answer the item (on another
  page, 1.05 or 2048 is some other quantity), and a lone integer only from five digits on (chapter 6's table of
  parameter counts prints 2,112 for Shaw, which is also one student's 6.4 answer in bytes); an answer made of
  integers under five digits only (a range of distances, 113 to 123) is printed only where its numbers stand
  side by side, in its order, since each of them alone is on a page of tables for many other reasons;
- **code**: a solution that defines a function, compared with every function of the book's code cells and of
  ``posenc_ref`` (which ships to students too) after renaming its local names (:func:`code_shape`);
- **prose**: a written answer's model answer, compared with each of the book's folded solutions by the content
  words they share (:func:`shared_words`).

An item none of these describe (a letter, a set of names, a check written in its test) is listed as such, so
that an item of a new shape is not skipped unseen. The pages are ``_build/html/book/*.html`` (``make book``
writes them before ``make test`` runs the tests). A code cell tagged ``measured-on-this-machine`` (a table of
milliseconds and MiB) is left out: its numbers are this build's timings, a new draw at every build.
"""

from __future__ import annotations

import ast
import difflib
import html.parser
import math
import re
from functools import cache
from pathlib import Path

import nbformat
import pytest
from item_grading import hidden_constants, source_cells
from two_sides import HIDDEN_BEGIN, SOLUTION

from autograder import ASSIGNMENTS, source_notebook

ROOT = Path(__file__).resolve().parents[1]
PAGES = ROOT / "_build" / "html" / "book"
CHAPTERS = tuple(sorted(path.stem for path in (ROOT / "book").glob("0*.md")))
STUDENTS = tuple(f"student{number:02d}" for number in range(30))
# A printed number with fewer significant digits than this can be anything's rounding (0.5, 12, 1.0).
SIGNIFICANT_DIGITS = 3
# Two functions whose renamed syntax trees agree this much are one function written twice.
SAME_CODE = 0.8
# A model answer sharing this share of its content words with a folded solution of the book says the same thing.
SAME_PROSE = 0.6
# 393,216 or 0.8415 or 1e-05; a number inside a name (d4, x_0) is not one.
NUMBER = re.compile(r"(?<![\w.,])-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?(?![\w.]*\d)")
WORD = re.compile(r"[a-z][a-z'-]{3,}")
STOPWORDS = frozenset({
    "that", "this", "with", "from", "have", "what", "when", "which", "their", "there", "than", "then",
    "they", "them", "each", "into", "only", "also", "does", "were", "will", "would", "because", "about",
    "other", "more", "most", "these", "those", "your", "where", "while", "both", "such", "same", "some",
    "over", "just", "like", "been", "being", "must", "make", "makes", "made", "here", "after", "before",
    "between", "through", "under", "every", "without", "whose"
})


# ------------------------------------------------------------------------------------ the book's pages


# A code cell tagged so prints what this machine measured (milliseconds, MiB): numbers no answer is made of,
# which differ from one build to the next.
MEASURED_CELL = "tag_measured-on-this-machine"


class _TextOf(html.parser.HTMLParser):
    """The text a reader sees, code and outputs included; scripts, styles and measured cells left out."""

    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []
        self._hidden = 0
        self._measured_divs = 0  # open <div>s from a measured cell's own one inward

    def handle_starttag(self, tag, attrs):
        self._hidden += tag in ("script", "style")
        if tag == "div" and (self._measured_divs or MEASURED_CELL in (dict(attrs).get("class") or "").split()):
            self._measured_divs += 1

    def handle_endtag(self, tag):
        self._hidden -= tag in ("script", "style") and self._hidden > 0
        self._measured_divs -= tag == "div" and self._measured_divs > 0

    def handle_data(self, data):
        if not self._hidden and not self._measured_divs:
            self.parts.append(data)


def page_text(html_text: str) -> str:
    parser = _TextOf()
    parser.feed(html_text)
    return " ".join(parser.parts)


def printed_numbers(text: str) -> set[tuple[float, int]]:
    """Every number of ``text`` as ``(value, decimals)``: ``0.8415`` is ``(0.8415, 4)``."""
    found = set()
    for token in NUMBER.findall(text.replace("\u2212", "-")):
        token = token.replace(",", "")
        mantissa = token.lower().split("e")[0]
        decimals = len(mantissa.split(".")[1]) if "." in mantissa else 0
        found.add((float(token), decimals if "e" not in token.lower() else -1))
    return found


@cache
def pages() -> dict[str, str]:
    if not PAGES.is_dir():
        pytest.fail(f"no built book in {PAGES}: run `make book` first (`make test` does)")
    return {chapter: page_text((PAGES / f"{chapter}.html").read_text(encoding="utf-8")) for chapter in CHAPTERS}


# ------------------------------------------------------------------------------------ numbers


def flat_numbers(value) -> list[float]:
    """The numbers of an expected value, an exact expression (\"cos(3/100)\") evaluated."""
    if isinstance(value, bool):
        return []
    if isinstance(value, str):
        from autograder.student.answers import AnswerError, parse_expression

        try:
            return [float(parse_expression(value))]
        except (AnswerError, TypeError, ValueError):
            return []
    if isinstance(value, (int, float)):
        return [float(value)]
    if isinstance(value, (list, tuple)):
        return [number for item in value for number in flat_numbers(item)]
    if isinstance(value, dict):
        return [number for item in value.values() for number in flat_numbers(item)]
    return []


def distinctive(value: float) -> bool:
    """Whether ``value`` has enough digits that a printed number equal to it is it: an integer of three digits
    or more, or a fraction whose first four decimals hold three digits between their first and last nonzero;
    a multiple of pi/4 never (a page about angles prints 3.1416 or 0.785 as a bound or a unit, not an answer)."""
    if not math.isfinite(value) or _multiple_of_a_quarter_pi(value):
        return False
    if value == int(value):
        return abs(value) >= 10 ** (SIGNIFICANT_DIGITS - 1)
    return len(f"{abs(value):.4f}".replace(".", "").strip("0")) >= SIGNIFICANT_DIGITS


def _multiple_of_a_quarter_pi(value: float) -> bool:
    quarters = value / (math.pi / 4)
    return value != 0 and abs(quarters - round(quarters)) < 1e-9 and abs(round(quarters)) <= 8


def printed_in_order(text: str) -> list[float]:
    """The values of ``text``'s numbers in the order a reader meets them."""
    return [float(token.replace(",", "")) for token in NUMBER.findall(text.replace("\u2212", "-"))]


def small_integers(numbers: list[float]) -> bool:
    """Whether ``numbers`` are all integers of fewer than five digits: each alone could be any count or index."""
    return all(number == int(number) and abs(number) < 1e4 for number in numbers)


def printed_side_by_side(numbers: list[float], in_order: list[float]) -> bool:
    """Whether ``numbers`` stand next to one another, in their order, among the numbers a page prints."""
    width = len(numbers)
    return any(in_order[start:start + width] == numbers for start in range(len(in_order) - width + 1))


def is_printed(value: float, printed: set[tuple[float, int]]) -> bool:
    """Whether ``value`` is among ``printed``, as itself or rounded to the decimals a number was printed with
    (never fewer than :data:`SIGNIFICANT_DIGITS` significant digits)."""
    for number, decimals in printed:
        if decimals < 0:
            close = math.isclose(number, value, rel_tol=1e-3)
        elif value == int(value):
            close = decimals == 0 and number == value
        else:
            digits = len(f"{abs(number):.{decimals}f}".replace(".", "").strip("0"))
            close = decimals > 0 and digits >= SIGNIFICANT_DIGITS and round(value, decimals) == number
        if close:
            return True
    return False


def written_in_the_test(hidden: str) -> list[float]:
    """The numbers a hidden test compares an answer with where it writes them in its code rather than as a
    constant: ``count != 393216``, ``check_close(fraction, [0.25], ...)``."""
    numbers: list[float] = []
    for node in ast.walk(ast.parse(hidden)):
        if isinstance(node, ast.Compare):
            for side in (node.left, *node.comparators):
                if isinstance(side, ast.Constant) and type(side.value) in (int, float):
                    numbers.append(float(side.value))
        elif isinstance(node, ast.Call) and getattr(node.func, "id", "") == "check_close" and len(node.args) > 1:
            try:
                numbers += flat_numbers(ast.literal_eval(node.args[1]))
            except ValueError:
                pass
    return numbers


def expected_sets(assignment: str, grade_id: str) -> list[tuple[str, list[float]]]:
    """The distinctive expected numbers of a test cell, one list per answer key or student and constant."""
    from autograder.student.parameters import draw
    from autograder.variants import variants_of

    variant = next((one for one in variants_of(assignment) if one.test_cell == grade_id), None)
    cases = [("answer key", hidden_constants(assignment, grade_id))]
    if variant is not None:
        cases = [("answer key", variant.constants(variant.answer_key))]
        cases += [(student, variant.constants(draw(variant, student))) for student in STUDENTS]
    sets = []
    for who, constants in cases:
        for name, value in constants.items():
            numbers = [number for number in flat_numbers(value) if distinctive(number)] if name.startswith(
                "EXPECTED") else []
            if numbers:
                sets.append((f"{name} ({who})", numbers))
    if not sets:
        from autograder.verdicts.verdict import hidden_section

        numbers = [number for number in written_in_the_test(hidden_section(source_cells(assignment)[grade_id]))
                   if distinctive(number)]
        sets += [("the numbers its test compares with", numbers)] if numbers else []
    return sets


# ------------------------------------------------------------------------------------ code


class _Renamed(ast.NodeTransformer):
    """Local names, arguments and constants all become one placeholder; attributes and called globals stay."""

    def __init__(self, local: set[str]) -> None:
        self.local = local

    def visit_Name(self, node):
        return ast.copy_location(ast.Name(id="_" if node.id in self.local else node.id, ctx=node.ctx), node)

    def visit_arg(self, node):
        return ast.copy_location(ast.arg(arg="_"), node)

    def visit_Constant(self, node):
        return ast.copy_location(ast.Constant(value=0), node)


def code_shape(function: ast.FunctionDef) -> list[str]:
    """The function's body as a sequence of node descriptions, its own names renamed: two copies of one function
    that differ in names and constants get the same shape."""
    local = {arg.arg for arg in ast.walk(function.args) if isinstance(arg, ast.arg)}
    local |= {node.id for node in ast.walk(function) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)}
    body = [_Renamed(local).visit(statement) for statement in ast.parse(ast.unparse(function)).body[0].body]
    body = [statement for statement in body if not (isinstance(statement, ast.Expr)
                                                     and isinstance(statement.value, ast.Constant))]  # docstrings
    return [ast.dump(node, annotate_fields=False) for statement in body for node in ast.walk(statement)
            if not isinstance(node, (ast.Load, ast.Store))]


def functions_in(source: str) -> list[ast.FunctionDef]:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    return [node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)]


CODE_CELL = re.compile(r"```\{code-cell\}[^\n]*\n(.*?)```", re.DOTALL)


@cache
def book_functions() -> dict[str, list[str]]:
    """The shape of every function in the book's code cells and in ``posenc_ref``, by where it is."""
    found = {}
    for chapter in CHAPTERS:
        text = (ROOT / "book" / f"{chapter}.md").read_text(encoding="utf-8")
        for cell in CODE_CELL.findall(text):
            cell = "\n".join(line for line in cell.splitlines() if not line.startswith((":", "%", "!", "---")))
            for function in functions_in(cell):
                found[f"book/{chapter}.md: {function.name}"] = code_shape(function)
    for path in sorted((ROOT / "posenc_ref").rglob("*.py")):
        for function in functions_in(path.read_text(encoding="utf-8")):
            found[f"{path.relative_to(ROOT)}: {function.name}"] = code_shape(function)
    return found


def same_code(one: list[str], other: list[str]) -> float:
    if min(len(one), len(other)) < 12:  # a one-liner is anybody's
        return 0.0
    return difflib.SequenceMatcher(None, one, other, autojunk=False).ratio()


# ------------------------------------------------------------------------------------ prose


def content_words(text: str) -> set[str]:
    return {word for word in WORD.findall(text.lower()) if word not in STOPWORDS}


def shared_words(answer: str, solution: str) -> float:
    """The share of the answer's content words that the solution uses too."""
    words = content_words(answer)
    return len(words & content_words(solution)) / len(words) if words else 0.0


FOLDED = re.compile(r"```\{solution\}[^\n]*\n(.*?)```", re.DOTALL)


@cache
def folded_solutions() -> dict[str, str]:
    found = {}
    for chapter in CHAPTERS:
        text = (ROOT / "book" / f"{chapter}.md").read_text(encoding="utf-8")
        for number, solution in enumerate(FOLDED.findall(text), 1):
            found[f"book/{chapter}.md, folded solution {number}"] = solution
    return found


def model_answer(source: str) -> str:
    """A written answer's model answer, its mark scheme left out (the scheme names points, not an answer)."""
    answer = "\n".join(SOLUTION.findall(source))
    return answer.split("**Mark scheme")[0]


# ------------------------------------------------------------------------------------ the items


def graded_items() -> list[tuple[str, str, str, str]]:
    """``(assignment, grade id, cell type, source)`` of every graded cell, with the answer cell's source for a
    test cell (the solution before it)."""
    items = []
    for assignment in ASSIGNMENTS:
        cells = nbformat.read(source_notebook(assignment), as_version=4).cells
        for index, cell in enumerate(cells):
            nbgrader = cell.metadata.get("nbgrader", {})
            if not nbgrader.get("grade") or not nbgrader.get("points"):
                continue
            answer = cell.source if nbgrader.get("solution") else next(
                (before.source for before in reversed(cells[:index]) if SOLUTION.search(before.source)), "")
            items.append((assignment, nbgrader["grade_id"], cell.cell_type, answer))
    return items


ITEMS = graded_items()


def forms(assignment: str, grade_id: str, cell_type: str, answer: str) -> dict[str, object]:
    """The forms in which the item's answer could stand in the book."""
    found: dict[str, object] = {}
    if cell_type == "markdown":
        found["prose"] = model_answer(answer)
        return found
    if HIDDEN_BEGIN in source_cells(assignment)[grade_id] and (sets := expected_sets(assignment, grade_id)):
        found["numbers"] = sets
    solution_functions = [function for code in SOLUTION.findall(answer) for function in functions_in(code)]
    if solution_functions:
        found["code"] = {function.name: code_shape(function) for function in solution_functions}
    return found


def matches(assignment: str, grade_id: str, cell_type: str, answer: str) -> list[str]:
    """Where the book prints the item's answer, as readable lines; empty when nowhere."""
    found = []
    item_forms = forms(assignment, grade_id, cell_type, answer)
    for chapter, text in pages().items() if "numbers" in item_forms else ():
        printed, in_order = printed_numbers(text), printed_in_order(text)
        for name, numbers in item_forms["numbers"]:
            if len(numbers) == 1 and (chapter != assignment or numbers[0] == int(numbers[0]) and abs(numbers[0]) < 1e4):
                continue  # one number alone answers the item only where its chapter prints it, and a lone
                # integer of three or four digits is on a page of tables for many other reasons
            if printed_side_by_side(numbers, in_order) if small_integers(numbers) else all(
                    is_printed(number, printed) for number in numbers):
                found.append(f"{chapter}.html prints {name}: {numbers[:6]}")
                break
    for name, shape in item_forms.get("code", {}).items():
        for where, other in book_functions().items():
            if (ratio := same_code(shape, other)) >= SAME_CODE:
                found.append(f"the solution's {name} is {where} ({ratio:.0%} alike)")
    if "prose" in item_forms:
        for where, solution in folded_solutions().items():
            if (share := shared_words(item_forms["prose"], solution)) >= SAME_PROSE:
                found.append(f"the model answer shares {share:.0%} of its words with {where}")
    return found


@pytest.mark.parametrize(("assignment", "grade_id", "cell_type", "answer"), ITEMS,
                         ids=[f"{item[0]}/{item[1]}" for item in ITEMS])
def test_the_book_does_not_print_the_items_answer(assignment, grade_id, cell_type, answer):
    assert matches(assignment, grade_id, cell_type, answer) == []


CHOICE = re.compile(r"\bas_(choice|text_set|bool|nested)\(")


def why_not_searched(assignment: str, grade_id: str) -> str | None:
    """Why an item has no form to search for: it is answered by a choice (a letter, names, yes or no, an example
    of the student's own), or its numbers are too small to tell from any other number a page prints."""
    from autograder.verdicts.verdict import hidden_section

    test = source_cells(assignment)[grade_id]
    hidden = hidden_section(test) if HIDDEN_BEGIN in test else ""
    if CHOICE.search(hidden):
        return "a choice"
    constants = hidden_constants(assignment, grade_id) if hidden else {}
    numbers = written_in_the_test(hidden) if hidden else []
    numbers += [number for name, value in constants.items() if name.startswith("EXPECTED")
                for number in flat_numbers(value)]
    if numbers or re.search(r"check_close\(\w+, \[", test):
        return "small numbers"
    return None


def test_every_item_is_searched_in_some_form_or_says_why_not():
    """A new kind of item is searched for, or added to the reasons knowingly."""
    reasons = {f"{assignment}/{grade_id}": why_not_searched(assignment, grade_id)
               for assignment, grade_id, cell_type, answer in ITEMS if not forms(assignment, grade_id, cell_type, answer)}
    assert [item for item, reason in reasons.items() if reason is None] == []
    searched = len(ITEMS) - len(reasons)
    assert searched >= len(ITEMS) / 2, f"only {searched} of {len(ITEMS)} items are searched for"


# ------------------------------------------------------------------------------------ the search finds


def test_a_number_is_found_at_the_decimals_it_is_printed_with():
    printed = printed_numbers("PE(1) = [0.8415, 0.5403, 0.0100, 1.0000] and 393,216 numbers; tensor([216, 7]), d4")
    assert is_printed(0.841470984808, printed) and is_printed(0.540302305868, printed)
    assert is_printed(216.0, printed) and is_printed(393216.0, printed)
    assert not is_printed(393.0, printed) and (4.0, 0) not in printed
    assert not is_printed(0.8414, printed)  # another value
    assert not is_printed(0.00999983333, printed)  # 0.0100 says 0.01: anything's rounding
    assert not distinctive(0.5) and not distinctive(12.0) and distinctive(0.841470984808) and distinctive(216.0)


def test_a_cell_measured_on_the_build_machine_and_multiples_of_pi_are_not_searched():
    page = ('<div class="cell tag_measured-on-this-machine docutils container"><div class="cell_output">'
            '<pre>  256   reference   3.14   0.5171</pre></div></div><p>angle 0.7854 of 2.7183</p>')
    assert printed_numbers(page_text(page)) == {(0.7854, 4), (2.7183, 4)}
    assert not distinctive(math.pi) and not distinctive(-math.pi / 4) and not distinctive(3 * math.pi / 2)
    assert distinctive(math.e) and distinctive(math.pi / 3) and distinctive(9 * math.pi)


def test_integers_under_five_digits_are_found_side_by_side_only():
    range_printed = printed_in_order("distances 113 to 123 share bucket 47")
    apart = printed_in_order("113 steps; 7 heads; 123 ms")
    assert small_integers([113.0, 123.0]) and not small_integers([113.0, 0.5]) and not small_integers([12345.0])
    assert printed_side_by_side([113.0, 123.0], range_printed)
    assert not printed_side_by_side([113.0, 123.0], apart)
    assert not printed_side_by_side([123.0, 113.0], range_printed)


def test_a_copy_of_a_book_function_with_new_names_is_found():
    book = functions_in("def table(length, d):\n    i = torch.arange(d // 2)\n    w = 10000 ** (-2 * i / d)\n"
                        "    a = torch.arange(length)[:, None] * w\n    return torch.stack([a.sin(), a.cos()], -1)"
                        ".flatten(1)\n")[0]
    copy = functions_in("def pe(n, dim):\n    pair = torch.arange(dim // 2)\n    freq = 10000 ** (-2 * pair / dim)"
                        "\n    angle = torch.arange(n)[:, None] * freq\n    return torch.stack([angle.sin(), "
                        "angle.cos()], -1).flatten(1)\n")[0]
    other = functions_in("def count(xs):\n    total = 0\n    for x in xs:\n        if x > 0:\n            total += "
                         "len(str(x))\n    return sorted(set(xs))[total % len(xs)]\n")[0]
    assert same_code(code_shape(book), code_shape(copy)) == 1.0
    assert same_code(code_shape(book), code_shape(other)) < SAME_CODE


def test_a_model_answer_that_a_folded_solution_repeats_is_found():
    answer = "ALiBi's penalty grows linearly with distance, so a model trained on 2k tokens keeps a recency bias"
    assert shared_words(answer, "Because ALiBi's penalty grows linearly with distance the trained model keeps "
                        "its recency bias beyond 2k tokens.") >= SAME_PROSE
    assert shared_words(answer, "RoPE with position interpolation and a short fine-tune") < SAME_PROSE
