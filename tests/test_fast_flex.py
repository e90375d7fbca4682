"""FlexAttention paths for offset biases: the block mask, the compiled kernel on CPU, and every fallback."""

from __future__ import annotations

import pytest
import torch
from torch.nn.attention.flex_attention import create_block_mask

from posenc_ref.attention import reference_attention
from posenc_ref.fast import dispatch, fast_attention, fast_path_report, flex

HEADS = 4


def qkv(q_len: int, k_len: int, *, head_dim: int = 16, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    return (torch.randn(1, HEADS, n, head_dim, generator=generator) for n in (q_len, k_len, k_len))


def alibi_params() -> dict:
    return {"slopes": torch.tensor([2.0 ** -(h + 1) for h in range(HEADS)])}


def t5_params() -> dict:
    return {"bias_table": torch.randn(32, HEADS, generator=torch.Generator().manual_seed(1)), "max_distance": 64}


def block_sets(mask):
    """(any, full) block-level bool tensors (1, heads, q_blocks, k_blocks) of a BlockMask."""
    heads, q_blocks = mask.kv_num_blocks.shape[1:]
    k_blocks = -(-mask.seq_lengths[1] // 128)
    sets = []
    for counts, indices in ((mask.kv_num_blocks, mask.kv_indices), (mask.full_kv_num_blocks, mask.full_kv_indices)):
        dense = torch.zeros(1, heads, q_blocks, k_blocks, dtype=torch.bool)
        for head in range(heads):
            for row in range(q_blocks):
                dense[0, head, row, indices[0, head, row, : counts[0, head, row]].long()] = True
        sets.append(dense)
    partial, full = sets
    return partial | full, full


@pytest.mark.parametrize(("q_len", "k_len", "offset"), [(1, 1, 0), (131, 131, 0), (100, 300, 200), (130, 260, 7),
                                                        (256, 256, 0), (300, 140, 5), (129, 513, 384)])
def test_causal_block_mask_classifies_blocks_like_create_block_mask(q_len, k_len, offset):
    mine = flex.block_mask(q_len, k_len, offset, torch.device("cpu"), causal=True)
    expected = create_block_mask(lambda b, h, q, kv: kv <= q + offset, None, None, q_len, k_len, device="cpu")
    for actual_blocks, expected_blocks in zip(block_sets(mine), block_sets(expected), strict=True):
        assert torch.equal(actual_blocks, expected_blocks)
    # inside partial blocks the mask_mod decides, pair by pair
    q_index, kv_index = torch.tensor([3]), torch.tensor([3 + offset, 4 + offset])
    assert mine.mask_mod(0, 0, q_index, kv_index).tolist() == [True, False]


def steep_alibi_params() -> dict:
    """Slopes steep enough that distant key blocks are skipped (see alibi_keep_radius)."""
    return {"slopes": torch.tensor([1.0, 0.5, 0.25, 0.01])}


@pytest.mark.slow  # each shape compiles (seconds; the first compile in a process more)
@pytest.mark.parametrize(
    ("position", "q_len", "k_len", "query_offset", "causal"),
    # ALiBi: a head-dependent window mask over three key blocks, queries past the keys; T5: the causal
    # block mask with an offset, partial and full blocks, the per-offset table
    [("alibi", 200, 420, 300, False), ("t5", 37, 150, 20, True)],
)
def test_compiled_flex_on_cpu_equals_reference(position, q_len, k_len, query_offset, causal):
    q, k, v = qkv(q_len, k_len)
    params = steep_alibi_params() if position == "alibi" else t5_params()
    options = dict(position=position, causal=causal, query_offset=query_offset, **params)
    with torch.no_grad():
        actual = fast_attention(q, k, v, implementation="flex", **options)
    assert flex.compile_allowed("cpu"), "torch.compile of FlexAttention failed on CPU"
    torch.testing.assert_close(actual, reference_attention(q, k, v, **options), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(("q_len", "k_len", "offset", "causal"), [(300, 300, 0, True), (200, 420, 300, False),
                                                                  (256, 384, 500, True)])
def test_alibi_skips_only_blocks_whose_weights_vanish(q_len, k_len, offset, causal):
    q, k, _ = qkv(q_len, k_len, seed=4)
    q = q * 3.0  # larger logits widen the window the bound must keep
    slopes, scale = steep_alibi_params()["slopes"], 0.25
    radius = flex.alibi_keep_radius(q, k, slopes, scale)
    kept = flex.block_mask(q_len, k_len, offset, torch.device("cpu"), causal=causal, keep_radius=radius)
    every = flex.block_mask(q_len, k_len, offset, torch.device("cpu"), causal=causal)
    kept_any, _ = (x[0] for x in block_sets(kept))
    every_any, _ = (x[0] for x in block_sets(every))
    assert kept_any[0].sum() < every_any[0].sum(), "the steepest head should skip some blocks"
    assert torch.equal(kept_any[3], every_any[0]), "a shallow slope (0.01) keeps every visible block"
    # weights of the dense softmax, written out: skipped pairs must weigh < e^-40 of their row's maximum
    query_positions = torch.arange(offset, offset + q_len)
    distance = (query_positions[:, None] - torch.arange(k_len)[None, :]).abs()
    logits = scale * q[0] @ k[0].transpose(-1, -2) - slopes[:, None, None] * distance  # (heads, q_len, k_len)
    if causal:
        logits = logits.masked_fill(torch.arange(k_len)[None, :] > query_positions[:, None], float("-inf"))
    relative = logits - logits.amax(-1, keepdim=True)
    pair_kept = kept_any.repeat_interleave(128, 1).repeat_interleave(128, 2)[:, :q_len, :k_len]
    assert (relative[~pair_kept] < -40).all()


def test_forced_flex_with_gradients_on_cpu_is_refused():
    q, k, v = (x.requires_grad_() for x in qkv(5, 5))
    with pytest.raises(ValueError, match="no backward on cpu.*sdpa_bias"):
        fast_attention(q, k, v, position="alibi", implementation="flex_eager", **alibi_params())


def test_failed_compile_warns_falls_back_to_eager_flex_and_is_remembered(monkeypatch):
    def failing_compile(function):
        def compiled(*arguments):
            raise RuntimeError("inductor cannot build this")

        return compiled

    monkeypatch.setattr(flex, "_compiled", failing_compile)
    monkeypatch.setattr(flex, "_COMPILE_FAILED", set())
    q, k, v = qkv(37, 37)
    options = dict(position="alibi", causal=True, **alibi_params())
    with pytest.warns(RuntimeWarning, match="torch.compile of FlexAttention failed on cpu for torch.float32"):
        actual = fast_attention(q, k, v, implementation="flex", **options)
    torch.testing.assert_close(actual, reference_attention(q, k, v, **options), atol=1e-5, rtol=1e-5)
    assert not flex.compile_allowed("cpu", torch.float32, 16)
    assert flex.compile_allowed("cpu", torch.float32, 32), "a failure is remembered for its own signature only"
    assert "compile failed" in fast_path_report("cpu")["alibi"]


class Spy:
    """Stands in for an attention path; records that it was called."""

    def __init__(self):
        self.calls = []

    def __call__(self, q, *arguments, **options):
        self.calls.append(options)
        return torch.zeros_like(q)


@pytest.fixture
def spies(monkeypatch):
    flex_spy, sdpa_spy = Spy(), Spy()
    monkeypatch.setattr(flex, "flex_bias_attention", flex_spy)
    monkeypatch.setattr(dispatch, "sdpa_bias_attention", sdpa_spy)
    monkeypatch.setattr(flex, "_COMPILE_FAILED", set())
    return flex_spy, sdpa_spy


def test_auto_uses_compiled_flex_for_a_large_alibi_problem_without_gradients(spies):
    flex_spy, sdpa_spy = spies
    q, k, v = qkv(1024, 1024, head_dim=2)  # 4 heads * 1024^2 > SMALL_BIAS_ELEMENTS
    fast_attention(q, k, v, position="alibi", **alibi_params())
    assert len(flex_spy.calls) == 1 and flex_spy.calls[0]["compiled"] is True and not sdpa_spy.calls


@pytest.mark.parametrize("reason", ["small", "gradients", "compile failed", "no flex"])
def test_auto_falls_back_to_sdpa_with_a_bias(spies, monkeypatch, reason):
    flex_spy, sdpa_spy = spies
    q, k, v = qkv(8, 8, head_dim=2) if reason == "small" else qkv(1024, 1024, head_dim=2)
    params = alibi_params()
    if reason == "gradients":
        params["slopes"].requires_grad_()
    if reason == "compile failed":
        flex._COMPILE_FAILED.add(("cpu", torch.float32, 2))
    if reason == "no flex":
        monkeypatch.setattr(flex, "flex_available", lambda: False)
    fast_attention(q, k, v, position="alibi", **params)
    assert len(sdpa_spy.calls) == 1 and not flex_spy.calls


@pytest.mark.parametrize("size", [8, 1024])
def test_auto_takes_the_banded_path_for_t5_on_cpu_without_gradients(spies, monkeypatch, size):
    flex_spy, sdpa_spy = spies
    banded_spy = Spy()
    monkeypatch.setattr(dispatch, "banded_offset_attention", banded_spy)
    q, k, v = qkv(size, size, head_dim=2)
    fast_attention(q, k, v, position="t5", **t5_params())
    assert len(banded_spy.calls) == 1 and not flex_spy.calls and not sdpa_spy.calls
    params = t5_params()
    params["bias_table"].requires_grad_()
    fast_attention(q, k, v, position="t5", **params)  # no backward in the banded path: the materialized bias
    assert len(banded_spy.calls) == 1 and len(sdpa_spy.calls) == 1
