"""Tests for posenc_ref.learned: the learned table and concatenation of a position code."""

from __future__ import annotations

import math

import pytest
import torch

from posenc_ref.learned import ConcatPositionalEncoding, LearnedPositionalEmbedding


def plain_sinusoid_row(position: int, dim: int, base: float = 10000.0) -> list[float]:
    """PE(p) in the interleaved layout, from the formula with the math module."""
    row = []
    for i in range(dim // 2):
        angle = position * base ** (-2 * i / dim)
        row += [math.sin(angle), math.cos(angle)]
    return row


def known_weights(module: LearnedPositionalEmbedding) -> torch.Tensor:
    """Overwrite the table with W[p, j] = p + j / 100 so that expected sums can be written by hand."""
    max_len, dim = module.weight.shape
    values = torch.tensor([[p + j / 100 for j in range(dim)] for p in range(max_len)])
    with torch.no_grad():
        module.weight.copy_(values)
    return values


# ---------------------------------------------------------------- LearnedPositionalEmbedding


def test_weight_is_a_parameter_initialised_normal_with_std_0_02():
    torch.manual_seed(1)
    module = LearnedPositionalEmbedding(512, 64)
    assert isinstance(module.weight, torch.nn.Parameter) and module.weight.shape == (512, 64)
    assert [name for name, _ in module.named_parameters()] == ["weight"]
    values = module.weight.detach().double()
    # 32768 draws: the sample std is within 2% and the mean within 5 standard errors of N(0, 0.02^2)
    assert abs(values.std().item() - 0.02) < 0.02 * 0.02
    assert abs(values.mean().item()) < 5 * 0.02 / math.sqrt(values.numel())


def test_forward_adds_the_rows_of_the_positions_used():
    module = LearnedPositionalEmbedding(10, 3)
    values = known_weights(module)
    x = torch.randn(2, 4, 3)
    torch.testing.assert_close(module(x), x + values[:4])
    torch.testing.assert_close(module(x, offset=5), x + values[5:9])
    assert module(x, offset=5)[1, 2, 0].item() == pytest.approx(x[1, 2, 0].item() + 7.0)


def test_gradient_reaches_exactly_the_rows_used():
    module = LearnedPositionalEmbedding(12, 4)
    batch, seq, offset = 3, 5, 4
    module(torch.randn(batch, seq, 4), offset=offset).sum().backward()
    gradient = module.weight.grad
    # each used row is added to every batch element, so d(sum)/dW[p] = batch for p in offset..offset+seq-1
    expected = torch.zeros(12, 4)
    expected[offset : offset + seq] = batch
    torch.testing.assert_close(gradient, expected)


@pytest.mark.parametrize(("seq", "offset"), [(600, 0), (500, 100), (1, 512)])
def test_overlong_input_raises_naming_both_lengths(seq, offset):
    module = LearnedPositionalEmbedding(512, 2)
    needed = seq + offset
    with pytest.raises(ValueError, match=rf"up to {needed}\b.*max_len is 512\b"):
        module(torch.zeros(1, seq, 2), offset=offset)


def test_offset_plus_seq_exactly_max_len_works():
    module = LearnedPositionalEmbedding(8, 2)
    values = known_weights(module)
    x = torch.zeros(1, 3, 2)
    torch.testing.assert_close(module(x, offset=5), values[5:8].unsqueeze(0))
    torch.testing.assert_close(module(torch.zeros(1, 8, 2)), values.unsqueeze(0))


def test_learned_table_is_not_cast_to_the_input_dtype():
    module = LearnedPositionalEmbedding(8, 2)
    with pytest.raises(TypeError, match="dtype"):
        module(torch.zeros(1, 3, 2, dtype=torch.float64))
    out = module.to(torch.float64)(torch.zeros(1, 3, 2, dtype=torch.float64))
    assert out.dtype == torch.float64


@pytest.mark.parametrize(
    ("args", "error", "match"),
    [
        ((0, 4), ValueError, "max_len"),
        ((-3, 4), ValueError, "max_len"),
        ((8.0, 4), TypeError, "max_len"),
        ((8, 0), ValueError, "dim"),
        ((8, True), TypeError, "dim"),
    ],
)
def test_learned_rejects_bad_constructor_arguments(args, error, match):
    with pytest.raises(error, match=match):
        LearnedPositionalEmbedding(*args)


@pytest.mark.parametrize(
    ("x", "offset", "error", "match"),
    [
        (torch.zeros(5, 4), 0, ValueError, "x must have 3 dimensions"),
        (torch.zeros(2, 5, 3), 0, ValueError, "x has last dimension 3 but the module's dim is 4"),
        (torch.zeros(2, 5, 4, dtype=torch.int32), 0, TypeError, "x must have a floating dtype"),
        (torch.zeros(2, 5, 4), -1, ValueError, "offset"),
        (torch.zeros(2, 5, 4), 2.0, TypeError, "offset"),
        (torch.zeros(2, 5, 4), True, TypeError, "offset"),
    ],
)
def test_learned_forward_rejects_bad_input(x, offset, error, match):
    with pytest.raises(error, match=match):
        LearnedPositionalEmbedding(16, 4)(x, offset=offset)


# ---------------------------------------------------------------- ConcatPositionalEncoding


def test_sinusoidal_concat_appends_the_code_and_keeps_x_unchanged():
    module = ConcatPositionalEncoding(6)
    x = torch.randn(2, 5, 3)
    out = module(x, offset=7)
    assert out.shape == (2, 5, 3 + 6) and module.pos_dim == 6 and module.output_dim(3) == 9
    assert torch.equal(out[..., :3], x)
    expected = torch.tensor([plain_sinusoid_row(7 + s, 6) for s in range(5)])
    for batch_index in range(2):
        torch.testing.assert_close(out[batch_index, :, 3:], expected, atol=1e-6, rtol=0)


def test_sinusoidal_concat_uses_base_and_casts_the_code_to_the_input_dtype():
    module = ConcatPositionalEncoding(4, base=100.0)
    out = module(torch.zeros(1, 3, 2, dtype=torch.float64))
    assert out.dtype == torch.float64
    expected = torch.tensor([plain_sinusoid_row(s, 4, base=100.0) for s in range(3)], dtype=torch.float64)
    torch.testing.assert_close(out[0, :, 2:], expected, atol=1e-6, rtol=0)


def test_learned_concat_appends_table_rows_and_trains_them():
    module = ConcatPositionalEncoding(3, kind="learned", max_len=10)
    assert module.output_dim(5) == 8
    values = known_weights(module.encoding)
    x = torch.randn(4, 6, 5)
    out = module(x, offset=2)
    assert out.shape == (4, 6, 8)
    assert torch.equal(out[..., :5], x)
    torch.testing.assert_close(out[..., 5:], values[2:8].expand(4, 6, 3))
    out.sum().backward()
    expected_gradient = torch.zeros(10, 3)
    expected_gradient[2:8] = 4
    torch.testing.assert_close(module.encoding.weight.grad, expected_gradient)


def test_learned_concat_needs_max_len_and_respects_it():
    with pytest.raises(ValueError, match="max_len is required"):
        ConcatPositionalEncoding(3, kind="learned")
    module = ConcatPositionalEncoding(3, kind="learned", max_len=4)
    with pytest.raises(ValueError, match=r"up to 5\b.*max_len is 4\b"):
        module(torch.zeros(1, 5, 2))


def test_only_the_learned_concat_has_parameters():
    assert list(ConcatPositionalEncoding(4).parameters()) == []
    assert ConcatPositionalEncoding(4).state_dict() == {}
    assert [p.shape for p in ConcatPositionalEncoding(5, kind="learned", max_len=7).parameters()] == [(7, 5)]


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "match"),
    [
        ((5,), {}, ValueError, "pos_dim.*even"),
        ((0,), {"kind": "learned", "max_len": 4}, ValueError, "pos_dim"),
        ((4.0,), {}, TypeError, "pos_dim"),
        ((4,), {"kind": "rotary"}, ValueError, "kind"),
        ((4,), {"max_len": 16}, ValueError, "max_len"),
        ((4,), {"kind": "learned", "max_len": 0}, ValueError, "max_len"),
        ((4,), {"kind": "learned", "max_len": 2.5}, TypeError, "max_len"),
        ((4,), {"base": 0.0}, ValueError, "base"),
    ],
)
def test_concat_rejects_bad_constructor_arguments(args, kwargs, error, match):
    with pytest.raises(error, match=match):
        ConcatPositionalEncoding(*args, **kwargs)


