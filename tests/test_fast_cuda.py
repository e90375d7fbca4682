"""The fast paths on a CUDA device: compiled Triton RoPE, compiled FlexAttention (with backward), SDPA.

Every test here is marked ``cuda`` and skipped, with its reason shown, where no CUDA device is available.
"""

from __future__ import annotations

import math

import pytest
import torch
from test_fast_rope import plain_rope

from posenc_ref.attention import reference_attention
from posenc_ref.fast import apply_rope_fused, fast_attention, fast_path_report

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (none available here)"),
]

HEADS, HEAD_DIM = 4, 32
# float32: GPU kernels accumulate in another order and FlexAttention's softmax uses exp2 (~2 ulp); a
# bound of 2e-5 leaves room for that while catching any real error (which is of the order of the bias).
FP32_TOLERANCE = {"atol": 2e-5, "rtol": 2e-5}
# bfloat16 (8-bit significand): the fast kernels round q, k and the weights to bf16 before the products,
# the reference rounds once at the end; see tests/test_fast_attention.py for the same budget.
BF16_TOLERANCE = {"atol": 3e-2, "rtol": 2e-2}
SHAPES = [(1, 1, None), (37, 37, None), (131, 131, None), (5, 37, None), (20, 45, 60)]


def make_qkv(q_len, k_len, dtype, *, requires_grad=False):
    generator = torch.Generator(device="cpu").manual_seed(0)
    tensors = [torch.randn(2, n, HEADS, HEAD_DIM, generator=generator).to("cuda", dtype).transpose(1, 2)
               for n in (q_len, k_len, k_len)]  # (batch, heads, seq, head_dim) views, not contiguous
    return [t.detach().requires_grad_() for t in tensors] if requires_grad else tensors


def make_params(position, dtype):
    generator = torch.Generator(device="cpu").manual_seed(1)
    if position == "rope":
        inv_freq = 10000.0 ** (-torch.arange(0, HEAD_DIM, 2, dtype=torch.float32) / HEAD_DIM)
        return {"inv_freq": inv_freq.cuda(), "layout": "interleaved", "attention_factor": 1.1}
    if position == "alibi":
        return {"slopes": torch.tensor([2.0 ** -(h + 1) for h in range(HEADS)], device="cuda")}
    if position == "t5":
        return {"bias_table": torch.randn(32, HEADS, generator=generator).to("cuda", dtype), "max_distance": 64}
    if position == "shaw":
        return {name: (0.5 * torch.randn(9, HEAD_DIM, generator=generator)).to("cuda", dtype)
                for name in ("rel_k_table", "rel_v_table")}
    return {}


def test_fast_path_report_on_cuda_names_triton_and_flex():
    report = fast_path_report("cuda")
    assert "Triton" in report["rope"]
    assert "FlexAttention" in report["alibi"] and "compiled" in report["t5"]


