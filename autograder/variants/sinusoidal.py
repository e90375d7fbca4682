r"""The varied items of chapter 2 (sinusoidal encoding), their parameters and expected values.

With :math:`\omega_i = \text{base}^{-2i/d}`: :math:`\mathrm{PE}(p)_{2i} = \sin(p\,\omega_i)`,
:math:`\mathrm{PE}(p)_{2i+1} = \cos(p\,\omega_i)`. The right values come from ``posenc_ref.sinusoidal``; the
known mistakes (degrees, sin and cos swapped, the halves layout, a doubled exponent, an exponent over features)
from :func:`autograder.submitted_tables.pe_with_mistake`, the same formula with one thing changed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from autograder.submitted_tables import BASE, SUBMITTED, pe_with_mistake
from autograder.variants import Variant, distinct_mistakes

ASSIGNMENT = "02_sinusoidal"

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


def _dot(parameters: Mapping[str, Any]) -> dict[str, Any]:
    k = str(parameters["distance"])
    return {
        "EXPECTED": [dot_expression(k)],
        "MISTAKES": [
            (("this is the value at distance 0 (the squared norm d/2 of every row); at your distance each pair "
             "contributes the cosine of the angle between its two points"),
             ["3"]),
            (("every pair is counted twice: each pair (sin, cos) contributes one cosine of the angle between its two "
             "points, so there are d/2 terms, not d"),
             [dot_expression(k, factor="2*")]),
            ("the exponent is doubled: pair i has omega_i = base**(-2i/d) with i = 0, ..., d/2 - 1",
             [dot_expression(k, exponent=4)]),
            (FEATURES, [dot_expression(k, exponent=1)]),
            ("the angles were treated as degrees: p * omega_i is an angle in radians", [dot_expression(f"{k}*pi/180")]),
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
# The bug of each submission of autograder.submitted_tables, by number: the parameter the notebook shows says
# which submission, not which bug. Number 1 is the one answer key's (the doubled exponent).
SUBMISSIONS = {number: letter for number, flags in SUBMITTED.items() for letter, bug in BUGS.items() if bug == flags}
# What testing shows against each letter, whatever the submission's bug is.
WRONG_LETTER = {
    "A": "a table with sin and cos swapped starts with the row (1, 0, 1, 0, ...): compare row 0 of candidate_table with it",
    "B": "a table in the halves layout starts with d/2 zeros and then d/2 ones: compare row 0 of candidate_table with it",
    "C": "with a doubled exponent pair i >= 1 turns more slowly than base**(-2i/d) radians per position: measure the "
         "angle each pair of candidate_table turns between rows 0 and 1",
    "D": "with the exponent over features pair i >= 1 turns faster than base**(-2i/d) radians per position: measure "
         "the angle each pair of candidate_table turns between rows 0 and 1",
    "E": "a table off by one position starts with PE(1), whose first pair is (sin 1, cos 1): compare row 0 of "
         "candidate_table with PE(0) = (0, 1, 0, 1, ...) and PE(1)",
    "F": "in degrees pair 0 would turn by pi/180 radians per position instead of 1: measure the angle pair 0 of "
         "candidate_table turns between rows 0 and 1",
}


def _planted_bug(parameters: Mapping[str, Any]) -> dict[str, Any]:
    bug = SUBMISSIONS[parameters["submission"]]
    return {"EXPECTED": bug, "MISTAKES": {letter: why for letter, why in WRONG_LETTER.items() if letter != bug}}


VARIANTS = (
    Variant.of(ASSIGNMENT, "2.1", "most_moved_test", _most_moved),
    Variant.of(ASSIGNMENT, "2.2", "pe_d4_at_p_test", _pe_d4),
    Variant.of(ASSIGNMENT, "2.3", "pe_d6_at_p_test", _pe_d6),
    Variant.of(ASSIGNMENT, "2.5", "first_turn_test", _first_turn),
    Variant.of(ASSIGNMENT, "2.6", "planted_bug_test", _planted_bug),
    Variant.of(ASSIGNMENT, "2.7", "dot_test", _dot),
)
