r"""The varied item of chapter 5 (RoPE): 5.6, pairs that never turn once.

Pair :math:`i` of a head of :math:`d` features turns by :math:`\theta_i = \text{base}^{-2i/d}` radians per
position; over the positions :math:`0, \dots, L - 1` it never completes a turn while
:math:`(L - 1)\,\theta_i < 2\pi`, i.e. while its wavelength :math:`2\pi\,\text{base}^{2i/d}` exceeds
:math:`L - 1`. The frequencies come from ``posenc_ref.rope.rope_frequencies``. For the allowed values no wavelength
lies within 10 tokens of :math:`L - 1` or :math:`L`, so the count is the same whichever of the two is taken as
the last position, and in float32.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from autograder.variants import Variant, distinct_mistakes

ASSIGNMENT = "05_rope"
LLAMA3 = (500_000, 128, 8192)  # base, head dimension, context: the question's example, a mistake students make


def slow_pairs(base: float, head_dim: int, length: int, *, full_turn: float = 2 * math.pi, exponent: float = 2.0
               ) -> int:
    """Pairs whose angle at the last position L - 1 stays below ``full_turn``; ``exponent`` 4 for the doubled
    exponent (computed by hand, as posenc_ref has no such rule)."""
    if exponent == 2.0:
        from posenc_ref.rope import rope_frequencies

        thetas = rope_frequencies(head_dim, base=base)[0].double().tolist()  # (d/2,)
    else:
        thetas = [base ** (-exponent * i / head_dim) for i in range(head_dim // 2)]
    return sum(1 for theta in thetas if (length - 1) * theta < full_turn)


def _slow_pairs(parameters: Mapping[str, Any]) -> dict[str, Any]:
    base, head_dim, length = parameters["base"], parameters["head_dim"], parameters["context"]
    right = slow_pairs(base, head_dim, length)
    mistakes = [
        ("this counts the pairs that do complete at least one turn; the question asks for those that never do",
         head_dim // 2 - right),
        ("this is the count for base 10,000 (or for other heads); use your base and head size",
         slow_pairs(10_000, head_dim, length)),
        ("a full turn is an angle of 2 pi radians, not 1", slow_pairs(base, head_dim, length, full_turn=1.0)),
        ("the exponent is doubled: theta_i = base**(-2i/d) for pair i = 0, ..., d/2 - 1",
         slow_pairs(base, head_dim, length, exponent=4.0)),
        ("the angles are in radians: a full turn is 2 pi, not 360", slow_pairs(base, head_dim, length, full_turn=360.0)),
        (("this is Llama 3's count (base 500,000, d = 128, L = 8192), the example of the question; use your base, "
          "head size and length"), slow_pairs(*LLAMA3)),
    ]
    return {"EXPECTED": [right], "MISTAKES": distinct_mistakes([right], [(why, [wrong]) for why, wrong in mistakes])}


VARIANTS = (Variant.of(ASSIGNMENT, "5.6", "slow_pairs_test", _slow_pairs),)
