"""Tests of posenc_ref.rope: the rotation's properties, two independent references, Hugging Face parity,
the long-context scaling rules, partial rotation, the angle ratio of each rule, the module and its cache, the
positions of padded and packed batches, and bad input.

Expected values come from closed forms written here with the math module (plain python loops over the
pairs), from complex-number arithmetic in numpy, or from Hugging Face transformers (installed; nothing is
downloaded).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import DataCollatorWithFlattening, GPTNeoXConfig, LlamaConfig, LlamaForCausalLM, LlamaModel
from transformers.masking_utils import create_causal_mask
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
from transformers.models.gpt_neox.modeling_gpt_neox import GPTNeoXRotaryEmbedding
from transformers.models.gpt_neox.modeling_gpt_neox import (
    apply_rotary_pos_emb as gpt_neox_apply_rotary_pos_emb,
)
from transformers.models.gptj.modeling_gptj import apply_rotary_pos_emb as gptj_apply_rotary_pos_emb
from transformers.models.gptj.modeling_gptj import create_sinusoidal_positions as gptj_sinusoidal_positions
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

from posenc_ref.attention import attention
from posenc_ref.rope import (
    ROPE_LAYOUTS,
    ROPE_SCALING_RULES,
    RotaryEmbedding,
    apply_rope,
    packed_document_mask,
    packed_positions,
    padded_positions,
    rope_angle_ratio,
    rope_frequencies,
    rope_permutation,
)

# ----------------------------------------------------------------------------------------------------------
# Independent derivations from the papers' formulas (python floats, one pair at a time)
# ----------------------------------------------------------------------------------------------------------


def plain_frequencies(dim: int, base: float) -> list[float]:
    """RoFormer: theta_i = base^(-2i/d)."""
    return [base ** (-2 * i / dim) for i in range(dim // 2)]


def linear_frequencies(dim: int, base: float, factor: float) -> list[float]:
    """Position interpolation: position m is read as m / s, so every theta_i is divided by s."""
    return [theta / factor for theta in plain_frequencies(dim, base)]


def dynamic_frequencies(dim: int, base: float, factor: float, original: int, seq_len: int) -> list[float]:
    """NTK-aware base change b' = b * scale^(d/(d-2)), with the dynamic scale s*l/L - (s-1) once l > L."""
    if seq_len <= original:
        return plain_frequencies(dim, base)
    scale = factor * seq_len / original - (factor - 1)
    return plain_frequencies(dim, base * scale ** (dim / (dim - 2)))


def yarn_frequencies(
    dim: int,
    base: float,
    factor: float,
    original: int,
    beta_fast: float = 32.0,
    beta_slow: float = 1.0,
    truncate: bool = True,
) -> list[float]:
    """YaRN's "NTK-by-parts": pair i turns r_i = L / lambda_i times over the original context L.

    Pairs turning more than beta_fast times keep theta_i, pairs turning fewer than beta_slow times get
    theta_i / s, and in between the weight moves linearly in the pair index (the authors' released code),
    between the indices where r = beta_fast and r = beta_slow.
    """

    def index_where_rotations_equal(rotations: float) -> float:
        # L / (2 pi b^(2i/d)) = r  <=>  i = (d/2) log_b(L / (2 pi r))
        return dim / 2 * math.log(original / (2 * math.pi * rotations), base)

    low, high = index_where_rotations_equal(beta_fast), index_where_rotations_equal(beta_slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    result = []
    for i, theta in enumerate(plain_frequencies(dim, base)):
        weight = min(max((i - low) / (high - low), 0.0), 1.0)
        result.append((1 - weight) * theta + weight * theta / factor)
    return result


def yarn_attention_factor(factor: float) -> float:
    """YaRN: sqrt(1/t) = 0.1 ln(s) + 1."""
    return 0.1 * math.log(factor) + 1.0


def llama3_frequencies(dim: int, base: float, factor: float, original: int, low: float, high: float) -> list[float]:
    """Llama 3.1: keep wavelengths below L/high, divide those above L/low by s, blend linearly in L/lambda."""
    result = []
    for theta in plain_frequencies(dim, base):
        wavelength = 2 * math.pi / theta
        if wavelength < original / high:
            result.append(theta)
        elif wavelength > original / low:
            result.append(theta / factor)
        else:
            blend = (original / wavelength - low) / (high - low)
            result.append((1 - blend) * theta / factor + blend * theta)
    return result


def hugging_face_frequencies(
    dim: int, base: float, rope_parameters: dict, max_position_embeddings: int, seq_len: int | None = None
) -> tuple[torch.Tensor, float]:
    """inv_freq and attention factor from transformers' ROPE_INIT_FUNCTIONS, via a LlamaConfig (5.x form)."""
    config = LlamaConfig(
        hidden_size=2 * dim,
        num_attention_heads=2,
        head_dim=dim,
        max_position_embeddings=max_position_embeddings,
        rope_parameters={**rope_parameters, "rope_theta": base},
    )
    return ROPE_INIT_FUNCTIONS[rope_parameters["rope_type"]](config, None, seq_len=seq_len)


def as_tensor(values: list[float]) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64)


def rotate_one(vector: torch.Tensor, position: int, layout: str, **kwargs) -> torch.Tensor:
    """Rotate a single head_dim vector placed at one position."""
    x = vector.reshape(1, 1, 1, -1)
    return apply_rope(x, torch.tensor([position]), layout=layout, **kwargs).reshape(-1)


