r"""The varied items of chapter 2 (sinusoidal encoding), their parameters and expected values.

With :math:`\omega_i = \text{base}^{-2i/d}`: :math:`\mathrm{PE}(p)_{2i} = \sin(p\,\omega_i)`,
:math:`\mathrm{PE}(p)_{2i+1} = \cos(p\,\omega_i)`. The right values come from ``posenc_ref.sinusoidal``; the
known mistakes (degrees, sin and cos swapped, the halves layout, a doubled exponent, an exponent over features)
from :func:`pe_with_mistake`, the same formula with one thing changed.

2.6's submissions are tables of numbers in :mod:`autograder.student.submitted_tables` (the student's side), written by
:func:`submitted_tables_source` from :data:`SUBMISSIONS`: which bug and which base each submission number has is
known here only.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from typing import Any

from autograder.variants import Variant, distinct_mistakes

ASSIGNMENT = "02_sinusoidal"
BASE = 10000.0


def pe_with_mistake(position: int, d: int, *, exponent: float = 2.0, degrees: bool = False, swap: bool = False,
                    halves: bool = False, base: float = BASE) -> list[float]:
    """PE(position) for ``d`` with ``omega_i = base**(-exponent * i / d)``, one mistake switched on or none."""
    angles = [position * base ** (-exponent * i / d) for i in range(d // 2)]
    angles = [math.radians(angle) for angle in angles] if degrees else angles
    first, second = ([math.cos(a) for a in angles], [math.sin(a) for a in angles]) if swap else (
        [math.sin(a) for a in angles], [math.cos(a) for a in angles])
    if halves:
        return first + second
    return [value for pair in zip(first, second, strict=True) for value in pair]

DEGREES = "the angles were treated as degrees: p * omega_i is an angle in radians (math.sin and torch.sin take radians)"
SWAPPED = ("sin and cos are swapped: the even features 2i hold sin(p * omega_i), the odd features 2i + 1 hold "
           "cos(p * omega_i)")
HALVES = ("this is the halves layout (all sines, then all cosines); the interleaved layout asked for alternates "
          "sin and cos within each pair (2i, 2i + 1)")
DOUBLED = ("the exponent is doubled: pair i has omega_i = base**(-2i/d) with i = 0, ..., d/2 - 1; looping over the "
           "even feature indices j = 2i and still writing 2*j/d counts the factor 2 twice")
FEATURES = "the exponent runs over features instead of pairs: pair i needs base**(-2i/d), not base**(-i/d)"


def _farthest(frequencies: list[float], k: float, *, squared: bool = False) -> list[float]:
    """[the pair whose point moves farthest over k positions, that distance 2|sin(k omega_i / 2)|] (or squared)."""
    distances = [2 * abs(math.sin(k * omega / 2)) for omega in frequencies]
    pair = max(range(len(distances)), key=distances.__getitem__)
    return [pair, distances[pair] ** 2 if squared else distances[pair]]


def _most_moved(parameters: Mapping[str, Any]) -> dict[str, Any]:
    import torch

    from posenc_ref.sinusoidal import sinusoidal_table

    k = parameters["distance"]
    ends = sinusoidal_table(k + 1, 8, offset=100, dtype=torch.float64)[[0, k]]  # (2, 8): PE(100), PE(100 + k)
    moved = (ends[1] - ends[0]).reshape(4, 2).norm(dim=-1).tolist()  # (4,): per pair
    pair = max(range(4), key=moved.__getitem__)
    expected = [pair, moved[pair]]
    right = [BASE ** (-2 * i / 8) for i in range(4)]
    return {
        "EXPECTED": expected,
        "MISTAKES": distinct_mistakes(expected, [
            (("pair 0 turns fastest (k radians over k positions), but a point that turns past half a circle comes "
              "back towards where it started: two points of the unit circle at the angle theta apart are "
              "2|sin(theta / 2)| apart, largest near theta = pi"),
             [0, moved[0]]),
            ("that is the angle pair 0 turns (k * omega_0 radians), not the distance between its two points",
             [0, float(k)]),
            ("that is the squared distance; the distance between the two points of the pair is its square root",
             _farthest(right, k, squared=True)),
            (FEATURES, _farthest([BASE ** (-i / 8) for i in range(4)], k)),
            (DOUBLED, _farthest([BASE ** (-4 * i / 8) for i in range(4)], k)),
            (DEGREES, _farthest([omega * math.pi / 180 for omega in right], k)),
        ]),
    }


def pe_reference(position: int, d: int, base: float = BASE) -> list[float]:
    """PE(position) for ``d`` from ``posenc_ref`` (float64)."""
    import torch

    from posenc_ref.sinusoidal import sinusoidal_table

    return sinusoidal_table(1, d, base=base, offset=position, dtype=torch.float64)[0].tolist()


def _pe_d4(parameters: Mapping[str, Any]) -> dict[str, Any]:
    p = parameters["position"]
    return {
        "EXPECTED": pe_reference(p, 4),
        "MISTAKES": [
            (DEGREES, pe_with_mistake(p, 4, degrees=True)),
            (SWAPPED, pe_with_mistake(p, 4, swap=True)),
            (HALVES, pe_with_mistake(p, 4, halves=True)),
            (DOUBLED, pe_with_mistake(p, 4, exponent=4.0)),
            (FEATURES, pe_with_mistake(p, 4, exponent=1.0)),
        ],
    }


def _angle(scale: str, pair: int, d: int, exponent: int = 2) -> str:
    """The exact angle ``scale * base**(-exponent * pair / d)`` as an expression string."""
    if pair == 0:
        return scale
    numerator, denominator = exponent * pair, d
    common = math.gcd(numerator, denominator)
    return f"{scale}*10000**(-{numerator // common}/{denominator // common})"


def pe_expressions(scale: str, d: int, *, exponent: int = 2, swap: bool = False, halves: bool = False) -> list[str]:
    """Exact entries of PE at the angle scale ``scale`` ("2", or "2*pi/180" for degrees), as strings."""
    angles = [_angle(scale, i, d, exponent) for i in range(d // 2)]
    first, second = ("cos", "sin") if swap else ("sin", "cos")
    sines, cosines = [f"{first}({a})" for a in angles], [f"{second}({a})" for a in angles]
    return sines + cosines if halves else [value for pair in zip(sines, cosines, strict=True) for value in pair]


def _pe_d6(parameters: Mapping[str, Any]) -> dict[str, Any]:
    p = str(parameters["position"])
    return {
        "EXPECTED": pe_expressions(p, 6),
        "MISTAKES": [
            (SWAPPED, pe_expressions(p, 6, swap=True)),
            (DOUBLED, pe_expressions(p, 6, exponent=4)),
            (FEATURES, pe_expressions(p, 6, exponent=1)),
            (HALVES, pe_expressions(p, 6, halves=True)),
            (DEGREES, pe_expressions(f"{p}*pi/180", 6)),
        ],
    }


def _first_turn(parameters: Mapping[str, Any]) -> dict[str, Any]:
    from posenc_ref.sinusoidal import sinusoidal_frequencies

    base = float(parameters["base"])
    omegas = sinusoidal_frequencies(16, base=base).tolist()  # (8,): omega_i = base**(-2i/16)
    wavelengths = [2 * math.pi / omega for omega in omegas]
    return {
        "EXPECTED": [math.ceil(wavelength) for wavelength in wavelengths],
        "MISTAKES": [
            (("these are the wavelengths 2 pi / omega_i of the pairs; the question asks for the first whole position "
             "at which the pair has turned all the way (at or after its wavelength)"),
             wavelengths),
            (("rounded down: at that position the pair has not yet gone all the way round; take the first position "
             "at or past the wavelength"),
             [math.floor(wavelength) for wavelength in wavelengths]),
            ("that is half a turn (an angle of pi); a full turn is an angle of 2 pi",
             [math.ceil(wavelength / 2) for wavelength in wavelengths]),
            (("the exponent is doubled: pair i has omega_i = base**(-2i/d) with i = 0, ..., d/2 - 1; writing 4i/d "
             "makes the pairs slow down twice as fast"),
             [math.ceil(2 * math.pi * base ** (4 * i / 16)) for i in range(8)]),
            (FEATURES, [math.ceil(2 * math.pi * base ** (i / 16)) for i in range(8)]),
            (("the angles were treated as degrees (a full turn of 360): p * omega_i is an angle in radians, and a "
             "full turn is 2 pi"),
             [math.ceil(360 / omega - 1e-9) for omega in omegas]),  # 360 * 10000**(1/4) is 3600 (+ rounding)
        ],
    }


def dot_expression(scale: str, *, exponent: int = 2, factor: str = "") -> str:
    """PE(p) . PE(p + k) for d = 6 as the sum of cos(k * omega_i) over the 3 pairs, k given by ``scale``."""
    return " + ".join(f"{factor}cos({_angle(scale, i, 6, exponent)})" for i in range(3))


def gap_expression(scale: str, *, exponent: int = 2, norm: str = "6", factor: str = "2*") -> str:
    """|PE(p + k) - PE(p)|^2 for d = 6: the two squared norms d/2 (``norm`` together) less ``factor`` times the dot
    product, k given by ``scale``."""
    return norm + "".join(f" - {factor}cos({_angle(scale, i, 6, exponent)})" for i in range(3))


def _gap(parameters: Mapping[str, Any]) -> dict[str, Any]:
    k = str(parameters["distance"])
    return {
        "EXPECTED": [gap_expression(k)],
        "MISTAKES": [
            (("that is the dot product PE(p) . PE(p + k) of the two rows; the squared distance is |PE(p + k)|^2 + "
              "|PE(p)|^2 - 2 PE(p) . PE(p + k)"),
             [dot_expression(k)]),
            (("each row has the squared norm d/2 = 3, and there are two rows: |a - b|^2 = |a|^2 + |b|^2 - 2 a . b "
              "starts with 3 + 3"),
             [gap_expression(k, norm="3")]),
            ("the factor 2 of the cross term is missing: |a - b|^2 = |a|^2 + |b|^2 - 2 a . b",
             [gap_expression(k, factor="")]),
            ("this is half the squared distance: each pair contributes 2 - 2 cos(k omega_i), not 1 - cos(k omega_i)",
             [gap_expression(k, norm="3", factor="")]),
            ("the exponent is doubled: pair i has omega_i = base**(-2i/d) with i = 0, ..., d/2 - 1",
             [gap_expression(k, exponent=4)]),
            (FEATURES, [gap_expression(k, exponent=1)]),
            ("the angles were treated as degrees: p * omega_i is an angle in radians", [gap_expression(f"{k}*pi/180")]),
        ],
    }


# ---------------------------------------------------------------------------------------------------------
# 2.6: every student diagnoses a submission of their own, with one of six bugs
# ---------------------------------------------------------------------------------------------------------

BUGS = {  # letter: how the submitted table differs from the right one
    "A": {"swap": True},
    "B": {"halves": True},
    "C": {"exponent": 4.0},
    "D": {"exponent": 1.0},
    "E": {"shift": 1},
    "F": {"degrees": True},
}
# The bug and the base of each submission of autograder.student.submitted_tables, by number: the student's side ships the
# numbers of the tables only. Two submissions of each bug, at other bases; the numbers are a random sample of
# 11..99, so that a number says nothing about its bug. Number 26 is the one answer key's (the doubled exponent).
SUBMISSIONS: dict[int, tuple[str, float]] = {
    26: ("C", 10000.0), 51: ("A", 2000.0), 75: ("F", 500.0), 76: ("E", 30000.0), 93: ("B", 10000.0),
    24: ("D", 5000.0), 39: ("E", 1000.0), 87: ("A", 20000.0), 90: ("B", 800.0), 82: ("F", 50000.0),
    64: ("D", 10000.0), 84: ("C", 3000.0),
}
ROWS, FEATURES_OF_TABLE = 32, 8  # every submitted table: PE(0), ..., PE(31) for d = 8
DECIMALS = 6  # the tables are shipped rounded to 6 decimals


def submission_rows(number: int) -> list[list[float]]:
    """The rows of submission ``number``, rounded as shipped: row p is PE(p + shift) with the submission's bug."""
    letter, base = SUBMISSIONS[number]
    flags = dict(BUGS[letter])
    shift = flags.pop("shift", 0)
    return [[round(value, DECIMALS) + 0.0 for value in pe_with_mistake(p + shift, FEATURES_OF_TABLE, base=base, **flags)]
            for p in range(ROWS)]


