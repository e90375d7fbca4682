"""Per-student variants (the draw in autograder/student/parameters.py, the expected values in autograder/variants/): the
draw, the notebook's "your parameters", chapter 2's expected values against derivations written here, and a
class graded end to end where answers pass between students."""

from __future__ import annotations

import csv
import html
import itertools
import math
import re
import shutil
from pathlib import Path

import nbformat
import pytest
import sympy
import torch
from item_grading import adam_l2_entry, hidden_constants, source_cells
from nbclient import NotebookClient
from planted import ROOT, filled, run_module, solutions

import autograder.student.parameters as student_side
from autograder.student.kernels import execute_in_own_loop
from autograder.student.parameters import QUIZZES, declared_student_id, draw, parameters_for, your_parameters
from autograder.student.submitted_tables import submitted_base, submitted_table
from autograder.variants import variants_of
from autograder.variants.sinusoidal import VARIANTS as SINUSOIDAL

ASSIGNMENTS = ("01_permutation", "02_sinusoidal", "03_learned", "04_relative", "05_rope", "06_comparison")
ASSIGNMENT = "02_sinusoidal"
VARIED = {variant.item: variant for variant in SINUSOIDAL}


# ---------------------------------------------------------------------------------------------------------
# Derivations written here, from the formulas of the chapter (not from autograder/ or posenc_ref)
# ---------------------------------------------------------------------------------------------------------


