r"""The varied items of chapter 5 (RoPE): 5.6, pairs pushed past their trained angles by NTK-aware scaling, and
5.7, the bug of the student's mystery_rope.

5.6. Pair :math:`i` of a head of :math:`d` features turns by :math:`\theta_i = \text{base}^{-2i/d}` radians per
position. A model trained on :math:`L` tokens met, in pair :math:`i`, angles up to :math:`(L - 1)\,\theta_i`; the
pairs with :math:`(L - 1)\,\theta_i < 2\pi` never completed a turn, and met no angle beyond that. NTK-aware
scaling with factor :math:`s` reads :math:`sL` tokens with the base :math:`\text{base}' = \text{base}\cdot
s^{d/(d-2)}`, so pair :math:`i` reaches :math:`(sL - 1)\,\theta'_i` with :math:`\theta'_i =
\text{base}'^{-2i/d}`. The answer is the pair ``[slow, beyond]``: how many pairs never completed a turn in
training, and how many of those reach more than twice their largest trained angle at :math:`sL`. For the allowed
values no wavelength lies within 10 tokens of :math:`L - 1` or :math:`L` and no ratio within 0.5% of 2.

5.7. The notebook defines six functions ``mystery_rope_1`` to ``mystery_rope_6``, each with one of the six bugs
(``none`` included); the student's parameter says which one is theirs, and the map from numbers to bugs lives
here only (:data:`MYSTERY_BUGS`). The evidence graded beside the name is the angle by which the student's function
turns the basis vector :math:`e_6` of :math:`d = 8` features (base 10) at the student's position :math:`m`,
measured in the plane of features 6 and 7: ``atan2(y[7], y[6])``, compared modulo :math:`2\pi`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from autograder.variants import Variant, distinct_mistakes

ASSIGNMENT = "05_rope"

# 5.7: which bug each mystery_rope_<n> of the notebook has; never shipped to students.
MYSTERY_BUGS = {1: "squared_positions", 2: "none", 3: "wrong_direction", 4: "half_layout", 5: "doubled_exponent",
                6: "degrees"}
MEASURED_DIM, MEASURED_BASE, MEASURED_FEATURE = 8, 10.0, 6  # e_6 of d = 8 features, base 10: pair 3


def _frequencies(head_dim: int, base: float) -> list[float]:
    from posenc_ref.rope import rope_frequencies

    return rope_frequencies(head_dim, base=base)[0].double().tolist()  # (d/2,) base**(-2i/d)


def ntk_pairs(base: float, head_dim: int, length: int, factor: int, *, rule: str = "ntk", only_slow: bool = True
              ) -> int:
    """Pairs (never turned in training, when ``only_slow``) whose largest angle at factor * length tokens is more
    than twice their largest trained angle. ``rule``: "ntk" (base * s**(d/(d-2))), "ntk_base_times_s" (base * s,
    the exponent forgotten), "none" (plain RoPE read at sL), "interpolation" (every frequency divided by s)."""
    trained = _frequencies(head_dim, base)
    if rule == "ntk":
        scaled = _frequencies(head_dim, base * factor ** (head_dim / (head_dim - 2)))
    elif rule == "ntk_base_times_s":
        scaled = _frequencies(head_dim, base * factor)
    elif rule == "none":
        scaled = trained
    else:
        scaled = [theta / factor for theta in trained]
    count = 0
    for theta, theta_scaled in zip(trained, scaled, strict=True):
        slow = (length - 1) * theta < 2 * math.pi
        if (slow or not only_slow) and (factor * length - 1) * theta_scaled > 2 * (length - 1) * theta:
            count += 1
    return count


def slow_pairs(base: float, head_dim: int, length: int) -> int:
    """Pairs whose angle at the last trained position L - 1 stays below one turn."""
    return sum(1 for theta in _frequencies(head_dim, base) if (length - 1) * theta < 2 * math.pi)


def _ntk_pairs(parameters: Mapping[str, Any]) -> dict[str, Any]:
    base, head_dim, length, factor = (parameters[name] for name in ("base", "head_dim", "context", "factor"))
    slow = slow_pairs(base, head_dim, length)
    right = [slow, ntk_pairs(base, head_dim, length, factor)]
    mistakes = [
        (("the first number counts the pairs that do complete a turn in training; the question asks for those that "
         "never do"), [head_dim // 2 - slow, right[1]]),
        (("the second number counts every pair past twice its trained angles, also those that completed a turn in "
         "training (they have met every angle already)"),
         [slow, ntk_pairs(base, head_dim, length, factor, only_slow=False)]),
        (("the second number is for plain RoPE read at sL; NTK-aware scaling first raises the base to "
         "base * s**(d/(d-2))"), [slow, ntk_pairs(base, head_dim, length, factor, rule="none")]),
        ("NTK-aware scaling raises the base to base * s**(d/(d-2)), not base * s",
         [slow, ntk_pairs(base, head_dim, length, factor, rule="ntk_base_times_s")]),
        ("that is position interpolation, which divides every frequency by s; NTK-aware scaling raises the base",
         [slow, ntk_pairs(base, head_dim, length, factor, rule="interpolation")]),
        ("these are the counts for base 10,000; use your base",
         [slow_pairs(10_000, head_dim, length), ntk_pairs(10_000, head_dim, length, factor)]),
    ]
    return {"EXPECTED": right, "MISTAKES": distinct_mistakes(right, mistakes)}


def measured_angle(bug: str, position: int) -> float:
    """The angle atan2(y[7], y[6]) of y = mystery(e_6, [m]) for d = 8 and base 10, for a mystery with ``bug``.

    e_6 is the first feature of pair 3 in the interleaved layout; with the half layout it is the second member of
    pair 2, (2, 6), and comes out as cos(m theta_2) e_6 (feature 7 pairs with 3 and stays 0)."""
    theta = [MEASURED_BASE ** (-2 * i / MEASURED_DIM) for i in range(MEASURED_DIM // 2)]
    pair = MEASURED_FEATURE // 2
    if bug == "half_layout":
        return 0.0 if math.cos(position * theta[MEASURED_FEATURE - MEASURED_DIM // 2]) > 0 else math.pi
    return {
        "none": position * theta[pair],
        "wrong_direction": -position * theta[pair],
        "doubled_exponent": position * MEASURED_BASE ** (-4 * pair / MEASURED_DIM),
        "degrees": math.radians(position * theta[pair]),
        "squared_positions": position**2 * theta[pair],
    }[bug]


def _planted_bug(parameters: Mapping[str, Any]) -> dict[str, Any]:
    bug, position = MYSTERY_BUGS[parameters["mystery"]], parameters["position"]
    right = math.remainder(measured_angle(bug, position), 2 * math.pi)  # in [-pi, pi], as atan2 gives it
    mistakes = [
        ("this is the angle RoPE itself would give, m theta_3; measure what your mystery_rope does to e_6",
         [math.remainder(measured_angle("none", position), 2 * math.pi)]),
        ("the angle is asked in radians, as math.atan2 returns it", [math.degrees(right)]),
    ]
    return {"EXPECTED_BUG": bug, "EXPECTED": [right],
            "MISTAKES": distinct_mistakes([right], mistakes)}


VARIANTS = (
    Variant.of(ASSIGNMENT, "5.6", "slow_pairs_test", _ntk_pairs),
    Variant.of(ASSIGNMENT, "5.7", "planted_bug_test", _planted_bug),
)
