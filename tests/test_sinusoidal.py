"""Tests for posenc_ref.sinusoidal: closed forms, properties, layouts, the adding module, bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from posenc_ref.sinusoidal import (
    SINUSOIDAL_LAYOUTS,
    SinusoidalPositionalEncoding,
    shift_matrix,
    sinusoidal_frequencies,
    sinusoidal_table,
)

FEW_EXAMPLES = settings(max_examples=30, deadline=None)
EVEN_DIMS = st.sampled_from([2, 4, 6, 8, 16, 64])


def reference_table(length: int, dim: int, *, base: float = 10000.0, layout: str = "interleaved", offset: int = 0):
    """The table written straight from each layout's formula, in numpy float64 (independent of the package)."""
    half = dim // 2
    table = np.zeros((length, dim))
    for i in range(half):
        if layout == "tensor2tensor":
            # tensor2tensor: log_timescale_increment = log(max/min) / (num_timescales - 1), min = 1, max = base
            frequency = math.exp(-i * math.log(base) / (half - 1))
        else:
            frequency = base ** (-2 * i / dim)
        for row in range(length):
            angle = (offset + row) * frequency
            if layout == "interleaved":
                table[row, 2 * i], table[row, 2 * i + 1] = math.sin(angle), math.cos(angle)
            else:
                table[row, i], table[row, half + i] = math.sin(angle), math.cos(angle)
    return table


