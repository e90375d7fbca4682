"""Tests for posenc_ref.relative: offsets, Shaw's clipped embeddings, T5 buckets and bias, ALiBi."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers.models.t5.modeling_t5 import T5Attention

from posenc_ref.attention import MultiHeadAttention
from posenc_ref.lab.models import build_model
from posenc_ref.relative import (
    ShawRelativePosition,
    T5RelativeBias,
    alibi_bias,
    alibi_slopes,
    clipped_relative_index,
    query_positions_offset,
    relative_position_bucket,
    relative_positions,
)

OFFSETS = torch.arange(-300, 301)
BUCKET_SETTINGS = [(32, 128), (16, 64), (8, 20), (64, 256), (10, 50), (4, 3), (12, 1000)]


# ---------------------------------------------------------------------------------------------------------
# offsets


@pytest.mark.parametrize(
    ("q_len", "k_len", "query_offset", "first_query"),
    [(4, 4, None, 0), (3, 7, None, 4), (1, 5, None, 4), (3, 7, 0, 0), (3, 7, 2, 2), (6, 2, 5, 5)],
)
def test_relative_positions_are_key_minus_query(q_len, k_len, query_offset, first_query):
    offsets = relative_positions(q_len, k_len, query_offset=query_offset)
    assert offsets.shape == (q_len, k_len)
    assert offsets.dtype == torch.int64
    for row in range(q_len):
        for j in range(k_len):
            assert offsets[row, j].item() == j - (first_query + row)


def test_query_offset_none_places_queries_at_the_last_key_positions():
    assert query_positions_offset(3, 10, None) == 7
    assert query_positions_offset(5, 5, None) == 0
    assert query_positions_offset(3, 10, 2) == 2


def test_clipped_relative_index_is_clipped_offset_plus_k():
    k = 3
    index = clipped_relative_index(5, 9, k, query_offset=1)
    assert index.dtype == torch.int64
    for row in range(5):
        for j in range(9):
            assert index[row, j].item() == min(max(j - (1 + row), -k), k) + k
    assert index.min().item() == 0 and index.max().item() == 2 * k


# ---------------------------------------------------------------------------------------------------------
# Shaw


def test_shaw_tables_have_2k_plus_1_rows():
    module = ShawRelativePosition(max_distance=4, head_dim=6)
    assert module.max_distance == 4
    assert module.keys.shape == (9, 6)
    assert module.values.shape == (9, 6)


def test_shaw_rel_k_and_rel_v_are_the_rows_of_the_clipped_offset():
    torch.manual_seed(0)
    k = 2
    module = ShawRelativePosition(max_distance=k, head_dim=3)
    rel_k, rel_v = module(4, 7)  # queries at positions 3..6
    assert rel_k.shape == (4, 7, 3) and rel_v.shape == (4, 7, 3)
    for row in range(4):
        for j in range(7):
            expected_row = min(max(j - (3 + row), -k), k) + k
            torch.testing.assert_close(rel_k[row, j], module.keys[expected_row], rtol=0, atol=0)
            torch.testing.assert_close(rel_v[row, j], module.values[expected_row], rtol=0, atol=0)


def test_shaw_far_offsets_share_the_edge_rows():
    module = ShawRelativePosition(max_distance=2, head_dim=4)
    rel_k, rel_v = module(1, 12, query_offset=6)  # offsets -6..5
    for j in range(4):  # offsets -6..-3, all <= -k
        torch.testing.assert_close(rel_k[0, j], module.keys[0], rtol=0, atol=0)
        torch.testing.assert_close(rel_v[0, j], module.values[0], rtol=0, atol=0)
    for j in range(8, 12):  # offsets 2..5, all >= k
        torch.testing.assert_close(rel_k[0, j], module.keys[4], rtol=0, atol=0)
        torch.testing.assert_close(rel_v[0, j], module.values[4], rtol=0, atol=0)


def test_shaw_gradients_reach_only_the_used_rows():
    module = ShawRelativePosition(max_distance=5, head_dim=3)
    rel_k, rel_v = module(2, 2)  # offsets -1, 0, 1 -> rows 4, 5, 6
    (rel_k.sum() + rel_v.sum()).backward()
    used = {4, 5, 6}
    for row in range(11):
        for gradient in (module.keys.grad[row], module.values.grad[row]):
            if row in used:
                assert gradient.abs().sum() > 0
            else:
                assert torch.all(gradient == 0)


def test_shaw_initialisation_is_small():
    torch.manual_seed(0)
    module = ShawRelativePosition(max_distance=64, head_dim=64)
    assert 0.015 < module.keys.std().item() < 0.025
    assert 0.015 < module.values.std().item() < 0.025


# ---------------------------------------------------------------------------------------------------------
# T5 buckets


def plain_t5_bucket(offset: int, bidirectional: bool, num_buckets: int, max_distance: int) -> int:
    """T5's rule for one offset, written from the formula in plain Python."""
    bucket_start = 0
    buckets_per_direction = num_buckets
    if bidirectional:
        buckets_per_direction = num_buckets // 2
        if offset > 0:
            bucket_start = buckets_per_direction
        distance = abs(offset)
    else:
        distance = max(-offset, 0)
    max_exact = buckets_per_direction // 2
    if distance < max_exact:
        return bucket_start + distance
    fraction = math.log(distance / max_exact) / math.log(max_distance / max_exact)
    log_bucket = max_exact + int(fraction * (buckets_per_direction - max_exact))
    return bucket_start + min(log_bucket, buckets_per_direction - 1)


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize(("num_buckets", "max_distance"), BUCKET_SETTINGS)
def test_t5_bucket_matches_a_plain_python_implementation(bidirectional, num_buckets, max_distance):
    buckets = relative_position_bucket(
        OFFSETS, bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance
    )
    expected = [plain_t5_bucket(int(r), bidirectional, num_buckets, max_distance) for r in OFFSETS]
    assert buckets.tolist() == expected


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize(("num_buckets", "max_distance"), BUCKET_SETTINGS)
def test_t5_bucket_matches_hugging_face(bidirectional, num_buckets, max_distance):
    buckets = relative_position_bucket(
        OFFSETS, bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance
    )
    expected = T5Attention._relative_position_bucket(
        OFFSETS, bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance
    )
    assert buckets.dtype == torch.int64
    assert torch.equal(buckets, expected.to(torch.int64))


