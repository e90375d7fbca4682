"""posenc_ref.evidence: intervals over seeds and the ranking sentences generated from them."""

import pytest

from posenc_ref.evidence import Interval, interval, rank, ranking_sentence


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