def interleaved_frequencies(dim: int, base: float = 10000.0) -> list[float]:
    return [base ** (-2 * i / dim) for i in range(dim // 2)]


# ---------------------------------------------------------------- closed forms


def test_position_zero_at_d4_is_sin0_cos0_pairs():
    table = sinusoidal_table(1, 4, dtype=torch.float64)
    assert table[0].tolist() == pytest.approx([0.0, 1.0, 0.0, 1.0], abs=1e-15)


def test_position_one_at_d4_matches_closed_form():
    table = sinusoidal_table(2, 4, dtype=torch.float64)
    expected = [math.sin(1), math.cos(1), math.sin(0.01), math.cos(0.01)]
    assert table[1].tolist() == pytest.approx(expected, abs=1e-14)


def test_position_two_at_d6_matches_closed_form_entry_by_entry():
    row = sinusoidal_table(3, 6, dtype=torch.float64)[2].tolist()
    middle, slow = 2 / 10000 ** (1 / 3), 2 / 10000 ** (2 / 3)
    expected = [math.sin(2), math.cos(2), math.sin(middle), math.cos(middle), math.sin(slow), math.cos(slow)]
    for index, (value, wanted) in enumerate(zip(row, expected, strict=True)):
        assert value == pytest.approx(wanted, abs=1e-14), f"feature {index}"


def test_interleaved_frequencies_are_base_to_minus_2i_over_d():
    inv_freq = sinusoidal_frequencies(8, base=500.0)
    assert inv_freq.dtype == torch.float64 and inv_freq.shape == (4,)
    assert inv_freq.tolist() == pytest.approx([500.0 ** (-2 * i / 8) for i in range(4)], rel=1e-14)


def test_large_positions_keep_float64_angle_precision():
    # 123456789 is not a float32 number (spacing 8 there): float32 angles would be off by whole radians.
    position = 123_456_789
    row = sinusoidal_table(1, 4, offset=position)[0].tolist()
    expected = [math.sin(position), math.cos(position), math.sin(position / 100), math.cos(position / 100)]
    assert row == pytest.approx(expected, abs=1e-6)


def test_table_has_requested_dtype_and_shape():
    for dtype in (torch.float32, torch.float64, torch.bfloat16):
        table = sinusoidal_table(5, 8, dtype=dtype)
        assert table.dtype == dtype and table.shape == (5, 8)


# ---------------------------------------------------------------- properties


def test_distinct_positions_give_distinct_rows():
    table = sinusoidal_table(512, 64)
    distances = torch.cdist(table, table, compute_mode="donot_use_mm_for_euclid_dist")  # (512, 512)
    distances.fill_diagonal_(float("inf"))
    assert distances.min().item() > 0.0


@FEW_EXAMPLES
@given(dim=EVEN_DIMS, position=st.integers(0, 5000), data=st.data())
def test_shift_matrix_moves_every_position_by_k(dim, position, data):
    k = data.draw(st.integers(-position, 5000), label="k")  # negative shifts included, p + k >= 0
    pe_p = torch.tensor(reference_table(1, dim, offset=position)[0])
    pe_shifted = torch.tensor(reference_table(1, dim, offset=position + k)[0])
    torch.testing.assert_close(shift_matrix(k, dim) @ pe_p, pe_shifted, atol=1e-9, rtol=0)


@pytest.mark.parametrize("dim", [2, 4, 10, 32])
@pytest.mark.parametrize("k", [-37, -1, 0, 1, 5, 1000])
def test_shift_matrix_is_one_orthogonal_matrix_for_every_position(dim, k):
    matrix = shift_matrix(k, dim)
    torch.testing.assert_close(matrix @ matrix.T, torch.eye(dim, dtype=torch.float64), atol=1e-12, rtol=0)
    # One matrix, independent of p: it maps all rows p = 40..239 to rows p + k at once.
    positions = torch.arange(40, 240)
    table = torch.tensor(reference_table(1300, dim))
    torch.testing.assert_close((matrix @ table[positions].T).T, table[positions + k], atol=1e-9, rtol=0)


def test_shift_matrix_entries_match_closed_form_at_d4():
    expected = [
        [math.cos(3), math.sin(3), 0.0, 0.0],
        [-math.sin(3), math.cos(3), 0.0, 0.0],
        [0.0, 0.0, math.cos(0.03), math.sin(0.03)],
        [0.0, 0.0, -math.sin(0.03), math.cos(0.03)],
    ]
    torch.testing.assert_close(shift_matrix(3, 4), torch.tensor(expected, dtype=torch.float64), atol=1e-14, rtol=0)


def test_shift_by_minus_k_undoes_shift_by_k():
    product = shift_matrix(-7, 12) @ shift_matrix(7, 12)
    torch.testing.assert_close(product, torch.eye(12, dtype=torch.float64), atol=1e-12, rtol=0)


@FEW_EXAMPLES
@given(dim=EVEN_DIMS, first=st.integers(0, 3000), second=st.integers(0, 3000), k=st.integers(0, 500))
def test_inner_product_depends_only_on_offset_k(dim, first, second, k):
    # <PE(p), PE(p+k)> = sum_i sin(p w_i) sin((p+k) w_i) + cos(p w_i) cos((p+k) w_i)
    #                  = sum_i cos((p+k) w_i - p w_i) = sum_i cos(k w_i)        (cos(a - b) identity)
    expected = sum(math.cos(k * frequency) for frequency in interleaved_frequencies(dim))
    for position in (first, second):
        table = sinusoidal_table(k + 1, dim, offset=position, dtype=torch.float64)
        assert torch.dot(table[0], table[k]).item() == pytest.approx(expected, abs=1e-9)


@pytest.mark.parametrize("layout", SINUSOIDAL_LAYOUTS)
def test_values_in_unit_interval_and_each_sin_cos_pair_has_unit_norm(layout):
    dim = 32
    table = sinusoidal_table(300, dim, layout=layout, offset=17, dtype=torch.float64)
    assert table.abs().max().item() <= 1.0
    if layout == "interleaved":
        sines, cosines = table[:, 0::2], table[:, 1::2]
    else:
        sines, cosines = table[:, : dim // 2], table[:, dim // 2 :]
    torch.testing.assert_close(sines**2 + cosines**2, torch.ones(300, dim // 2, dtype=torch.float64))


# ---------------------------------------------------------------- layouts


@pytest.mark.parametrize("layout", SINUSOIDAL_LAYOUTS)
@pytest.mark.parametrize(("dim", "base", "offset"), [(4, 10000.0, 0), (6, 10000.0, 3), (16, 500.0, 100)])
def test_each_layout_matches_its_formula(layout, dim, base, offset):
    table = sinusoidal_table(50, dim, base=base, layout=layout, offset=offset, dtype=torch.float64)
    expected = reference_table(50, dim, base=base, layout=layout, offset=offset)
    np.testing.assert_allclose(table.numpy(), expected, atol=1e-12, rtol=0)


def test_float32_table_matches_formula_to_float32_precision():
    expected = reference_table(200, 12, layout="halves", offset=9)
    np.testing.assert_allclose(sinusoidal_table(200, 12, layout="halves", offset=9).numpy(), expected, atol=1e-6)


@pytest.mark.parametrize("dim", [2, 8, 22])
def test_halves_is_a_permutation_of_interleaved(dim):
    halves = sinusoidal_table(40, dim, layout="halves")
    interleaved = sinusoidal_table(40, dim, layout="interleaved")
    # interleaved feature 2i is sine i (halves feature i); 2i + 1 is cosine i (halves feature d/2 + i)
    permutation = [i // 2 if i % 2 == 0 else dim // 2 + i // 2 for i in range(dim)]
    assert sorted(permutation) == list(range(dim))
    assert torch.equal(halves[:, permutation], interleaved)


@pytest.mark.parametrize(("dim", "base"), [(4, 10000.0), (10, 10000.0), (64, 10.0)])
def test_tensor2tensor_frequencies_run_from_1_to_1_over_base_log_spaced(dim, base):
    inv_freq = sinusoidal_frequencies(dim, base=base, layout="tensor2tensor").tolist()
    assert len(inv_freq) == dim // 2
    assert inv_freq[0] == pytest.approx(1.0, rel=1e-15)
    assert inv_freq[-1] == pytest.approx(1.0 / base, rel=1e-13)
    increment = math.log(base) / (dim / 2 - 1)
    steps = [math.log(inv_freq[i]) - math.log(inv_freq[i + 1]) for i in range(len(inv_freq) - 1)]
    assert steps == pytest.approx([increment] * len(steps), rel=1e-12)


@pytest.mark.parametrize("layout", SINUSOIDAL_LAYOUTS)
def test_offset_shifts_rows(layout):
    long = sinusoidal_table(60, 8, layout=layout)
    shifted = sinusoidal_table(35, 8, layout=layout, offset=25)
    assert torch.equal(shifted, long[25:])


# ---------------------------------------------------------------- the module


def test_module_output_is_input_plus_table():
    module = SinusoidalPositionalEncoding(8).eval()
    x = torch.randn(3, 20, 8, dtype=torch.float64)
    expected = x + torch.tensor(reference_table(20, 8))
    torch.testing.assert_close(module(x), expected, atol=1e-6, rtol=0)


def test_module_offset_adds_rows_from_offset_on():
    module = SinusoidalPositionalEncoding(6, layout="halves", base=100.0).eval()
    x = torch.zeros(2, 7, 6)
    expected = torch.tensor(reference_table(7, 6, base=100.0, layout="halves", offset=11), dtype=torch.float32)
    torch.testing.assert_close(module(x, offset=11), expected.expand(2, 7, 6), atol=1e-6, rtol=0)


def test_scale_embeddings_multiplies_input_by_sqrt_dim():
    module = SinusoidalPositionalEncoding(16, scale_embeddings=True).eval()
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    expected = x * 4.0 + torch.tensor(reference_table(5, 16))
    torch.testing.assert_close(module(x), expected, atol=1e-6, rtol=0)


def test_dropout_is_identity_in_eval_and_random_on_the_sum_in_train():
    torch.manual_seed(0)
    module = SinusoidalPositionalEncoding(8, dropout=0.5)
    x = torch.randn(4, 30, 8, dtype=torch.float64)
    total = x + torch.tensor(reference_table(30, 8))
    torch.testing.assert_close(module.eval()(x), total, atol=1e-6, rtol=0)
    module.train()
    first, second = module(x), module(x)
    dropped = first == 0
    assert 0.3 < dropped.double().mean().item() < 0.7
    # kept entries are the sum scaled by 1 / (1 - p): the dropout acts on x + PE, not on x alone
    torch.testing.assert_close(first[~dropped], 2 * total[~dropped], atol=1e-6, rtol=0)
    assert not torch.equal(first, second)


def test_table_buffer_grows_past_first_size_without_cap():
    module = SinusoidalPositionalEncoding(4)
    first_size = module.cached_table.shape[0]
    needed = 10 * first_size + 3
    rows = module.table(5, offset=needed - 5)
    grown = module.cached_table.shape[0]
    assert grown >= needed and grown & (grown - 1) == 0 and grown // 2 < needed  # the next power of two
    np.testing.assert_allclose(rows.numpy(), reference_table(5, 4, offset=needed - 5), atol=1e-6)
    out = module(torch.zeros(1, 3, 4), offset=100_000)
    assert module.cached_table.shape[0] == 131_072
    np.testing.assert_allclose(out[0].numpy(), reference_table(3, 4, offset=100_000), atol=1e-5)


def test_table_buffer_is_non_persistent():
    module = SinusoidalPositionalEncoding(8)
    assert module.state_dict() == {}
    module.table(1000)
    assert module.state_dict() == {}
    assert any(buffer is module.cached_table for buffer in module.buffers())  # moved by .to(), not saved
    module.load_state_dict({})


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_module_casts_table_to_input_dtype(dtype):
    module = SinusoidalPositionalEncoding(8).eval()
    x = torch.randn(2, 9, 8).to(dtype)
    out = module(x)
    assert out.dtype == dtype
    expected = x + torch.tensor(reference_table(9, 8)).to(dtype)
    tolerance = 1e-6 if dtype == torch.float64 else 1e-2
    torch.testing.assert_close(out.double(), expected.double(), atol=tolerance, rtol=tolerance)


def test_module_table_method_returns_rows():
    module = SinusoidalPositionalEncoding(10, layout="tensor2tensor")
    rows = module.table(4, offset=2)
    assert rows.shape == (4, 10) and rows.dtype == torch.float32
    np.testing.assert_allclose(rows.numpy(), reference_table(4, 10, layout="tensor2tensor", offset=2), atol=1e-6)


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"length": 0}, ValueError, "length"),
        ({"length": -1}, ValueError, "length"),
        ({"length": 2.0}, TypeError, "length"),
        ({"length": True}, TypeError, "length"),
        ({"dim": 5}, ValueError, "dim.*even"),
        ({"dim": 0}, ValueError, "dim"),
        ({"dim": 4.0}, TypeError, "dim"),
        ({"offset": -1}, ValueError, "offset"),
        ({"offset": 1.5}, TypeError, "offset"),
        ({"offset": False}, TypeError, "offset"),
        ({"base": 0.0}, ValueError, "base"),
        ({"base": -10.0}, ValueError, "base"),
        ({"base": "10000"}, TypeError, "base"),
        ({"layout": "sines-first"}, ValueError, "layout.*interleaved"),
        ({"dtype": torch.int64}, TypeError, "dtype"),
        ({"dim": 2, "layout": "tensor2tensor"}, ValueError, "dim.*>= 4"),
    ],
)
def test_sinusoidal_table_rejects_bad_arguments(kwargs, error, match):
    arguments = {"length": 3, "dim": 4} | kwargs
    length, dim = arguments.pop("length"), arguments.pop("dim")
    with pytest.raises(error, match=match):
        sinusoidal_table(length, dim, **arguments)


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "match"),
    [
        ((3,), {}, ValueError, "dim"),
        ((2.0,), {}, TypeError, "dim"),
        ((4,), {"layout": "spiral"}, ValueError, "layout"),
        ((4,), {"base": 0}, ValueError, "base"),
        ((2,), {"layout": "tensor2tensor"}, ValueError, "dim"),
    ],
)
def test_sinusoidal_frequencies_rejects_bad_arguments(args, kwargs, error, match):
    with pytest.raises(error, match=match):
        sinusoidal_frequencies(*args, **kwargs)


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "match"),
    [
        ((1.5, 4), {}, TypeError, "k"),
        ((True, 4), {}, TypeError, "k"),
        ((1, 3), {}, ValueError, "dim"),
        ((1, 0), {}, ValueError, "dim"),
        ((1, 4), {"base": -1.0}, ValueError, "base"),
        ((1, 4), {"dtype": torch.int32}, TypeError, "dtype"),
    ],
)
def test_shift_matrix_rejects_bad_arguments(args, kwargs, error, match):
    with pytest.raises(error, match=match):
        shift_matrix(*args, **kwargs)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"dim": 7}, ValueError, "dim"),
        ({"dim": 8.0}, TypeError, "dim"),
        ({"layout": "rotary"}, ValueError, "layout"),
        ({"base": 0.0}, ValueError, "base"),
        ({"dropout": 1.0}, ValueError, "dropout"),
        ({"dropout": -0.1}, ValueError, "dropout"),
        ({"scale_embeddings": 1}, TypeError, "scale_embeddings"),
    ],
)
def test_module_rejects_bad_constructor_arguments(kwargs, error, match):
    arguments = {"dim": 8} | kwargs
    dim = arguments.pop("dim")
    with pytest.raises(error, match=match):
        SinusoidalPositionalEncoding(dim, **arguments)