def test_t5_bucket_boundaries_with_defaults_bidirectional():
    def bucket(offset: int) -> int:
        return relative_position_bucket(torch.tensor([offset])).item()

    assert bucket(0) == 0
    assert bucket(-7) == 7 and bucket(-8) == 8  # exact buckets end at max_exact = 8
    assert bucket(7) == 16 + 7 and bucket(8) == 16 + 8
    assert bucket(-90) == 14 and bucket(-91) == 15  # 8 * 2**3.5 = 90.51
    assert bucket(90) == 16 + 14 and bucket(91) == 31
    assert bucket(-10_000) == 15 and bucket(10_000) == 31


def test_t5_bucket_unidirectional_sends_future_keys_to_bucket_zero():
    future = torch.arange(1, 500)
    assert torch.all(relative_position_bucket(future, bidirectional=False) == 0)
    past = torch.tensor([-1, -15, -16, -10_000])
    assert relative_position_bucket(past, bidirectional=False).tolist() == [1, 15, 16, 31]


def test_t5_bucket_keeps_shape_and_accepts_int32():
    offsets = relative_positions(3, 5).to(torch.int32)
    buckets = relative_position_bucket(offsets)
    assert buckets.shape == (3, 5) and buckets.dtype == torch.int64


@settings(max_examples=30, deadline=None)
@given(
    offset=st.integers(-5000, 5000),
    half=st.integers(2, 40),
    extra_distance=st.integers(1, 500),
    bidirectional=st.booleans(),
)
def test_t5_bucket_is_in_range_and_matches_plain_python(offset, half, extra_distance, bidirectional):
    num_buckets = 2 * half
    per_direction = half if bidirectional else num_buckets
    max_distance = per_direction // 2 + extra_distance
    bucket = relative_position_bucket(
        torch.tensor([offset]),
        bidirectional=bidirectional,
        num_buckets=num_buckets,
        max_distance=max_distance,
    ).item()
    assert 0 <= bucket < num_buckets
    assert bucket == plain_t5_bucket(offset, bidirectional, num_buckets, max_distance)