def submitted_tables_source() -> str:
    """The text of ``autograder/student/submitted_tables.py``: the numbers of every submission and nothing that names a bug
    (a test of the course compares the file with this)."""
    lines = [
        '''r"""Item 2.6: the submitted sinusoidal tables that students diagnose, each by its number.

Every student gets a submission of their own: its number is the student's parameter of 2.6
(:mod:`autograder.student.parameters`). A submission is the table that someone's implementation of the interleaved
sinusoidal encoding returned for 32 positions and d = 8, at the base it was asked to use, rounded to 6 decimals:
numbers only. Each table has one bug of the notebook's list; which one is for the student to find by testing.
(Written by the grader's side; do not edit by hand.)
"""

from __future__ import annotations

from typing import Any

# The base each submission was made for, by number.
BASES: dict[int, float] = {''',
    ]
    lines += [f"    {number}: {base!r}," for number, (_, base) in SUBMISSIONS.items()]
    lines += ["}", "", "# The rows of each submission, by number: row p is the implementation's PE(p) for d = 8.",
              "SUBMITTED: dict[int, tuple[tuple[float, ...], ...]] = {"]
    for number in SUBMISSIONS:
        lines.append(f"    {number}: (")
        lines += [f"        ({', '.join(repr(value) for value in row)})," for row in submission_rows(number)]
        lines.append("    ),")
    lines += ["}", "", "",
              "def _number(number: int) -> int:",
              "    if number not in SUBMITTED:",
              '        raise ValueError(f"number must be one of {sorted(SUBMITTED)}, got {number!r}")',
              "    return number",
              "", "",
              "def submitted_base(number: int) -> float:",
              '    """The base that submission ``number`` was made for."""',
              "    return BASES[_number(number)]",
              "", "",
              "def submitted_table(number: int) -> Any:",
              '    """Submission ``number`` as a float32 tensor of shape (32, 8): row p is its PE(p)."""',
              "    import torch",
              "",
              "    return torch.tensor(SUBMITTED[_number(number)], dtype=torch.float32)  # (32, 8)",
              ""]
    return "\n".join(lines)


