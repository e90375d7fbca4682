"""The banded path (far keys by the flash kernel, the band written out) equals the reference, block by block."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from posenc_ref.attention import reference_attention
from posenc_ref.fast import fast_attention
from posenc_ref.fast.banded import (
    banded_offset_attention,
    causal_as_squares,
    check_banded_can_run,
    flash_below_shifted_diagonal,
    merge_two,
    t5_reaches,
    written_out_with_logsumexp,
)
from posenc_ref.fast.params import resolve_query_offset, validate_position_params
from posenc_ref.relative import relative_position_bucket

HEADS, HEAD_DIM = 4, 16
FP32_TOLERANCE = {"atol": 1e-5, "rtol": 1e-5}


def make_params(position: str, *, dtype=torch.float32, rows: int = 9, seed: int = 1) -> dict:
    generator = torch.Generator().manual_seed(seed)
    if position == "alibi":
        return {"slopes": torch.tensor([0.5, 0.25, 0.125, 1 / 16])}
    if position.startswith("t5"):
        return {"bias_table": torch.randn(16, HEADS, generator=generator).to(dtype),
                "bidirectional": position == "t5", "max_distance": 20}
    return {"rel_k_table": (torch.randn(rows, HEAD_DIM, generator=generator) * 0.5).to(dtype),
            "rel_v_table": (torch.randn(rows, HEAD_DIM, generator=generator) * 0.5).to(dtype)}


def make_qkv(q_len: int, k_len: int, *, dtype=torch.float32, seed: int = 0):
    """(batch 2, heads, seq, head_dim) views of (batch, seq, heads, head_dim) tensors: not contiguous."""
    generator = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(2, n, HEADS, HEAD_DIM, generator=generator).to(dtype).transpose(1, 2)
                 for n in (q_len, k_len, k_len))


def banded(q, k, v, position, params, *, causal, query_offset=None, block=None, scale=0.3):
    kind = "t5" if position.startswith("t5") else position
    params = validate_position_params(kind, params, q=q, k=k)
    offset = resolve_query_offset(q.shape[2], k.shape[2], query_offset)
    return banded_offset_attention(q, k, v, kind, params, causal=causal, scale=scale, offset=offset, block=block)


def reference(q, k, v, position, params, *, causal, query_offset=None, scale=0.3):
    kind = "t5" if position.startswith("t5") else position
    return reference_attention(q, k, v, position=kind, causal=causal, query_offset=query_offset, scale=scale,
                               **params)


# (q_len, k_len, query_offset): one query (decoding), shorter than a block, odd lengths, a multiple of the
# block, queries past the last key, an explicit offset
SHAPES = [(1, 40, None), (3, 3, None), (37, 37, None), (64, 64, None), (131, 131, None), (50, 30, 0), (20, 45, 60),
          (5, 37, 3)]
POSITIONS = ["alibi", "t5", "t5_unidirectional", "shaw"]


@pytest.mark.parametrize("position", POSITIONS)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(("q_len", "k_len", "query_offset"), SHAPES)
@pytest.mark.parametrize("block", [1, 7, 32, None])
def test_banded_equals_reference_for_every_block_size(position, causal, q_len, k_len, query_offset, block):
    q, k, v = make_qkv(q_len, k_len)
    params = make_params(position)
    actual = banded(q, k, v, position, params, causal=causal, query_offset=query_offset, block=block)
    expected = reference(q, k, v, position, params, causal=causal, query_offset=query_offset)
    assert actual.shape == expected.shape and actual.dtype == expected.dtype
    torch.testing.assert_close(actual, expected, **FP32_TOLERANCE)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("rows", [3, 5, 81])  # k = 1, 2, and 40: larger than every length here
def test_shaw_banded_for_any_clipping_distance(causal, rows):
    q, k, v = make_qkv(19, 23)
    params = make_params("shaw", rows=rows)
    actual = banded(q, k, v, "shaw", params, causal=causal, block=4)
    torch.testing.assert_close(actual, reference(q, k, v, "shaw", params, causal=causal), **FP32_TOLERANCE)


@pytest.mark.parametrize("position", POSITIONS)
def test_banded_keeps_float64_and_rounds_bfloat16_once(position):
    for dtype, tolerance in ((torch.float64, {"atol": 1e-12, "rtol": 1e-12}), (torch.bfloat16,
                                                                               {"atol": 3e-2, "rtol": 2e-2})):
        q, k, v = make_qkv(45, 45, dtype=dtype)
        params = make_params(position, dtype=dtype)
        actual = banded(q, k, v, position, params, causal=True, block=8)
        assert actual.dtype == dtype
        expected = reference(q, k, v, position, params, causal=True)
        torch.testing.assert_close(actual.double(), expected.double(), **tolerance)


def test_t5_reaches_start_at_the_last_bucket():
    # relative_position_bucket's docstring: with (bidirectional, 32, 128) the last bucket starts at |r| = 91
    assert t5_reaches(True, 32, 128) == (91, 91)
    # unidirectional: every r >= 0 is bucket 0, so the right tail starts at r = 1
    assert t5_reaches(False, 32, 128)[1] == 1
    for bidirectional, buckets, max_distance in [(True, 32, 128), (False, 32, 128), (True, 16, 20), (False, 8, 50)]:
        left, right = t5_reaches(bidirectional, buckets, max_distance)
        far = torch.arange(1, 10 * max_distance)
        options = {"bidirectional": bidirectional, "num_buckets": buckets, "max_distance": max_distance}
        for sign, reach in ((-1, left), (1, right)):
            bucket = relative_position_bucket(sign * far, **options)
            assert (bucket[reach - 1:] == bucket[reach - 1]).all(), "constant from the reach on"
            if reach > 1:
                assert bucket[reach - 2] != bucket[reach - 1], "and not before"


@pytest.mark.parametrize("shift", [-9, -3, 0, 2, 8, 30])
def test_flash_below_shifted_diagonal_equals_the_masked_softmax(shift):
    generator = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, 2, n, 8, generator=generator) for n in (7, 9, 9))
    out, lse = flash_below_shifted_diagonal(q, k, v, shift=shift, scale=0.5)
    seen = torch.arange(9)[None, :] <= torch.arange(7)[:, None] + shift  # (7, 9)
    logits = (0.5 * q @ k.transpose(-1, -2)).masked_fill(~seen, float("-inf"))
    rows = seen.any(-1)
    expected_lse = torch.logsumexp(logits, -1)
    torch.testing.assert_close(lse[..., rows], expected_lse[..., rows])
    torch.testing.assert_close(out[..., rows, :], torch.softmax(logits[..., rows, :], -1) @ v)
    assert (lse[..., ~rows] == float("-inf")).all() and (out[..., ~rows, :] == 0).all()


def test_merge_two_equals_attention_over_the_union_of_the_keys():
    generator = torch.Generator().manual_seed(4)
    logits = torch.randn(1, 2, 5, 12, generator=generator) * 3
    values = torch.randn(1, 2, 12, 8, generator=generator)
    parts = []
    for keys in (slice(0, 4), slice(4, 12)):
        parts += [torch.softmax(logits[..., keys], -1) @ values[..., keys, :], torch.logsumexp(logits[..., keys], -1)]
    out, lse = merge_two(*parts)
    torch.testing.assert_close(out, torch.softmax(logits, -1) @ values)
    torch.testing.assert_close(lse, torch.logsumexp(logits, -1))
    empty = torch.full((1, 2, 5), float("-inf"))
    out, lse = merge_two(torch.zeros_like(parts[0]), empty, torch.zeros_like(parts[0]), empty.clone())
    assert (out == 0).all() and (lse == float("-inf")).all(), "a row empty in both parts stays empty"
    out, _ = merge_two(parts[0], parts[1], torch.zeros_like(parts[0]), empty)
    torch.testing.assert_close(out, parts[0])


def masked_softmax_attention(q, k, v, *, scale, mask=None, diagonal=False):
    """Independent of the code under test: float64 logits, top-left causal mask, softmax, product."""
    logits = scale * q.double() @ k.double().transpose(-2, -1)
    if mask is not None:
        logits = logits + mask.double()
    if diagonal:
        rows, keys = logits.shape[-2:]
        logits = logits.masked_fill(torch.ones(rows, keys, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(logits, -1) @ v.double(), torch.logsumexp(logits, -1)


@pytest.mark.parametrize(("rows", "keys"), [(7, 7), (5, 9), (9, 4), (1, 6), (6, 1)])
def test_causal_as_squares_hands_the_kernel_only_squares(rows, keys):
    q, k, v = make_qkv(rows, keys)
    shapes = []

    def square_only_kernel(q_part, k_part, v_part, causal):
        shapes.append((q_part.shape[2], k_part.shape[2], causal))
        assert not causal or q_part.shape[2] == k_part.shape[2], "a causal call that is not square"
        return masked_softmax_attention(q_part, k_part, v_part, scale=0.3, diagonal=causal)

    out, lse = causal_as_squares(square_only_kernel, q, k, v)
    expected_out, expected_lse = masked_softmax_attention(q, k, v, scale=0.3, diagonal=True)
    torch.testing.assert_close(out, expected_out)
    torch.testing.assert_close(lse, expected_lse)
    assert any(causal for _, _, causal in shapes)


@pytest.mark.parametrize("diagonal", [False, True])
def test_written_out_band_equals_the_masked_softmax(diagonal):
    q, k, v = make_qkv(6, 6, dtype=torch.bfloat16)
    mask = torch.randn(1, HEADS, 6, 6, generator=torch.Generator().manual_seed(3))
    mask[..., 0, 1] = float("-inf")
    out, lse = written_out_with_logsumexp(q, k, v, scale=0.3, mask=mask, diagonal=diagonal)
    assert out.dtype == lse.dtype == torch.float32, "the band is computed in float32"
    expected_out, expected_lse = masked_softmax_attention(q, k, v, scale=0.3, mask=mask, diagonal=diagonal)
    torch.testing.assert_close(out.double(), expected_out, **FP32_TOLERANCE)
    torch.testing.assert_close(lse.double(), expected_lse, **FP32_TOLERANCE)


def test_banded_refuses_gradients_and_devices_other_than_cpu():
    q, k, v = make_qkv(5, 5)
    with pytest.raises(ValueError, match="cpu only"):
        check_banded_can_run(torch.device("cuda"), q)
    with pytest.raises(ValueError, match="cpu and cuda only.*meta"):
        check_banded_can_run(torch.device("meta"), q, constant_tails=True)
    q.requires_grad_()
    with pytest.raises(ValueError, match="banded.*no backward"):
        fast_attention(q, k, v, position="t5", implementation="banded", **make_params("t5"))
    with torch.no_grad():  # the same call without autograd runs
        fast_attention(q, k, v, position="t5", implementation="banded", **make_params("t5"))


MEMORY_SCRIPT = """
import json, sys
import torch
from posenc_ref import bench
from posenc_ref.fast.banded import banded_offset_attention
# The CPU flash kernel takes a scratch buffer per thread, so the peak grows with the thread count (T5 measured
# 8.4 MiB with 16 threads on a 16-core machine): two threads, as on the course's 2-core machines.
torch.set_num_threads(2)
length, heads, head_dim = 1024, 2, 16
q, k, v = (torch.randn(1, heads, length, head_dim) for _ in range(3))
params = {"t5": {"bias_table": torch.randn(16, heads), "bidirectional": True, "max_distance": 20},
          "alibi": {"slopes": torch.tensor([0.5, 0.25])},
          "shaw": {"rel_k_table": torch.randn(9, head_dim), "rel_v_table": torch.randn(9, head_dim)}}