def pe(position: int, d: int, base: float = 10000.0) -> list[float]:
    """PE(p)_{2i} = sin(p base^(-2i/d)), PE(p)_{2i+1} = cos(p base^(-2i/d))."""
    values = []
    for i in range(d // 2):
        angle = position / base ** (2 * i / d)
        values += [math.sin(angle), math.cos(angle)]
    return values


def first_full_turn(base: float) -> list[int]:
    """The first whole p with p * omega_i >= 2 pi, found by counting (not by a ceiling)."""
    turns = []
    for i in range(8):
        omega = base ** (-2 * i / 16)
        low, high = 0, 1
        while high * omega < 2 * math.pi:
            low, high = high, high * 2
        while high - low > 1:  # invariant: low * omega < 2 pi <= high * omega
            middle = (low + high) // 2
            low, high = (middle, high) if middle * omega < 2 * math.pi else (low, middle)
        turns.append(high)
    return turns


def dot_at_distance(k: int) -> float:
    """PE(p) . PE(p + k) for d = 6, computed from two rows (p = 3)."""
    return sum(a * b for a, b in zip(pe(3, 6), pe(3 + k, 6), strict=True))


def farthest_pair(position: int, distance: int) -> tuple[int, float, float]:
    """(pair, its distance, the margin to the next pair) between PE(p) and PE(p + k) for d = 8, measured on the
    two rows as points of the unit circle (not from the chord formula of the variant)."""
    first, second = pe(position, 8), pe(position + distance, 8)
    moved = [math.dist(first[2 * i : 2 * i + 2], second[2 * i : 2 * i + 2]) for i in range(4)]
    ranked = sorted(range(4), key=moved.__getitem__, reverse=True)
    return ranked[0], moved[ranked[0]], moved[ranked[0]] - moved[ranked[1]]


def value(expression: str) -> float:
    return float(sympy.sympify(expression.replace("^", "**")).evalf(30))


def literal_answers(parameters: dict[str, dict]) -> dict[str, str]:
    """Answer cells with numbers typed in (as a student who computed by hand), for these parameters."""
    p2, p3 = parameters["2.1"]["position"], parameters["2.2"]["position"]
    base, k = parameters["2.5"]["base"], parameters["2.7"]["distance"]
    d6 = [f"{f}({p3}*10000^(-{i}/3))" for i in range(3) for f in ("sin", "cos")]
    moved = farthest_pair(7, parameters["2.3"]["distance"])
    return {
        "most_moved_answer": f"most_moved = {[moved[0], round(moved[1], 4)]}",
        "pe_d4_at_p_answer": f"pe_d4_at_p = {[round(x, 4) for x in pe(p2, 4)]}",
        "pe_d6_at_p_answer": f"pe_d6_at_p = {d6}",
        "first_turn_answer": f"first_full_turn = {first_full_turn(base)}",
        "dot_answer": f'pe_gap_d6_at_k = "{" + ".join(f"4*sin({k}*10000^(-{i}/3)/2)^2" for i in range(3))}"',
        "planted_bug_answer": (f"bug_evidence = {[round(x, 4) for x in measured_evidence(parameters['2.6']['submission'])]}\n"
                               f"planted_bug = {diagnosed(parameters['2.6']['submission'])!r}"),
    }


def diagnosed(submission: int) -> str:
    """The bug of a submission of 2.6, found by comparing its table with the six tables built here at its base."""
    candidate = submitted_table(submission).double()
    (letter,) = [letter for letter, table in bug_tables(32, 8, submitted_base(submission)).items()
                 if torch.allclose(candidate, table, atol=1e-5)]
    return letter


def measured_evidence(submission: int) -> list[float]:
    """2.6's evidence measured here with posenc_ref's shift matrix: per pair the largest |T[p+1] - M_1 T[p]|, then
    the length of T[0] - PE(0)."""
    from posenc_ref.sinusoidal import shift_matrix

    table, base = submitted_table(submission).double(), submitted_base(submission)
    moved = shift_matrix(1, 8, base=base, dtype=torch.float64) @ table[:-1].T  # (8, 31): column p is M_1 T[p]
    residual = (table[1:] - moved.T).abs()  # (31, 8)
    return [residual[:, 2 * i : 2 * i + 2].max().item() for i in range(4)] + [
        math.sqrt(sum((a - b) ** 2 for a, b in zip(table[0].tolist(), pe(0, 8), strict=True)))]


# ---------------------------------------------------------------------------------------------------------
# The draw
# ---------------------------------------------------------------------------------------------------------


def test_the_draw_is_a_function_of_the_id_and_reaches_every_allowed_value():
    students = [f"student{n:03d}" for n in range(300)]
    for variant in SINUSOIDAL:
        drawn = [draw(variant, student) for student in students]
        assert drawn == [draw(variant, student) for student in students]  # the same in notebook and grader
        for name, allowed in variant.choices.items():
            counts = {choice: sum(d[name] == choice for d in drawn) for choice in allowed}
            assert min(counts.values()) >= 300 / len(allowed) / 3, (variant.item, counts)  # no value left out


def test_variants_off_gives_every_student_the_first_allowed_values():
    off = [parameters_for(ASSIGNMENT, student, enabled=False) for student in ("ana", "ben", "")]
    quizzes = {quiz: {"order": "ABCD"} for quiz in QUIZZES[ASSIGNMENT]}  # the options in the source's order
    assert off[0] == off[1] == off[2] == quizzes | {"2.1": {"position": 7}, "2.2": {"position": 3},
                                          "2.3": {"distance": 13}, "2.5": {"base": 10000},
                                          "2.6": {"submission": 26},
                                          "2.7": {"distance": 10}}


def test_every_varied_item_names_a_test_cell_of_its_assignment_with_a_show_cell_before_its_answer():
    for assignment in ASSIGNMENTS:
        notebook = nbformat.read(ROOT / "autograder" / "source" / assignment / f"{assignment}.ipynb", as_version=4)
        ids = [cell.metadata["nbgrader"]["grade_id"] for cell in notebook.cells]
        sources = [cell.source for cell in notebook.cells]
        for variant in variants_of(assignment):
            assert variant.test_cell in ids, variant
            if variant.item in QUIZZES[assignment]:  # its options cell, then an answer in the student's letters
                show = next(index for index, source in enumerate(sources)
                            if source.startswith(f'my_parameters.show_options("{variant.item}", ['))
                used = f'my_parameters.letter("{variant.item}", '
            else:
                show = sources.index(f'my_parameters.show("{variant.item}")')
                used = f'my_parameters["{variant.item}"]'
            assert show < ids.index(variant.test_cell)
            assert used in "\n".join(sources[show:ids.index(variant.test_cell)])
        if variants_of(assignment):
            assert sources[ids.index("student_id")].startswith('STUDENT_ID = ""')
            assert notebook.cells[ids.index("student_id")].metadata["nbgrader"]["locked"] is False
            assert f'your_parameters("{assignment}", STUDENT_ID)' in sources[ids.index("my_parameters")]


# ---------------------------------------------------------------------------------------------------------
# Chapter 2's expected values
# ---------------------------------------------------------------------------------------------------------


# The quiz questions' letters have tests of their own (tests/test_grader_quiz_order.py).
ALL_VARIANTS = [
    variant for assignment in ASSIGNMENTS for variant in variants_of(assignment)
    if variant.item not in QUIZZES[assignment]
]


def numbers_or_values(values):
    """Numbers as they are; exact expressions (strings) as their values; a choice (a letter, or a dict of
    letters, as in 2.6) as it is."""
    if isinstance(values, str | dict):
        return values
    return [value(x) if isinstance(x, str) else float(x) for x in values]


def same_constant(first, second) -> bool:
    """Whether two constants are equal, numbers to 1e-9 (the hidden test's literals are written to 12 digits)."""
    if isinstance(first, bool) or isinstance(second, bool) or isinstance(first, str) or isinstance(second, str):
        return first == second
    if isinstance(first, int | float) and isinstance(second, int | float):
        return second == pytest.approx(first, rel=1e-10, abs=1e-9)
    if isinstance(first, dict) and isinstance(second, dict):
        return first.keys() == second.keys() and all(same_constant(first[key], second[key]) for key in first)
    if isinstance(first, list | tuple) and isinstance(second, list | tuple):
        return len(first) == len(second) and all(same_constant(a, b) for a, b in zip(first, second, strict=True))
    return first == second


@pytest.mark.parametrize("variant", ALL_VARIANTS, ids=lambda variant: variant.item)
def test_the_answer_key_reproduces_the_literal_constants_of_the_hidden_test(variant):
    literal = hidden_constants(variant.assignment, variant.test_cell)
    computed = variant.constants(variant.answer_key)
    assert set(computed) <= set(literal), "the grader would add constants the hidden test does not have"
    for name in set(computed) - {"EXPECTED", "MISTAKES"}:  # 2.6's evidence, 1.5's maps, 1.6's task, ...
        assert same_constant(computed[name], literal[name]), name
    if "EXPECTED" not in computed:
        return
    if isinstance(computed["MISTAKES"], dict):  # a choice: the letter, and what testing shows against the others
        assert (computed["EXPECTED"], computed["MISTAKES"]) == (literal["EXPECTED"], literal["MISTAKES"])
        return
    assert numbers_or_values(computed["EXPECTED"]) == pytest.approx(
        numbers_or_values(literal["EXPECTED"]), rel=1e-10, abs=1e-9)
    assert len(computed["MISTAKES"]) == len(literal["MISTAKES"])
    for (why, wrong), (_, literal_wrong) in zip(computed["MISTAKES"], literal["MISTAKES"], strict=True):
        assert numbers_or_values(wrong) == pytest.approx(numbers_or_values(literal_wrong), rel=1e-10, abs=1e-9), why


@pytest.mark.parametrize("variant", ALL_VARIANTS, ids=lambda variant: variant.item)
def test_for_every_allowed_combination_no_mistake_is_graded_as_right(variant):
    """A mistake must lie beyond the item's tolerance (1.5 times it) from the right answer, an expression
    must differ in value, and at least 60% of the combinations have an answer of their own (no two within the
    tolerance)."""
    tolerance = hidden_constants(variant.assignment, variant.test_cell).get("TOLERANCE", 1e-9)
    answers = set()
    for values in itertools.product(*variant.choices.values()):
        constants = variant.constants(dict(zip(variant.choices, values, strict=True)))
        if "EXPECTED" not in constants:  # 1.5's maps, 1.6's task: an answer of their own, checked below
            answers.add(repr(sorted(constants.items())))
            continue
        expected = numbers_or_values(constants["EXPECTED"])
        if not isinstance(expected, str) and any(len(numbers_or_values(wrong)) != len(expected)
                                                 for _, wrong in constants["MISTAKES"]):
            # a set of whole numbers (1.4's rows): a mistake is another set
            answers.add(tuple(expected))
            assert all(numbers_or_values(wrong) != expected for _, wrong in constants["MISTAKES"]), values
            continue
        if isinstance(expected, str):  # a choice: the right letter is never among the named mistakes
            assert expected not in constants["MISTAKES"], values
            evidence = constants.get("EXPECTED_EVIDENCE", ())  # 2.6: the letter with its measured evidence
            answers.add((expected, tuple(round(x, 2) for x in evidence)))
            continue
        answers.add(tuple(round(x / max(tolerance, 1e-9)) for x in expected))
        for why, wrong in constants["MISTAKES"]:
            gap = max(abs(a - b) for a, b in zip(numbers_or_values(wrong), expected, strict=True))
            assert gap > 1.5 * tolerance, (values, why)
    combinations = math.prod(len(allowed) for allowed in variant.choices.values())
    # counts are small whole numbers, so some combinations must share one; most do not
    assert len(answers) >= 0.6 * combinations, f"only {len(answers)} answers for {combinations} combinations"


@pytest.mark.parametrize("distance", VARIED["2.3"].choices["distance"])
def test_the_farthest_pair_is_measured_on_two_rows_whatever_the_position(distance):
    expected = VARIED["2.3"].constants({"distance": distance})["EXPECTED"]
    for position in (0, 3, 100, 5000):  # the same pair and distance wherever the two rows stand
        pair, moved, margin = farthest_pair(position, distance)
        assert expected[0] == pair != 0 and expected[1] == pytest.approx(moved, abs=1e-9)
        assert margin > 0.05  # no near tie between pairs


def test_no_student_draws_a_position_that_the_book_works_out():
    assert 0 not in VARIED["2.1"].choices["position"] and 1 not in VARIED["2.1"].choices["position"]
    assert 2 not in VARIED["2.2"].choices["position"]


@pytest.mark.parametrize("position", VARIED["2.1"].choices["position"])
def test_pe_d4_matches_the_formula_and_every_mistake_is_told_apart(position):
    constants = VARIED["2.1"].constants({"position": position})
    assert constants["EXPECTED"] == pytest.approx(pe(position, 4), abs=1e-12)
    for why, wrong in constants["MISTAKES"]:
        # 1.5 times the tolerance of two decimals: a mistake is never graded as right
        assert max(abs(a - b) for a, b in zip(wrong, pe(position, 4), strict=True)) > 0.0075, (position, why)


@pytest.mark.parametrize("position", VARIED["2.2"].choices["position"])
def test_pe_d6_expressions_equal_the_formula_and_every_mistake_differs(position):
    constants = VARIED["2.2"].constants({"position": position})
    assert [value(x) for x in constants["EXPECTED"]] == pytest.approx(pe(position, 6), abs=1e-12)
    for why, wrong in constants["MISTAKES"]:
        gaps = [abs(value(a) - b) for a, b in zip(wrong, pe(position, 6), strict=True)]
        assert max(gaps) > 1e-4, (position, why)


@pytest.mark.parametrize("base", VARIED["2.5"].choices["base"])
def test_first_full_turn_matches_counting_and_no_wavelength_is_near_a_whole_number(base):
    constants = VARIED["2.5"].constants({"base": base})
    assert constants["EXPECTED"] == first_full_turn(base)
    wavelengths = [2 * math.pi * base ** (2 * i / 16) for i in range(8)]
    assert min(abs(w - round(w)) for w in wavelengths) >= 0.04
    for why, wrong in constants["MISTAKES"]:
        assert max(abs(a - b) for a, b in zip(wrong, constants["EXPECTED"], strict=True)) > 0.01, (base, why)


def bug_tables(length: int, d: int, base: float = 10000.0) -> dict[str, torch.Tensor]:
    """The table with each bug of 2.6's list, built here from the formula."""
    def table(*, swap=False, halves=False, exponent=2, shift=0, degrees=False):
        rows = []
        for p in range(shift, length + shift):
            angles = [p * base ** (-exponent * i / d) * (math.pi / 180 if degrees else 1) for i in range(d // 2)]
            first = [math.cos(a) if swap else math.sin(a) for a in angles]
            second = [math.sin(a) if swap else math.cos(a) for a in angles]
            rows.append(first + second if halves else [x for pair in zip(first, second, strict=True) for x in pair])
        return torch.tensor(rows, dtype=torch.float64)

    return {"A": table(swap=True), "B": table(halves=True), "C": table(exponent=4), "D": table(exponent=1),
            "E": table(shift=1), "F": table(degrees=True)}


@pytest.mark.parametrize("submission", VARIED["2.6"].choices["submission"])
def test_each_submission_has_the_bug_the_grader_expects_and_the_model_diagnosis_finds_it(submission):
    candidate = submitted_table(submission).double()  # (32, 8)
    assert tuple(candidate.shape) == (32, 8)
    matching = [letter for letter, table in bug_tables(32, 8, submitted_base(submission)).items()
                if torch.allclose(candidate, table, atol=1e-5)]
    constants = VARIED["2.6"].constants({"submission": submission})
    assert matching == [constants["EXPECTED"]]
    evidence = measured_evidence(submission)
    assert constants["EXPECTED_EVIDENCE"] == pytest.approx(evidence, abs=1e-6)  # the student measures the float32 table
    for why, wrong in constants["MISTAKES_EVIDENCE"]:
        assert max(abs(a - b) for a, b in zip(wrong, evidence, strict=True)) > 0.01, (submission, why)
    cells = source_cells(ASSIGNMENT)
    namespace = {"my_parameters": {"2.6": {"submission": submission}}}
    for grade_id in ("imports", "planted_bug_code", "planted_bug_answer"):
        exec(cells[grade_id], namespace)  # noqa: S102 (source/: trusted)
    assert namespace["planted_bug"] == constants["EXPECTED"]
    assert namespace["bug_evidence"] == pytest.approx(evidence, abs=1e-6)


def test_every_bug_has_two_submissions_at_two_bases_and_the_numbers_say_nothing():
    bugs = {number: diagnosed(number) for number in VARIED["2.6"].choices["submission"]}
    assert sorted(bugs.values()) == sorted("ABCDEF" * 2)
    for letter in "ABCDEF":
        bases = [submitted_base(number) for number, found in bugs.items() if found == letter]
        assert len(set(bases)) == 2, letter
    assert VARIED["2.6"].answer_key == {"submission": 26} and bugs[26] == "C"  # the hidden test's literal


def test_the_shipped_tables_are_the_graders_tables_as_numbers_only():
    from autograder.variants.sinusoidal import submitted_tables_source

    shipped = (ROOT / "autograder" / "student" / "submitted_tables.py").read_text(encoding="utf-8")
    assert shipped == submitted_tables_source()
    for word in ("swap", "halves", "exponent", "degrees", "shift", "bug =", "BUGS", "letter"):
        assert word not in shipped, word


def gap_at_distance(k: int) -> float:
    """|PE(p + k) - PE(p)|^2 for d = 6, computed from two rows (p = 3)."""
    return sum((a - b) ** 2 for a, b in zip(pe(3, 6), pe(3 + k, 6), strict=True))


@pytest.mark.parametrize("distance", VARIED["2.7"].choices["distance"])
def test_squared_distance_equals_two_rows_of_the_table_and_every_mistake_differs(distance):
    constants = VARIED["2.7"].constants({"distance": distance})
    assert value(constants["EXPECTED"][0]) == pytest.approx(gap_at_distance(distance), abs=1e-12)
    assert gap_at_distance(distance) == pytest.approx(6 - 2 * dot_at_distance(distance), abs=1e-12)
    for why, wrong in constants["MISTAKES"]:
        assert abs(value(wrong[0]) - gap_at_distance(distance)) > 1e-4, (distance, why)


# Chapters 1, 3 and 6


def by_item(item: str):
    return next(variant for variant in ALL_VARIANTS if variant.item == item)


@pytest.mark.parametrize("values", by_item("1.7").choices["values"])
@pytest.mark.parametrize("prefix", by_item("1.7").choices["prefix"])
def test_prefix_counting_matches_the_average_of_the_visible_values(values, prefix):
    first, others = values
    sequence = [first] + [others] * 7
    seen = [[j for j in range(8) if j <= p or j < prefix] for p in range(8)]  # the keys each query sees, equally
    averages = [sum(sequence[j] for j in keys) / len(keys) for keys in seen]
    constants = by_item("1.7").constants({"values": values, "prefix": prefix})
    assert constants["EXPECTED"] == pytest.approx(averages, abs=1e-12)
    causal = [sum(sequence[: p + 1]) / (p + 1) for p in range(8)]
    assert max(abs(a - b) for a, b in zip(causal, averages, strict=True)) > 0.05  # the prefix matters for everyone
    for why, wrong in constants["MISTAKES"]:
        assert max(abs(a - b) for a, b in zip(wrong, averages, strict=True)) > 0.0075, (values, prefix, why)


def masked_attention_rows(x, weights, prefix):
    """One head with the prefix mask, written here: softmax(q k^T / sqrt(d) with -inf where j > i and j >= k) v."""
    w_query, w_key, w_value = weights
    scores = (x @ w_query) @ (x @ w_key).T / math.sqrt(w_key.shape[1])
    n = x.shape[0]
    hidden = torch.tensor([[j > i and j >= prefix for j in range(n)] for i in range(n)])
    return torch.softmax(scores.masked_fill(hidden, float("-inf")), dim=-1) @ (x @ w_value)


@pytest.mark.parametrize("setting", by_item("1.4").choices["setting"])
def test_the_rows_that_agree_are_measured_on_a_masked_head(setting):
    prefix, shuffle = setting
    generator = torch.Generator().manual_seed(sum(shuffle) + 10 * prefix)
    x = torch.randn(6, 4, dtype=torch.float64, generator=generator)
    weights = [torch.randn(4, 4, dtype=torch.float64, generator=generator) / 2 for _ in range(3)]  # no saturation
    order = list(shuffle)
    gaps = (masked_attention_rows(x[order], weights, prefix) - masked_attention_rows(x, weights, prefix)[order]).abs()
    measured = [row for row in range(6) if gaps[row].max() < 1e-12]
    assert all(gaps[row].max() > 1e-3 for row in range(6) if row not in measured), gaps.amax(dim=1)
    constants = by_item("1.4").constants({"setting": setting})
    assert constants["EXPECTED"] == measured
    kept = [row for row in range(6) if shuffle[row] == row]
    assert measured != kept and measured != list(range(6)) and measured != []
    assert all(wrong != measured for _, wrong in constants["MISTAKES"])


def pool_maps() -> dict[str, object]:
    """Each map of 1.5's pool, written here as a function of (n, d) tensors (a small random head where needed)."""
    generator = torch.Generator().manual_seed(5)
    w = [torch.randn(3, 3, dtype=torch.float64, generator=generator) for _ in range(4)]
    table = torch.randn(6, 3, dtype=torch.float64, generator=generator)

    def attention(x, hidden=None, bias=None):
        scores = (x @ w[0]) @ (x @ w[1]).T
        scores = scores + bias if bias is not None else scores
        scores = scores.masked_fill(hidden, float("-inf")) if hidden is not None else scores
        return torch.softmax(scores, dim=-1) @ (x @ w[2])

    index = torch.arange(6)
    return {
        "column_softmax": lambda x: torch.softmax(x, dim=0),
        "minus_mean": lambda x: x - x.mean(dim=0),
        "learned_table": lambda x: x + table,
        "sort_rows": lambda x: x[torch.argsort(x[:, 0])],
        "distance_bias": lambda x: attention(x, bias=-(index[:, None] - index[None, :]).abs().double()),
        "plain_block": lambda x: torch.tanh(torch.nn.functional.layer_norm(x + attention(x), (3,)) @ w[3]),
        "running_max": lambda x: torch.cummax(x, dim=0).values,
        "not_itself": lambda x: attention(x, hidden=torch.eye(6, dtype=torch.bool)),
        "kernel_one": lambda x: x @ w[3],
        "reverse_rows": lambda x: x.flip(0),
        "content_mask": lambda x: attention(x, hidden=x[None, :, 0] > x[:, None, 0]),
        "add_previous": lambda x: torch.cat([x[:1], x[1:] + x[:-1]]),
        "broadcast_max": lambda x: x.max(dim=0).values.expand(6, 3),
        "scale_by_position": lambda x: x * (index[:, None] + 1),
    }


def test_every_map_of_the_pool_is_equivariant_exactly_when_the_grader_says_so():
    from autograder.student.parameters import MAPS
    from autograder.variants.permutation import EQUIVARIANT

    maps = pool_maps()
    assert set(maps) == set(MAPS) == set(EQUIVARIANT)
    generator = torch.Generator().manual_seed(6)
    x = torch.randn(6, 3, dtype=torch.float64, generator=generator)
    shuffle = [2, 0, 5, 1, 3, 4]
    for name, f in maps.items():
        gap = (f(x[shuffle]) - f(x)[shuffle]).abs().max().item()
        assert (gap < 1e-10) == EQUIVARIANT[name][0], (name, gap)


@pytest.mark.parametrize("maps", by_item("1.5").choices["maps"])
def test_the_letters_of_each_list_are_its_equivariant_maps(maps):
    from autograder.variants.permutation import EQUIVARIANT

    constants = by_item("1.5").constants({"maps": maps})
    assert len(maps) == len(set(maps)) == 8
    assert constants["EXPECTED_MAPS"] == "".join(letter for letter, name in zip("abcdefgh", maps, strict=True)
                                                 if EQUIVARIANT[name][0])
    assert 3 <= len(constants["EXPECTED_MAPS"]) <= 5  # neither all nor none
    assert sorted(constants["EXPECTED_WHY"]) == list("abcdefgh")


DECIDES = {  # 1.6's properties, written here
    "palindrome": lambda s: list(s) == list(reversed(s)),
    "never_decreasing": lambda s: list(s) == sorted(s),
    "first_below_last": lambda s: s[0] < s[-1],
    "adjacent_pair": lambda s: len(set(itertools.pairwise(s)) & {(t, t) for t in range(10)}) > 0,
}


@pytest.mark.parametrize("verdict", by_item("1.6").choices["verdict"])
@pytest.mark.parametrize("length", by_item("1.6").choices["length"])
def test_the_model_pair_of_every_task_fools_the_classifier(verdict, length):
    assert set(DECIDES) == set(by_item("1.6").choices["verdict"])
    assert by_item("1.6").constants({"verdict": verdict, "length": length}) == {"EXPECTED_VERDICT": verdict,
                                                                                "EXPECTED_LENGTH": length}
    namespace = {"my_parameters": {"1.6": {"verdict": verdict, "length": length}}}
    exec(source_cells("01_permutation")["blind_answer"], namespace)  # noqa: S102 (source/: trusted)
    first, second = namespace["blind_pair"]
    assert len(first) == len(second) == length and set(first + second) <= set(range(10))
    assert sorted(first) == sorted(second) and first != second
    assert DECIDES[verdict](first) != DECIDES[verdict](second)


@pytest.mark.parametrize("rows", by_item("3.6").choices["rows"])
@pytest.mark.parametrize("longest", by_item("3.6").choices["longest"])
def test_offset_rows_match_the_rows_a_training_run_touches(rows, longest):
    touched = {position + 2 for length in range(1, longest + 1) for position in range(length)}
    expected = [min(touched), max(touched), rows - len(touched)]  # every other row never learns
    assert by_item("3.6").constants({"rows": rows, "longest": longest})["EXPECTED"] == expected


def packed_runs(documents: list[int], context: int) -> list[int]:
    """The lengths of the runs of position ids when ``documents`` (their lengths), back to back, are cut into rows
    of ``context`` tokens: a run ends at each document's end and at each row's end."""
    cuts = set(itertools.accumulate(documents)) | set(range(context, sum(documents), context))
    ends = sorted(cuts | {0})
    return [end - start for start, end in itertools.pairwise(ends)]


@pytest.mark.parametrize("rows", by_item("3.4").choices["rows"])
@pytest.mark.parametrize("longest", by_item("3.4").choices["longest"])
def test_packed_rows_never_trained_are_those_past_the_longest_run(rows, longest):
    # documents of every length up to D, one of D at the start of a row, rows of 128 tokens
    runs = packed_runs([longest, *range(1, longest + 1)], 128)
    assert by_item("3.4").constants({"rows": rows, "longest": longest})["EXPECTED"] == [rows - max(runs)]


@pytest.mark.parametrize("document", by_item("3.5").choices["document"])
@pytest.mark.parametrize("context", by_item("3.5").choices["context"])
def test_packed_counts_are_the_runs_that_reach_the_first_and_the_last_position(document, context):
    periods = 2
    documents = periods * context // math.gcd(document, context)  # twice lcm(C, D) tokens
    runs = packed_runs([document] * documents, context)
    assert sum(runs) % context == 0 and context % document != 0  # whole rows, and rows cut documents
    expected = [len(runs), sum(run == document for run in runs)]  # every run uses row 0; whole ones row D - 1
    assert by_item("3.5").constants({"document": document, "context": context})["EXPECTED"] == expected
    described = by_item("3.5").describe({"document": document, "context": context})
    assert f"{documents} documents fill {sum(runs) // context} rows" in described


@pytest.mark.parametrize("steps", by_item("3.7").choices["steps"])
def test_the_measured_entry_is_adams_update_and_about_lr_a_step(steps):
    for rate, start in itertools.product(by_item("3.7").choices["lr"], by_item("3.7").choices["start"]):
        constants = by_item("3.7").constants({"lr": rate, "steps": steps, "start": start})
        [measured] = constants["EXPECTED"]
        assert measured == pytest.approx(adam_l2_entry(rate, steps, start), abs=1e-12)
        assert constants["TOLERANCE"] == pytest.approx(rate * steps / 10)
        assert abs(measured - (start - rate * steps)) < constants["TOLERANCE"] / 2  # "about lr a step" passes
        [adamw] = constants["MISTAKES"][0][1]
        assert adamw == pytest.approx(start * (1 - rate * 0.1) ** steps)
        assert abs(adamw - measured) > 9 * constants["TOLERANCE"]


def t5_bucket(r: int, num_buckets: int, max_distance: int, bidirectional: bool = True) -> int:
    """T5's bucket of the offset r = j - i, as in the T5 paper's code (written out here)."""
    n = num_buckets // 2 if bidirectional else num_buckets
    bucket, a = ((n if r > 0 else 0), abs(r)) if bidirectional else (0, max(-r, 0))
    exact = n // 2
    if a < exact:
        return bucket + a
    return bucket + min(n - 1, exact + int(math.log(a / exact) / math.log(max_distance / exact) * (n - exact)))


def shaw_rewrite(batch: int, heads: int, tokens: int, head_dim: int, max_distance: int) -> list[float]:
    """6.4 from the formula: the scores against the 2k + 1 rows, the scores at every key, and the plain product
    over their sum, in MiB of float32."""
    relative = batch * heads * tokens * (2 * max_distance + 1) * 4 / 2**20
    placed = batch * heads * tokens * tokens * 4 / 2**20
    return [relative, placed, batch * heads * tokens * tokens * head_dim * 4 / 2**20 / (relative + placed)]


def test_shaw_rewrite_counts_bytes_of_both_steps():
    for values in itertools.product(*by_item("6.4").choices.values()):
        parameters = dict(zip(by_item("6.4").choices, values, strict=True))
        assert by_item("6.4").constants(parameters)["EXPECTED"] == pytest.approx(shaw_rewrite(*values), rel=1e-12)


# The kind each allowed case of 6.1 calls for, by part, read here from the chapter's table of the four doors
# (where a kind enters, whether it has trained parameters): in the order of the allowed cases.
CASES = {
    "6.1 (a)": ("none", "shaw", "sinusoidal"),
    "6.1 (b)": ("alibi", "rope", "none"),
    "6.1 (c)": ("rope", "learned", "alibi"),
    "6.1 (d)": ("t5", "shaw", "sinusoidal"),
    "6.1 (e)": ("learned", "t5", "rope"),
}
DOORS = {  # a phrase of a case -> the kinds it leaves
    "no trained parameters": {"none", "sinusoidal", "alibi", "rope"},
    "trained": {"learned", "shaw", "t5"},
    "absolute position": {"sinusoidal", "learned"},
    "to the input": {"sinusoidal", "learned"},
    "to the token embeddings": {"sinusoidal", "learned"},
    "to the attention scores": {"t5", "alibi"},
    "added to the scores": {"t5", "alibi"},
    "to its keys": {"shaw"},
    "added to the key": {"shaw"},
    "query and key vectors themselves": {"rope"},
    "queries and keys must be turned": {"rope"},
    "m + s": {"rope", "alibi", "shaw", "t5", "none"},
    "cached": {"rope", "none", "sinusoidal", "learned"},
    "no position signal at all": {"none"},
    "depend on the positions": {"sinusoidal", "learned", "shaw", "t5", "alibi", "rope"},
    "must not change when": {"none"},
    "sines and cosines": {"sinusoidal"},
    "logarithmically": {"t5"},
    "bucket": {"t5"},
    "linearly with the distance": {"alibi"},
    "learn any vector": {"learned"},
}


@pytest.mark.parametrize("item", CASES)
def test_each_case_of_6_1_leaves_one_kind_the_grader_expects_and_the_solution_finds(item):
    """The constraints' phrases of each allowed case leave exactly the kind of CASES; the grader expects it, names
    every other kind, and the source's solution, run with the case, sets it."""
    (variant,) = [variant for variant in variants_of("06_comparison") if variant.item == item]
    (name, cases), = variant.choices.items()
    answer_id = f"choice_{item[-2]}_answer"
    body = "\n".join(line for line in source_cells("06_comparison")[answer_id].splitlines() if not line.startswith("###"))
    for case, kind in zip(cases, CASES[item], strict=True):
        left = {"none", "sinusoidal", "learned", "shaw", "t5", "alibi", "rope"}
        for phrase, kinds in DOORS.items():
            if phrase in case and not (phrase == "trained" and "no trained" in case):
                left &= kinds
        assert left == {kind}, (item, case, left)
        constants = variant.constants({name: case})
        assert constants["EXPECTED"] == kind and sorted(constants["MISTAKES"]) == sorted(
            {"none", "sinusoidal", "learned", "shaw", "t5", "alibi", "rope"} - {kind})
        namespace = {"my_parameters": {item: {name: case}}}
        exec(body, namespace)  # noqa: S102 (source/: trusted)
        assert namespace[f"choice_{item[-2]}"] == kind, (item, case)


# ---------------------------------------------------------------------------------------------------------
# The student ID: declared in the notebook, from JupyterHub, or the submission's folder while grading
# ---------------------------------------------------------------------------------------------------------


def test_the_declared_id_is_read_from_the_student_id_line_without_running_it():
    def notebook(*sources):
        return {"cells": [{"cell_type": "code", "source": source} for source in sources]}

    assert declared_student_id(notebook("x = 1", 'STUDENT_ID = " ana "  # mine')) == "ana"
    assert declared_student_id(notebook("STUDENT_ID = 12345")) == "12345"
    assert declared_student_id(notebook('STUDENT_ID = ""')) is None
    assert declared_student_id(notebook('STUDENT_ID = input("who?")')) is None  # not run, not read
    assert declared_student_id(notebook("STUDENT_ID = (", "y = 2")) is None
    # Round 16: code nested deeper than Python's parser goes raised RecursionError, a grader's failure.
    assert declared_student_id(notebook('STUDENT_ID = "ana"\nx = ' + "1+" * 200_000 + "1")) is None
    assert declared_student_id(notebook('STUDENT_ID = "ana"\nx = ' + "-" * 200_000 + "1")) is None


def test_your_parameters_prints_the_parameters_of_the_declared_id(monkeypatch, capsys):
    monkeypatch.delenv("AUTOGRADER_GRADING", raising=False)
    monkeypatch.setenv("JUPYTERHUB_USER", "hubuser")
    mine = your_parameters(ASSIGNMENT, "ana")
    printed = capsys.readouterr().out
    assert "Student ID: ana (STUDENT_ID)" in printed
    assert f"Your parameters for 2.1: position p = {draw(VARIED['2.1'], 'ana')['position']}" in printed
    assert mine["2.7"] == draw(VARIED["2.7"], "ana")
    hub = your_parameters(ASSIGNMENT, "")
    assert "Student ID: hubuser ($JUPYTERHUB_USER)" in capsys.readouterr().out
    assert hub["2.5"] == draw(VARIED["2.5"], "hubuser")
    with pytest.raises(KeyError, match="item must be one of"):
        mine["2.4"]
    with pytest.raises(KeyError, match="item must be one of"):
        mine.show("2.4")
    with pytest.raises(TypeError, match="STUDENT_ID must be a string"):
        your_parameters(ASSIGNMENT, ["ana"])


def test_an_empty_id_says_what_to_do(monkeypatch, capsys):
    monkeypatch.delenv("AUTOGRADER_GRADING", raising=False)
    monkeypatch.delenv("JUPYTERHUB_USER", raising=False)
    your_parameters(ASSIGNMENT, "  ").show("2.1")
    printed = capsys.readouterr().out
    assert "STUDENT_ID is empty: write your student ID" in printed and "(set STUDENT_ID first!)" in printed


def test_while_grading_the_folder_decides_and_the_switch_is_obeyed(monkeypatch, capsys):
    monkeypatch.setenv("AUTOGRADER_GRADING", "1")
    monkeypatch.setenv("AUTOGRADER_STUDENT_ID", "ben")
    monkeypatch.setenv("AUTOGRADER_VARIANTS", "1")
    assert your_parameters(ASSIGNMENT, "ana")["2.1"] == draw(VARIED["2.1"], "ben")
    monkeypatch.setenv("AUTOGRADER_VARIANTS", "0")
    assert your_parameters(ASSIGNMENT, "ana")["2.1"] == VARIED["2.1"].answer_key
    assert "Variants are turned off" in capsys.readouterr().out


def test_the_setting_is_read_from_the_course_configuration(monkeypatch, tmp_path):
    assert student_side.enabled_in_config() is True  # as autograder/nbgrader_config.py ships
    config = tmp_path / "nbgrader_config.py"
    config.write_text("c = get_config()\nc.AutograderVariants.enabled = False\n")
    monkeypatch.setattr(student_side, "CONFIG_FILE", config)
    assert student_side.enabled_in_config() is False
    config.write_text("c = get_config()\nc.AutograderVariants.enabled = 'no'\n")
    with pytest.raises(ValueError, match="must be True or False"):
        student_side.enabled_in_config()


def test_the_released_notebook_prints_the_students_parameters_above_the_items(monkeypatch):
    monkeypatch.delenv("AUTOGRADER_GRADING", raising=False)
    notebook = nbformat.read(ROOT / "notebooks" / f"{ASSIGNMENT}.ipynb", as_version=4)
    for cell in notebook.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == "student_id":
            cell.source = 'STUDENT_ID = "ana"'
        if cell.metadata.get("nbgrader", {}).get("grade_id", "").startswith("explore_"):
            cell.source = ""
    execute_in_own_loop(NotebookClient(notebook, timeout=300, kernel_name="python3",
                                       resources={"metadata": {"path": str(ROOT)}}))
    outputs = {
        cell.metadata.get("nbgrader", {}).get("grade_id"): "".join(
            output.get("text", "") + output.get("data", {}).get("text/plain", "") for output in cell.outputs
        )
        for cell in notebook.cells if cell.cell_type == "code"
    }
    assert "Student ID: ana (STUDENT_ID)" in outputs["my_parameters"]
    for item, variant in VARIED.items():
        line = f"Your parameters for {item}: {variant.describe(draw(variant, 'ana'))}"
        assert line in outputs["my_parameters"] and outputs[f"parameters_{item.replace('.', '_')}"].strip() == line
    assert "2.1 not answered yet" in outputs["pe_d4_at_p_test"]  # the notebook runs on past unanswered items


# ---------------------------------------------------------------------------------------------------------
# A class graded end to end: answers passed between students
# ---------------------------------------------------------------------------------------------------------

# Four students, in every assignment with varied items. ana and ben type their own numbers; cy hands in ana's
# numbers and declares ana's ID; fay hands in ben's numbers. The IDs are chosen so that every varied parameter
# differs between the pairs (the first test below checks it).
CLASS = {"ana": "ana", "ben": "ben", "cy": "ana", "fay": "ben"}
CLASS_ASSIGNMENTS = ASSIGNMENTS
TOTALS = {"01_permutation": 13, "02_sinusoidal": 16, "03_learned": 12, "04_relative": 13, "05_rope": 12,
          "06_comparison": 14}  # the notebooks' tables and the students' guide's, autograded points (written answers wait for a hand grade)


def other_literal_answers(assignment: str, parameters: dict[str, dict]) -> dict[str, str]:
    """Typed-in numbers for the varied items of every chapter (derived here, as in the tests above)."""
    if assignment == "01_permutation":
        first, others = parameters["1.7"]["values"]
        sequence, prefix = [first] + [others] * 7, parameters["1.7"]["prefix"]
        averages = [sum(sequence[: max(p, prefix - 1) + 1]) / (max(p, prefix - 1) + 1) for p in range(8)]
        return {"count_answer": f"prefix_outputs = {[round(average, 3) for average in averages]}"}
    if assignment == "03_learned":
        packed = parameters["3.4"]
        document, context = parameters["3.5"]["document"], parameters["3.5"]["context"]
        runs = packed_runs([document] * (2 * context // math.gcd(document, context)), context)
        rows, longest = parameters["3.6"]["rows"], parameters["3.6"]["longest"]
        decay = parameters["3.7"]
        return {"packed_rows_answer": f"packed_never_trained = {packed['rows'] - min(128, packed['longest'])}",
                "packed_counts_answer": f"packed_counts = [{len(runs)}, {runs.count(document)}]",
                "offset_answer": f"offset_rows = [2, {longest + 1}, {rows - longest}]",
                "decay_answer": f"untrained_entry = {decay['start'] - decay['lr'] * decay['steps']:.4f}"}
    if assignment == "04_relative":
        model, length = parameters["4.3"], parameters["4.3"]["length"]
        trained = [len({t5_bucket(r, model["num_buckets"], model["max_distance"], bidirectional)
                        for r in range(-(length - 1), length if bidirectional else 1)}) for bidirectional in (True, False)]
        decoder, a = parameters["4.7"], parameters["4.7"]["distance"]
        mine = t5_bucket(-a, decoder["num_buckets"], decoder["max_distance"], False)
        shared = [d for d in range(1, 5 * a) if t5_bucket(-d, decoder["num_buckets"], decoder["max_distance"], False) == mine]
        lead, heads = parameters["4.8"]["lead"], parameters["4.8"]["heads"]
        hiding = [math.floor(1 + lead / slope) + 1 for slope in (2 ** (-8 / heads), 2**-8)]
        return {"bucket_reach_answer": f"t5_trained_buckets = {trained}",
                "t5_shared_answer": f"t5_shared_distances = {[shared[0], shared[-1]]}",
                "alibi_hiding_answer": f"alibi_hiding_distance = {hiding}"}
    if assignment == "05_rope":
        model = parameters["5.6"]
        base, d, length, factor = model["base"], model["head_dim"], model["context"], model["factor"]
        wavelengths = [2 * math.pi * base ** (2 * i / d) for i in range(d // 2)]  # slow: longer than L - 1
        scaled = [2 * math.pi * (base * factor ** (d / (d - 2))) ** (2 * i / d) for i in range(d // 2)]
        slow = [i for i in range(d // 2) if wavelengths[i] > length - 1]
        beyond = sum((factor * length - 1) / scaled[i] > 2 * (length - 1) / wavelengths[i] for i in slow)
        # 5.7: the source's diagnosis, run on the function of the mystery number drawn, at the position drawn
        mystery = parameters["5.7"]
        diagnosis = solutions(assignment)["planted_bug_answer"].replace("mystery_rope(", f"mystery_rope_{mystery['mystery']}(")
        diagnosis = diagnosis.replace('my_parameters["5.7"]["position"]', str(mystery["position"]))
        return {"slow_pairs_answer": f"ntk_slow_pairs = [{len(slow)}, {beyond}]", "planted_bug_answer": diagnosis}
    if assignment == "06_comparison":
        from test_grader_items_thinking import seeds_derivation  # the independent derivation of 6.3

        sizes = parameters["6.4"]
        rewrite = shaw_rewrite(*(sizes[name] for name in ("batch", "heads", "tokens", "head_dim", "max_distance")))
        from test_grader_items_thinking import three_seeds_derivation  # the independent derivation of 6.5

        adjusted_p, ordered = seeds_derivation(parameters["6.3"]["table"]["scores"])["expected"]
        far_pairs = three_seeds_derivation(parameters["6.5"]["table"]["scores"])["right"]
        chosen = {}
        for item, kinds in CASES.items():
            (name, case), = parameters[item].items()
            (variant,) = [variant for variant in variants_of(assignment) if variant.item == item]
            chosen[f"choice_{item[-2]}_answer"] = f"choice_{item[-2]} = {kinds[variant.choices[name].index(case)]!r}"
        return {**chosen, "shaw_memory_answer": f"shaw_rewrite = {[round(x, 3) for x in rewrite]}",
                "seeds_answer": f"adjusted_p = {[round(p, 4) for p in adjusted_p]}\nordered_pairs = {ordered}",
                "claims_answer": f"far_pairs = {far_pairs}"}
    return literal_answers(parameters)


def parameters(student: str, assignment: str = ASSIGNMENT) -> dict[str, dict]:
    return parameters_for(assignment, student, enabled=True)


def varied_points(assignment: str) -> dict[str, float]:
    """Points of the varied items' test cells (the quiz questions left out), read from the source notebook."""
    notebook = nbformat.read(ROOT / "autograder" / "source" / assignment / f"{assignment}.ipynb", as_version=4)
    points = {cell.metadata["nbgrader"]["grade_id"]: cell.metadata["nbgrader"].get("points") for cell in notebook.cells}
    return {variant.test_cell: points[variant.test_cell] for variant in variants_of(assignment)
            if variant.item not in QUIZZES[assignment]}


def quiz_answers(assignment: str, student: str) -> dict[str, tuple[str, str]]:
    """For each quiz question's test cell: its answer cell and the letter under which ``student`` sees the right
    option (the place of the source's letter in the student's order, worked out here)."""
    found = {}
    for variant in variants_of(assignment):
        if variant.item in QUIZZES[assignment]:
            source_letter = hidden_constants(assignment, variant.test_cell)["EXPECTED_CHOICE"]
            order = parameters(student, assignment)[variant.item]["order"]
            found[variant.test_cell] = (variant.test_cell.removesuffix("_test") + "_answer", "ABCD"[order.index(source_letter)])
    return found


def copied_answers(assignment: str, answers_of: str) -> dict[str, str]:
    """Every answer cell that reads ``my_parameters``, as the plain values it gives ``answers_of``, typed in: what a
    student hands in who copies another's numbers instead of computing their own (the items without a derivation
    of their own in :func:`other_literal_answers`). The notebook's cells run in order, as in a kernel, with the ID
    of ``answers_of``; its explorers and tests are left out."""
    import ast
    import contextlib
    import io

    notebook = nbformat.read(ROOT / "autograder" / "source" / assignment / f"{assignment}.ipynb", as_version=4)
    answers = solutions(assignment)
    namespace: dict = {}
    typed = {}
    for cell in notebook.cells:
        meta = cell.metadata.get("nbgrader", {})
        grade_id = meta.get("grade_id", "")
        if cell.cell_type != "code" or meta.get("grade") or grade_id.startswith("explore"):
            continue
        source = answers.get(grade_id, cell.source)
        if grade_id == "student_id":
            source = f'STUDENT_ID = "{answers_of}"'
        with contextlib.redirect_stdout(io.StringIO()):
            exec(source, namespace)  # noqa: S102 (source/: trusted)
        if grade_id in answers and "my_parameters" in source and not grade_id.startswith("quiz_"):
            names = [target.id for statement in ast.parse(source).body if isinstance(statement, ast.Assign)
                     for target in statement.targets if isinstance(target, ast.Name)]
            plain = {name: namespace[name] for name in names
                     if isinstance(namespace[name], int | float | str | list | tuple | dict | set | frozenset)}
            typed[grade_id] = "\n".join(f"{name} = {value!r}" for name, value in plain.items())
    return typed


def copied_points(assignment: str, student: str) -> float:
    """What a student of the class who hands in another's answers loses: every varied item, and the quiz
    questions whose right letter differs between the two (24 orders: two students may share one)."""
    own, copied = quiz_answers(assignment, student), quiz_answers(assignment, CLASS[student])
    quiz_points = sum(1.0 for cell in own if own[cell][1] != copied[cell][1])
    return sum(varied_points(assignment).values()) + quiz_points


def test_the_class_ids_draw_different_parameters_on_every_varied_item():
    for assignment in CLASS_ASSIGNMENTS:
        for first, second in (("ana", "ben"), ("cy", "ana"), ("fay", "ben")):
            for item, drawn in parameters(first, assignment).items():
                if item not in QUIZZES[assignment]:
                    assert drawn != parameters(second, assignment)[item], (first, second, item)


@pytest.fixture(scope="module")
def graded_class(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("variants")
    for assignment in CLASS_ASSIGNMENTS:
        for student, answers_of in CLASS.items():
            typed = {**copied_answers(assignment, answers_of),
                     **other_literal_answers(assignment, parameters(answers_of, assignment))}
            for answer_cell, letter in quiz_answers(assignment, answers_of).values():  # letters typed in, as seen
                typed[answer_cell] = f'{solutions(assignment)[answer_cell].split(" = ")[0]} = "{letter}"'
            notebook = filled(assignment, {**solutions(assignment), **typed})
            for cell in notebook.cells:
                if cell.metadata.get("nbgrader", {}).get("grade_id") == "student_id" and student == "cy":
                    cell.source = 'STUDENT_ID = "ana"'
            folder = root / "submitted" / student / assignment
            folder.mkdir(parents=True)
            nbformat.write(notebook, folder / f"{assignment}.ipynb")
    completed = run_module("autograder", "grade", str(root / "submitted"), "--out", str(root / "out"), timeout=1200)
    assert completed.returncode == 0, completed.stderr[-4000:]
    yield root / "out"
    shutil.rmtree(root, ignore_errors=True)


def rows(out: Path, name: str) -> list[dict[str, str]]:
    with open(out / name, newline="") as handle:
        return list(csv.DictReader(handle))


def test_each_student_is_right_with_their_own_numbers_and_wrong_with_anothers(graded_class):
    scores = {(row["student_id"], row["assignment"]): float(row["raw_score"]) for row in rows(graded_class, "grades.csv")}
    items = {(row["student_id"], row["assignment"], row["item"]): row for row in rows(graded_class, "items.csv")}
    for assignment in CLASS_ASSIGNMENTS:
        assert sum(varied_points(assignment).values()) > 0
        for student in CLASS:
            expected = TOTALS[assignment] - (copied_points(assignment, student) if student in ("cy", "fay") else 0)
            assert scores[student, assignment] == expected, (student, assignment)
        for student in ("cy", "fay"):
            own, copied = quiz_answers(assignment, student), quiz_answers(assignment, CLASS[student])
            for variant in variants_of(assignment):
                row = items[student, assignment, variant.test_cell]
                if variant.item in QUIZZES[assignment]:  # right where the two orders put the right option alike
                    same = own[variant.test_cell][1] == copied[variant.test_cell][1]
                    assert float(row["score"]) == (1.0 if same else 0.0), (student, variant.item)
                    assert "with your parameters" not in row["message"], row["message"]
                    continue
                assert float(row["score"]) == 0, (student, variant.item)
                described = variant.describe(parameters(student, assignment)[variant.item])
                if "\n" in described or len(described) > 160:  # too long to repeat: the page's note lists it
                    described = "listed at the top of this page"
                assert row["message"].startswith(f"with your parameters ({described}): "), row["message"]


def test_feedback_lists_the_parameters_and_names_a_declared_id_that_is_not_the_folders(graded_class):
    report = (graded_class / "report.txt").read_text()
    for assignment in CLASS_ASSIGNMENTS:
        for student in CLASS:
            drawn = parameters(student, assignment)
            listed = "; ".join(f"{v.item} {v.describe(drawn[v.item])}" for v in variants_of(assignment)
                               if v.item not in QUIZZES[assignment])
            note = f"the varied items were graded with the parameters of student {student}: {listed}"
            assert note.replace("\n", "\\n") in report  # report.txt writes each note on one line
            page = (graded_class / "feedback" / student / assignment / f"{assignment}.html").read_text()
            assert html.escape(note) in page
    mismatch = ("the notebook says STUDENT_ID = 'ana', but it was submitted in the folder of student 'cy': its "
                "varied items were graded with the parameters of 'cy'")
    assert report.count(mismatch) == len(CLASS_ASSIGNMENTS)
    assert report.count("the notebook says STUDENT_ID") == len(CLASS_ASSIGNMENTS)  # the others declare nothing


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_the_titles_that_say_your_are_exactly_the_varied_items(assignment):
    """Students and the book (tests/test_book_exercise_lists.py) learn which items vary from the word "your"."""
    intro = nbformat.read(ROOT / "autograder" / "source" / assignment / f"{assignment}.ipynb", as_version=4).cells[0]
    rows = [re.match(r"\| (\d\.\d+(?: \([a-e]\))?)", line).group(1) for line in intro.source.splitlines()
            if line.startswith("| ") and "your" in line.lower()]
    varied = [variant.item for variant in variants_of(assignment) if variant.item not in QUIZZES[assignment]]
    assert rows == varied  # every quiz question varies its order of options, which the guide says once