def shift_residuals(rows: list[list[float]], base: float, *, backwards: bool = False) -> list[float]:
    """For each pair i: the largest |T[p + 1] - M_1 T[p]| over p and the pair's two features, where M_1's block of
    pair i maps (x, y) to (c x + s y, -s x + c y) with c, s = cos, sin of omega_i = base**(-2i/d) (``backwards``:
    the block of M_{-1}, s negated)."""
    d = len(rows[0])
    residuals = []
    for i in range(d // 2):
        omega = base ** (-2 * i / d)
        c, s = math.cos(omega), math.sin(omega) * (-1 if backwards else 1)
        worst = 0.0
        for now, after in itertools.pairwise(rows):
            x, y = now[2 * i], now[2 * i + 1]
            worst = max(worst, abs(after[2 * i] - (c * x + s * y)), abs(after[2 * i + 1] - (-s * x + c * y)))
        residuals.append(worst)
    return residuals


def bug_evidence(rows: list[list[float]], base: float, **options: Any) -> list[float]:
    r"""[the shift residual of pairs 0 to 3, the length ||T[0] - PE(0)||] of a table (PE(0) = (0, 1, 0, 1, ...)).

    The length, not the largest entry: a table off by one position starts with PE(1), and
    :math:`\|PE(1) - PE(0)\| = \sqrt{\sum_i (2 - 2\cos\omega_i)}` depends on the submission's base, where its
    largest entry would be sin 1 for every base."""
    start = [0.0, 1.0] * (len(rows[0]) // 2)
    length = math.sqrt(sum((a - b) ** 2 for a, b in zip(rows[0], start, strict=True)))
    return [*shift_residuals(rows, base, **options), length]


EVIDENCE_TOLERANCE = 0.005 + 1e-9  # two decimals


def _far(right: list[float], mistakes: list[tuple[str, list[float]]]) -> list[tuple[str, list[float]]]:
    """The mistakes that differ from the right answer, and from those before, by more than twice the tolerance."""
    kept: list[tuple[str, list[float]]] = []
    for why, wrong in mistakes:
        if all(max(abs(a - b) for a, b in zip(wrong, other, strict=True)) > 2 * EVIDENCE_TOLERANCE
               for other in [right, *(answer for _, answer in kept)]):
            kept.append((why, wrong))
    return kept


# What testing shows against each letter, whatever the submission's bug is.
WRONG_LETTER = {
    "A": "a table with sin and cos swapped starts with the row (1, 0, 1, 0, ...): compare row 0 of your table with it",
    "B": "a table in the halves layout starts with d/2 zeros and then d/2 ones: compare row 0 of your table with it",
    "C": "with a doubled exponent pair i >= 1 turns more slowly than base**(-2i/d) radians per position: measure the "
         "angle each pair of your table turns between rows 0 and 1",
    "D": "with the exponent over features pair i >= 1 turns faster than base**(-2i/d) radians per position: measure "
         "the angle each pair of your table turns between rows 0 and 1",
    "E": "a table off by one position starts with PE(1), whose first pair is (sin 1, cos 1): compare row 0 of "
         "your table with PE(0) = (0, 1, 0, 1, ...) and PE(1)",
    "F": "in degrees pair 0 would turn by pi/180 radians per position instead of 1: measure the angle pair 0 of "
         "your table turns between rows 0 and 1",
}


def _planted_bug(parameters: Mapping[str, Any]) -> dict[str, Any]:
    letter, base = SUBMISSIONS[parameters["submission"]]
    rows = submission_rows(parameters["submission"])
    evidence = bug_evidence(rows, base)
    return {
        "EXPECTED": letter,
        "MISTAKES": {other: why for other, why in WRONG_LETTER.items() if other != letter},
        "EXPECTED_EVIDENCE": evidence,
        "MISTAKES_EVIDENCE": _far(evidence, [
            (("M_1 is applied the wrong way round: PE(p + 1) = M_1 PE(p), with the block (cos w, sin w; -sin w, "
              "cos w) of shift_matrix(1, 8, base=your base); its transpose moves back one position"),
             bug_evidence(rows, base, backwards=True)),
            (("the residuals are measured with base 10000; your submission was made for another base: build M_1 "
              "with shift_matrix(1, 8, base=your base)"),
             bug_evidence(rows, BASE)),
        ]),
    }


VARIANTS = (
    Variant.of(ASSIGNMENT, "2.1", "pe_d4_at_p_test", _pe_d4),
    Variant.of(ASSIGNMENT, "2.2", "pe_d6_at_p_test", _pe_d6),
    Variant.of(ASSIGNMENT, "2.3", "most_moved_test", _most_moved),
    Variant.of(ASSIGNMENT, "2.5", "first_turn_test", _first_turn),
    Variant.of(ASSIGNMENT, "2.6", "planted_bug_test", _planted_bug),
    Variant.of(ASSIGNMENT, "2.7", "dot_test", _gap),
)