# ---------------------------------------------------------------------------------------------------------
# T5 bias


def test_t5_bias_is_weight_at_bucket_of_offset():
    torch.manual_seed(0)
    module = T5RelativeBias(3, num_buckets=8, max_distance=12)
    assert module.weight.shape == (8, 3)
    bias = module(4, 20, query_offset=5)
    assert bias.shape == (3, 4, 20)
    for head in range(3):
        for row in range(4):
            for j in range(20):
                bucket = plain_t5_bucket(j - (5 + row), True, 8, 12)
                assert bias[head, row, j].item() == module.weight[bucket, head].item()


def test_t5_bias_depends_only_on_key_minus_query():
    torch.manual_seed(0)
    module = T5RelativeBias(2, bidirectional=False, num_buckets=16, max_distance=40)
    shift = 7
    full = module(10, 30, query_offset=shift)  # queries 7..16, keys 0..29
    window = module(10, 23, query_offset=0)  # queries 0..9, keys 0..22: every pair shifted by -7
    torch.testing.assert_close(full[:, :, shift:], window, rtol=0, atol=0)


# ---------------------------------------------------------------------------------------------------------
# ALiBi


def test_alibi_slopes_for_8_heads_are_halves():
    expected = torch.tensor([1 / 2, 1 / 4, 1 / 8, 1 / 16, 1 / 32, 1 / 64, 1 / 128, 1 / 256])
    slopes = alibi_slopes(8)
    assert slopes.dtype == torch.float32
    torch.testing.assert_close(slopes, expected, rtol=0, atol=0)


def test_alibi_slopes_for_6_heads_follow_press_reference_code():
    # 4 heads: 2^-2, 2^-4, 2^-6, 2^-8; then 8-head slopes 2^-1, 2^-2, ... taking every other: 2^-1, 2^-3.
    expected = torch.tensor([2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8, 2.0**-1, 2.0**-3])
    torch.testing.assert_close(alibi_slopes(6), expected, rtol=0, atol=0)


def test_alibi_slopes_for_12_heads_follow_press_reference_code():
    # 8 heads: 2^-1..2^-8; then 16-head slopes 2^-0.5, 2^-1, 2^-1.5, ... taking every other, 4 of them.
    exponents = [-1, -2, -3, -4, -5, -6, -7, -8, -0.5, -1.5, -2.5, -3.5]
    expected = torch.tensor([2.0**e for e in exponents], dtype=torch.float32)
    torch.testing.assert_close(alibi_slopes(12), expected)


@pytest.mark.parametrize("num_heads", [2, 4, 16, 32, 64])
def test_alibi_slopes_for_powers_of_two_are_geometric_with_ratio_2_to_minus_8_over_n(num_heads):
    slopes = alibi_slopes(num_heads).double()
    torch.testing.assert_close(slopes[0], torch.tensor(2.0 ** (-8 / num_heads), dtype=torch.float64))
    ratios = slopes[1:] / slopes[:-1]
    torch.testing.assert_close(ratios, torch.full_like(ratios, 2.0 ** (-8 / num_heads)))


def test_alibi_slopes_for_one_head():
    torch.testing.assert_close(alibi_slopes(1), torch.tensor([2.0**-8]), rtol=0, atol=0)


@pytest.mark.parametrize("num_heads", [1, 3, 5, 7, 12, 20, 33])
def test_alibi_slopes_are_between_zero_and_one(num_heads):
    slopes = alibi_slopes(num_heads)
    assert slopes.shape == (num_heads,)
    assert torch.all(slopes > 0) and torch.all(slopes < 1)


def test_alibi_bias_is_minus_slope_times_distance():
    slopes = alibi_slopes(4)
    bias = alibi_bias(4, 3, 6)  # queries at 3, 4, 5
    assert bias.shape == (4, 3, 6)
    for head in range(4):
        for row in range(3):
            for j in range(6):
                expected = -slopes[head].item() * abs((3 + row) - j)
                assert bias[head, row, j].item() == pytest.approx(expected, rel=1e-6)


