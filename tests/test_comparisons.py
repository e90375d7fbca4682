"""posenc_ref.lab.comparisons: runs from rows, fit at every training size, range means, findings, agreement."""

import math

import pytest

from posenc_ref.lab.comparisons import (
    NOT_COMPARED,
    LiteratureClaim,
    agreement,
    compared_only,
    findings,
    group_runs,
    literature_verdicts,
    may_be_ordered,
    order_sentence,
    reproductions,
    scores_by_kind,
    size_ranges,
    threshold_sensitivity,
)
from posenc_ref.lab.evidence import Comparison

TRAINING = (3, 4)  # training sizes; L = 4: beyond is 5..8, far 9..12


def rows_of(kind, seed, exact, *, task="copy", tokens=None, steps=100, reached=True):
    """The rows of one run, ``exact`` = {size: exact match}."""
    tokens = tokens or {size: min(1.0, value + 0.1) for size, value in exact.items()}
    return [{"task": task, "model": "decoder", "position": kind, "randomized": False, "seed": seed,
             "length": size, "accuracy": value, "token_accuracy": tokens[size], "train_steps": steps,
             "reached_target": reached, "train_seconds": 1.0, "in_training_range": size in TRAINING}
            for size, value in exact.items()]


def curve(inside, beyond, far):
    return {3: inside[0], 4: inside[1], **dict.fromkeys(range(5, 9), beyond), **dict.fromkeys(range(9, 13), far)}


def test_a_run_fits_only_when_every_training_size_reaches_the_target():
    runs = group_runs(rows_of("rope", 0, curve((1.0, 0.995), 0.5, 0.1)) +
                      rows_of("t5", 0, curve((0.0, 1.0), 0.5, 0.1), reached=True))
    assert runs["copy", "decoder", "rope"][0].fitted(0.99)
    # Reached the stopping rule, 1.0 at L, 0.0 at size 3: not fitted.
    t5 = runs["copy", "decoder", "t5"][0]
    assert not t5.fitted(0.99) and t5.lowest_inside() == 0.0 and t5.reached_target


def test_range_means_and_per_token_scores():
    run = group_runs(rows_of("rope", 0, curve((1.0, 0.5), 0.25, 0.0)))["copy", "decoder", "rope"][0]
    ranges = size_ranges(TRAINING)
    assert ranges == {"inside": (3, 4), "beyond": (5, 8), "far": (9, 12)}
    assert run.mean(ranges["inside"]) == 0.75
    assert run.mean(ranges["beyond"]) == 0.25
    assert run.mean(ranges["beyond"], "tokens") == pytest.approx(0.35)
    with pytest.raises(ValueError, match="measure must be one of"):
        run.mean(ranges["far"], "bleu")
    with pytest.raises(ValueError, match="no score at sizes 20..30"):
        run.mean((20, 30))


def test_rows_that_contradict_each_other_are_refused():
    doubled = rows_of("rope", 0, {3: 1.0}) * 2
    with pytest.raises(ValueError, match="two rows score"):
        group_runs(doubled)
    mixed = rows_of("rope", 0, {3: 1.0}) + rows_of("rope", 0, {4: 1.0}, steps=7)
    with pytest.raises(ValueError, match="disagree on its training"):
        group_runs(mixed)


def test_scores_are_paired_by_seed_and_unpaired_kinds_are_refused():
    rows = (rows_of("rope", 1, curve((1, 1), 0.2, 0)) + rows_of("rope", 0, curve((1, 1), 0.4, 0)) +
            rows_of("t5", 0, curve((1, 1), 0.6, 0)) + rows_of("t5", 1, curve((1, 1), 0.8, 0)))
    scores = scores_by_kind(group_runs(rows), "copy", "decoder", (5, 8))
    assert scores == {"rope": [0.4, 0.2], "t5": [0.6, 0.8]}  # seed 0 first in both
    unpaired = group_runs(rows + rows_of("alibi", 0, curve((1, 1), 0.1, 0)))
    with pytest.raises(ValueError, match="different seeds"):
        scores_by_kind(unpaired, "copy", "decoder", (5, 8))


