r"""Item 2.6: the submitted sinusoidal tables that students diagnose, each by its number.

Every student gets a submission of their own (its number is the student's parameter of 2.6,
:mod:`autograder.parameters`): a function ``candidate_table(length, d, base=10000.0)`` that returns an
interleaved sinusoidal table with one thing changed. The student tests it and names the bug. Which bug of
the notebook's list a number has is the grader's to know (:mod:`autograder.variants.sinusoidal`); this module
only builds the tables.

With :math:`\omega_i = \text{base}^{-e\,i/d}` (:math:`e = 2` in the right table), row :math:`p` is
:math:`(\sin(p\,\omega_0), \cos(p\,\omega_0), \sin(p\,\omega_1), \dots)`; :func:`pe_with_mistake` computes it with
the exponent, the unit of the angles, the order of sin and cos or the layout changed.
"""

from __future__ import annotations

import math
from typing import Any

BASE = 10000.0

# How each submission's table is made: the arguments of pe_with_mistake, and a shift of the positions.
SUBMITTED: dict[int, dict[str, Any]] = {
    1: {"exponent": 4.0},
    2: {"shift": 1},
    3: {"swap": True},
    4: {"degrees": True},
    5: {"exponent": 1.0},
    6: {"halves": True},
}


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


def table_with(length: int, d: int, base: float, *, swap: bool = False, halves: bool = False,
               exponent: float = 2.0, shift: int = 0, degrees: bool = False) -> Any:
    """The float32 tensor of shape ``(length, d)`` whose row ``p`` is ``pe_with_mistake(p + shift, d, ...)``."""
    import torch

    rows = [pe_with_mistake(p + shift, d, exponent=exponent, degrees=degrees, swap=swap, halves=halves, base=base)
            for p in range(length)]
    return torch.tensor(rows, dtype=torch.float64).float()  # (length, d)


def submitted_table(number: int):
    """The ``candidate_table(length, d, base=10000.0)`` of submission ``number`` (one of :data:`SUBMITTED`)."""
    if number not in SUBMITTED:
        raise ValueError(f"number must be one of {sorted(SUBMITTED)}, got {number!r}")
    flags = SUBMITTED[number]

    def candidate_table(length, d, base=10000.0):
        """A submitted interleaved sinusoidal table, shape (length, d), with one bug."""
        return table_with(length, d, base, **flags)

    return candidate_table
