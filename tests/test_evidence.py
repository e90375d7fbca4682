"""posenc_ref.lab.evidence: intervals over seeds and the ranking sentences generated from them."""

import math
import random

import pytest

from posenc_ref.lab import evidence
from posenc_ref.lab.evidence import Interval, interval, rank, ranking_sentence


def test_range_interval_is_min_to_max_with_the_mean():
    span = interval([0.2, 0.9, 0.4])
    assert (span.low, span.high, span.runs) == (0.2, 0.9, 3)
    assert span.mean == pytest.approx(0.5)


def test_bootstrap_interval_lies_inside_the_range_and_narrows_with_the_level():
    scores = [0.1, 0.3, 0.35, 0.4, 0.9]
    wide = interval(scores, method="bootstrap", level=0.95)
    narrow = interval(scores, method="bootstrap", level=0.5)
    assert 0.1 <= wide.low <= narrow.low <= 0.41 <= narrow.high <= wide.high <= 0.9
    assert interval(scores, method="bootstrap", seed=3) == interval(scores, method="bootstrap", seed=3)
    same = interval([0.7, 0.7, 0.7], method="bootstrap")
    assert same.low == pytest.approx(0.7) and same.high == pytest.approx(0.7)


@pytest.mark.parametrize("scores, message", [
    ([], "non-empty"), ("0.5", "non-empty"), ([0.5, float("nan")], "finite"), ([True], "finite"),
])
def test_bad_scores_are_named(scores, message):
    with pytest.raises(ValueError, match=message):
        interval(scores)


def test_bad_method_and_level_are_named():
    with pytest.raises(ValueError, match="method"):
        interval([0.1], method="minmax")
    with pytest.raises(ValueError, match="level"):
        interval([0.1, 0.2], method="bootstrap", level=1.0)


def test_above_needs_the_whole_interval_above():
    assert Interval(0.8, 0.61, 0.9, 3).is_above(Interval(0.4, 0.2, 0.6, 3))
    assert not Interval(0.8, 0.6, 0.9, 3).is_above(Interval(0.4, 0.2, 0.6, 3))  # touching is not separated
    assert not Interval(0.9, 0.5, 0.95, 3).is_above(Interval(0.3, 0.1, 0.55, 3))  # means far, ranges overlap


def test_separated_results_rank_in_a_chain():
    ranking = rank({"t5": [0.30, 0.66], "alibi": [0.98, 0.99], "none": [0.0, 0.05]})
    assert ranking.order == ("alibi", "t5", "none")
    assert ranking.above == {"alibi": ("t5", "none"), "t5": ("none",), "none": ()}
    assert all(not tied for tied in ranking.tied.values())
    assert ranking_sentence({"t5": [0.30, 0.66], "alibi": [0.98, 0.99], "none": [0.0, 0.05]}) == (
        "alibi 0.98 (0.98–0.99) lies above t5 and none. t5 0.48 (0.30–0.66) lies above none. "
        "none 0.03 (0.00–0.05) lies below alibi and t5.")


def test_overlapping_results_are_not_separated_whatever_their_means():
    # The example of chapter 6's one-seed ranking: far-range means 0.53 and 0.47, ranges 0.15-0.91 and 0.30-0.65.
    scores = {"shaw": [0.15, 0.53, 0.91], "t5": [0.30, 0.47, 0.65]}
    assert not rank(scores).separated("shaw", "t5")
    assert ranking_sentence(scores) == (
        "shaw 0.53 (0.15–0.91) and t5 0.47 (0.30–0.65) are not separated: every two intervals overlap.")


def test_partial_order_names_what_is_separated_and_what_is_not():
    # a above c; b overlaps both: the sentence must not claim a > b or b > c.
    scores = {"a": [0.90, 0.95], "b": [0.50, 0.92], "c": [0.10, 0.60]}
    ranking = rank(scores)
    assert ranking.above["a"] == ("c",) and ranking.above["b"] == () and ranking.tied["b"] == ("a", "c")
    sentence = ranking_sentence(scores)
    assert sentence == ("a 0.93 (0.90–0.95) lies above c and is not separated from b. "
                        "b 0.71 (0.50–0.92) is not separated from a and c. "
                        "c 0.35 (0.10–0.60) is not separated from b.")