def study(beyond_by_kind, inside_by_kind=None):
    """Runs of kinds whose beyond-range score per seed is given; far 0, inside 1.0 unless ``inside_by_kind``
    gives a kind's lowest exact match inside per seed (at size 3; size 4 scores 1.0)."""
    rows = []
    for kind, values in beyond_by_kind.items():
        for seed, value in enumerate(values):
            inside = (inside_by_kind or {}).get(kind, [1.0] * len(values))[seed]
            rows += rows_of(kind, seed, curve((inside, 1.0), value, 0.0))
    return group_runs(rows)


def test_two_kinds_may_be_ordered_only_when_both_fitted_on_every_seed():
    runs = study({"t5": [0.9, 0.9, 0.9], "rope": [0.3, 0.3, 0.3], "alibi": [0.5, 0.5, 0.5]},
                 {"rope": [1.0, 0.98, 1.0], "alibi": [0.995, 0.99, 1.0]})
    t5, rope, alibi = (runs["copy", "decoder", kind] for kind in ("t5", "rope", "alibi"))
    assert may_be_ordered(t5, alibi, 0.99)
    assert not may_be_ordered(t5, rope, 0.99) and not may_be_ordered(rope, t5, 0.99)  # seed 1 of rope: 0.98
    assert may_be_ordered(t5, rope, 0.95)
    assert not may_be_ordered(t5, alibi, 0.999)  # alibi's seed 1 has 0.99 at size 3
    # Only the seeds both ran count: rope without seed 1 fitted on the seeds compared.
    assert may_be_ordered(t5, {seed: run for seed, run in rope.items() if seed != 1}, 0.99)
    with pytest.raises(ValueError, match="share no seed"):
        may_be_ordered({0: t5[0]}, {1: rope[1]}, 0.99)


def test_findings_with_a_target_test_only_fitted_pairs_and_correct_only_for_them():
    # Three kinds, rope unfitted on one seed: of the 3 pairs only t5/alibi is tested, so the family has one
    # comparison and Holm leaves its p-value as it is.
    beyond = {"t5": [0.9, 0.8, 0.85, 0.95, 0.9], "alibi": [0.5, 0.6, 0.4, 0.5, 0.45], "rope": [0.2] * 5}
    runs = study(beyond, {"rope": [1.0, 1.0, 0.5, 1.0, 1.0]})
    decided = findings(runs, {"beyond": (5, 8)}, target=0.99)
    assert len(decided) == 3
    compared = compared_only(decided)
    assert [(c.higher, c.lower) for c in compared] == [("t5", "alibi")]
    (pair,) = compared
    # Paired differences 0.4, 0.2, 0.45, 0.45, 0.45: mean 0.39, sd 0.10840, t = 8.0449 on 4 degrees of freedom;
    # P(|T_4| >= t) = 1 - (x + x (1 - x^2) / 2)... computed in closed form for even df:
    # P(|T| < t) = sin(theta) (1 + cos^2(theta) / 2) with theta = atan(t / 2).
    differences = [0.4, 0.2, 0.45, 0.45, 0.45]
    mean = sum(differences) / 5
    sd = math.sqrt(sum((d - mean) ** 2 for d in differences) / 4)
    theta = math.atan(mean / (sd / math.sqrt(5)) / 2)
    expected = 1 - math.sin(theta) * (1 + math.cos(theta) ** 2 / 2)
    assert pair.p_value == pytest.approx(expected, rel=1e-9) and pair.adjusted_p == pair.p_value
    assert pair.finding and (pair.seeds_on_side, pair.seeds) == (5, 5)
    left_out = [c for c in decided if c not in compared]
    assert {(c.higher, c.lower) for c in left_out} == {("t5", "rope"), ("alibi", "rope")}
    assert all(not c.finding and math.isnan(c.p_value) and c.reason == f"{NOT_COMPARED}: rope fitted 4 of 5"
               for c in left_out)
    # Without a target all three pairs form the family (the page's former rule).
    assert len(compared_only(findings(runs, {"beyond": (5, 8)}))) == 3


