"""fast_attention equals the reference (and a per-element loop) for every position kind and path, on CPU."""

from __future__ import annotations

import math

import pytest
import torch

from posenc_ref.attention import reference_attention
from posenc_ref.fast import IMPLEMENTATIONS, fast_attention, fast_path_report
from posenc_ref.fast.shaw import shaw_attention

HEADS, HEAD_DIM = 4, 16
FP32_TOLERANCE = {"atol": 1e-5, "rtol": 1e-5}
# bf16 has an 8-bit significand: one rounding of an O(1) output costs up to 2^-8 ~ 0.004 relative. The fast
# paths also round q, k (after RoPE) and the attention weights to bf16 before the products (flash-style
# kernels do), while the reference computes in float32 and rounds once; with |v| up to ~4 the difference
# stays below a few 1e-2, which is what we allow.
BF16_TOLERANCE = {"atol": 3e-2, "rtol": 2e-2}

# (q_len, k_len, query_offset): single position, odd, not a multiple of a flex block (128), cached decoding
# with the default offset, and an explicit offset.
SHAPES = [(1, 1, None), (37, 37, None), (131, 131, None), (5, 37, None), (5, 37, 3), (20, 45, 60)]
PATHS = [(position, implementation) for position, options in IMPLEMENTATIONS.items()
         for implementation in options if implementation not in ("flex", "triton")]


def make_params(position: str, *, dtype=torch.float32, generator=None, bidirectional=True) -> dict:
    def randn(*shape, scale=1.0):
        return (torch.randn(*shape, generator=generator) * scale).to(dtype)

    if position == "rope":
        inv_freq = 100.0 ** (-torch.arange(0, HEAD_DIM, 2, dtype=torch.float32) / HEAD_DIM)
        return {"inv_freq": inv_freq, "layout": "half", "attention_factor": 1.1}
    if position == "alibi":
        return {"slopes": torch.tensor([2.0 ** -(h + 1) for h in range(HEADS)])}
    if position == "t5":
        return {"bias_table": randn(16, HEADS), "bidirectional": bidirectional, "max_distance": 20}
    if position == "shaw":
        return {"rel_k_table": randn(9, HEAD_DIM, scale=0.5), "rel_v_table": randn(9, HEAD_DIM, scale=0.5)}
    return {}


def make_qkv(q_len: int, k_len: int, *, dtype=torch.float32, seed=0):
    """q, k, v as (batch, heads, seq, head_dim) views of (batch, seq, heads, head_dim) tensors, as a
    multi-head layer produces them: not contiguous."""
    generator = torch.Generator().manual_seed(seed)
    q = torch.randn(2, q_len, HEADS, HEAD_DIM, generator=generator).to(dtype).transpose(1, 2)
    k = torch.randn(2, k_len, HEADS, HEAD_DIM, generator=generator).to(dtype).transpose(1, 2)
    v = torch.randn(2, k_len, HEADS, HEAD_DIM, generator=generator).to(dtype).transpose(1, 2)
    return q, k, v


@pytest.mark.parametrize(("position", "implementation"), PATHS)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(("q_len", "k_len", "query_offset"), SHAPES)
def test_fast_attention_equals_reference(position, implementation, causal, q_len, k_len, query_offset):
    q, k, v = make_qkv(q_len, k_len)
    assert q_len == 1 or not q.is_contiguous()
    params = make_params(position, generator=torch.Generator().manual_seed(1), bidirectional=not causal)
    options = dict(position=position, causal=causal, query_offset=query_offset, **params)
    expected = reference_attention(q, k, v, **options)
    actual = fast_attention(q, k, v, implementation=implementation, **options)
    assert actual.shape == expected.shape and actual.dtype == expected.dtype
    torch.testing.assert_close(actual, expected, **FP32_TOLERANCE)


@pytest.mark.parametrize("position", list(IMPLEMENTATIONS))
def test_fast_attention_with_sliced_inputs_equals_reference(position):
    generator = torch.Generator().manual_seed(3)
    wide = torch.randn(2, HEADS, 80, 2 * HEAD_DIM, generator=generator)
    q = wide[:, :, 1:60:2, :HEAD_DIM]  # every other position, first half of the features
    k = wide[:, :, :45, HEAD_DIM:]
    v = wide[:, :, 35:, HEAD_DIM:]
    params = make_params(position, generator=generator)
    options = dict(position=position, causal=True, query_offset=7, scale=0.3, **params)
    torch.testing.assert_close(fast_attention(q, k, v, **options), reference_attention(q, k, v, **options),
                               **FP32_TOLERANCE)


