r"""The varied items of chapter 6 (comparison): 6.1, the kind each case calls for; 6.3, what six seeds of the
committed study support; 6.4, the memory of Shaw's relative scores without the five-dimensional product; 6.5,
what three seeds of the study separate by the range rule.

6.1: each part draws one of three cases (:mod:`autograder.student.parameters`); :data:`CASE_KINDS` gives, in the order
of the allowed cases, the one kind of ``posenc_ref`` that meets every constraint of each, and each other kind's
message says what it does instead (:data:`KIND_FACTS`).

6.3: the student's table holds four kinds' scores on six seeds. For each of the six pairs (in the table's order,
``itertools.combinations``), Student's paired :math:`t`-test on the per-seed differences (5 degrees of freedom),
Holm's step-down adjustment over the six, and an ordering where the adjusted :math:`p` is below 0.05, the means
differ by at least the margin 0.05 and are not both below the floor 0.05 (``posenc_ref.lab.evidence``). The
named mistakes apply the range rule, unpaired tests (Welch's, or with pooled variances), no correction,
Bonferroni's correction, one-sided tests, Holm's adjustment without its running maximum, or no margin and floor;
a mistake that gives the right answer for a table, or the answer of a mistake named before it, is left out.

6.4: Shaw's score term :math:`q_i \cdot a^K_{\operatorname{clip}(j - i, -k, k)}` takes only :math:`2k + 1`
values per query. Computed once per query and offset (``q @ rel_k_table.T``) it is a tensor of shape
:math:`(B, H, n, 2k + 1)`; gathered into place, :math:`(B, H, n, n)`. In float32 and MiB those are
:math:`4 B H n (2k + 1) / 2^{20}` and :math:`4 B H n^2 / 2^{20}`, and the plain product
:math:`(B, H, n, n, d_\text{head})` is :math:`n\, d_\text{head} / (2k + 1 + n)` times their sum. The byte counts
come from tensors of those shapes (``torch.empty(..., device="meta")``, which allocates nothing).

6.5: the student's table holds four kinds' scores on three seeds at sizes 9 to 16 and 17 to 24. For each pair at
17 to 24, 1 where every seed of the first kind lies above every seed of the second, -1 the other way round, 0
where the ranges overlap or touch. The named mistakes order by the means, count touching ranges as separated,
read the column of sizes 9 to 16, or swap the signs.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Mapping
from typing import Any

from autograder.variants import Variant, distinct_mistakes

ASSIGNMENT = "06_comparison"
MIB = 2**20
KINDS = ("none", "sinusoidal", "learned", "shaw", "t5", "alibi", "rope")

# ---------------------------------------------------------------------------------------------------------
# 6.1
# ---------------------------------------------------------------------------------------------------------

# By part, the kind that meets each allowed case, in the order of autograder.student.parameters.
CASE_KINDS = {
    "6.1 (a)": ("none", "shaw", "sinusoidal"),
    "6.1 (b)": ("alibi", "rope", "none"),
    "6.1 (c)": ("rope", "learned", "alibi"),
    "6.1 (d)": ("t5", "shaw", "sinusoidal"),
    "6.1 (e)": ("learned", "t5", "rope"),
}
KIND_FACTS = {
    "none": "none gives attention no position signal at all: the model knows order only through a causal mask, if any",
    "sinusoidal": ("sinusoidal adds a fixed table of sines and cosines of the absolute position to the input, with no "
                   "trained parameters"),
    "learned": ("learned adds a trained vector for each absolute position to the input, up to max_len positions and "
                "no further"),
    "shaw": ("shaw adds trained vectors for the clipped offset j - i to the keys and values inside attention, d_head "
             "features each"),
    "t5": "t5 adds a trained scalar per head and per log-spaced bucket of offsets to the scores, shared by the layers",
    "alibi": "alibi adds a fixed bias to the scores, minus a slope per head times the distance, with no trained parameters",
    "rope": ("rope rotates the queries and keys by angles proportional to their positions, with no trained parameters, "
             "so that the score depends on m - n"),
}


def _case(item: str):
    def constants(parameters: Mapping[str, Any]) -> dict[str, Any]:
        from autograder.student.parameters import varied_item

        ((name, case),) = parameters.items()
        kind = CASE_KINDS[item][varied_item(ASSIGNMENT, item).choices[name].index(case)]
        return {"EXPECTED": kind, "MISTAKES": {other: KIND_FACTS[other] for other in KINDS if other != kind}}

    return constants


# ---------------------------------------------------------------------------------------------------------
# 6.3
# ---------------------------------------------------------------------------------------------------------

ALPHA = MARGIN = FLOOR = 0.05
TOLERANCE = 0.001  # 6.3's hidden test's, on each adjusted p-value
MIB_TOLERANCE = 0.01  # 6.4's hidden test's, in MiB and on the ratio


def t_two_sided(t: float, degrees_of_freedom: float) -> float:
    """P(|T| >= |t|) for Student's t, any degrees of freedom > 0: the regularized incomplete beta function."""
    from posenc_ref.lab.evidence import regularized_incomplete_beta

    return regularized_incomplete_beta(degrees_of_freedom / (degrees_of_freedom + t * t), degrees_of_freedom / 2, 0.5)