def test_a_tied_group_is_one_subject_and_labels_are_applied():
    scores = {"rope": [0.90, 0.97], "alibi": [0.93, 0.99], "none": [0.0, 0.1], "t5": [0.05, 0.2]}
    sentence = ranking_sentence(scores, label=str.upper)
    assert sentence == ("ALIBI 0.96 (0.93–0.99) and ROPE 0.94 (0.90–0.97) are not separated and lie above "
                        "T5 and NONE. T5 0.12 (0.05–0.20) and NONE 0.05 (0.00–0.10) are not separated.")


def test_one_kind_and_no_kind():
    assert ranking_sentence({"rope": [0.5, 0.7]}) == "Only rope 0.60 (0.50–0.70) was measured."
    with pytest.raises(ValueError, match="at least one kind"):
        rank({})
    with pytest.raises(ValueError, match="kind 'rope'"):
        rank({"rope": []})


# ------------------------------------------------------------------------------------ paired comparisons


@pytest.mark.parametrize("x", [0.0, 0.1, 0.37, 0.9, 1.0])
def test_incomplete_beta_agrees_with_its_closed_forms(x):
    assert evidence.regularized_incomplete_beta(x, 1.0, 1.0) == pytest.approx(x, abs=1e-12)
    assert evidence.regularized_incomplete_beta(x, 3.0, 1.0) == pytest.approx(x**3, abs=1e-12)
    assert evidence.regularized_incomplete_beta(x, 1.0, 2.5) == pytest.approx(1 - (1 - x) ** 2.5, abs=1e-12)


@pytest.mark.parametrize("t", [0.0, 0.4, 1.0, 2.0, 7.5, -3.0])
def test_t_p_values_agree_with_the_closed_forms_for_one_two_and_three_degrees_of_freedom(t):
    s = abs(t)
    assert evidence.t_two_sided_p(t, 1) == pytest.approx(1 - 2 / math.pi * math.atan(s), abs=1e-10)  # Cauchy
    assert evidence.t_two_sided_p(t, 2) == pytest.approx(1 - s / math.sqrt(2 + s * s), abs=1e-10)
    u = s / math.sqrt(3)
    assert evidence.t_two_sided_p(t, 3) == pytest.approx(1 - 2 / math.pi * (u / (1 + u * u) + math.atan(u)), abs=1e-10)


@pytest.mark.parametrize(("t", "df", "p"), [(2.262157, 9, 0.05), (3.249836, 9, 0.01), (2.776445, 4, 0.05),
                                            (1.959964, 10**7, 0.05)])
def test_t_p_values_at_the_critical_values_of_the_tables(t, df, p):
    assert evidence.t_two_sided_p(t, df) == pytest.approx(p, rel=1e-5)


def test_a_paired_test_works_on_the_differences():
    # d = [1, 2, 2, 3]: mean 2, sd sqrt(2/3), t = 2 / (sd / 2) = 4.899 on 3 degrees of freedom
    test = evidence.paired_t_test([1, 2, 3, 4], [0, 0, 1, 1])
    u = (2 / (math.sqrt(2 / 3) / 2)) / math.sqrt(3)
    assert test.mean_difference == 2 and test.seeds == 4
    assert test.p_value == pytest.approx(1 - 2 / math.pi * (u / (1 + u * u) + math.atan(u)), rel=1e-9)
    # pairing matters: the same numbers shuffled between seeds no longer differ consistently
    assert evidence.paired_t_test([1, 2, 3, 4], [1, 1, 0, 0]).p_value > test.p_value
    assert evidence.paired_t_test([0.5, 0.7], [0.3, 0.5]).p_value == 0.0  # no seed disagrees, nothing varies
    assert evidence.paired_t_test([0.5, 0.7], [0.5, 0.7]).p_value == 1.0


@pytest.mark.parametrize(("first", "second", "message"), [
    ([1.0], [0.0], "at least two seeds"), ([1.0, 2.0], [0.0, 1.0, 2.0], "equally long"),
    ([1.0, float("nan")], [0.0, 1.0], "finite"),
])
def test_a_paired_test_names_bad_input(first, second, message):
    with pytest.raises(ValueError, match=message):
        evidence.paired_t_test(first, second)


def test_holm_adjusts_step_down_and_keeps_the_order():
    adjusted = evidence.holm({"a": 0.01, "b": 0.04, "c": 0.03, "d": 0.005})
    # sorted: d 0.005*4 = 0.02, a 0.01*3 = 0.03, c 0.03*2 = 0.06, b 0.04*1 = 0.04 -> raised to 0.06
    assert adjusted == pytest.approx({"a": 0.03, "b": 0.06, "c": 0.06, "d": 0.02})
    assert evidence.holm({"x": 0.7, "y": 0.9}) == {"x": 1.0, "y": 1.0}
    with pytest.raises(ValueError, match="p-values must lie in"):
        evidence.holm({"x": 1.5})


