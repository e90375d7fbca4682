"""The varied items of every assignment, by assignment (one module of definitions per chapter)."""

from __future__ import annotations

from autograder.variants import Variant, sinusoidal

VARIANTS: dict[str, tuple[Variant, ...]] = {
    sinusoidal.ASSIGNMENT: sinusoidal.VARIANTS,
}
