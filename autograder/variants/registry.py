"""The varied items of every assignment, by assignment (one module of definitions per chapter)."""

from __future__ import annotations

from autograder.variants import Variant, comparison, learned, permutation, relative, rope, sinusoidal
from autograder.variants.quizzes import quiz_variants

VARIANTS: dict[str, tuple[Variant, ...]] = {
    permutation.ASSIGNMENT: permutation.VARIANTS,
    sinusoidal.ASSIGNMENT: sinusoidal.VARIANTS,
    learned.ASSIGNMENT: learned.VARIANTS,
    relative.ASSIGNMENT: relative.VARIANTS,
    rope.ASSIGNMENT: rope.VARIANTS,
    comparison.ASSIGNMENT: comparison.VARIANTS,
}
VARIANTS = {assignment: chapter + quiz_variants(assignment) for assignment, chapter in VARIANTS.items()}
