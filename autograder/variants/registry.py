"""The varied items of every assignment, by assignment (one module of definitions per chapter)."""

from __future__ import annotations

from autograder.variants import Variant, comparison, learned, permutation, sinusoidal

VARIANTS: dict[str, tuple[Variant, ...]] = {
    permutation.ASSIGNMENT: permutation.VARIANTS,
    sinusoidal.ASSIGNMENT: sinusoidal.VARIANTS,
    learned.ASSIGNMENT: learned.VARIANTS,
    comparison.ASSIGNMENT: comparison.VARIANTS,
}