def _welch(a, b) -> float:
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    t = (statistics.fmean(a) - statistics.fmean(b)) / math.sqrt(va + vb)
    return t_two_sided(t, (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1)))


def _pooled(a, b) -> float:
    df = len(a) + len(b) - 2
    pooled = ((len(a) - 1) * statistics.variance(a) + (len(b) - 1) * statistics.variance(b)) / df
    t = (statistics.fmean(a) - statistics.fmean(b)) / math.sqrt(pooled * (1 / len(a) + 1 / len(b)))
    return t_two_sided(t, df)


def holm_adjusted(p_values: list[float], *, running_maximum: bool = True) -> list[float]:
    """Holm's adjustment in the order given; without ``running_maximum`` (a mistake) each value stands alone."""
    from posenc_ref.lab.evidence import holm

    if running_maximum:
        return list(holm(dict(enumerate(p_values))).values())
    order = sorted(range(len(p_values)), key=p_values.__getitem__)
    adjusted = [0.0] * len(p_values)
    for rank, index in enumerate(order):
        adjusted[index] = min(1.0, (len(p_values) - rank) * p_values[index])
    return adjusted


def orderings(scores: Mapping[str, tuple[float, ...]], adjusted: list[float], *, effect: bool = True) -> list[bool]:
    """For each pair: adjusted p below alpha and (with ``effect``) means at least the margin apart, not both
    below the floor."""
    decided = []
    for (a, b), p in zip(itertools.combinations(scores, 2), adjusted, strict=True):
        mean_a, mean_b = statistics.fmean(scores[a]), statistics.fmean(scores[b])
        big_enough = abs(mean_a - mean_b) >= MARGIN and not (mean_a < FLOOR and mean_b < FLOOR)
        decided.append(bool(p < ALPHA and (big_enough or not effect)))
    return decided


def _far_apart(right: list[float], mistakes: list[tuple[str, list[float]]], tolerance: float) -> list[tuple[str, list[float]]]:
    """The mistakes more than twice ``tolerance`` from the right answer and from every mistake kept before (an
    answer near two of them would get one's message by chance)."""
    kept, seen = [], [right]
    for why, wrong in mistakes:
        if all(max(abs(a - b) for a, b in zip(wrong, other, strict=True)) > 2 * tolerance for other in seen):
            kept.append((why, wrong))
            seen.append(wrong)
    return kept