def test_alibi_bias_uses_given_slopes_dtype_and_query_offset():
    slopes = torch.tensor([0.5, 0.25], dtype=torch.float64)
    bias = alibi_bias(2, 2, 4, query_offset=1, slopes=slopes)
    assert bias.dtype == torch.float64
    expected = torch.tensor(
        [
            [[-0.5, 0.0, -0.5, -1.0], [-1.0, -0.5, 0.0, -0.5]],
            [[-0.25, 0.0, -0.25, -0.5], [-0.5, -0.25, 0.0, -0.25]],
        ],
        dtype=torch.float64,
    )
    torch.testing.assert_close(bias, expected, rtol=0, atol=0)


@pytest.mark.parametrize(("q_len", "k_len", "query_offset"), [(8, 8, None), (3, 9, None), (4, 10, 2)])
def test_alibi_bias_and_press_form_give_the_same_causal_softmax(q_len, k_len, query_offset):
    num_heads = 6
    torch.manual_seed(0)
    scores = torch.randn(num_heads, q_len, k_len, dtype=torch.float64)
    slopes = alibi_slopes(num_heads).double()
    first_query = k_len - q_len if query_offset is None else query_offset
    query_positions = torch.arange(first_query, first_query + q_len)
    key_positions = torch.arange(k_len)
    causal = key_positions[None, :] <= query_positions[:, None]  # (q_len, k_len)
    # Press et al.'s form: m_h * (j - (k_len - 1)), one row vector for every query.
    press = slopes[:, None, None] * (key_positions - (k_len - 1)).double()[None, None, :]
    ours = alibi_bias(num_heads, q_len, k_len, query_offset=query_offset, slopes=slopes)
    assert not torch.allclose(ours.masked_fill(~causal, 0), press.expand_as(ours).masked_fill(~causal, 0))
    weights_press = torch.softmax((scores + press).masked_fill(~causal, float("-inf")), dim=-1)
    weights_ours = torch.softmax((scores + ours).masked_fill(~causal, float("-inf")), dim=-1)
    torch.testing.assert_close(weights_ours, weights_press)


def test_alibi_bias_is_unchanged_by_reversing_queries_and_keys():
    bias = alibi_bias(6, 11, 11)  # (heads, L, L)
    assert torch.equal(bias.flip(1, 2), bias)  # |(L-1-i) - (L-1-j)| = |i - j|


