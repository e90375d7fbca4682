r"""Learned absolute position embeddings, and concatenation as the alternative to addition.

A learned table (GPT-2, BERT) is a trained matrix ``W`` of shape ``(max_len, d)``: position ``p`` is encoded by
its row, ``PE(p) = W[p]``, and the encoding is added to the token embedding, ``x_p + W[p]``. Unlike the
sinusoidal formula it has no row for a position ``p >= max_len``, so it cannot run on longer inputs, and a
row only learns from the training inputs that reach its position.

Instead of adding, the position code can be concatenated: ``[x_p ; PE(p)]`` keeps content and position in
separate features, at the cost of a wider model (``d + pos_dim`` features).
"""

from __future__ import annotations

import torch
from torch import nn

from posenc_ref._checks import (
    check_choice,
    check_even_dim,
    check_int,
    check_positions,
    check_positive_float,
    check_positive_int,
    check_same_dtype_and_device,
    check_tensor,
)
from posenc_ref.sinusoidal import SinusoidalPositionalEncoding, _check_embeddings, _rows_at

CONCAT_KINDS: tuple[str, ...] = ("sinusoidal", "learned")


class LearnedPositionalEmbedding(nn.Module):
    r"""A trained table of absolute positions, added to the input: ``forward(x) = x + W[offset : offset + seq]``.

    ``W`` is the parameter ``weight`` of shape ``(max_len, d)``, initialised from ``N(0, init_std^2)``;
    the default 0.02 is GPT-2's and BERT's, whose token embeddings start at the same scale. The input and ``weight`` must share a dtype and a device (move the module with ``.to``):
    a trained parameter is not cast behind the caller's back.

    Args:
        max_len: the number of positions the table covers, >= 1.
        dim: the model dimension ``d``, >= 1.
        init_std: the standard deviation of the initial rows, > 0: the scale of the token embeddings the
            table is added to.

    Raises:
        TypeError / ValueError: for a ``max_len`` or ``dim`` that is not a positive int, an ``init_std`` that
            is not a positive number.
    """

    def __init__(self, max_len: int, dim: int, *, init_std: float = 0.02) -> None:
        super().__init__()
        self.max_len = check_positive_int("max_len", max_len)
        self.dim = check_positive_int("dim", dim)
        self.init_std = check_positive_float("init_std", init_std)
        self.weight = nn.Parameter(torch.empty(max_len, dim))  # (max_len, d)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.normal_(self.weight, mean=0.0, std=self.init_std)

    def table(self, length: int, *, offset: int = 0) -> torch.Tensor:
        """The rows ``W[offset : offset + length]``, shape ``(length, d)``; gradients flow into ``weight``.

        Raises:
            TypeError / ValueError: if ``length`` or ``offset`` is not an int >= 0, or if
            ``offset + length > max_len`` (the message names both lengths).
        """
        check_int("length", length, minimum=0)
        check_int("offset", offset, minimum=0)
        needed = offset + length
        if needed > self.max_len:
            raise ValueError(
                f"input needs positions up to {needed} (offset {offset} + seq {length}) but max_len is "
                f"{self.max_len}: a learned table has no rows beyond max_len; use a shorter input or a "
                f"smaller offset, a larger max_len, or an encoding defined for every position (sinusoidal)"
            )
        return self.weight[offset:needed]  # (length, d)

    def forward(self, x: torch.Tensor, *, offset: int = 0, positions: torch.Tensor | None = None) -> torch.Tensor:
        """``x + W[offset : offset + seq]`` for ``x`` of shape (batch, seq, d).

        ``positions``, a 1-D integer tensor ``(seq,)``, gives each token its own row instead
        (``x + W[positions]``; e.g. the sorted random positions of Ruoss et al. 2023); ``offset`` must then
        stay 0.

        Raises:
            TypeError / ValueError: if ``x`` is not a floating 3-D tensor with last dimension ``d``, has
            another dtype or device than ``weight``, or needs positions beyond ``max_len``; for a bad
            ``offset`` or ``positions`` (see :class:`~posenc_ref.sinusoidal.SinusoidalPositionalEncoding`).
        """
        _check_embeddings(x, self.dim)
        if positions is not None:
            check_int("offset", offset, minimum=0)
            check_positions("positions", positions, x.shape[1])
            if positions.numel() and int(positions.max()) >= self.max_len:
                raise ValueError(f"positions reach {int(positions.max())} but the table has rows 0 .. "
                                 f"{self.max_len - 1} (max_len={self.max_len}); use a larger max_len")
            rows = _rows_at(self, positions, x, offset)  # (seq, d)
        else:
            rows = self.table(x.shape[1], offset=offset)  # (seq, d)
        check_same_dtype_and_device(x=x, weight=rows)
        return x + rows  # (batch, seq, d)

    def extra_repr(self) -> str:
        return f"max_len={self.max_len}, dim={self.dim}, init_std={self.init_std}"


