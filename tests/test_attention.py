"""The attention oracle, Shaw's relative attention, reference_attention and MultiHeadAttention.

Expected values come from plain float64 loops written here, from closed forms, or from the worked example.
"""

import math

import numpy as np
import pytest
import torch

from posenc_ref.attention import (
    POSITION_KINDS,
    MultiHeadAttention,
    attention,
    causal_mask,
    reference_attention,
    register_position_kind,
    relative_attention,
)
from posenc_ref.relative import alibi_slopes

ALL_KINDS = ("none", "sinusoidal", "learned", "shaw", "t5", "alibi", "rope")
KIND_OPTIONS = {"learned": {"max_len": 64}, "shaw": {"max_distance": 3}}


def random_qkv(batch=2, heads=3, q_len=5, k_len=5, head_dim=4, seed=0, dtype=torch.float64):
    generator = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, heads, q_len, head_dim, generator=generator, dtype=dtype)
    k = torch.randn(batch, heads, k_len, head_dim, generator=generator, dtype=dtype)
    v = torch.randn(batch, heads, k_len, head_dim, generator=generator, dtype=dtype)
    return q, k, v


def loop_attention(q, k, v, bias=None, allowed=None, scale=None, rel_k=None, rel_v=None):
    """Attention one query at a time in float64 numpy: the formula, written out."""
    q, k, v = (t.detach().double().numpy() for t in (q, k, v))
    batch, heads, q_len, head_dim = q.shape
    k_len = k.shape[2]
    scale = 1 / math.sqrt(head_dim) if scale is None else scale
    out = np.zeros((batch, heads, q_len, v.shape[-1]))
    for b in range(batch):
        for h in range(heads):
            for i in range(q_len):
                logits = []
                for j in range(k_len):
                    key = k[b, h, j] + (0 if rel_k is None else rel_k[i, j].double().numpy())
                    logit = scale * float(q[b, h, i] @ key)
                    if bias is not None:
                        logit += float(bias[h, i, j])
                    logits.append(logit)
                keep = [allowed is None or bool(allowed[i, j]) for j in range(k_len)]
                if not any(keep):
                    continue
                top = max(logit for logit, kept in zip(logits, keep) if kept)
                weights = [math.exp(logit - top) if kept else 0.0 for logit, kept in zip(logits, keep)]
                total = sum(weights)
                for j in range(k_len):
                    value = v[b, h, j] + (0 if rel_v is None else rel_v[i, j].double().numpy())
                    out[b, h, i] += weights[j] / total * value
    return torch.from_numpy(out)


# ---------------------------------------------------------------------------------------------------------
# attention()
# ---------------------------------------------------------------------------------------------------------


def test_attention_matches_a_loop_over_queries_and_keys():
    q, k, v = random_qkv(q_len=4, k_len=6)
    bias = torch.randn(3, 4, 6, dtype=torch.float64)
    allowed = torch.rand(4, 6, generator=torch.Generator().manual_seed(1)) > 0.3
    allowed[:, 0] = True
    expected = loop_attention(q, k, v, bias=bias, allowed=allowed, scale=0.7)
    got = attention(q, k, v, bias=bias, mask=allowed, scale=0.7)
    torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-12)


def test_default_scale_is_one_over_square_root_of_head_dim():
    q, k, v = random_qkv(head_dim=9)
    torch.testing.assert_close(attention(q, k, v), attention(q, k, v, scale=1 / 3))
    assert not torch.allclose(attention(q, k, v), attention(q, k, v, scale=1.0))


def test_causal_lets_each_query_see_its_own_position_and_before_aligned_to_the_last_key():
    q, k, v = random_qkv(q_len=3, k_len=7)
    # Queries are positions 4, 5, 6 of 7 when query_offset is None (cached decoding).
    allowed = torch.tensor([[j <= 4 + i for j in range(7)] for i in range(3)])
    torch.testing.assert_close(attention(q, k, v, causal=True), loop_attention(q, k, v, allowed=allowed))
    explicit = torch.tensor([[j <= 1 + i for j in range(7)] for i in range(3)])
    torch.testing.assert_close(attention(q, k, v, causal=True, query_offset=1),
                               loop_attention(q, k, v, allowed=explicit))


def test_causal_mask_is_lower_triangular_for_equal_lengths():
    assert torch.equal(causal_mask(4, 4), torch.ones(4, 4, dtype=torch.bool).tril())