def test_threshold_sensitivity_decides_each_threshold_as_its_own_family():
    beyond = {"t5": [0.9, 0.8, 0.85, 0.95, 0.9], "alibi": [0.5, 0.6, 0.4, 0.5, 0.45], "rope": [0.2] * 5}
    runs = study(beyond, {"rope": [1.0, 1.0, 0.97, 1.0, 1.0], "alibi": [0.995] * 5})
    table = threshold_sensitivity(runs, {"beyond": (5, 8)}, (0.95, 0.99, 0.999))
    # 0.95: every kind fitted, 3 pairs; 0.99: rope out; 0.999: alibi out too.
    assert table[0.95] == {"compared": 3, "orderings": 3, "not compared": 0}
    assert table[0.99] == {"compared": 1, "orderings": 1, "not compared": 2}
    assert table[0.999] == {"compared": 0, "orderings": 0, "not compared": 3}


def test_findings_order_kinds_by_a_corrected_paired_test_with_a_margin_and_a_floor():
    runs = study({"t5": [0.9, 0.8, 0.85, 0.95, 0.9], "rope": [0.3, 0.2, 0.25, 0.35, 0.3],
                  "alibi": [0.31, 0.19, 0.27, 0.33, 0.32], "none": [0.01, 0.0, 0.02, 0.0, 0.01],
                  "learned": [0.0, 0.02, 0.0, 0.01, 0.0]})
    decided = findings(runs, {"beyond": (5, 8)})
    # 5 kinds: 10 pairs in the one table (the far range would add 10 more).
    assert len(decided) == 10
    by_pair = {(c.higher, c.lower): c for c in decided}
    assert by_pair["t5", "rope"].finding and math.isclose(by_pair["t5", "rope"].mean_difference, 0.6)
    # Differences of 0.6 on every seed, exactly: p = 0 for t5 over rope.
    assert by_pair["t5", "rope"].p_value == 0.0
    close = by_pair.get(("alibi", "rope")) or by_pair[("rope", "alibi")]
    assert not close.finding and close.reason.startswith("difference")
    near_zero = by_pair.get(("none", "learned")) or by_pair[("learned", "none")]
    assert not near_zero.finding and near_zero.reason == "both below 0.05"


def test_a_small_consistent_gap_over_few_seeds_is_not_a_finding_after_correction():
    # Three seeds with differences 0.1, 0.3, 0.2: t = 0.2 / (0.1 / sqrt 3) = 3.46, df 2, p = 0.074 alone.
    runs = study({"t5": [0.6, 0.8, 0.7], "rope": [0.5, 0.5, 0.5]})
    (comparison,) = findings(runs, {"beyond": (5, 8)})
    assert comparison.p_value == pytest.approx(0.0742, abs=5e-4)
    assert not comparison.finding and comparison.reason.startswith("adjusted p")


def test_order_sentence_names_the_findings_and_counts_the_rest():
    comparisons = [
        Comparison("t", "t5", "rope", 0.6, 0.0, 0.0, True, ""),
        Comparison("t", "t5", "none", 0.8, 0.0, 0.0, True, ""),
        Comparison("t", "rope", "none", 0.2, 0.2, 0.4, False, "adjusted p = 0.4 >= 0.05"),
    ]
    means = {"none": 0.1, "t5": 0.9, "rope": 0.3}
    text = order_sentence(comparisons, means, label=lambda kind: f"`{kind}`")
    assert text == ("`t5` lies above `rope` and `none`. The other 1 pairs are not ordered: 1 by the test.")
    nothing = order_sentence(comparisons[2:], means)
    assert nothing == "No pair is ordered (1 pairs)."