# ----------------------------------------------------------------------------------------------------------
# Properties of the rotation
# ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("layout", ROPE_LAYOUTS)
def test_logit_depends_only_on_position_difference(layout):
    generator = torch.Generator().manual_seed(0)
    q = torch.randn(64, generator=generator, dtype=torch.float64)
    k = torch.randn(64, generator=generator, dtype=torch.float64)

    def logit(m, n):
        return float(rotate_one(q, m, layout) @ rotate_one(k, n, layout))

    for difference in (0, 3, -3, 17):
        pairs = [(m, m - difference) for m in (20, 57, 400, 3021)]
        logits = [logit(m, n) for m, n in pairs]
        assert max(logits) - min(logits) < 1e-5, (difference, logits)

    by_difference = [logit(100 + difference, 100) for difference in (0, 1, 3, -3, 17, 500)]
    gaps = [abs(a - b) for i, a in enumerate(by_difference) for b in by_difference[i + 1 :]]
    assert min(gaps) > 1e-3


@settings(max_examples=30, deadline=None)
@given(
    half_dim=st.integers(1, 12),
    seq=st.integers(1, 6),
    shift=st.integers(0, 50_000),
    layout=st.sampled_from(ROPE_LAYOUTS),
    seed=st.integers(0, 2**16),
)
def test_rotation_preserves_the_norm_of_every_pair(half_dim, seq, shift, layout, seed):
    x = torch.randn(2, 3, seq, 2 * half_dim, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    positions = torch.arange(seq) * 7 + shift
    rotated = apply_rope(x, positions, layout=layout)
    if layout == "interleaved":
        pair_norms = (x.unflatten(-1, (-1, 2)) ** 2).sum(-1)
        rotated_pair_norms = (rotated.unflatten(-1, (-1, 2)) ** 2).sum(-1)
    else:
        pair_norms = x[..., :half_dim] ** 2 + x[..., half_dim:] ** 2
        rotated_pair_norms = rotated[..., :half_dim] ** 2 + rotated[..., half_dim:] ** 2
    torch.testing.assert_close(rotated_pair_norms, pair_norms, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(rotated.norm(dim=-1), x.norm(dim=-1), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("layout", ROPE_LAYOUTS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_position_zero_is_the_identity(layout, dtype):
    x = torch.randn(2, 3, 5, 16, generator=torch.Generator().manual_seed(1)).to(dtype)
    assert torch.equal(apply_rope(x, torch.zeros(5, dtype=torch.long), layout=layout), x)


@settings(max_examples=30, deadline=None)
@given(
    first=st.lists(st.integers(0, 20_000), min_size=4, max_size=4),
    second=st.lists(st.integers(0, 20_000), min_size=4, max_size=4),
    layout=st.sampled_from(ROPE_LAYOUTS),
)
def test_rotating_by_m_then_n_equals_rotating_by_m_plus_n(first, second, layout):
    x = torch.randn(1, 2, 4, 12, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    m, n = torch.tensor(first), torch.tensor(second)
    twice = apply_rope(apply_rope(x, m, layout=layout), n, layout=layout)
    torch.testing.assert_close(twice, apply_rope(x, m + n, layout=layout), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("base", [10000.0, 500000.0])
def test_interleaved_layout_matches_complex_multiplication(base):
    head_dim, seq = 16, 7
    x = torch.randn(2, 3, seq, head_dim, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    positions = [0, 1, 5, 42, 999, 12345, 7]
    # Pair (2i, 2i+1) is the complex number x_2i + j x_2i+1; RoPE multiplies it by exp(j m theta_i).
    # The frequencies are float32 by contract; with them rounded so, the rotation is exact to float64.
    theta = np.array(plain_frequencies(head_dim, base), dtype=np.float32).astype(np.float64)
    z = x.numpy()[..., 0::2] + 1j * x.numpy()[..., 1::2]
    z = z * np.exp(1j * np.array(positions)[:, None] * theta[None, :])
    expected = np.empty_like(x.numpy())
    expected[..., 0::2], expected[..., 1::2] = z.real, z.imag
    rotated = apply_rope(x, torch.tensor(positions), base=base, layout="interleaved")
    np.testing.assert_allclose(rotated.numpy(), expected, rtol=1e-9, atol=1e-9)


def test_half_layout_matches_hugging_face_llama():
    head_dim, heads, seq, base = 32, 4, 9, 10000.0
    generator = torch.Generator().manual_seed(4)
    q = torch.randn(2, heads, seq, head_dim, generator=generator)
    k = torch.randn(2, heads, seq, head_dim, generator=generator)
    positions = torch.tensor([0, 1, 2, 10, 11, 100, 250, 3, 64])
    config = LlamaConfig(
        hidden_size=heads * head_dim,
        num_attention_heads=heads,
        head_dim=head_dim,
        rope_parameters={"rope_type": "default", "rope_theta": base},
    )
    rotary = LlamaRotaryEmbedding(config)
    cos, sin = rotary(q, positions[None, :].expand(2, seq))
    expected_q, expected_k = apply_rotary_pos_emb(q, k, cos, sin)
    # Same frequencies: the rotation itself must agree to float32 rounding.
    inv_freq = rotary.inv_freq
    torch.testing.assert_close(apply_rope(q, positions, inv_freq=inv_freq, layout="half"), expected_q)
    torch.testing.assert_close(apply_rope(k, positions, inv_freq=inv_freq, layout="half"), expected_k)
    # Our own frequencies (float64 rounded once) differ from Hugging Face's float32 ones by < 1e-6 relative.
    torch.testing.assert_close(rope_frequencies(head_dim, base=base)[0], inv_freq, rtol=1e-6, atol=0)
    torch.testing.assert_close(apply_rope(q, positions, base=base, layout="half"), expected_q, rtol=0, atol=1e-4)


def test_default_frequencies_are_base_to_the_minus_two_i_over_d():
    inv_freq, attention_factor = rope_frequencies(10, base=100.0)
    assert inv_freq.dtype == torch.float32 and inv_freq.shape == (5,)
    expected = [1.0, 100 ** -0.2, 100 ** -0.4, 100 ** -0.6, 100 ** -0.8]
    torch.testing.assert_close(inv_freq.double(), as_tensor(expected), rtol=1e-7, atol=0)
    assert attention_factor == 1.0


def test_attention_factor_scales_the_result():
    x = torch.randn(1, 2, 5, 8, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    torch.testing.assert_close(apply_rope(x, attention_factor=1.5), 1.5 * apply_rope(x), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_result_has_the_dtype_of_x_and_float32_accuracy(dtype):
    x = torch.randn(1, 2, 6, 8, generator=torch.Generator().manual_seed(6), dtype=torch.float64)
    positions = torch.tensor([0, 3, 100, 2000, 40000, 65000])
    rotated = apply_rope(x.to(dtype), positions)
    assert rotated.dtype == dtype
    # The angles are computed in float32 at least: only the final rounding to dtype is lost.
    expected = apply_rope(x.to(dtype).double(), positions)
    tolerance = {torch.float16: 1e-3, torch.bfloat16: 8e-3, torch.float32: 2e-3, torch.float64: 1e-12}[dtype]
    torch.testing.assert_close(rotated.double(), expected, rtol=tolerance, atol=tolerance)


# ----------------------------------------------------------------------------------------------------------
# The permutation between the layouts
# ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("head_dim", [2, 4, 6, 8, 64, 130])
def test_permutation_turns_interleaved_into_half(head_dim):
    permutation = rope_permutation(head_dim)
    assert permutation.dtype == torch.int64
    assert permutation.tolist() == list(range(0, head_dim, 2)) + list(range(1, head_dim, 2))
    x = torch.randn(2, 3, 5, head_dim, generator=torch.Generator().manual_seed(head_dim), dtype=torch.float64)
    positions = torch.tensor([0, 1, 17, 300, 4096])
    interleaved = apply_rope(x, positions, layout="interleaved")
    half = apply_rope(x[..., permutation], positions, layout="half")
    torch.testing.assert_close(interleaved[..., permutation], half, rtol=1e-12, atol=1e-12)


def test_permuting_rows_of_query_and_key_weights_keeps_logits_across_layouts():
    head_dim, model_dim, seq = 16, 24, 6
    generator = torch.Generator().manual_seed(7)
    hidden = torch.randn(seq, model_dim, generator=generator, dtype=torch.float64)
    weight_q = torch.randn(head_dim, model_dim, generator=generator, dtype=torch.float64)
    weight_k = torch.randn(head_dim, model_dim, generator=generator, dtype=torch.float64)
    permutation = rope_permutation(head_dim)

    def logits(w_q, w_k, layout):
        q = apply_rope((hidden @ w_q.T)[None, None], layout=layout)  # (1, 1, seq, head_dim)
        k = apply_rope((hidden @ w_k.T)[None, None], layout=layout)
        return q @ k.transpose(-1, -2)  # (1, 1, seq, seq)

    converted = logits(weight_q[permutation], weight_k[permutation], "half")
    torch.testing.assert_close(converted, logits(weight_q, weight_k, "interleaved"), rtol=1e-12, atol=1e-12)
    # Without the permutation, the same weights give other logits.
    assert not torch.allclose(logits(weight_q, weight_k, "half"), logits(weight_q, weight_k, "interleaved"))


# ----------------------------------------------------------------------------------------------------------
# Scaling rules: independent derivation and Hugging Face parity
# ----------------------------------------------------------------------------------------------------------

# (ours, Hugging Face's rope_parameters, HF max_position_embeddings, seq_len, reference frequencies,
#  reference attention factor)
SCALING_CASES = {
    "linear factor 4": (
        64, 10000.0,
        {"type": "linear", "factor": 4},
        {"rope_type": "linear", "factor": 4.0}, 2048, None,
        linear_frequencies(64, 10000.0, 4.0), 1.0,
    ),
    "dynamic below original length": (
        64, 10000.0,
        {"type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 2048},
        {"rope_type": "dynamic", "factor": 2.0}, 2048, 1000,
        plain_frequencies(64, 10000.0), 1.0,
    ),
    "dynamic above original length": (
        64, 10000.0,
        {"type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 2048},
        {"rope_type": "dynamic", "factor": 2.0}, 2048, 6000,
        dynamic_frequencies(64, 10000.0, 2.0, 2048, 6000), 1.0,
    ),
    "dynamic far above, llama base": (
        128, 500000.0,
        {"type": "dynamic", "factor": 4.0, "original_max_position_embeddings": 4096},
        {"rope_type": "dynamic", "factor": 4.0}, 4096, 100_000,
        dynamic_frequencies(128, 500000.0, 4.0, 4096, 100_000), 1.0,
    ),
    "yarn defaults": (
        64, 10000.0,
        {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2048},
        {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2048}, 8192, None,
        yarn_frequencies(64, 10000.0, 4.0, 2048), yarn_attention_factor(4.0),
    ),
    "yarn explicit betas and attention factor": (
        128, 500000.0,
        {"type": "yarn", "factor": 8.0, "original_max_position_embeddings": 4096, "beta_fast": 16.0,
         "beta_slow": 2.0, "attention_factor": 0.9},
        {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 4096, "beta_fast": 16.0,
         "beta_slow": 2.0, "attention_factor": 0.9}, 32768, None,
        yarn_frequencies(128, 500000.0, 8.0, 4096, 16.0, 2.0), 0.9,
    ),
    "yarn without truncation": (
        128, 10000.0,
        {"type": "yarn", "factor": 8.0, "original_max_position_embeddings": 4096, "truncate": False},
        {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 4096, "truncate": False},
        32768, None,
        yarn_frequencies(128, 10000.0, 8.0, 4096, truncate=False), yarn_attention_factor(8.0),
    ),
    "llama3 (Llama 3.1 values)": (
        128, 500000.0,
        {"type": "llama3", "factor": 8.0, "original_max_position_embeddings": 8192, "low_freq_factor": 1.0,
         "high_freq_factor": 4.0},
        {"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 8192, "low_freq_factor": 1.0,
         "high_freq_factor": 4.0}, 131072, None,
        llama3_frequencies(128, 500000.0, 8.0, 8192, 1.0, 4.0), 1.0,
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", list(SCALING_CASES))
def test_scaling_rule_matches_paper_formula_and_hugging_face(case):
    dim, base, scaling, hf_parameters, hf_max_positions, seq_len, reference, reference_factor = SCALING_CASES[case]
    inv_freq, attention_factor = rope_frequencies(dim, base=base, scaling=scaling, seq_len=seq_len)
    assert inv_freq.dtype == torch.float32 and inv_freq.shape == (dim // 2,)
    torch.testing.assert_close(inv_freq.double(), as_tensor(reference), rtol=1e-6, atol=0)
    assert math.isclose(attention_factor, reference_factor, rel_tol=1e-12)
    hf_inv_freq, hf_attention_factor = hugging_face_frequencies(dim, base, hf_parameters, hf_max_positions, seq_len)
    torch.testing.assert_close(inv_freq, hf_inv_freq, rtol=1e-6, atol=0)
    assert math.isclose(attention_factor, hf_attention_factor, rel_tol=1e-12)


def test_dynamic_scaling_changes_nothing_up_to_the_original_length():
    scaling = {"type": "dynamic", "factor": 3.0, "original_max_position_embeddings": 512}
    plain, _ = rope_frequencies(32)
    for seq_len in (1, 100, 512):
        assert torch.equal(rope_frequencies(32, scaling=scaling, seq_len=seq_len)[0], plain)
    longer, _ = rope_frequencies(32, scaling=scaling, seq_len=513)
    assert longer[0] == 1.0 and bool((longer[1:] < plain[1:]).all())


@pytest.mark.parametrize("beta_fast, beta_slow", [(32.0, 1.0), (16.0, 2.0)])
def test_yarn_keeps_fast_pairs_and_interpolates_slow_pairs(beta_fast, beta_slow):
    dim, base, factor, original = 128, 10000.0, 8.0, 4096
    scaling = {"type": "yarn", "factor": factor, "original_max_position_embeddings": original,
               "beta_fast": beta_fast, "beta_slow": beta_slow}  # fmt: skip
    inv_freq = rope_frequencies(dim, base=base, scaling=scaling)[0].double()
    plain = as_tensor(plain_frequencies(dim, base))
    rotations = original * plain / (2 * math.pi)  # turns of each pair over the original context
    fast, slow = rotations > beta_fast, rotations < beta_slow
    middle = ~fast & ~slow
    assert fast.any() and slow.any() and middle.any()
    torch.testing.assert_close(inv_freq[fast], plain[fast], rtol=1e-6, atol=0)
    torch.testing.assert_close(inv_freq[slow], plain[slow] / factor, rtol=1e-6, atol=0)
    assert bool((inv_freq[middle] <= plain[middle] * (1 + 1e-6)).all())
    assert bool((inv_freq[middle] >= plain[middle] / factor * (1 - 1e-6)).all())


def test_llama3_has_three_bands():
    dim, base, factor, original, low, high = 128, 500000.0, 8.0, 8192, 1.0, 4.0
    scaling = {"type": "llama3", "factor": factor, "original_max_position_embeddings": original,
               "low_freq_factor": low, "high_freq_factor": high}  # fmt: skip
    inv_freq = rope_frequencies(dim, base=base, scaling=scaling)[0].double()
    plain = as_tensor(plain_frequencies(dim, base))
    wavelength = 2 * math.pi / plain
    high_band, low_band = wavelength < original / high, wavelength > original / low
    middle = ~high_band & ~low_band
    assert high_band.sum() > 0 and low_band.sum() > 0 and middle.sum() > 0
    torch.testing.assert_close(inv_freq[high_band], plain[high_band], rtol=1e-6, atol=0)
    torch.testing.assert_close(inv_freq[low_band], plain[low_band] / factor, rtol=1e-6, atol=0)
    # In between, the scale goes smoothly and monotonically from 1 down to 1/factor.
    scale = inv_freq / plain  # (dim/2,)
    assert bool((scale[middle] < 1).all()) and bool((scale[middle] > 1 / factor).all())
    assert bool((scale[1:] <= scale[:-1] + 1e-6).all())
    blend = (original / wavelength[middle] - low) / (high - low)
    torch.testing.assert_close(scale[middle], (1 - blend) / factor + blend, rtol=1e-6, atol=0)


def test_registry_holds_the_four_rules_each_with_a_formula():
    assert set(ROPE_SCALING_RULES) == {"linear", "dynamic", "yarn", "llama3"}
    for rule in ROPE_SCALING_RULES.values():
        assert rule.__doc__ and "omega_i'" in rule.__doc__


# ----------------------------------------------------------------------------------------------------------
# RotaryEmbedding
# ----------------------------------------------------------------------------------------------------------

MODULE_SCALINGS = [
    None,
    {"type": "linear", "factor": 4},
    {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64},
    {"type": "llama3", "factor": 8.0, "original_max_position_embeddings": 64, "low_freq_factor": 1.0,
     "high_freq_factor": 4.0},
]  # fmt: skip


@pytest.mark.parametrize("layout", ROPE_LAYOUTS)
@pytest.mark.parametrize("scaling", MODULE_SCALINGS, ids=lambda s: "none" if s is None else s["type"])
def test_module_forward_equals_apply_rope(layout, scaling):
    head_dim = 16
    generator = torch.Generator().manual_seed(8)
    q = torch.randn(2, 4, 6, head_dim, generator=generator)
    k = torch.randn(2, 2, 6, head_dim, generator=generator)  # fewer key heads, as in grouped-query attention
    positions = torch.tensor([5, 0, 3, 300, 2, 1])
    module = RotaryEmbedding(head_dim, base=1000.0, scaling=scaling, layout=layout)
    inv_freq, attention_factor = rope_frequencies(head_dim, base=1000.0, scaling=scaling)
    assert torch.equal(module.inv_freq, inv_freq) and module.attention_factor == attention_factor
    q_rotated, k_rotated = module(q, k, positions=positions)
    options = {"inv_freq": inv_freq, "layout": layout, "attention_factor": attention_factor}
    torch.testing.assert_close(q_rotated, apply_rope(q, positions, **options), rtol=0, atol=0)
    torch.testing.assert_close(k_rotated, apply_rope(k, positions, **options), rtol=0, atol=0)


def test_module_with_yarn_matches_hugging_face_llama_rotary_embedding():
    head_dim, heads, seq, original, factor = 32, 2, 12, 128, 4.0
    generator = torch.Generator().manual_seed(9)
    q = torch.randn(1, heads, seq, head_dim, generator=generator)
    k = torch.randn(1, heads, seq, head_dim, generator=generator)
    config = LlamaConfig(
        hidden_size=heads * head_dim,
        num_attention_heads=heads,
        head_dim=head_dim,
        max_position_embeddings=int(original * factor),
        rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": factor,
                         "original_max_position_embeddings": original},
    )  # fmt: skip
    cos, sin = LlamaRotaryEmbedding(config)(q, torch.arange(seq)[None, :])
    expected_q, expected_k = apply_rotary_pos_emb(q, k, cos, sin)
    module = RotaryEmbedding(
        head_dim, scaling={"type": "yarn", "factor": factor, "original_max_position_embeddings": original},
        layout="half",
    )  # fmt: skip
    q_rotated, k_rotated = module(q, k)
    torch.testing.assert_close(q_rotated, expected_q, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(k_rotated, expected_k, rtol=1e-5, atol=1e-5)


def test_dynamic_module_recomputes_frequencies_beyond_the_original_length():
    head_dim, original, factor = 16, 32, 2.0
    scaling = {"type": "dynamic", "factor": factor, "original_max_position_embeddings": original}
    module = RotaryEmbedding(head_dim, scaling=scaling, layout="half")
    generator = torch.Generator().manual_seed(10)
    long_q = torch.randn(1, 2, 50, head_dim, generator=generator, dtype=torch.float64)
    short_q = long_q[:, :, :20]

    stretched = torch.tensor(dynamic_frequencies(head_dim, 10000.0, factor, original, 50), dtype=torch.float32)
    q_rotated, _ = module(long_q, long_q)
    torch.testing.assert_close(module.inv_freq, stretched, rtol=1e-6, atol=0)
    expected = apply_rope(long_q, inv_freq=stretched, layout="half")
    torch.testing.assert_close(q_rotated, expected, rtol=1e-6, atol=1e-6)

    # Back within the original length, the unscaled frequencies return.
    q_rotated, _ = module(short_q, short_q)
    unscaled = torch.tensor(plain_frequencies(head_dim, 10000.0), dtype=torch.float32)
    torch.testing.assert_close(module.inv_freq, unscaled, rtol=1e-6, atol=0)
    torch.testing.assert_close(q_rotated, apply_rope(short_q, layout="half"), rtol=1e-6, atol=1e-6)


def test_cache_grows_on_demand_with_no_cap():
    module = RotaryEmbedding(8)
    q = torch.randn(1, 1, 3, 8, generator=torch.Generator().manual_seed(11), dtype=torch.float64)
    module(q, q, positions=torch.tensor([0, 1, 2]))
    small = module.cos_cached.shape[0]
    assert 3 <= small < 1000
    positions = torch.tensor([0, 70_000, 200_000])
    q_rotated, _ = module(q, q, positions=positions)
    assert module.cos_cached.shape[0] > 200_000 and module.sin_cached.shape == module.cos_cached.shape
    torch.testing.assert_close(q_rotated, apply_rope(q, positions), rtol=0, atol=0)


def test_cos_sin_are_the_closed_form_for_the_positions_asked():
    module = RotaryEmbedding(6, base=100.0)
    positions = torch.tensor([4, 0, 9])
    cos, sin = module.cos_sin(positions, torch.float64, torch.device("cpu"))
    assert cos.shape == sin.shape == (3, 3) and cos.dtype == torch.float64
    theta = plain_frequencies(6, 100.0)
    expected_cos = [[math.cos(m * float(np.float32(t))) for t in theta] for m in (4, 0, 9)]
    expected_sin = [[math.sin(m * float(np.float32(t))) for t in theta] for m in (4, 0, 9)]
    torch.testing.assert_close(cos, as_tensor(expected_cos), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(sin, as_tensor(expected_sin), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("layout", ROPE_LAYOUTS)
def test_offset_equals_shifted_positions(layout):
    module = RotaryEmbedding(8, layout=layout)
    generator = torch.Generator().manual_seed(12)
    q, k = torch.randn(2, 2, 5, 8, generator=generator), torch.randn(2, 2, 5, 8, generator=generator)
    with_offset = module(q, k, offset=37)
    with_positions = module(q, k, positions=torch.arange(5) + 37)
    for got, expected in zip(with_offset, with_positions, strict=True):
        assert torch.equal(got, expected)
    assert not torch.allclose(with_offset[0], module(q, k)[0])


def test_state_dict_is_empty_and_the_cache_is_in_buffers():
    module = RotaryEmbedding(8, scaling={"type": "linear", "factor": 2.0})
    assert module.state_dict() == {}
    q = torch.randn(1, 1, 4, 8)
    module(q, q)
    assert module.state_dict() == {}
    assert {"inv_freq", "cos_cached", "sin_cached"} <= {name for name, _ in module.named_buffers()}


def test_module_cast_to_half_keeps_float32_frequencies():
    module = RotaryEmbedding(16).half()
    q = torch.randn(1, 2, 4, 16, generator=torch.Generator().manual_seed(13)).half()
    positions = torch.tensor([1, 1000, 30_000, 60_000])
    q_rotated, _ = module(q, q, positions=positions)
    assert q_rotated.dtype == torch.float16
    torch.testing.assert_close(q_rotated, apply_rope(q, positions), rtol=0, atol=0)


# ----------------------------------------------------------------------------------------------------------
# Partial rotation (rotary_dim)
# ----------------------------------------------------------------------------------------------------------


def test_partial_rotation_in_the_half_layout_matches_hugging_face_gpt_neox():
    head_dim, heads, seq = 32, 2, 7
    generator = torch.Generator().manual_seed(21)
    q = torch.randn(2, heads, seq, head_dim, generator=generator)
    k = torch.randn(2, heads, seq, head_dim, generator=generator)
    positions = torch.tensor([0, 1, 2, 5, 9, 100, 3])
    config = GPTNeoXConfig(hidden_size=heads * head_dim, num_attention_heads=heads, rotary_pct=0.25,
                           intermediate_size=16, num_hidden_layers=1)  # fmt: skip
    rotary = GPTNeoXRotaryEmbedding(config)
    cos, sin = rotary(q, positions[None, :].expand(2, seq))
    expected_q, expected_k = gpt_neox_apply_rotary_pos_emb(q, k, cos, sin)
    rotary_dim = int(head_dim * 0.25)
    assert rotary.inv_freq.shape == (rotary_dim // 2,)
    torch.testing.assert_close(rope_frequencies(rotary_dim)[0], rotary.inv_freq, rtol=1e-6, atol=0)
    torch.testing.assert_close(apply_rope(q, positions, layout="half", rotary_dim=rotary_dim), expected_q)
    module = RotaryEmbedding(head_dim, layout="half", rotary_dim=rotary_dim)
    module_q, module_k = module(q, k, positions=positions)
    torch.testing.assert_close(module_q, expected_q)
    torch.testing.assert_close(module_k, expected_k)
    assert module.cos_cached.shape[1] == rotary_dim // 2


def test_partial_rotation_in_the_interleaved_layout_matches_hugging_face_gpt_j():
    head_dim, rotary_dim, seq = 24, 8, 6
    x = torch.randn(1, 3, seq, head_dim, generator=torch.Generator().manual_seed(22))  # (batch, heads, seq, d)
    positions = torch.tensor([0, 4, 1, 30, 2, 7])
    sin, cos = torch.split(gptj_sinusoidal_positions(64, rotary_dim)[positions], rotary_dim // 2, dim=-1)
    features = x.transpose(1, 2)  # GPT-J's layout (batch, seq, heads, head_dim)
    rotated = gptj_apply_rotary_pos_emb(features[..., :rotary_dim], sin[None], cos[None])
    expected = torch.cat([rotated, features[..., rotary_dim:]], dim=-1).transpose(1, 2)
    torch.testing.assert_close(apply_rope(x, positions, layout="interleaved", rotary_dim=rotary_dim), expected)


@pytest.mark.parametrize("layout", ROPE_LAYOUTS)
def test_partial_rotation_passes_the_last_features_and_keeps_the_logit_relative(layout):
    head_dim, rotary_dim = 16, 6
    generator = torch.Generator().manual_seed(23)
    q, k = torch.randn(2, 1, 1, 1, head_dim, generator=generator, dtype=torch.float64).unbind(0)
    rotated = apply_rope(q.expand(1, 1, 5, head_dim), torch.arange(5) * 11, layout=layout, rotary_dim=rotary_dim)
    assert torch.equal(rotated[..., rotary_dim:], q.expand(1, 1, 5, head_dim)[..., rotary_dim:])
    full = apply_rope(q[..., :rotary_dim], torch.tensor([3]), layout=layout)
    torch.testing.assert_close(apply_rope(q, torch.tensor([3]), layout=layout, rotary_dim=rotary_dim)[..., :rotary_dim],
                               full, rtol=0, atol=0)

    def logit(m, n):
        options = {"layout": layout, "rotary_dim": rotary_dim}
        return float((apply_rope(q, torch.tensor([m]), **options) * apply_rope(k, torch.tensor([n]), **options)).sum())

    assert max(logit(m, m - 4) for m in (4, 50, 900)) - min(logit(m, m - 4) for m in (4, 50, 900)) < 1e-9


# ----------------------------------------------------------------------------------------------------------
# How far each scaling rule lets the angles go
# ----------------------------------------------------------------------------------------------------------


def test_angle_ratio_of_each_rule_at_d_128_l_2048_s_8():
    dim, trained, factor = 128, 2048, 8.0
    target = int(factor * trained)
    plain = rope_frequencies(dim)[0]
    slow = 2 * math.pi / plain.double() > trained - 1  # pairs that never complete a turn in training
    interpolation = rope_angle_ratio(rope_frequencies(dim, scaling={"type": "linear", "factor": factor})[0],
                                     plain, original_length=trained, length=target)
    torch.testing.assert_close(interpolation, torch.full((64,), (target - 1) / (factor * (trained - 1)),
                                                         dtype=torch.float64), rtol=1e-6, atol=0)
    # NTK-aware: base' = base s^(d/(d-2)), so pair i is divided by s^(2i/(d-2)) only, less than s.
    ntk_scaling = {"type": "dynamic", "factor": 1.0, "original_max_position_embeddings": trained}
    ntk = rope_angle_ratio(rope_frequencies(dim, scaling=ntk_scaling, seq_len=target)[0], plain,
                           original_length=trained, length=target)
    closed_form = [(target - 1) / (trained - 1) * factor ** (-2 * i / (dim - 2)) for i in range(dim // 2)]
    torch.testing.assert_close(ntk, as_tensor(closed_form), rtol=1e-6, atol=0)
    assert 2.0 < float(ntk[slow].max()) < 2.1 and float(ntk[-1]) == pytest.approx(1.0, abs=1e-3)
    yarn = rope_frequencies(dim, scaling={"type": "yarn", "factor": factor,
                                          "original_max_position_embeddings": trained})[0]
    yarn_ratio = rope_angle_ratio(yarn, plain, original_length=trained, length=target)
    assert float(yarn_ratio[slow].max()) < 1.001  # YaRN interpolates every slow pair fully
    assert float(yarn_ratio[0]) == pytest.approx((target - 1) / (trained - 1))  # and leaves the fastest alone


# ----------------------------------------------------------------------------------------------------------
# Positions of padded and packed batches
# ----------------------------------------------------------------------------------------------------------


def tiny_llama_config(**options) -> LlamaConfig:
    return LlamaConfig(vocab_size=12, hidden_size=16, intermediate_size=24, num_hidden_layers=2,
                       num_attention_heads=2, **options)  # fmt: skip


def test_padded_positions_are_those_hugging_face_generate_builds_from_the_mask():
    mask = torch.tensor([[1, 1, 1, 1, 1], [0, 0, 1, 1, 1], [0, 0, 0, 0, 1], [0, 1, 1, 1, 1]])
    model = LlamaForCausalLM(tiny_llama_config())
    expected = model._prepare_position_ids_for_generation(torch.zeros_like(mask), {"attention_mask": mask})
    assert torch.equal(padded_positions(mask), expected)
    assert torch.equal(padded_positions(mask.bool()), expected)
    assert padded_positions(mask)[1].tolist() == [0, 0, 0, 1, 2]


def test_packed_positions_are_those_of_hugging_face_data_collator_with_flattening():
    lengths = [3, 2, 4]
    features = [{"input_ids": list(range(length))} for length in lengths]
    expected = DataCollatorWithFlattening()(features)["position_ids"][0]
    assert torch.equal(packed_positions(lengths), expected)


def test_packed_document_mask_with_the_causal_rule_is_hugging_face_packed_mask():
    lengths = [3, 2, 4]
    config = tiny_llama_config()
    config._attn_implementation = "sdpa"
    hf_mask = create_causal_mask(config, torch.zeros(1, 9, 16), None, None,
                                 position_ids=packed_positions(lengths)[None])[0, 0]  # (9, 9) bool
    causal = torch.ones(9, 9, dtype=torch.bool).tril()
    assert torch.equal(packed_document_mask(lengths) & causal, hf_mask)


def test_packed_documents_with_restarting_positions_are_computed_as_if_alone():
    lengths = [5, 3]
    generator = torch.Generator().manual_seed(24)
    q, k, v = torch.randn(3, 1, 2, sum(lengths), 8, generator=generator, dtype=torch.float64).unbind(0)
    positions = packed_positions(lengths)
    packed = attention(apply_rope(q, positions), apply_rope(k, positions), v,
                       mask=packed_document_mask(lengths), causal=True)
    start = 0
    for length in lengths:
        part = slice(start, start + length)
        alone = attention(apply_rope(q[:, :, part]), apply_rope(k[:, :, part]), v[:, :, part], causal=True)
        torch.testing.assert_close(packed[:, :, part], alone)
        start += length


def test_hugging_face_reads_document_boundaries_from_restarting_position_ids():
    torch.manual_seed(25)
    model = LlamaModel(tiny_llama_config()).eval()
    first, second = torch.tensor([[1, 5, 7, 2, 9]]), torch.tensor([[4, 4, 8]])
    packed = torch.cat([first, second], dim=1)
    with torch.no_grad():
        # Without a cache and without an attention_mask, as in training on packed rows.
        alone = model(second, use_cache=False).last_hidden_state
        restarting = model(packed, position_ids=packed_positions([5, 3])[None], use_cache=False).last_hidden_state
        counting_on = model(packed, position_ids=torch.arange(8)[None], use_cache=False).last_hidden_state
    torch.testing.assert_close(restarting[:, 5:], alone, rtol=1e-5, atol=1e-5)
    assert (counting_on[:, 5:] - alone).abs().max() > 1e-2  # no restart: the second document sees the first


# ----------------------------------------------------------------------------------------------------------
# Bad input
# ----------------------------------------------------------------------------------------------------------

X = torch.zeros(1, 2, 3, 8)

BAD_CALLS = {
    "odd dim": (lambda: rope_frequencies(7), ValueError, "dim"),
    "odd head_dim in x": (lambda: apply_rope(torch.zeros(1, 2, 3, 7)), ValueError, r"head_dim"),
    "odd module head_dim": (lambda: RotaryEmbedding(7), ValueError, "head_dim"),
    "base not above 1": (lambda: rope_frequencies(8, base=1.0), ValueError, "base"),
    "unknown layout": (lambda: apply_rope(X, layout="diagonal"), ValueError, "layout.*'interleaved', 'half'"),
    "unknown module layout": (lambda: RotaryEmbedding(8, layout="neox"), ValueError, "layout"),
    "scaling not a dict": (lambda: rope_frequencies(8, scaling=["linear"]), TypeError, "scaling"),
    "scaling without type": (lambda: rope_frequencies(8, scaling={"factor": 2}), ValueError, "'type'.*'linear'"),
    "unknown scaling type": (
        lambda: rope_frequencies(8, scaling={"type": "ntk", "factor": 2}), ValueError,
        r"scaling\['type'\].*'linear', 'dynamic', 'yarn', 'llama3'",
    ),
    "unknown scaling key": (
        lambda: rope_frequencies(8, scaling={"type": "linear", "factor": 2, "original_max_position_embeddings": 8}),
        ValueError, "unknown keys.*original_max_position_embeddings.*allowed keys",
    ),
    "hugging face's rope_type key": (
        lambda: rope_frequencies(8, scaling={"type": "linear", "rope_type": "linear", "factor": 2}),
        ValueError, "unknown keys.*rope_type",
    ),
    "missing scaling key": (
        lambda: rope_frequencies(8, scaling={"type": "yarn", "factor": 2}), ValueError,
        "missing.*original_max_position_embeddings",
    ),
    "factor below 1": (
        lambda: rope_frequencies(8, scaling={"type": "linear", "factor": 0.5}), ValueError, r"scaling\['factor'\]",
    ),
    "dynamic without seq_len": (
        lambda: rope_frequencies(8, scaling={"type": "dynamic", "factor": 2, "original_max_position_embeddings": 8}),
        ValueError, "seq_len",
    ),
    "seq_len without dynamic": (lambda: rope_frequencies(8, seq_len=10), ValueError, "seq_len"),
    "beta_slow above beta_fast": (
        lambda: rope_frequencies(8, scaling={"type": "yarn", "factor": 2, "original_max_position_embeddings": 8,
                                             "beta_fast": 1.0, "beta_slow": 4.0}),
        ValueError, "beta_slow",
    ),
    "low_freq_factor above high_freq_factor": (
        lambda: rope_frequencies(8, scaling={"type": "llama3", "factor": 8, "original_max_position_embeddings": 8,
                                             "low_freq_factor": 4.0, "high_freq_factor": 1.0}),
        ValueError, "low_freq_factor",
    ),
    "truncate not a bool": (
        lambda: rope_frequencies(8, scaling={"type": "yarn", "factor": 2, "original_max_position_embeddings": 8,
                                             "truncate": "yes"}),
        TypeError, "truncate",
    ),
    "wrong inv_freq length": (lambda: apply_rope(X, inv_freq=torch.ones(3)), ValueError, "inv_freq.*4"),
    "inv_freq and base": (lambda: apply_rope(X, base=500.0, inv_freq=torch.ones(4)), ValueError, "base and inv_freq"),
    "positions of wrong length": (lambda: apply_rope(X, torch.arange(4)), ValueError, "positions.*3"),
    "float positions": (lambda: apply_rope(X, torch.arange(3.0)), TypeError, "positions"),
    "2-D positions": (lambda: apply_rope(X, torch.zeros(1, 3, dtype=torch.long)), ValueError, "positions"),
    "negative positions": (lambda: apply_rope(X, torch.tensor([0, -1, 2])), ValueError, "positions"),
    "3-D x": (lambda: apply_rope(torch.zeros(2, 3, 8)), ValueError, "x must have 4 dimensions"),
    "integer x": (lambda: apply_rope(torch.zeros(1, 2, 3, 8, dtype=torch.long)), TypeError, "x"),
    "attention_factor not positive": (lambda: apply_rope(X, attention_factor=0.0), ValueError, "attention_factor"),
    "positions and offset": (
        lambda: RotaryEmbedding(8)(X, X, positions=torch.arange(3), offset=2), ValueError, "offset",
    ),
    "negative offset": (lambda: RotaryEmbedding(8)(X, X, offset=-1), ValueError, "offset"),
    "k with another head_dim": (lambda: RotaryEmbedding(8)(X, torch.zeros(1, 2, 3, 6)), ValueError, "k"),
    "k with another dtype": (lambda: RotaryEmbedding(8)(X, X.double()), TypeError, "k"),
    "q with the module's wrong head_dim": (lambda: RotaryEmbedding(4)(X, X), ValueError, "q.*head_dim = 4"),
    "odd rotary_dim": (
        lambda: apply_rope(X, rotary_dim=3), ValueError, "rotary_dim must be None or an even int from 2 to head_dim = 8.*got 3",
    ),
    "rotary_dim above head_dim": (lambda: RotaryEmbedding(8, rotary_dim=10), ValueError, "rotary_dim.*head_dim = 8.*got 10"),
    "rotary_dim of 0": (lambda: apply_rope(X, rotary_dim=0), ValueError, "rotary_dim.*from 2.*got 0"),
    "fractional rotary_dim": (lambda: apply_rope(X, rotary_dim=0.25), TypeError, "rotary_dim must be an int or None"),
    "inv_freq for the whole head with rotary_dim": (
        lambda: apply_rope(X, inv_freq=torch.ones(4), rotary_dim=4), ValueError, "inv_freq must have rotary_dim / 2 = 2",
    ),
    "angle ratio with a trained length of 1": (
        lambda: rope_angle_ratio(torch.ones(2), torch.ones(2), original_length=1, length=8), ValueError,
        "original_length",
    ),
    "angle ratio of different pair counts": (
        lambda: rope_angle_ratio(torch.ones(2), torch.ones(3), original_length=4, length=8), ValueError,
        "2 pairs.*3",
    ),
    "angle ratio of a zero frequency": (
        lambda: rope_angle_ratio(torch.zeros(2), torch.ones(2), original_length=4, length=8), ValueError,
        "inv_freq must hold positive",
    ),
    "float padding mask": (lambda: padded_positions(torch.ones(2, 3)), TypeError, "attention_mask"),
    "padding mask with a 2": (lambda: padded_positions(torch.tensor([[1, 2]])), ValueError, "only 0 and 1"),
    "1-D padding mask": (lambda: padded_positions(torch.ones(3, dtype=torch.long)), ValueError, "attention_mask"),
    "packed lengths with a zero": (lambda: packed_positions([3, 0]), ValueError, r"lengths\[1\]"),
    "no packed documents": (lambda: packed_document_mask([]), ValueError, "at least one document"),
    "packed lengths as an int": (lambda: packed_positions(5), TypeError, "lengths"),
}  # fmt: skip


@pytest.mark.parametrize("case", list(BAD_CALLS))
def test_bad_input_raises_naming_the_argument(case):
    call, error, message = BAD_CALLS[case]
    with pytest.raises(error, match=message):
        call()