def test_a_query_that_may_see_no_key_outputs_zeros():
    q, k, v = random_qkv(q_len=2, k_len=3)
    mask = torch.tensor([[True, False, True], [False, False, False]])
    out, weights = attention(q, k, v, mask=mask, return_weights=True)
    assert torch.equal(out[:, :, 1], torch.zeros_like(out[:, :, 1]))
    assert torch.isfinite(out).all()
    torch.testing.assert_close(weights[:, :, 0].sum(-1), torch.ones(2, 3, dtype=torch.float64))


def test_relative_bias_worked_example_gives_weights_0506_0307_0186():
    # Equal content scores (q = 0) plus biases 0.5, 0 and -0.5 for offsets -1, 0, +1 seen from the middle token.
    q = torch.zeros(1, 1, 1, 2)
    k, v = torch.randn(1, 1, 3, 2), torch.randn(1, 1, 3, 2)
    bias = torch.tensor([[[0.5, 0.0, -0.5]]])
    _, weights = attention(q, k, v, bias=bias, return_weights=True)
    assert [round(w, 3) for w in weights.flatten().tolist()] == [0.506, 0.307, 0.186]
    # Softmax ignores a constant added to every score: content scores 0.2 give the same weights.
    shifted = torch.softmax(torch.tensor([0.7, 0.2, -0.3]), dim=0)
    torch.testing.assert_close(shifted, weights.flatten())


def test_half_precision_inputs_return_their_dtype_and_stay_close_to_float64():
    q, k, v = random_qkv(q_len=16, k_len=16, head_dim=32)
    reference = attention(q, k, v)
    got = attention(q.bfloat16(), k.bfloat16(), v.bfloat16())
    assert got.dtype == torch.bfloat16
    # bf16 keeps 8 bits of mantissa: inputs and output are rounded to about 2^-9 relative error each.
    assert (got.double() - reference).norm() / reference.norm() < 2e-2


# ---------------------------------------------------------------------------------------------------------
# Shaw's relative attention and reference_attention per position kind
# ---------------------------------------------------------------------------------------------------------


def test_relative_attention_matches_shaw_formula_written_as_a_loop():
    q, k, v = random_qkv(q_len=4, k_len=4)
    rel_k = torch.randn(4, 4, 4, dtype=torch.float64)
    rel_v = torch.randn(4, 4, 4, dtype=torch.float64)
    expected = loop_attention(q, k, v, rel_k=rel_k, rel_v=rel_v)
    torch.testing.assert_close(relative_attention(q, k, v, rel_k, rel_v), expected)
    allowed = torch.ones(4, 4, dtype=torch.bool).tril()
    torch.testing.assert_close(relative_attention(q, k, v, rel_k, rel_v, causal=True),
                               loop_attention(q, k, v, rel_k=rel_k, rel_v=rel_v, allowed=allowed))


def test_reference_alibi_adds_minus_slope_times_distance():
    q, k, v = random_qkv(heads=4, q_len=3, k_len=6)
    slopes = torch.tensor([0.5, 0.25, 0.125, 0.0625], dtype=torch.float64)
    # Query positions 3, 4, 5 (the last three of six).
    bias = torch.tensor([[[-slopes[h].item() * abs(3 + i - j) for j in range(6)] for i in range(3)]
                         for h in range(4)], dtype=torch.float64)
    expected = loop_attention(q, k, v, bias=bias)
    torch.testing.assert_close(reference_attention(q, k, v, position="alibi", slopes=slopes), expected)


def test_reference_t5_looks_up_one_bias_per_bucket_and_head():
    q, k, v = random_qkv(heads=2, q_len=5, k_len=5)
    table = torch.randn(8, 2, dtype=torch.float64)  # 8 buckets, 2 heads
    # Bidirectional, 8 buckets, max_distance 16: 4 buckets a side, exact below 2, log-spaced up to 16.
    def bucket(offset):
        side = 4 if offset > 0 else 0
        distance = abs(offset)
        if distance < 2:
            return side + distance
        return side + min(3, 2 + int(math.log(distance / 2) / math.log(16 / 2) * 2))
    bias = torch.tensor([[[table[bucket(j - i), h].item() for j in range(5)] for i in range(5)] for h in range(2)],
                        dtype=torch.float64)
    got = reference_attention(q, k, v, position="t5", bias_table=table, bidirectional=True, max_distance=16)
    torch.testing.assert_close(got, loop_attention(q, k, v, bias=bias))