@pytest.mark.parametrize("position", ["none", "rope", "alibi", "t5", "shaw"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(("q_len", "k_len", "query_offset"), SHAPES)
def test_fast_attention_on_cuda_equals_reference(position, dtype, causal, q_len, k_len, query_offset):
    q, k, v = make_qkv(q_len, k_len, dtype)
    options = dict(position=position, causal=causal, query_offset=query_offset, **make_params(position, dtype))
    actual = fast_attention(q, k, v, **options)
    tolerance = FP32_TOLERANCE if dtype == torch.float32 else BF16_TOLERANCE
    torch.testing.assert_close(actual.float(), reference_attention(q, k, v, **options).float(), **tolerance)


@pytest.mark.parametrize("position", ["alibi", "t5"])
@pytest.mark.parametrize(("q_len", "k_len", "query_offset", "causal"), [(131, 131, None, True),
                                                                       (20, 300, 60, False)])
def test_compiled_flex_on_cuda_equals_reference(position, q_len, k_len, query_offset, causal):
    q, k, v = make_qkv(q_len, k_len, torch.float32)
    options = dict(position=position, causal=causal, query_offset=query_offset,
                   **make_params(position, torch.float32))
    actual = fast_attention(q, k, v, implementation="flex", **options)
    torch.testing.assert_close(actual, reference_attention(q, k, v, **options), **FP32_TOLERANCE)


@pytest.mark.parametrize(("position", "implementation"), [("none", "auto"), ("rope", "triton"), ("alibi", "flex"),
                                                          ("t5", "flex"), ("t5", "sdpa_bias"), ("shaw", "auto")])
def test_gradients_on_cuda_equal_reference(position, implementation):
    weights = torch.randn(2, HEADS, 131, HEAD_DIM, device="cuda")
    gradients = []
    for attend in ("reference", "fast"):
        q, k, v = make_qkv(131, 131, torch.float32, requires_grad=True)
        params = make_params(position, torch.float32)
        tables = [params[name].requires_grad_() for name in ("bias_table", "rel_k_table", "rel_v_table")
                  if name in params]
        options = dict(position=position, causal=True, **params)
        if attend == "fast":
            out = fast_attention(q, k, v, implementation=implementation, **options)
        else:
            out = reference_attention(q, k, v, **options)
        (out * weights).sum().backward()
        gradients.append([x.grad for x in (q, k, v, *tables)])
    for expected, actual in zip(*gradients, strict=True):
        torch.testing.assert_close(actual, expected, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("layout", ["interleaved", "half"])
@pytest.mark.parametrize(("dtype", "rtol"), [(torch.float32, 1e-5), (torch.bfloat16, 2.0**-7),
                                             (torch.float16, 2.0**-10)])
@pytest.mark.parametrize("head_dim", [64, 128, 80])
def test_compiled_triton_rope_rotates_like_complex_multiplication(layout, dtype, rtol, head_dim):
    generator = torch.Generator(device="cpu").manual_seed(2)
    q = torch.randn(2, 300, 6, head_dim, generator=generator).to("cuda", dtype).transpose(1, 2)
    k = torch.randn(2, 6, 600, head_dim, generator=generator).to("cuda", dtype)[:, :, ::2]
    inv_freq = (10000.0 ** (-torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)).cuda()
    q_positions, k_positions = torch.arange(1000, 1300, device="cuda"), torch.arange(300, device="cuda")
    q_rot, k_rot = apply_rope_fused(q, k, inv_freq, q_positions=q_positions, k_positions=k_positions,
                                    layout=layout, attention_factor=1.25, implementation="triton")
    for rotated, x, positions in ((q_rot, q, q_positions), (k_rot, k, k_positions)):
        expected = plain_rope(x.cpu(), positions.cpu(), inv_freq.cpu(), layout, 1.25)
        # angles up to 1300 rad: float32 cos/sin of the same float32 angle agree to ~1e-6 absolute
        torch.testing.assert_close(rotated.cpu().double(), expected, atol=1e-5 + 4e-6 * math.sqrt(head_dim),
                                   rtol=rtol)


@pytest.mark.parametrize("position", ["t5", "shaw"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("tail_kernel", ["flash", "cudnn"])
@pytest.mark.parametrize(("q_len", "k_len", "query_offset"), SHAPES + [(300, 300, None), (40, 300, 100)])
def test_banded_on_cuda_equals_reference(position, dtype, causal, tail_kernel, q_len, k_len, query_offset,
                                         monkeypatch):
    from posenc_ref.fast import banded

    monkeypatch.setattr(banded, "CUDA_TAIL_KERNEL", tail_kernel)
    q, k, v = make_qkv(q_len, k_len, dtype)
    params = make_params(position, dtype)
    if position == "t5":
        params["max_distance"] = 20  # a band of a few dozen keys: most keys of the longer shapes are in a tail
    options = dict(position=position, causal=causal, query_offset=query_offset, **params)
    actual = fast_attention(q, k, v, implementation="banded", **options)
    tolerance = FP32_TOLERANCE if dtype == torch.float32 else BF16_TOLERANCE
    torch.testing.assert_close(actual.float(), reference_attention(q, k, v, **options).float(), **tolerance)


def test_auto_takes_the_banded_path_for_shaw_on_cuda_and_flex_for_t5():
    report = fast_path_report("cuda")
    assert report["shaw"].startswith("banded") and report["t5"].startswith("FlexAttention")