@pytest.mark.parametrize(
    ("x", "offset", "error", "match"),
    [
        (torch.zeros(3, 4), 0, ValueError, "x must have 3 dimensions"),
        (torch.zeros(1, 3, 4, dtype=torch.bool), 0, TypeError, "x must have a floating dtype"),
        (torch.zeros(1, 3, 4), -1, ValueError, "offset"),
        (torch.zeros(1, 3, 4), 0.5, TypeError, "offset"),
    ],
)
def test_concat_forward_rejects_bad_input(x, offset, error, match):
    with pytest.raises(error, match=match):
        ConcatPositionalEncoding(4)(x, offset=offset)


@pytest.mark.parametrize(("input_dim", "error"), [(0, ValueError), (3.0, TypeError), (True, TypeError)])
def test_output_dim_rejects_non_positive_int(input_dim, error):
    with pytest.raises(error, match="input_dim"):
        ConcatPositionalEncoding(4).output_dim(input_dim)


def test_explicit_positions_pick_their_rows_and_exclude_an_offset():
    torch.manual_seed(0)
    table = LearnedPositionalEmbedding(10, 4)
    x = torch.randn(2, 3, 4)
    out = table(x, positions=torch.tensor([1, 4, 9]))
    torch.testing.assert_close(out, x + table.weight.detach()[[1, 4, 9]].unsqueeze(0))
    with pytest.raises(ValueError, match="either offset or positions"):
        table(x, offset=2, positions=torch.tensor([1, 4, 9]))
    with pytest.raises(ValueError, match="3 entries"):
        table(x, positions=torch.tensor([1, 4]))
    with pytest.raises(TypeError, match="integer"):
        table(x, positions=torch.tensor([1.0, 4.0, 5.0]))


def test_init_std_sets_the_scale_and_is_checked():
    torch.manual_seed(0)
    assert abs(LearnedPositionalEmbedding(256, 128, init_std=1.0).weight.std().item() - 1.0) < 0.02
    with pytest.raises(ValueError, match="init_std"):
        LearnedPositionalEmbedding(4, 4, init_std=0.0)