@pytest.mark.parametrize(("position", "implementation"), PATHS)
def test_fast_attention_in_bfloat16_is_close_to_reference(position, implementation):
    q, k, v = make_qkv(37, 37, dtype=torch.bfloat16)
    params = make_params(position, dtype=torch.bfloat16, generator=torch.Generator().manual_seed(1))
    options = dict(position=position, causal=True, **params)
    actual = fast_attention(q, k, v, implementation=implementation, **options)
    assert actual.dtype == torch.bfloat16
    torch.testing.assert_close(actual.float(), reference_attention(q, k, v, **options).float(), **BF16_TOLERANCE)


def _leaves(position: str, params: dict, q, k, v) -> list[torch.Tensor]:
    tables = {"t5": ["bias_table"], "shaw": ["rel_k_table", "rel_v_table"]}.get(position, [])
    return [q, k, v] + [params[name] for name in tables]


@pytest.mark.parametrize("position", list(IMPLEMENTATIONS))
@pytest.mark.parametrize(("q_len", "k_len", "query_offset", "causal"), [(37, 37, None, True), (5, 37, None, False),
                                                                       (9, 20, 2, True)])
def test_fast_attention_gradients_equal_reference(position, q_len, k_len, query_offset, causal):
    generator = torch.Generator().manual_seed(5)
    weights = torch.randn(2, HEADS, q_len, HEAD_DIM, generator=generator)
    gradients = []
    for attend in (reference_attention, fast_attention):
        q, k, v = (x.detach().clone().requires_grad_() for x in make_qkv(q_len, k_len))
        params = make_params(position, generator=torch.Generator().manual_seed(1))
        for leaf in _leaves(position, params, q, k, v)[3:]:
            leaf.requires_grad_()
        out = attend(q, k, v, position=position, causal=causal, query_offset=query_offset, **params)
        (out * weights).sum().backward()
        gradients.append([leaf.grad for leaf in _leaves(position, params, q, k, v)])
    for expected, actual in zip(*gradients, strict=True):
        torch.testing.assert_close(actual, expected, **FP32_TOLERANCE)


# ---------------------------------------------------------------------------------------------------------
# An oracle independent of posenc_ref: every logit written out, element by element.
# ---------------------------------------------------------------------------------------------------------


def _t5_bucket(offset: int, bidirectional: bool, num_buckets: int, max_distance: int) -> int:
    """T5's bucket (Raffel et al. 2020), written per element."""
    start = 0
    if bidirectional:
        num_buckets //= 2
        start = num_buckets if offset > 0 else 0
        distance = abs(offset)
    else:
        distance = max(-offset, 0)
    exact = num_buckets // 2
    if distance < exact:
        return start + distance
    log_bucket = exact + int(math.log(distance / exact) / math.log(max_distance / exact) * (num_buckets - exact))
    return start + min(log_bucket, num_buckets - 1)


def _rotate(x: list[float], position: int, inv_freq: list[float], factor: float) -> list[float]:
    """'half' layout: pair (i, i + d/2) as the complex number x_i + i x_{i+d/2}, times factor e^{i m w}."""
    half = len(x) // 2
    out = list(x)
    for i in range(half):
        z = complex(x[i], x[i + half]) * factor * complex(math.cos(position * inv_freq[i]),
                                                          math.sin(position * inv_freq[i]))
        out[i], out[i + half] = z.real, z.imag
    return out


def loop_attention(q, k, v, *, position, causal, scale, offset, params) -> torch.Tensor:
    batch, heads, q_len, head_dim = q.shape
    k_len = k.shape[2]
    out = torch.zeros(batch, heads, q_len, head_dim, dtype=torch.float64)
    for b in range(batch):
        for h in range(heads):
            for i in range(q_len):
                m = offset + i
                qi = q[b, h, i].tolist()
                if position == "rope":
                    qi = _rotate(qi, m, params["inv_freq"].tolist(), params["attention_factor"])
                logits, values = [], []
                for j in range(k_len):
                    if causal and j > m:
                        continue
                    kj, vj = k[b, h, j].tolist(), v[b, h, j].tolist()
                    if position == "rope":
                        kj = _rotate(kj, j, params["inv_freq"].tolist(), params["attention_factor"])
                    if position == "shaw":
                        row = min(max(j - m, -2), 2) + 2
                        kj = [a + c for a, c in zip(kj, params["rel_k_table"][row].tolist(), strict=True)]
                        vj = [a + c for a, c in zip(vj, params["rel_v_table"][row].tolist(), strict=True)]
                    logit = scale * sum(a * c for a, c in zip(qi, kj, strict=True))
                    if position == "alibi":
                        logit -= params["slopes"][h].item() * abs(m - j)
                    if position == "t5":
                        table = params["bias_table"]
                        bucket = _t5_bucket(j - m, params["bidirectional"], table.shape[0], params["max_distance"])
                        logit += table[bucket, h].item()
                    logits.append(logit)
                    values.append(vj)
                top = max(logits)
                weights = [math.exp(x - top) for x in logits]
                total = sum(weights)
                for w, vj in zip(weights, values, strict=True):
                    for d in range(head_dim):
                        out[b, h, i, d] += w / total * vj[d]
    return out


