"""Causal ALiBi by the square and window split (posenc_ref.fast.alibi_window) equals the reference."""

from __future__ import annotations

import pytest
import torch

from posenc_ref.attention import reference_attention
from posenc_ref.fast import dispatch, fast_attention, flex
from posenc_ref.fast.alibi_window import _window_widths, alibi_window_attention, block_for_width

HEADS, HEAD_DIM = 4, 16
FP32_TOLERANCE = {"atol": 1e-5, "rtol": 1e-5}
STEEP = [4.0, 0.5, 0.25, 1 / 16]
SMALL = [1e-4, 1 / 256, 0.0, 0.3]  # a slope of 0 (no bias) and one that is not a power of two


def make_qkv(q_len: int, k_len: int, *, batch: int = 2, heads: int = HEADS, head_dim: int = HEAD_DIM,
             dtype=torch.float32, seed: int = 0, spread: float = 1.0):
    """(batch, heads, seq, head_dim) views of (batch, seq, heads, head_dim) tensors: not contiguous."""
    generator = torch.Generator().manual_seed(seed)
    return tuple((torch.randn(batch, n, heads, head_dim, generator=generator) * spread).to(dtype).transpose(1, 2)
                 for n in (q_len, k_len, k_len))


def reference(q, k, v, slopes, *, query_offset, scale=None, causal=True):
    return reference_attention(q, k, v, position="alibi", causal=causal, query_offset=query_offset, scale=scale,
                               slopes=slopes)


# (q_len, k_len, query_offset): one query, one key; odd lengths; a few blocks; decoding with the default
# offset; an explicit offset; queries past every key; more queries than keys; q_len != k_len over blocks
SHAPES = [(1, 1, None), (37, 37, None), (131, 131, None), (5, 37, None), (5, 37, 3), (20, 45, 60), (50, 30, 0),
          (300, 300, None), (200, 500, 100), (150, 100, 40)]


@pytest.mark.parametrize(("q_len", "k_len", "query_offset"), SHAPES)
@pytest.mark.parametrize("slopes", [STEEP, SMALL], ids=["steep", "small"])
@pytest.mark.parametrize("block", [None, 1, 7, 64])
def test_window_equals_reference(q_len, k_len, query_offset, slopes, block):
    q, k, v = make_qkv(q_len, k_len)
    slopes = torch.tensor(slopes)
    offset = k_len - q_len if query_offset is None else query_offset
    with torch.no_grad():
        actual = alibi_window_attention(q, k, v, slopes, scale=0.3, offset=offset, block=block)
    expected = reference(q, k, v, slopes, query_offset=query_offset, scale=0.3)
    assert actual.shape == expected.shape and actual.dtype == expected.dtype
    torch.testing.assert_close(actual, expected, **FP32_TOLERANCE)


@pytest.mark.parametrize("length", [2048, 4096])
def test_long_sequence_with_slope_one_half_equals_reference_through_auto(length, monkeypatch):
    """Where float32 is tightest: logits up to 0.5 * L in size, and keys far back dropped by the window."""
    calls = []
    window = dispatch.alibi_window_attention

    def spy(*arguments, **options):
        calls.append(options)
        return window(*arguments, **options)

    monkeypatch.setattr(dispatch, "alibi_window_attention", spy)
    q, k, v = make_qkv(length, length, batch=1, heads=3, head_dim=64, seed=length, spread=1.5)
    slopes = torch.tensor([0.5, 1 / 32, 1 / 1024])
    widths = _window_widths(q, k, slopes, 64 ** -0.5)
    assert widths[0] < length // 8 and widths[2] == length, "the test must drop keys for the steep head"
    with torch.no_grad():
        actual = fast_attention(q, k, v, position="alibi", causal=True, slopes=slopes)
    assert len(calls) == 1, "auto must take the window path for causal ALiBi on CPU without autograd"
    torch.testing.assert_close(actual, reference(q, k, v, slopes, query_offset=None), **FP32_TOLERANCE)