def seeds_answers(scores: Mapping[str, tuple[float, ...]]) -> dict[str, Any]:
    """Every answer 6.3 expects or names for a table of scores (kind -> one score per seed)."""
    from posenc_ref.lab.evidence import paired_t_test

    pairs = list(itertools.combinations(scores, 2))
    raw = [paired_t_test(scores[a], scores[b]).p_value for a, b in pairs]
    welch = [_welch(scores[a], scores[b]) for a, b in pairs]
    pooled = [_pooled(scores[a], scores[b]) for a, b in pairs]
    one_sided = holm_adjusted([p / 2 for p in raw])
    adjusted = holm_adjusted(raw)
    p_mistakes = [
        (("these are the p-values before the correction: Holm's method multiplies the smallest of the six by 6, "
          "the next by 5, and so on, none below the one before"), raw),
        ("this is Bonferroni's correction, every p-value times 6; Holm's multiplies the k-th smallest by 7 - k",
         [min(1.0, len(pairs) * p) for p in raw]),
        (("Holm's adjusted p-values never decrease from the smallest raw p-value to the largest: each is at least "
         "the one before it"), holm_adjusted(raw, running_maximum=False)),
        (("these come from an unpaired test (Welch's): every seed trained the kinds on the same data, so test the "
          "per-seed differences, a paired test"), holm_adjusted(welch)),
        (("these come from an unpaired test (with pooled variances): every seed trained the kinds on the same "
          "data, so test the per-seed differences, a paired test"), holm_adjusted(pooled)),
        (("these come from one-sided tests: whether either kind of a pair lies above the other is a two-sided "
         "question"), one_sided),
        (("these are the p-values of unpaired tests (Welch's), before the correction: test the per-seed "
          "differences (a paired test), then apply Holm's correction"), welch),
        (("these are the p-values of unpaired tests (with pooled variances), before the correction: test the "
          "per-seed differences (a paired test), then apply Holm's correction"), pooled),
    ]
    expected = orderings(scores, adjusted)
    ranges = [min(scores[a]) > max(scores[b]) or min(scores[b]) > max(scores[a]) for a, b in pairs]
    order_mistakes = [
        (("this is the range rule (every seed of one kind above every seed of the other), not the chapter's test: "
          "pair the scores seed by seed, test the per-seed differences, and correct for the six comparisons"),
         ranges),
        (("these orderings come from an unpaired test (Welch's), which sets the difference against how much each "
          "kind varies from seed to seed; every seed trained the kinds on the same data: test the per-seed "
          "differences (a paired test)"), orderings(scores, holm_adjusted(welch))),
        (("these orderings come from an unpaired test (Welch's) without Holm's correction: test the per-seed "
          "differences (a paired test), and correct for the six comparisons"), orderings(scores, welch)),
        (("these orderings come from an unpaired test (with pooled variances): every seed trained the kinds on the "
          "same data, so test the per-seed differences (a paired test)"), orderings(scores, holm_adjusted(pooled))),
        (("these orderings come from an unpaired test (with pooled variances) without Holm's correction: test the "
          "per-seed differences (a paired test), and correct for the six comparisons"), orderings(scores, pooled)),
        (("some of these pairs pass the paired test on their own, but the family makes six comparisons: compare "
          "Holm's adjusted p-values with 0.05, not the raw ones"), orderings(scores, raw)),
        (("these orderings come from one-sided tests: whether either kind of a pair lies above the other is a "
          "two-sided question"), orderings(scores, one_sided)),
        (("an ordering also needs the two means to differ by at least the margin of 0.05, and not both to lie "
          "below the floor of 0.05"), orderings(scores, adjusted, effect=False)),
        (("Holm's adjusted p-values never decrease from the smallest raw p-value to the largest: a pair with a "
          "larger raw p-value than another has an adjusted p-value at least as large"),
         orderings(scores, holm_adjusted(raw, running_maximum=False))),
        (("an ordering needs a paired test that survives Holm's correction over the six comparisons, a difference "
          "of at least the margin, and two kinds not both below the floor: not every pair has all three"),
         [True] * len(pairs)),
        (("some pairs have an adjusted p-value below 0.05 and means that differ by at least the margin, not both "
          "below the floor: those are ordered"), [False] * len(pairs)),
    ]
    return {"EXPECTED": adjusted, "MISTAKES": _far_apart(adjusted, p_mistakes, TOLERANCE),
            "EXPECTED_ORDER": expected, "MISTAKES_ORDER": distinct_mistakes(expected, order_mistakes)}


def _seeds(parameters: Mapping[str, Any]) -> dict[str, Any]:
    return seeds_answers(parameters["table"]["scores"])


# ---------------------------------------------------------------------------------------------------------
# 6.4
# ---------------------------------------------------------------------------------------------------------


def float32_mib(*shape: int) -> float:
    """MiB of a float32 tensor of ``shape``, from a tensor on the meta device."""
    import torch

    tensor = torch.empty(*shape, dtype=torch.float32, device="meta")
    return tensor.numel() * tensor.element_size() / MIB


def rewrite_answer(b: int, h: int, n: int, d: int, rows: int, *, bytes_per_number: int = 4, mib: float = MIB,
                   plain_over=None) -> list[float]:
    """[relative scores MiB, gathered scores MiB, plain product / their sum] for ``rows`` relative rows."""
    scale = bytes_per_number / 4 * MIB / mib
    relative, gathered = float32_mib(b, h, n, rows) * scale, float32_mib(b, h, n, n) * scale
    plain = float32_mib(b, h, n, n, d) * scale
    return [relative, gathered, plain / (plain_over(relative, gathered) if plain_over else relative + gathered)]