def test_reference_shaw_uses_the_rows_of_clipped_offsets():
    q, k, v = random_qkv(q_len=5, k_len=5)
    rel_k_table = torch.randn(5, 4, dtype=torch.float64)  # k = 2: offsets -2..2
    rel_v_table = torch.randn(5, 4, dtype=torch.float64)
    index = torch.tensor([[min(max(j - i, -2), 2) + 2 for j in range(5)] for i in range(5)])
    expected = loop_attention(q, k, v, rel_k=rel_k_table[index], rel_v=rel_v_table[index])
    got = reference_attention(q, k, v, position="shaw", rel_k_table=rel_k_table, rel_v_table=rel_v_table)
    torch.testing.assert_close(got, expected)


def rotate_pairs_as_complex_numbers(x, positions, inv_freq):
    """RoFormer's rotation: feature pairs (2i, 2i+1) as complex numbers times e^{i m theta_i}."""
    pairs = torch.view_as_complex(x.double().reshape(*x.shape[:-1], -1, 2).contiguous())
    turn = torch.polar(torch.ones(len(positions), len(inv_freq), dtype=torch.float64),
                       positions.double()[:, None] * inv_freq.double()[None, :])
    return torch.view_as_real(pairs * turn).flatten(-2)


def test_reference_rope_rotates_queries_and_keys_at_their_positions():
    q, k, v = random_qkv(q_len=2, k_len=6, head_dim=8)
    inv_freq = 10000.0 ** (-torch.arange(0, 8, 2, dtype=torch.float64) / 8)
    q_rot = rotate_pairs_as_complex_numbers(q, torch.tensor([4, 5]), inv_freq)
    k_rot = rotate_pairs_as_complex_numbers(k, torch.arange(6), inv_freq)
    expected = loop_attention(q_rot, k_rot, v)
    got = reference_attention(q, k, v, position="rope", inv_freq=inv_freq)
    torch.testing.assert_close(got, expected)


def test_reference_attention_rejects_a_parameter_the_position_does_not_take():
    q, k, v = random_qkv()
    with pytest.raises(ValueError, match="slopes"):
        reference_attention(q, k, v, position="none", slopes=torch.ones(3))
    with pytest.raises(ValueError, match="inv_freq"):
        reference_attention(q, k, v, position="rope")


# ---------------------------------------------------------------------------------------------------------
# Permutations: equivariance without positions, and what breaks it
# ---------------------------------------------------------------------------------------------------------


def permutation_pair(kind, causal=False, seq=7, seed=0):
    torch.manual_seed(seed)
    layer = MultiHeadAttention(16, 4, position=kind, causal=causal, **KIND_OPTIONS.get(kind, {})).double()
    with torch.no_grad():  # T5's and Shaw's tables may start small; make them matter
        for name, parameter in layer.position.named_parameters():
            parameter.normal_()
    x = torch.randn(2, seq, 16, dtype=torch.float64)
    permutation = torch.randperm(seq, generator=torch.Generator().manual_seed(seed + 1))
    return layer(x[:, permutation]), layer(x)[:, permutation]


def test_attention_without_positions_is_permutation_equivariant():
    permuted_then_attended, attended_then_permuted = permutation_pair("none")
    torch.testing.assert_close(permuted_then_attended, attended_then_permuted)


def test_pooled_output_without_positions_is_permutation_invariant():
    permuted_then_attended, attended_then_permuted = permutation_pair("none")
    torch.testing.assert_close(permuted_then_attended.mean(1), attended_then_permuted.mean(1))


@pytest.mark.parametrize("kind", [k for k in ALL_KINDS if k != "none"])
def test_every_position_kind_breaks_permutation_equivariance(kind):
    permuted_then_attended, attended_then_permuted = permutation_pair(kind)
    assert (permuted_then_attended - attended_then_permuted).abs().max() > 1e-3


def test_a_causal_mask_alone_breaks_permutation_equivariance():
    permuted_then_attended, attended_then_permuted = permutation_pair("none", causal=True)
    assert (permuted_then_attended - attended_then_permuted).abs().max() > 1e-3


# ---------------------------------------------------------------------------------------------------------
# MultiHeadAttention and the registry
# ---------------------------------------------------------------------------------------------------------


def test_registry_holds_the_seven_position_kinds():
    assert set(POSITION_KINDS) == set(ALL_KINDS)


@pytest.mark.parametrize("kind", ALL_KINDS)
@pytest.mark.parametrize("causal", [False, True])
def test_multi_head_attention_keeps_the_input_shape_and_trains(kind, causal):
    layer = MultiHeadAttention(32, 4, position=kind, causal=causal, **KIND_OPTIONS.get(kind, {}))
    x = torch.randn(2, 9, 32, requires_grad=True)
    out = layer(x)
    assert out.shape == (2, 9, 32)
    out.square().sum().backward()
    assert torch.isfinite(x.grad).all() and x.grad.abs().sum() > 0