@pytest.mark.parametrize(
    ("x", "offset", "error", "match"),
    [
        (torch.zeros(5, 8), 0, ValueError, "x must have 3 dimensions"),
        (torch.zeros(1, 2, 5, 8), 0, ValueError, "x must have 3 dimensions"),
        (torch.zeros(2, 5, 6), 0, ValueError, "x has last dimension 6 but the module's dim is 8"),
        (torch.zeros(2, 5, 8, dtype=torch.int64), 0, TypeError, "x must have a floating dtype"),
        ([[[0.0] * 8]], 0, TypeError, "x must be a torch.Tensor"),
        (torch.zeros(2, 5, 8), -1, ValueError, "offset"),
        (torch.zeros(2, 5, 8), 1.0, TypeError, "offset"),
    ],
)
def test_module_forward_rejects_bad_input(x, offset, error, match):
    with pytest.raises(error, match=match):
        SinusoidalPositionalEncoding(8)(x, offset=offset)


@pytest.mark.parametrize(("length", "offset", "error"), [(-1, 0, ValueError), (2.0, 0, TypeError), (3, -2, ValueError)])
def test_module_table_rejects_bad_length_and_offset(length, offset, error):
    with pytest.raises(error, match="length" if offset == 0 else "offset"):
        SinusoidalPositionalEncoding(8).table(length, offset=offset)