@pytest.mark.parametrize(("position", "implementation"), PATHS)
@pytest.mark.parametrize("causal", [False, True])
def test_fast_attention_equals_per_element_formula(position, implementation, causal):
    generator = torch.Generator().manual_seed(7)
    q, k, v = (torch.randn(1, 2, n, 4, generator=generator) for n in (3, 6, 6))
    params = {
        "none": {},
        "rope": {"inv_freq": torch.tensor([1.0, 0.1]), "layout": "half", "attention_factor": 1.2},
        "alibi": {"slopes": torch.tensor([0.5, 0.25])},
        "t5": {"bias_table": torch.randn(8, 2, generator=generator), "bidirectional": not causal,
               "max_distance": 6},
        "shaw": {"rel_k_table": torch.randn(5, 4, generator=generator),
                 "rel_v_table": torch.randn(5, 4, generator=generator)},
    }[position]
    actual = fast_attention(q, k, v, position=position, causal=causal, scale=0.7, query_offset=2,
                            implementation=implementation, **params)
    expected = loop_attention(q, k, v, position=position, causal=causal, scale=0.7, offset=2, params=params)
    torch.testing.assert_close(actual.double(), expected, atol=1e-5, rtol=1e-5)


# ---------------------------------------------------------------------------------------------------------
# Shaw's chunking, paths and errors
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("causal", [False, True])
def test_shaw_in_many_chunks_equals_reference(causal):
    q, k, v = make_qkv(33, 40)
    params = make_params("shaw", generator=torch.Generator().manual_seed(2))
    expected = reference_attention(q, k, v, position="shaw", causal=causal, **params)
    # 2 * 4 heads * 40 keys per query: chunks of 3 queries, the last one shorter
    actual = shaw_attention(q, k, v, params["rel_k_table"], params["rel_v_table"], causal=causal,
                            scale=HEAD_DIM**-0.5, offset=7, chunk_elements=3 * 2 * HEADS * 40)
    torch.testing.assert_close(actual, expected, **FP32_TOLERANCE)


def test_fast_path_report_names_a_path_for_every_kind():
    report = fast_path_report("cpu")
    assert set(report) == set(IMPLEMENTATIONS)
    assert "scaled_dot_product_attention" in report["none"]
    assert "FlexAttention" in report["alibi"] and "materialized bias" in report["alibi"]


@pytest.mark.parametrize(
    ("arguments", "error", "message"),
    [
        ({"position": "learned"}, ValueError, "position must be one of"),
        ({"position": "alibi", "implementation": "triton"}, ValueError, "implementation must be one of"),
        ({"position": "none", "slopes": torch.ones(HEADS)}, ValueError, "unknown parameter.*slopes"),
        ({"position": "none", "scale": -1.0}, ValueError, "scale"),
        ({"position": "none", "causal": 1}, TypeError, "causal"),
        ({"position": "none", "query_offset": -2}, ValueError, "query_offset"),
    ],
)
def test_fast_attention_rejects_bad_arguments(arguments, error, message):
    q, k, v = make_qkv(3, 5)
    with pytest.raises(error, match=message):
        fast_attention(q, k, v, **arguments)


@pytest.mark.parametrize(
    ("shapes", "message"),
    [(((1, HEADS, 3, 8), (1, HEADS, 5, 8), (1, HEADS, 4, 8)), "k, v"),
     (((1, HEADS, 3, 8), (1, HEADS + 1, 5, 8), (1, HEADS + 1, 5, 8)), "q must be"),
     (((HEADS, 3, 8), (HEADS, 5, 8), (HEADS, 5, 8)), "q must have 4 dimensions")],
)
def test_fast_attention_rejects_mismatched_tensors(shapes, message):
    q, k, v = (torch.zeros(shape) for shape in shapes)
    with pytest.raises(ValueError, match=message):
        fast_attention(q, k, v)


def test_fast_attention_rejects_mixed_dtypes():
    q, k, v = make_qkv(3, 5)
    with pytest.raises(TypeError, match="dtype"):
        fast_attention(q, k.double(), v)