def test_alibi_encoder_is_equivariant_to_reversing_the_sequence_and_other_kinds_are_not():
    torch.manual_seed(0)
    x = torch.randn(2, 9, 32, dtype=torch.float64)  # (batch, seq, d_model)
    reversal_error = {}
    for position, causal in [("alibi", False), ("alibi", True), ("t5", False), ("shaw", False), ("rope", False)]:
        layer = MultiHeadAttention(32, 4, position=position, causal=causal).double()
        with torch.no_grad():
            reversal_error[position, causal] = (layer(x.flip(1)) - layer(x).flip(1)).abs().max().item()
    assert reversal_error["alibi", False] < 1e-12
    assert min(error for key, error in reversal_error.items() if key != ("alibi", False)) > 1e-3
    # A whole encoder (embeddings, blocks, read-out) inherits it: reversing the tokens reverses the logits.
    encoder = build_model("encoder", 20, "alibi", d_model=32, num_heads=4, num_layers=2).double()
    tokens = torch.randint(20, (3, 12))
    with torch.no_grad():
        torch.testing.assert_close(encoder(tokens.flip(1)), encoder(tokens).flip(1), rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------------------------------------------------
# bad input


@pytest.mark.parametrize("max_distance", [0, -1])
def test_shaw_rejects_max_distance_below_one(max_distance):
    with pytest.raises(ValueError, match="max_distance"):
        ShawRelativePosition(max_distance, 4)
    with pytest.raises(ValueError, match="max_distance"):
        clipped_relative_index(2, 2, max_distance)


def test_shaw_rejects_non_int_max_distance():
    with pytest.raises(TypeError, match="max_distance"):
        ShawRelativePosition(2.0, 4)


@pytest.mark.parametrize("num_buckets", [31, 7, 2, 0])
def test_t5_rejects_odd_or_too_few_buckets_when_bidirectional(num_buckets):
    with pytest.raises(ValueError, match="num_buckets"):
        relative_position_bucket(OFFSETS, num_buckets=num_buckets)
    with pytest.raises(ValueError, match="num_buckets"):
        T5RelativeBias(2, num_buckets=num_buckets)


def test_t5_rejects_too_few_buckets_when_unidirectional():
    with pytest.raises(ValueError, match="num_buckets"):
        relative_position_bucket(OFFSETS, bidirectional=False, num_buckets=1)


@pytest.mark.parametrize(
    ("bidirectional", "num_buckets", "max_distance"),
    [(True, 32, 8), (True, 32, 5), (False, 32, 16), (True, 4, 1)],
)
def test_t5_rejects_max_distance_within_the_exact_range(bidirectional, num_buckets, max_distance):
    with pytest.raises(ValueError, match="max_distance"):
        relative_position_bucket(
            OFFSETS, bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance
        )
    with pytest.raises(ValueError, match="max_distance"):
        T5RelativeBias(2, bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance)


@pytest.mark.parametrize(
    "relative_position", [torch.tensor([1.0, -2.0]), torch.tensor([True, False]), [1, 2]]
)
def test_t5_rejects_non_integer_relative_position(relative_position):
    with pytest.raises(TypeError, match="relative_position"):
        relative_position_bucket(relative_position)


def test_t5_rejects_non_bool_bidirectional():
    with pytest.raises(TypeError, match="bidirectional"):
        relative_position_bucket(OFFSETS, bidirectional=1)


@pytest.mark.parametrize("num_heads", [0, -3])
def test_rejects_num_heads_below_one(num_heads):
    with pytest.raises(ValueError, match="num_heads"):
        alibi_slopes(num_heads)
    with pytest.raises(ValueError, match="num_heads"):
        alibi_bias(num_heads, 2, 2)
    with pytest.raises(ValueError, match="num_heads"):
        T5RelativeBias(num_heads)


@pytest.mark.parametrize(("q_len", "k_len", "name"), [(0, 3, "q_len"), (3, 0, "k_len"), (-1, 3, "q_len")])
def test_rejects_lengths_below_one(q_len, k_len, name):
    with pytest.raises(ValueError, match=name):
        relative_positions(q_len, k_len, query_offset=0)
    with pytest.raises(ValueError, match=name):
        ShawRelativePosition(2, 4)(q_len, k_len, query_offset=0)
    with pytest.raises(ValueError, match=name):
        T5RelativeBias(2)(q_len, k_len, query_offset=0)
    with pytest.raises(ValueError, match=name):
        alibi_bias(2, q_len, k_len, query_offset=0)


def test_rejects_non_int_lengths():
    with pytest.raises(TypeError, match="q_len"):
        relative_positions(2.0, 3)


def test_rejects_negative_query_offset():
    with pytest.raises(ValueError, match="query_offset"):
        relative_positions(2, 3, query_offset=-1)
    with pytest.raises(ValueError, match="query_offset"):
        query_positions_offset(2, 3, -1)
    with pytest.raises(ValueError, match="query_offset"):
        alibi_bias(2, 2, 3, query_offset=-2)
    with pytest.raises(TypeError, match="query_offset"):
        relative_positions(2, 3, query_offset=1.0)


def test_query_offset_none_rejects_more_queries_than_keys():
    with pytest.raises(ValueError, match="query_offset"):
        relative_positions(5, 3)


@pytest.mark.parametrize(
    ("slopes", "error"),
    [
        (torch.ones(3), ValueError),
        (torch.ones(2, 1), ValueError),
        (torch.ones(2, dtype=torch.int64), TypeError),
    ],
)
def test_alibi_bias_rejects_bad_slopes(slopes, error):
    with pytest.raises(error, match="slopes"):
        alibi_bias(2, 2, 2, slopes=slopes)