def test_paired_comparisons_need_a_corrected_p_value_a_margin_and_a_score_above_the_floor():
    seeds = range(10)
    strong = [0.9 + 0.01 * (s % 3) for s in seeds]
    weak = [0.5 + 0.02 * (s % 4) for s in seeds]
    close = [value - 0.02 for value in strong]  # consistently lower, by less than the margin
    zero, almost = [0.0] * 10, [0.01 * (s % 2) for s in seeds]
    decided = {(c.higher, c.lower): c for c in evidence.paired_comparisons(
        {"task": {"strong": strong, "weak": weak, "close": close, "zero": zero, "almost": almost}})}
    assert len(decided) == 10
    assert decided["strong", "weak"].finding and decided["strong", "weak"].adjusted_p < 0.05
    assert not decided["strong", "close"].finding and "margin" in decided["strong", "close"].reason
    assert not decided["almost", "zero"].finding and decided["almost", "zero"].reason == "both below 0.05"


def test_more_comparisons_on_a_page_need_stronger_evidence():
    rng = random.Random(0)
    first = [0.6 + rng.gauss(0, 0.05) for _ in range(10)]
    second = [value - 0.06 + rng.gauss(0, 0.05) for value in first]
    alone = evidence.paired_comparisons({"one": {"a": first, "b": second}})[0]
    assert 0.001 < alone.p_value < 0.05 and alone.finding
    many = evidence.paired_comparisons({f"table {n}": {"a": first, "b": second} for n in range(40)})
    assert all(c.p_value == alone.p_value and c.adjusted_p == pytest.approx(min(1, 40 * alone.p_value))
               for c in many)
    assert not any(c.finding for c in many)


def test_the_sign_flip_p_value_counts_sign_assignments_as_far_from_zero():
    # Worked by hand: [3, 1] has 4 sign assignments with means 2, 1, -1, -2: two lie at least 2 from 0.
    assert evidence.sign_flip_p([3.0, 1.0]) == 0.5
    # [2, -1, 1]: sums 2, -4, 0, -2, 4, 0, 2, -2 (flipping none, the first, ...): |sum| >= 2 in six of eight.
    assert evidence.sign_flip_p([2.0, -1.0, 1.0]) == 6 / 8
    # Every seed on one side: only that assignment and its mirror are as far, so p = 2 / 2^n.
    assert evidence.sign_flip_p([0.3, 0.1, 0.2, 0.5]) == 2 / 16
    assert evidence.sign_flip_p([0.01] * 10) == 2 / 1024
    assert evidence.sign_flip_p([0.0, 0.0]) == 1.0


def test_with_ten_seeds_no_exact_test_survives_holm_over_many_comparisons():
    """The smallest sign-flip p-value of ten seeds is 2/1024; Holm's first threshold over 100 comparisons is
    0.05/100: no ordering passes, however strong, where the t-test finds them all."""
    strong = [0.9] * 10
    weak = [0.1 + 0.01 * seed for seed in range(10)]
    tables = {f"table {n}": {"strong": strong, "weak": weak} for n in range(100)}
    by_t = evidence.paired_comparisons(tables)
    by_signs = evidence.paired_comparisons(tables, test="sign-flip")
    assert all(c.finding for c in by_t)
    assert not any(c.finding for c in by_signs)
    assert {c.p_value for c in by_signs} == {2 / 1024} and {c.adjusted_p for c in by_signs} == {100 * 2 / 1024}
    assert {(c.seeds_on_side, c.seeds) for c in by_signs} == {(10, 10)}


def test_a_comparison_counts_the_seeds_on_its_side():
    higher = [0.9, 0.8, 0.1, 0.9]
    lower = [0.2, 0.3, 0.4, 0.2]
    (decided,) = evidence.paired_comparisons({"t": {"a": higher, "b": lower}}, margin=0.0)
    assert (decided.higher, decided.seeds_on_side, decided.seeds) == ("a", 3, 4)


def test_an_unknown_test_and_too_many_seeds_are_named():
    with pytest.raises(ValueError, match="test must be one of"):
        evidence.paired_comparisons({"t": {"a": [1.0, 2.0], "b": [0.0, 1.0]}}, test="wilcoxon")
    with pytest.raises(ValueError, match="1 to 20 seeds, got 21"):
        evidence.sign_flip_p([0.1] * 21)