class ConcatPositionalEncoding(nn.Module):
    r"""Concatenates a position code to the input: ``forward(x)_p = [x_p ; PE(p)]``.

    Maps ``(batch, seq, d)`` to ``(batch, seq, d + pos_dim)``: the first ``d`` features are ``x`` unchanged,
    the last ``pos_dim`` the code of position ``offset + s``.

    Args:
        pos_dim: the width of the position code, >= 1 (even for ``"sinusoidal"``).
        kind: ``"sinusoidal"`` (the fixed table of :func:`posenc_ref.sinusoidal.sinusoidal_table`, interleaved,
            cast to the dtype of ``x``) or ``"learned"`` (a :class:`LearnedPositionalEmbedding` of ``max_len``
            rows, which must share the dtype of ``x``).
        max_len: required for ``"learned"``; must be left as None for ``"sinusoidal"``, which has no cap.
        base: the base of the sinusoidal frequencies, > 0 (unused by ``"learned"``).

    Raises:
        TypeError / ValueError: for a bad ``pos_dim``, an unknown ``kind``, a missing ``max_len`` for
        ``"learned"`` or a ``max_len`` given for ``"sinusoidal"``.
    """

    def __init__(
        self, pos_dim: int, *, kind: str = "sinusoidal", max_len: int | None = None, base: float = 10000.0
    ) -> None:
        super().__init__()
        self.kind = check_choice("kind", kind, CONCAT_KINDS)
        check_positive_float("base", base)
        self.encoding: SinusoidalPositionalEncoding | LearnedPositionalEmbedding
        if kind == "sinusoidal":
            self.pos_dim = check_even_dim("pos_dim", pos_dim)
            if max_len is not None:
                raise ValueError(
                    f"max_len must be None for kind='sinusoidal' (the table covers every position), "
                    f"got {max_len!r}; use kind='learned' for a table of max_len rows"
                )
            self.encoding = SinusoidalPositionalEncoding(pos_dim, base=base)
        else:
            self.pos_dim = check_positive_int("pos_dim", pos_dim)
            if max_len is None:
                raise ValueError("max_len is required for kind='learned' (the number of rows of the table)")
            self.encoding = LearnedPositionalEmbedding(max_len, pos_dim)

    def output_dim(self, input_dim: int) -> int:
        """The width of the output, ``input_dim + pos_dim``."""
        return check_positive_int("input_dim", input_dim) + self.pos_dim

    def forward(self, x: torch.Tensor, *, offset: int = 0) -> torch.Tensor:
        """``cat([x, PE[offset : offset + seq]], dim=-1)`` for ``x`` of shape (batch, seq, d).

        Raises:
            TypeError / ValueError: if ``x`` is not a floating 3-D tensor, for a bad ``offset``, and for
            ``"learned"`` if ``x`` needs positions beyond ``max_len`` or has another dtype or device.
        """
        check_tensor("x", x, ndim=3, floating=True)
        batch, seq, _ = x.shape
        rows = self.encoding.table(seq, offset=offset)  # (seq, pos_dim)
        if self.kind == "sinusoidal":
            rows = rows.to(dtype=x.dtype, device=x.device)
        else:
            check_same_dtype_and_device(x=x, weight=rows)
        codes = rows.expand(batch, seq, self.pos_dim)  # (batch, seq, pos_dim)
        return torch.cat((x, codes), dim=-1)  # (batch, seq, d + pos_dim)

    def extra_repr(self) -> str:
        return f"pos_dim={self.pos_dim}, kind={self.kind!r}"
