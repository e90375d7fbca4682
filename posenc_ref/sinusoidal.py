r"""Sinusoidal absolute position encodings (Vaswani et al., 2017).

Position ``p`` in a model of dimension ``d`` is encoded by ``d / 2`` pairs of a sine and a cosine, one pair per
frequency ``inv_freq[i] = omega_i``:

.. math::

    PE(p)_{2i} = \sin(p \, \omega_i), \qquad PE(p)_{2i+1} = \cos(p \, \omega_i),
    \qquad \omega_i = \text{base}^{-2i/d}, \quad i = 0, \dots, d/2 - 1.

The frequencies fall geometrically from 1 to almost ``1 / base``, so the wavelengths ``2 pi / omega_i`` run
from ``2 pi`` to almost ``2 pi base``. Because each pair is a point on the unit circle turning at its own
speed, moving from ``p`` to ``p + k`` is a rotation by ``k omega_i`` in every pair: a fixed linear map that
depends on ``k`` only (:func:`shift_matrix`).

Three layouts of the same pairs are in use:

- ``"interleaved"``: sin, cos, sin, cos, ... as in the paper's formula.
- ``"halves"``: all sines, then all cosines (the same values, permuted).
- ``"tensor2tensor"``: halves, with ``omega_i = base^{-i / (d/2 - 1)}`` so that the last frequency is exactly
  ``1 / base``; this is how tensor2tensor's ``get_timing_signal_1d`` and fairseq's
  ``SinusoidalPositionalEmbedding`` compute it.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from posenc_ref._checks import (
    check_choice,
    check_even_dim,
    check_int,
    check_positions,
    check_positive_float,
    check_positive_int,
    check_probability,
    check_tensor,
)

SINUSOIDAL_LAYOUTS: tuple[str, ...] = ("interleaved", "halves", "tensor2tensor")


def _check_floating_dtype(name: str, value: Any) -> torch.dtype:
    if not isinstance(value, torch.dtype) or not value.is_floating_point:
        raise TypeError(f"{name} must be a floating torch.dtype (e.g. torch.float32), got {value!r}")
    return value


def _check_embeddings(x: Any, dim: int) -> torch.Tensor:
    """``x`` must be a floating (batch, seq, dim) tensor; shared with :mod:`posenc_ref.learned`."""
    check_tensor("x", x, ndim=3, floating=True)
    if x.shape[-1] != dim:
        raise ValueError(
            f"x has last dimension {x.shape[-1]} but the module's dim is {dim}; x must be (batch, seq, {dim})"
        )
    return x


def sinusoidal_frequencies(dim: int, *, base: float = 10000.0, layout: str = "interleaved") -> torch.Tensor:
    r"""The frequencies ``inv_freq[i] = omega_i`` of a sinusoidal table, in float64.

    - ``"interleaved"`` and ``"halves"``: ``omega_i = base^{-2i/d}``.
    - ``"tensor2tensor"``: ``omega_i = base^{-i/(d/2 - 1)}``, i.e. ``exp(-i log(base) / (d/2 - 1))``: log-spaced
      from exactly 1 down to exactly ``1 / base``.

    Args:
        dim: the model dimension ``d``, a positive even int (at least 4 for ``"tensor2tensor"``).
        base: the geometric base (10000 in the paper), > 0.
        layout: one of :data:`SINUSOIDAL_LAYOUTS`.

    Returns:
        A float64 tensor of shape ``(d/2,)``. The wavelengths are ``2 pi / inv_freq``.

    Raises:
        TypeError / ValueError: for a bad ``dim``, ``base`` or ``layout``, naming the argument.
    """
    check_even_dim("dim", dim)
    base = check_positive_float("base", base)
    check_choice("layout", layout, SINUSOIDAL_LAYOUTS)
    half = dim // 2
    pair_index = torch.arange(half, dtype=torch.float64)  # (d/2,)
    if layout == "tensor2tensor":
        if dim < 4:
            raise ValueError(
                f"dim must be >= 4 for layout='tensor2tensor' (its exponent -i/(d/2 - 1) divides by "
                f"d/2 - 1, which is 0 for d = 2), got {dim}"
            )
        log_increment = math.log(base) / (half - 1)
        return torch.exp(-log_increment * pair_index)
    return torch.exp(-math.log(base) * (2.0 * pair_index / dim))


def sinusoidal_table(
    length: int,
    dim: int,
    *,
    base: float = 10000.0,
    layout: str = "interleaved",
    offset: int = 0,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    r"""The sinusoidal encodings ``PE(p)`` of positions ``p = offset, ..., offset + length - 1``.

    Row ``r`` holds ``PE(offset + r)``; with ``omega_i`` from :func:`sinusoidal_frequencies`:

    - ``"interleaved"``: ``PE(p)_{2i} = sin(p omega_i)``, ``PE(p)_{2i+1} = cos(p omega_i)``.
    - ``"halves"`` and ``"tensor2tensor"``: ``PE(p)_i = sin(p omega_i)``, ``PE(p)_{d/2+i} = cos(p omega_i)``.

    The angles ``p omega_i`` are computed in float64 and the table is cast to ``dtype`` at the end: in
    float32 the position 10^8 + 1 is not even representable (it rounds to 10^8), and the fastest angle would be
    off by a whole radian.

    Args:
        length: the number of positions, >= 1.
        dim: the model dimension ``d``, a positive even int.
        base, layout: as in :func:`sinusoidal_frequencies`.
        offset: the first position, >= 0 (for cached decoding).
        dtype: a floating dtype for the result.
        device: where the result lives.

    Returns:
        A tensor of shape ``(length, d)``.

    Raises:
        TypeError / ValueError: for any bad argument, naming it.
    """
    check_positive_int("length", length)
    check_even_dim("dim", dim)
    check_int("offset", offset, minimum=0)
    _check_floating_dtype("dtype", dtype)
    inv_freq = sinusoidal_frequencies(dim, base=base, layout=layout)  # (d/2,)
    positions = torch.arange(offset, offset + length, dtype=torch.int64).to(torch.float64)  # (length,)
    angles = positions[:, None] * inv_freq[None, :]  # (length, d/2)
    sines, cosines = torch.sin(angles), torch.cos(angles)
    if layout == "interleaved":
        table = torch.stack((sines, cosines), dim=-1).reshape(length, dim)  # (length, d/2, 2) -> (length, d)
    else:
        table = torch.cat((sines, cosines), dim=-1)  # (length, d)
    return table.to(dtype=dtype, device=device)


def shift_matrix(k: int, dim: int, *, base: float = 10000.0, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    r"""The linear map that moves an interleaved encoding by ``k`` positions: ``M_k PE(p) = PE(p + k)``.

    Derivation: write ``a = p omega_i`` and ``b = k omega_i``. The angle-addition identities give

    .. math::

        \sin(a + b) = \cos b \, \sin a + \sin b \, \cos a, \qquad
        \cos(a + b) = -\sin b \, \sin a + \cos b \, \cos a,

    so the pair ``(sin a, cos a)`` at features ``(2i, 2i + 1)`` is mapped to the pair at ``p + k`` by

    .. math::

        \begin{pmatrix} \cos k\omega_i & \sin k\omega_i \\ -\sin k\omega_i & \cos k\omega_i \end{pmatrix}.

    Stacking these ``d/2`` blocks on the diagonal gives ``M_k``. The coefficients involve ``k`` but not
    ``p``, so one matrix shifts every position; each block is a rotation, so ``M_k`` is orthogonal and
    ``M_{-k} = M_k^T = M_k^{-1}``. (For the ``"halves"`` layouts conjugate by the permutation between the
    layouts.)

    Args:
        k: the shift, any int (negative shifts move backwards).
        dim: the model dimension ``d``, a positive even int.
        base: the geometric base of the frequencies, > 0.
        dtype: a floating dtype for the result (built in float64, then cast).

    Returns:
        A ``(d, d)`` block-diagonal tensor.

    Raises:
        TypeError / ValueError: for a non-int ``k`` or a bad ``dim``, ``base`` or ``dtype``.
    """
    check_int("k", k)
    check_even_dim("dim", dim)
    _check_floating_dtype("dtype", dtype)
    angles = k * sinusoidal_frequencies(dim, base=base, layout="interleaved")  # (d/2,)
    cosines, sines = torch.cos(angles), torch.sin(angles)
    blocks = torch.stack(
        (torch.stack((cosines, sines), dim=-1), torch.stack((-sines, cosines), dim=-1)), dim=-2
    )  # (d/2, 2, 2)
    return torch.block_diag(*blocks).to(dtype)  # (d, d)


def _rows_at(module: nn.Module, positions: torch.Tensor, x: torch.Tensor, offset: int) -> torch.Tensor:
    """The rows ``module.table(max + 1)[positions]``, shape ``(seq, d)``, as the table holds them."""
    check_positions("positions", positions, x.shape[1])
    if offset:
        raise ValueError(f"give either offset or positions, not both; got offset={offset} and positions")
    if positions.device != x.device:
        raise ValueError(f"positions are on {positions.device} but x is on {x.device}; they must be on one device")
    needed = int(positions.max()) + 1 if positions.numel() else 0
    table = module.table(needed)  # (needed, d)
    return table[positions.to(table.device).long()]  # (seq, d)


class SinusoidalPositionalEncoding(nn.Module):
    r"""Adds the sinusoidal table to token embeddings, as in the original Transformer.

    ``forward(x) = dropout(x_scaled + PE[offset : offset + seq])`` with ``x_scaled = x sqrt(d)`` when
    ``scale_embeddings`` is set (the paper multiplies the embeddings by ``sqrt(d_model)``) and ``x``
    otherwise. The dropout acts on the sum, as in the paper.

    The table is a cache, not a parameter: a non-persistent float32 buffer (so ``state_dict()`` is empty)
    that grows on demand to the next power of two of rows that covers the positions asked for. There is no
    length cap: the formula extends to any position. At use it is cast to the dtype and device of ``x``.

    Args:
        dim: the model dimension ``d``, a positive even int.
        base, layout: as in :func:`sinusoidal_table`.
        scale_embeddings: multiply ``x`` by ``sqrt(d)`` before adding.
        dropout: the dropout probability, in [0, 1).
    """

    _INITIAL_LENGTH = 128  # rows built at construction; enough for short inputs without a rebuild

    def __init__(
        self,
        dim: int,
        *,
        base: float = 10000.0,
        layout: str = "interleaved",
        scale_embeddings: bool = False,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        if not isinstance(scale_embeddings, bool):
            raise TypeError(f"scale_embeddings must be a bool, got {scale_embeddings!r}")
        self.dim = check_even_dim("dim", dim)
        self.base = check_positive_float("base", base)
        self.layout = check_choice("layout", layout, SINUSOIDAL_LAYOUTS)
        self.scale_embeddings = scale_embeddings
        self.dropout = nn.Dropout(check_probability("dropout", dropout))
        initial = sinusoidal_table(self._INITIAL_LENGTH, dim, base=self.base, layout=layout)  # (rows, d)
        self.register_buffer("cached_table", initial, persistent=False)

    def table(self, length: int, *, offset: int = 0) -> torch.Tensor:
        """The cached float32 rows ``PE(offset), ..., PE(offset + length - 1)``, shape ``(length, d)``.

        Grows the cache first if it is too short. ``length`` may be 0 (an empty sequence).

        Raises:
            TypeError / ValueError: if ``length`` or ``offset`` is not an int >= 0.
        """
        check_int("length", length, minimum=0)
        check_int("offset", offset, minimum=0)
        needed = offset + length
        if needed > self.cached_table.shape[0]:
            new_length = 1 << (needed - 1).bit_length()  # the next power of two >= needed
            self.cached_table = sinusoidal_table(
                new_length, self.dim, base=self.base, layout=self.layout, device=self.cached_table.device
            )
        return self.cached_table[offset:needed]  # (length, d)

    def forward(self, x: torch.Tensor, *, offset: int = 0, positions: torch.Tensor | None = None) -> torch.Tensor:
        """``dropout(x_scaled + PE[offset : offset + seq])`` for ``x`` of shape (batch, seq, d).

        ``positions``, a 1-D integer tensor ``(seq,)``, gives each token its own position instead
        (``x_scaled + PE[positions]``; e.g. the sorted random positions of Ruoss et al. 2023); ``offset`` must
        then stay 0.

        Raises:
            TypeError / ValueError: if ``x`` is not a floating 3-D tensor with last dimension ``d``, ``offset``
            is not an int >= 0, ``positions`` is not a 1-D integer tensor of ``seq`` entries >= 0, or both
            ``offset`` and ``positions`` are given.
        """
        _check_embeddings(x, self.dim)
        check_int("offset", offset, minimum=0)
        if positions is not None:
            rows = _rows_at(self, positions, x, offset).to(dtype=x.dtype, device=x.device)  # (seq, d)
        else:
            rows = self.table(x.shape[1], offset=offset).to(dtype=x.dtype, device=x.device)  # (seq, d)
        scaled = x * math.sqrt(self.dim) if self.scale_embeddings else x
        return self.dropout(scaled + rows)  # (batch, seq, d)

    def extra_repr(self) -> str:
        return (
            f"dim={self.dim}, base={self.base}, layout={self.layout!r}, scale_embeddings={self.scale_embeddings}"
        )