def _rewrite(parameters: Mapping[str, Any]) -> dict[str, Any]:
    b, h, n, d, k = (parameters[name] for name in ("batch", "heads", "tokens", "head_dim", "max_distance"))
    right = rewrite_answer(b, h, n, d, 2 * k + 1)
    relative, gathered, ratio = right
    mistakes = [
        ("the offsets run from -k to k, 0 included: 2k + 1 of them, not 2k", rewrite_answer(b, h, n, d, 2 * k)),
        (("the layer is not causal: keys lie on both sides of the query, so the offsets run from -k to k, 2k + 1 of "
          "them"), rewrite_answer(b, h, n, d, k + 1)),
        (("the relative scores need one column per clipped offset, 2k + 1, not one per key: n columns is the size "
          "of the gathered scores"), rewrite_answer(b, h, n, d, n)),
        ("a float32 number takes 4 bytes, not 32: these are bits", rewrite_answer(b, h, n, d, 2 * k + 1, bytes_per_number=32)),
        ("a MiB is 2**20 bytes, not 10**6", [relative * MIB / 1e6, gathered * MIB / 1e6, ratio]),
        ("both tensors hold a row for every batch element: (batch, heads, ...)",
         [relative / b, gathered / b, ratio]),
        (("the ratio compares the plain product with both tensors of the rewrite together, not with the relative "
         "scores alone"), rewrite_answer(b, h, n, d, 2 * k + 1, plain_over=lambda relative, gathered: relative)),
        ("the ratio is the plain product over the rewrite's two tensors, not the other way round",
         [relative, gathered, 1 / ratio]),
    ]
    return {"EXPECTED": right, "MISTAKES": _far_apart(right, mistakes, MIB_TOLERANCE)}


# ---------------------------------------------------------------------------------------------------------
# 6.5
# ---------------------------------------------------------------------------------------------------------


def range_rule(first: tuple[float, ...], second: tuple[float, ...], *, strict: bool = True) -> int:
    """1 where every seed of ``first`` lies above every seed of ``second``, -1 the other way round, else 0
    (``strict=False``, a mistake: ranges that touch count as separated)."""
    if min(first) > max(second) or (not strict and min(first) >= max(second)):
        return 1
    if min(second) > max(first) or (not strict and min(second) >= max(first)):
        return -1
    return 0


def _by_mean(first: tuple[float, ...], second: tuple[float, ...]) -> int:
    a, b = round(statistics.fmean(first), 2), round(statistics.fmean(second), 2)  # the means as the table prints them
    return (a > b) - (a < b)


def three_seeds_answers(scores: Mapping[str, Mapping[str, tuple[float, ...]]]) -> dict[str, Any]:
    """What 6.5 expects and names for a table: scores[range][kind] -> the three seeds' scores."""
    far, beyond = scores["far"], scores["beyond"]
    pairs = list(itertools.combinations(far, 2))
    right = [range_rule(far[a], far[b]) for a, b in pairs]
    mistakes = [
        (("a higher mean is not enough: the range rule separates two kinds only where every seed of one lies above "
          "every seed of the other"), [_by_mean(far[a], far[b]) for a, b in pairs]),
        (("where the lowest seed of one kind equals the highest seed of the other, the ranges touch: the rule asks "
          "for every seed strictly above"), [range_rule(far[a], far[b], strict=False) for a, b in pairs]),
        ("these are the pairs at sizes 9 to 16; the question asks for sizes 17 to 24",
         [range_rule(beyond[a], beyond[b]) for a, b in pairs]),
        ("the signs are the wrong way round: 1 where the first kind of the pair lies above the second, -1 below",
         [-value for value in right]),
    ]
    return {"EXPECTED": right, "MISTAKES": distinct_mistakes(right, mistakes)}


def _three_seeds(parameters: Mapping[str, Any]) -> dict[str, Any]:
    return three_seeds_answers(parameters["table"]["scores"])


VARIANTS = (
    *(Variant.of(ASSIGNMENT, item, f"choice_{item[-2]}_test", _case(item)) for item in CASE_KINDS),
    Variant.of(ASSIGNMENT, "6.3", "seeds_test", _seeds),
    Variant.of(ASSIGNMENT, "6.4", "shaw_memory_test", _rewrite),
    Variant.of(ASSIGNMENT, "6.5", "claims_test", _three_seeds),
)