def test_order_sentence_gives_sign_counts_and_counts_the_pairs_not_compared():
    comparisons = [
        Comparison("t", "t5", "rope", 0.6, 0.0, 0.0, True, "", seeds_on_side=10, seeds=10),
        Comparison("t", "t5", "none", 0.8, 0.0, 0.0, True, "", seeds_on_side=9, seeds=10),
        Comparison("t", "rope", "none", 0.2, math.nan, math.nan, False, f"{NOT_COMPARED}: none fitted 0 of 10"),
    ]
    means = {"none": 0.1, "t5": 0.9, "rope": 0.3}
    assert order_sentence(comparisons, means, signs=True) == (
        "T5 lies above rope (10 of 10 seeds) and none (9 of 10 seeds). The other 1 pairs are not ordered: "
        "1 not compared (a kind did not fit on every seed).")
    assert order_sentence(comparisons[2:], means) == (
        "No pair is ordered (1 pairs, 1 of them not compared: a kind did not fit on every seed).")


def test_agreement_reads_each_finding_in_another_run():
    study_runs = study({"t5": [0.9] * 5, "rope": [0.3] * 5, "alibi": [0.1] * 5})
    decided = findings(study_runs, {"beyond": (5, 8)})
    live = study({"t5": [0.9, 0.5, 0.8], "rope": [0.3, 0.6, 0.4], "alibi": [0.2, 0.1, 0.0]})
    results = {(a.finding.higher, a.finding.lower): a for a in agreement(decided, live, {"beyond": (5, 8)})}
    assert set(results) == {("t5", "rope"), ("t5", "alibi"), ("rope", "alibi")}
    assert results["t5", "rope"].other_difference == pytest.approx((0.6 - 0.1 + 0.4) / 3)
    assert results["t5", "rope"].holds and results["t5", "rope"].other_seeds == 3
    assert results["rope", "alibi"].other_difference == pytest.approx((0.1 + 0.5 + 0.4) / 3)
    flipped = study({"t5": [0.3] * 3, "rope": [0.9] * 3, "alibi": [0.1] * 3})
    held = {(a.finding.higher, a.finding.lower): a.holds for a in agreement(decided, flipped, {"beyond": (5, 8)})}
    assert held == {("t5", "rope"): False, ("t5", "alibi"): True, ("rope", "alibi"): True}


def test_reproductions_compare_the_same_run_in_two_places():
    original = group_runs(rows_of("rope", 0, curve((1, 1), 0.5, 0.1)) + rows_of("rope", 1, curve((1, 1), 0.5, 0.1)))
    again = group_runs(rows_of("rope", 0, curve((1, 1), 0.5, 0.1)) +
                       rows_of("rope", 1, curve((1, 1), 0.25, 0.1), steps=150) +
                       rows_of("rope", 2, curve((1, 1), 0.5, 0.1)))
    results = {r.seed: r for r in reproductions(original, again)}
    assert set(results) == {0, 1}  # seed 2 is not in the study
    assert results[0].identical and results[0].largest_difference == 0.0
    assert not results[1].identical and results[1].largest_difference == 0.25 and results[1].steps == (100, 150)


def test_literature_verdicts_sort_every_table_of_the_pair():
    comparisons = [
        Comparison("copy/decoder/beyond", "none", "alibi", 0.3, 0.0, 0.0, True, ""),
        Comparison("recall/decoder/beyond", "alibi", "none", 0.3, 0.0, 0.0, True, ""),
        Comparison("recall/decoder/far", "none", "alibi", 0.01, 0.5, 1.0, False, "difference 0.01 < margin 0.05"),
        Comparison("recall/decoder/inside", "none", "alibi", 0.3, 0.0, 0.0, True, ""),
        Comparison("recall/decoder/far", "none", "rope", 0.3, 0.0, 0.0, True, ""),
    ]
    comparisons.append(Comparison("copy/decoder/far", "alibi", "none", 0.3, math.nan, math.nan, False,
                                  f"{NOT_COMPARED}: none fitted 0 of 10"))
    claim = LiteratureClaim("Kazemnejad et al. (2023)", higher="none", lower="alibi")
    assert literature_verdicts([claim], comparisons)[claim] == {
        "agrees": ["copy/decoder/beyond"], "disagrees": ["recall/decoder/beyond"],
        "undecided": ["recall/decoder/far"], NOT_COMPARED: ["copy/decoder/far"]}