peaks = {}
with torch.no_grad():
    for position, values in params.items():
        def call(position=position, values=values):
            return banded_offset_attention(q, k, v, position, values, causal=True, scale=0.25, offset=0)
        call()
        peaks[position] = bench.peak_mib(call, torch.device("cpu"))
print(json.dumps(peaks))
"""


def test_banded_memory_stays_far_below_one_score_matrix():
    # in a process of its own: the profiler's count of a later measurement in the same process can include
    # memory that the flash kernel's threads allocate after this one
    result = subprocess.run([sys.executable, "-c", MEMORY_SCRIPT], check=False, capture_output=True, text=True,
                            timeout=300,
                            cwd=Path(__file__).resolve().parents[1])
    assert result.returncode == 0, result.stderr
    peaks = json.loads(result.stdout.strip().splitlines()[-1])
    scores_mib = 2 * 1024 * 1024 * 4 / 2**20  # one (heads, L, L) float32 matrix: 8 MiB
    for position, peak in peaks.items():
        assert 0 < peak < scores_mib / 4, (position, peak)


@pytest.mark.parametrize("position", ["alibi", "t5"])
def test_banded_follows_a_table_changed_in_place(position):
    q, k, v = make_qkv(40, 40)
    params = make_params(position)
    name = "slopes" if position == "alibi" else "bias_table"
    for _ in range(2):  # the second call must not reuse what the first kept for the old values
        with torch.no_grad():
            torch.testing.assert_close(banded(q, k, v, position, params, causal=True, block=8),
                                       reference(q, k, v, position, params, causal=True), **FP32_TOLERANCE)
        params[name].mul_(1.7)


@pytest.mark.parametrize("causal", [False, True])
def test_shaw_with_one_table_row_is_plain_attention_plus_its_value_vector(causal):
    # k = 0 (one row: every key in bucket 0), which the reference does not accept. Then q . a^K_0 is the same
    # for every key of a row and leaves the softmax alone, and every weight carries a^V_0: plain attention + a^V_0
    q, k, v = make_qkv(21, 26)
    params = make_params("shaw", rows=1)
    plain = reference_attention(q, k, v, position="none", causal=causal, scale=HEAD_DIM**-0.5)
    with torch.no_grad():
        for implementation in ("banded", "chunked"):
            actual = fast_attention(q, k, v, position="shaw", causal=causal, implementation=implementation, **params)
            torch.testing.assert_close(actual, plain + params["rel_v_table"][0], **FP32_TOLERANCE)