def test_multi_head_attention_equals_per_head_reference_attention():
    torch.manual_seed(0)
    layer = MultiHeadAttention(8, 2, position="alibi", causal=True).double()
    x = torch.randn(1, 5, 8, dtype=torch.float64)
    q, k, v = (projection(x).view(1, 5, 2, 4).transpose(1, 2) for projection in (layer.query, layer.key, layer.value))
    slopes = alibi_slopes(2).double()
    bias = torch.tensor([[[-slopes[h].item() * abs(i - j) for j in range(5)] for i in range(5)] for h in range(2)],
                        dtype=torch.float64)
    heads = loop_attention(q, k, v, bias=bias, allowed=torch.ones(5, 5, dtype=torch.bool).tril())
    expected = layer.output(heads.transpose(1, 2).reshape(1, 5, 8))
    torch.testing.assert_close(layer(x), expected)


def test_adding_a_position_kind_is_one_registry_entry():
    from posenc_ref.attention import PositionKind

    @register_position_kind("test_reversed_offset")
    class Reversed(PositionKind):
        def encode_input(self, x, offset):
            return x.flip(1)

    try:
        layer = MultiHeadAttention(8, 2, position="test_reversed_offset")
        assert layer(torch.randn(1, 3, 8)).shape == (1, 3, 8)
        with pytest.raises(ValueError, match="already registered"):
            register_position_kind("test_reversed_offset")(Reversed)
    finally:
        del POSITION_KINDS["test_reversed_offset"]


def test_learned_position_through_attention_refuses_inputs_longer_than_its_table():
    layer = MultiHeadAttention(8, 2, position="learned", max_len=4)
    with pytest.raises(ValueError, match=r"5.*4|4.*5"):
        layer(torch.randn(1, 5, 8))


# ---------------------------------------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "change, match",
    [
        (lambda q, k, v: (q[0], k, v), "q must have 4 dimensions"),
        (lambda q, k, v: (q, k[:, :2], v), "share \\(batch, heads\\)"),
        (lambda q, k, v: (q, k[..., :3], v), "share head_dim"),
        (lambda q, k, v: (q, k, v[:, :, :2]), "share k_len"),
        (lambda q, k, v: (q, k.float(), v), "dtype"),
        (lambda q, k, v: (q.long(), k, v), "floating dtype"),
    ],
)
def test_attention_names_the_argument_that_is_wrong(change, match):
    with pytest.raises((ValueError, TypeError), match=match):
        attention(*change(*random_qkv()))


def test_attention_rejects_a_bias_it_would_have_to_broadcast():
    q, k, v = random_qkv()
    with pytest.raises(ValueError, match="bias must have shape"):
        attention(q, k, v, bias=torch.zeros(5, 5, dtype=torch.float64))


def test_attention_rejects_a_mask_that_is_not_bool_or_has_the_wrong_shape():
    q, k, v = random_qkv()
    with pytest.raises(TypeError, match="mask must be a bool"):
        attention(q, k, v, mask=torch.ones(5, 5))
    with pytest.raises(ValueError, match="mask must have shape"):
        attention(q, k, v, mask=torch.ones(5, 4, dtype=torch.bool))


@pytest.mark.parametrize(
    "arguments, match",
    [
        ({"d_model": 10, "num_heads": 3}, "divisible"),
        ({"d_model": 8, "num_heads": 2, "position": "absolute"}, "position must be one of"),
        ({"d_model": 8, "num_heads": 2, "backend": "cuda"}, "backend must be one of"),
        ({"d_model": 8, "num_heads": 2, "position": "learned"}, "max_len"),
        ({"d_model": 8, "num_heads": 2, "position": "alibi", "max_distance": 3}, "alibi"),
        ({"d_model": 8, "num_heads": 2, "position": "rope", "layout": "spiral"}, "layout"),
    ],
)
def test_multi_head_attention_names_the_bad_argument(arguments, match):
    with pytest.raises((ValueError, TypeError), match=match):
        MultiHeadAttention(**arguments)


def test_multi_head_attention_rejects_input_of_the_wrong_width():
    with pytest.raises(ValueError, match="d_model=8"):
        MultiHeadAttention(8, 2)(torch.randn(1, 3, 6))