def test_window_with_batch_heads_and_a_kv_cache_offset_equals_reference():
    q, k, v = make_qkv(333, 1200, batch=3, heads=8, head_dim=32, seed=7)
    slopes = 2.0 ** -torch.arange(1, 9, dtype=torch.float32)
    with torch.no_grad():
        actual = fast_attention(q, k, v, position="alibi", causal=True, slopes=slopes, implementation="window")
    torch.testing.assert_close(actual, reference(q, k, v, slopes, query_offset=None), **FP32_TOLERANCE)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float64])
def test_window_in_other_dtypes_returns_that_dtype_close_to_reference(dtype):
    q, k, v = make_qkv(150, 150, dtype=dtype)
    slopes = torch.tensor(STEEP, dtype=dtype)
    with torch.no_grad():
        actual = alibi_window_attention(q, k, v, slopes, scale=0.25, offset=0, block=32)
    assert actual.dtype == dtype
    expected = reference(q.double(), k.double(), v.double(), slopes.double(), query_offset=None, scale=0.25)
    tolerance = {"atol": 1e-10, "rtol": 1e-10} if dtype == torch.float64 else {"atol": 3e-2, "rtol": 2e-2}
    torch.testing.assert_close(actual.double(), expected, **tolerance)


def test_window_without_causal_runs_the_banded_path_and_equals_reference():
    q, k, v = make_qkv(70, 90)
    slopes = torch.tensor(STEEP)
    with torch.no_grad():
        actual = fast_attention(q, k, v, position="alibi", causal=False, slopes=slopes, implementation="window")
    torch.testing.assert_close(actual, reference(q, k, v, slopes, query_offset=None, causal=False),
                               **FP32_TOLERANCE)


class Spy:
    def __init__(self):
        self.calls = 0

    def __call__(self, q, *arguments, **options):
        self.calls += 1
        return torch.zeros_like(q)


@pytest.mark.parametrize("case", ["causal", "not causal", "gradients", "small"])
def test_auto_chooses_window_only_for_large_causal_problems_without_gradients(monkeypatch, case):
    spies = {name: Spy() for name in ("window", "flex", "sdpa_bias")}
    monkeypatch.setattr(dispatch, "alibi_window_attention", spies["window"])
    monkeypatch.setattr(flex, "flex_bias_attention", spies["flex"])
    monkeypatch.setattr(dispatch, "sdpa_bias_attention", spies["sdpa_bias"])
    q, k, v = make_qkv(8, 8, head_dim=2) if case == "small" else make_qkv(1024, 1024, head_dim=2)
    slopes = torch.tensor(STEEP, requires_grad=case == "gradients")
    fast_attention(q, k, v, position="alibi", causal=case != "not causal", slopes=slopes)
    expected = {"causal": "window", "not causal": "flex", "gradients": "sdpa_bias", "small": "sdpa_bias"}[case]
    assert {name: spy.calls for name, spy in spies.items()} == {name: int(name == expected) for name in spies}


def test_block_size_grows_with_the_window_and_is_bounded():
    assert block_for_width(10) == 64 and block_for_width(1000) == 256 and block_for_width(10**6) == 1024


def test_window_rejects_bad_arguments():
    q, k, v = make_qkv(5, 5)
    slopes = torch.tensor(STEEP)
    with torch.no_grad():
        with pytest.raises(ValueError, match="block must be None or an int >= 1, got 0"):
            alibi_window_attention(q, k, v, slopes, scale=0.3, offset=0, block=0)
        with pytest.raises(ValueError, match="offset must be an int >= 0, got -1"):
            alibi_window_attention(q, k, v, slopes, scale=0.3, offset=-1)
        with pytest.raises(ValueError, match="cpu only, got q on meta"):
            alibi_window_attention(*(x.to("meta") for x in (q, k, v)), slopes.to("meta"), scale=0.3, offset=0)
    q.requires_grad_()
    with pytest.raises(ValueError, match="no backward"):
        alibi_window_attention(q, k, v, slopes, scale=0.3, offset=0)
    with pytest.raises(ValueError, match="implementation='window' has no backward"):
        fast_attention(q, k, v, position="alibi", causal=True, slopes=slopes, implementation="window")
