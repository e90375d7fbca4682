r"""Offset attention split at a band: far keys by SDPA's flash kernel, near keys written out, merged exactly.

ALiBi, T5 and Shaw et al. change the logit of query position :math:`p_i` and key j through the offset
:math:`r = j - p_i` only, and outside a band :math:`-D_L < r < D_R` that change is simple:

=====  =========================================================  ==============================================
kind   position term                                              outside the band
=====  =========================================================  ==============================================
alibi  :math:`b_h(r) = -m_h |r|`                                  affine: :math:`m_h r` left, :math:`-m_h r` right
                                                                  (:math:`D_L = D_R = 1`)
t5     :math:`b_h(r) = \text{bias\_table}[\text{bucket}(r), h]`   constant once the bucket saturates (from
                                                                  :math:`|r| = 91` with the defaults)
shaw   :math:`s\,q_i \cdot a^K_{c(r)}` and :math:`a^V_{c(r)}`      :math:`c(r)` is 0 (left) or 2k (right): one
                                                                  vector per side (:math:`D = k`)
=====  =========================================================  ==============================================

The keys of each query then fall into a *left tail* (:math:`r \le -D_L`), the *band* and, without
``causal``, a *right tail* (:math:`r \ge D_R`). SDPA's CPU flash kernel
(``aten._scaled_dot_product_flash_attention_for_cpu``) computes each tail and returns its output and
log-sum-exp :math:`L_t`; the band, at most B + D_L + D_R - 2 keys for a block of B queries, is computed with
its bias read from a template built once per call (the bias depends on r only, so one template serves every
block). The parts merge without approximation:

.. math:: L_i = \log \sum_t e^{L_{t,i}}, \qquad \text{out}_i = \sum_t e^{L_{t,i} - L_i}\, \text{out}_{t,i}.

*Constant tails* (T5, Shaw): the position term is one number per row, :math:`b_h(\mp D)` or
:math:`s\,q_i \cdot a^K_{0|2k}`, added to :math:`L_t`; Shaw's value vector, whose weights in the tail sum to
one, is added to the output. The left tail of query i is the keys :math:`j \le p_i - D_L`: the kernel's own
causal mask, shifted by :math:`p_0 - D_L` rows, so one kernel call covers every query (the right tail is the
same after reversing both sequences).

*Affine tails* (ALiBi): :math:`b(r) = b(r_0) + \beta (r - r_0)` with :math:`r_0 = -D_L` (left) or
:math:`D_R` (right). Per block of queries at :math:`p_0 .. p_1` the tails are cut at the block's edges,
:math:`j \le p_0 - D_L` and :math:`j \ge p_1 + D_R`, and with :math:`j_0 = p_0 - D_L` or :math:`p_1 + D_R`

.. math:: b = \underbrace{\beta\,(j - j_0)}_{\text{per key}}
          + \underbrace{b(r_0) + \beta\,(p_\text{ref} - p_i)}_{\text{per row}},
          \qquad p_\text{ref} = p_0 \text{ (left)}, \; p_1 \text{ (right)}:

the per-key term enters the kernel as a mask broadcast over the rows, the per-row term shifts
:math:`L_t`. The per-key term is at most 0 and 0 at the key nearest the band, so the logits near a row's
maximum stay small and keep float32's precision.

Every row has a key in the band or in its left tail, so no merged log-sum-exp is empty (a part with no key
for a row carries :math:`L = -\infty` and weight 0). The blocks whose band lies inside the keys go to one
call, stacked in the batch dimension (Shaw pads the keys and hides the padding, so all of them do).
Working memory: the output, the tails' outputs and the bands' logits, (batch, heads, q_len, B + D_L + D_R)
at most; never (q_len, k_len). The kernel's log-sum-exp has no gradient, so this path
runs without autograd, on CPU; 16-bit inputs are computed in float32. On CUDA the kinds with constant
tails (T5, Shaw) run too: the tails by SDPA's flash (or cuDNN) kernel in the inputs' dtype, causal calls cut
into squares, the bands written out in float32 (:func:`cuda_with_logsumexp`).

Threads: the kernels (the tails', and the band's of ALiBi and T5, which for T5 is about a sixth of the
time at L = 4096) run on every thread; Shaw's band passes and the merges, a few MiB each, run on one
(:func:`posenc_ref.fast.threads.serial_unless_large`), because on a busy CPU a parallel pass waits longer
for the pool's other threads than it works.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from posenc_ref.fast.offset_bias import bias_compute_dtype
from posenc_ref.fast.threads import kernel_threads, serial_unless_large
from posenc_ref.relative import relative_position_bucket

BAND_BLOCK = 64  # queries per block with constant tails: bands of B + D - 1 keys, computed together
SHAW_BLOCK = 32  # Shaw's band is written out (logits, softmax, products): a narrower one wastes fewer columns
AFFINE_BLOCK = 256  # queries per block with affine tails: the tails are cut at block edges, a call each


CONSTANT_TAIL_POSITIONS = ("t5", "shaw")  # the kinds whose tails need no mask: they also run on CUDA
CUDA_TAIL_KERNEL = "flash"  # 16-bit tails on CUDA: "flash" or "cudnn" (float32 takes "efficient")


def banded_available(device: torch.device | str = "cpu") -> bool:
    """True when this torch has, for ``device``, an SDPA kernel that returns the log-sum-exp as an operator
    (CPU: the flash kernel; CUDA: the flash and memory-efficient kernels, and a CUDA device)."""
    device = torch.device(device)
    if device.type == "cpu":
        return hasattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu")
    if device.type == "cuda":
        return (torch.cuda.is_available() and hasattr(torch.ops.aten, "_scaled_dot_product_flash_attention")
                and hasattr(torch.ops.aten, "_scaled_dot_product_efficient_attention"))
    return False


def check_banded_can_run(device: torch.device, *tensors: torch.Tensor | None, name: str = "banded",
                         constant_tails: bool = False) -> None:
    """Raise ValueError when the banded path (or another built on the same kernels, ``name``) cannot run:
    autograd needed, no such kernel, or a device other than CPU -- CUDA too for kinds with
    ``constant_tails`` (T5, Shaw), whose tails need no mask."""
    devices = ("cpu", "cuda") if constant_tails else ("cpu",)
    if device.type not in devices:
        raise ValueError(f"implementation={name!r} runs on {' and '.join(devices)} only for this position, got "
                         f"tensors on {device}")
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors):
        raise ValueError(f"implementation={name!r} has no backward (the kernel's log-sum-exp has no gradient); "
                         "inputs require grad. Use implementation='auto' or run under torch.no_grad()")
    if not banded_available(device):
        raise ValueError(f"implementation={name!r} needs SDPA's {device.type} kernels that return the "
                         f"log-sum-exp, missing from torch {torch.__version__} or without a device here")


def flash_with_logsumexp(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, scale: float,
                         mask: torch.Tensor | None = None, diagonal: bool = False
                         ) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(s q k^T + mask) v and its log-sum-exp per row, by an SDPA kernel that returns both.

    q (batch, heads, rows, head_dim), k and v (batch, heads, keys, head_dim), mask broadcastable to
    (batch, heads, rows, keys); ``diagonal``: row i sees keys j <= i only (the kernel then skips the key
    tiles above the diagonal). Returns out (batch, heads, rows, head_dim) and lse (batch, heads, rows).
    A row whose keys are all masked comes back as 0 with lse 0, not -inf: callers never pass one.

    CPU: the flash kernel, on the threads from before any
    :func:`~posenc_ref.fast.threads.serial_unless_large` block around it
    (:func:`~posenc_ref.fast.threads.kernel_threads`). CUDA: :func:`cuda_with_logsumexp`, out in float32.
    """
    if q.device.type != "cpu":
        return cuda_with_logsumexp(q, k, v, scale=scale, mask=mask, diagonal=diagonal)
    with kernel_threads():
        return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, diagonal, attn_mask=mask,
                                                                          scale=scale)


def written_out_with_logsumexp(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, scale: float,
                               mask: torch.Tensor | None = None, diagonal: bool = False
                               ) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`flash_with_logsumexp` written out in float32 on any device, for the narrow bands: logits
    (batch, heads, rows, keys), their log-sum-exp, the weights, the product. Same arguments and results."""
    q, k, v = q.float(), k.float(), v.float()
    logits = (q * scale) @ k.transpose(-2, -1)  # (batch, heads, rows, keys)
    if mask is not None:
        logits = logits + mask
    if diagonal:
        rows, keys = logits.shape[-2:]
        above = torch.ones(rows, keys, dtype=torch.bool, device=q.device).triu_(1)  # (rows, keys): j > i
        logits = logits.masked_fill(above, float("-inf"))
    lse = torch.logsumexp(logits, dim=-1)  # (batch, heads, rows)
    return torch.exp(logits - lse[..., None]) @ v, lse


def causal_as_squares(kernel, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """Row i sees keys j <= i (top-left), by a ``kernel(q, k, v, causal)`` -> (out, lse) that is given causal
    problems only as squares: kernels disagree on where the diagonal of a non-square causal mask lies.

    Keys after the last row are never seen, so they are cut; with fewer keys than rows, the rows from
    k_len on see every key, without a mask.
    """
    rows, keys = q.shape[2], k.shape[2]
    if keys >= rows:
        return kernel(q, k[:, :, :rows], v[:, :, :rows], True)
    square_out, square_lse = kernel(q[:, :, :keys], k, v, True)
    rest_out, rest_lse = kernel(q[:, :, keys:], k, v, False)
    return torch.cat((square_out, rest_out), dim=2), torch.cat((square_lse, rest_lse), dim=2)


def _cuda_kernel(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, *, scale: float
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """One CUDA SDPA kernel that returns the log-sum-exp: flash or cuDNN (:data:`CUDA_TAIL_KERNEL`) for
    16-bit inputs with head_dim a multiple of 8 up to 256, else memory-efficient. Out in float32."""
    rows, head_dim = q.shape[2], q.shape[3]
    sixteen_bit = q.dtype in (torch.float16, torch.bfloat16) and head_dim % 8 == 0 and head_dim <= 256
    if sixteen_bit and CUDA_TAIL_KERNEL == "cudnn":
        result = torch.ops.aten._scaled_dot_product_cudnn_attention(q, k, v, None, True, 0.0, causal, False,
                                                                   scale=scale)
    elif sixteen_bit:
        result = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, causal, False, scale=scale)
    else:
        result = torch.ops.aten._scaled_dot_product_efficient_attention(q, k, v, None, True, 0.0, causal,
                                                                       scale=scale)
    out, lse = result[0], result[1]
    lse = lse.reshape(*q.shape[:2], -1)[..., :rows]  # (batch, heads, rows): some kernels pad or add an axis
    return out.float(), lse.float()


def cuda_with_logsumexp(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, scale: float,
                        mask: torch.Tensor | None = None, diagonal: bool = False
                        ) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`flash_with_logsumexp` on CUDA: the tails (no mask) by SDPA's kernels in the inputs' dtype,
    causal ones cut into squares (:func:`causal_as_squares`); a masked call (a band, a few dozen keys) written
    out in float32 (:func:`written_out_with_logsumexp`). Out float32, lse float32."""
    if mask is not None:
        return written_out_with_logsumexp(q, k, v, scale=scale, mask=mask, diagonal=diagonal)

    def kernel(q_part, k_part, v_part, causal):
        return _cuda_kernel(q_part, k_part, v_part, causal, scale=scale)

    return causal_as_squares(kernel, q, k, v) if diagonal else kernel(q, k, v, False)


@dataclass(frozen=True)
class Tail:
    """The position term of one tail: :math:`b(r) = b(r_0) + \\beta (r - r_0)`, plus a value vector."""

    at_edge: torch.Tensor  # b_i(r_0): (heads,) or (batch, heads, rows)
    slope: torch.Tensor | None = None  # beta (heads,); None for a constant tail
    value: torch.Tensor | None = None  # (head_dim,) added to every output row of the tail (Shaw's a^V)


class BandedPosition(Protocol):
    """What a position kind tells :func:`banded_attention`: its reaches, its tails and its band."""

    left_reach: int  # D_L >= 1: keys with r <= -D_L form the left tail
    right_reach: int  # D_R >= 1: keys with r >= D_R form the right tail
    constant_tails: bool  # tails cut per row (constant) rather than at block edges (affine)

    def tail(self, side: str, q_rows: torch.Tensor) -> Tail: ...

    def band(self, q_block: torch.Tensor, k_band: torch.Tensor, v_band: torch.Tensor, first_column: int
             ) -> tuple[torch.Tensor, torch.Tensor]: ...


def band_template(left_reach: int, right_reach: int, block: int, *, causal: bool, constant_tails: bool,
                  device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The offsets r = j - p_i of a block's band, and which of them are hidden from the row.

    Row a is the query at p_0 + a, column c the key j = p_0 - D_L + 1 + c; width B + D_L + D_R - 2
    (B + D_L - 1 when causal: the keys after p_1 are never seen). Hidden: keys after the query when causal,
    and with constant tails the keys that belong to the row's own tails (r <= -D_L or r >= D_R).

    Returns (block, width) int64 offsets and (block, width) bool hidden.
    """
    width = block + left_reach - 1 + (0 if causal else right_reach - 1)
    columns = torch.arange(width, device=device) - (left_reach - 1)  # (width,)
    offsets = columns[None, :] - torch.arange(block, device=device)[:, None]  # (block, width)
    hidden = torch.zeros_like(offsets, dtype=torch.bool)
    if causal:
        hidden |= offsets > 0
    if constant_tails:
        hidden |= (offsets <= -left_reach) | (offsets >= right_reach)
    return offsets, hidden


class OffsetBiasBand:
    r"""ALiBi (affine tails) or T5 (constant tails) for :func:`banded_attention`: :math:`b_h(r)` from r alone."""

    def __init__(self, position: str, params: dict[str, Any], *, scale: float, causal: bool, block: int,
                 dtype: torch.dtype, device: torch.device):
        self.position, self.params, self.scale, self.dtype, self.causal = position, params, scale, dtype, causal
        if position == "alibi":
            slopes = params["slopes"].to(dtype)  # (heads,)
            self.left_reach, self.right_reach, self.constant_tails = 1, 1, False
            self.slopes = {"left": slopes, "right": -slopes}  # -m|r| = m r (r <= 0), -m r (r >= 0)
        else:
            self.left_reach, self.right_reach = t5_reaches(params["bidirectional"], params["bias_table"].shape[0],
                                                           params["max_distance"])
            self.constant_tails = True
            self.slopes = {"left": None, "right": None}
        offsets, hidden = band_template(self.left_reach, self.right_reach, block, causal=causal,
                                        constant_tails=self.constant_tails, device=device)
        self.template = self.bias_at(offsets).masked_fill(hidden, float("-inf"))  # (heads, block, width)
        self.tails = {side: Tail(at_edge=self.bias_at(torch.tensor(edge, device=device)), slope=self.slopes[side])
                      for side, edge in (("left", -self.left_reach), ("right", self.right_reach))}

    def bias_at(self, offsets: torch.Tensor) -> torch.Tensor:
        """(heads, *offsets.shape) bias b_h(r) for an integer tensor of offsets r, as the reference has it."""
        if self.position == "alibi":
            slopes = self.params["slopes"].to(self.dtype).reshape(-1, *[1] * offsets.ndim)
            return -slopes * offsets.abs().to(self.dtype)
        table = self.params["bias_table"].to(self.dtype)  # (num_buckets, heads)
        buckets = relative_position_bucket(offsets, bidirectional=self.params["bidirectional"],
                                           num_buckets=table.shape[0], max_distance=self.params["max_distance"])
        return table[buckets].movedim(-1, 0)  # (heads, *offsets.shape)

    def tail(self, side: str, q_rows: torch.Tensor) -> Tail:
        return self.tails[side]

    def band(self, q_block, k_band, v_band, first_column):
        rows, keys = q_block.shape[2], k_band.shape[2]
        mask = self.template[None, :, :rows, first_column:first_column + keys]  # (1, heads, rows, keys)
        # ALiBi's causal band is the block's diagonal square: the kernel can skip the tiles above it
        square = self.causal and not self.constant_tails and first_column == 0 and rows == keys
        return flash_with_logsumexp(q_block, k_band, v_band, scale=self.scale, mask=mask, diagonal=square)


def offset_bias_band(position: str, params: dict[str, Any], *, scale: float, causal: bool, block: int,
                     dtype: torch.dtype, device: torch.device) -> OffsetBiasBand:
    """An :class:`OffsetBiasBand`, kept for the same parameter *values* (its template costs a dozen small
    operations, each a parallel loop that a busy CPU makes wait): a changed slope or table entry is a new key."""
    table = params["slopes"] if position == "alibi" else params["bias_table"]
    options = (params.get("bidirectional"), params.get("max_distance"), scale, causal, block, dtype, device)
    return _cached_offset_bias_band(position, tuple(table.flatten().tolist()), tuple(table.shape), table.dtype,
                                    *options)


@functools.lru_cache(maxsize=8)
def _cached_offset_bias_band(position, values, shape, table_dtype, bidirectional, max_distance, scale, causal,
                             block, dtype, device) -> OffsetBiasBand:
    table = torch.tensor(values, dtype=table_dtype, device=device).reshape(shape)
    params = ({"slopes": table} if position == "alibi"
              else {"bias_table": table, "bidirectional": bidirectional, "max_distance": max_distance})
    return OffsetBiasBand(position, params, scale=scale, causal=causal, block=block, dtype=dtype, device=device)


@functools.lru_cache(maxsize=64)
def t5_reaches(bidirectional: bool, num_buckets: int, max_distance: int) -> tuple[int, int]:
    """(D_L, D_R): the smallest distances from which T5's bucket no longer changes, left and right.

    The bucket is monotone in the distance and constant from ``max_distance`` on (the log scale has passed
    the last bucket there), so D is the first distance whose bucket is that of ``max_distance``.
    """
    distances = torch.arange(1, max_distance + 1)  # (max_distance,)
    reaches = []
    for sign in (-1, 1):
        buckets = relative_position_bucket(sign * distances, bidirectional=bidirectional, num_buckets=num_buckets,
                                           max_distance=max_distance)
        reaches.append(int(torch.nonzero(buckets == buckets[-1])[0, 0]) + 1)
    return reaches[0], reaches[1]


class ShawBand:
    r"""Shaw et al. for :func:`banded_attention`: :math:`s\,q_i \cdot a^K_{c(r)}` and :math:`a^V_{c(r)}`."""

    constant_tails = True
    hides_padded_keys = True  # its band takes hidden_keys: every block in one call, the keys padded

    def __init__(self, rel_k_table: torch.Tensor, rel_v_table: torch.Tensor, *, scale: float, causal: bool,
                 block: int, dtype: torch.dtype):
        self.rel_k_table, self.rel_v_table = rel_k_table.to(dtype), rel_v_table.to(dtype)  # (2k+1, head_dim)
        self.max_distance = (rel_k_table.shape[0] - 1) // 2
        self.left_reach = self.right_reach = max(self.max_distance, 1)
        self.scale = scale
        offsets, self.hidden = band_template(self.left_reach, self.right_reach, block, causal=causal,
                                             constant_tails=True, device=rel_k_table.device)
        self.index = offsets.clamp(-self.max_distance, self.max_distance) + self.max_distance  # (block, width)
        # the column of bucket c = r + k in row a, r = column - (D_L - 1) - a, for the band's -D_L < r < D_R
        # (r <= 0 when causal: no key after the query); 0 < c < 2k, or c = 0 when k = 0
        self.inner_buckets = slice(self.max_distance - self.left_reach + 1,
                                   self.max_distance + (1 if causal else self.right_reach))
        inner = torch.arange(2 * self.max_distance + 1, device=rel_k_table.device)[self.inner_buckets]
        self.bucket_columns = (inner[None, :] - self.max_distance + (self.left_reach - 1)
                               + torch.arange(block, device=rel_k_table.device)[:, None])  # (block, buckets)

    def tail(self, side: str, q_rows: torch.Tensor) -> Tail:
        row = 0 if side == "left" else 2 * self.max_distance
        at_edge = self.scale * (q_rows.to(self.rel_k_table.dtype) @ self.rel_k_table[row])  # (batch, heads, rows)
        return Tail(at_edge=at_edge, value=self.rel_v_table[row])

    def band(self, q_block, k_band, v_band, first_column, hidden_keys=None):
        """As the protocol, for whole windows only (first_column 0, every column; the keys outside the
        sequence padded), and ``hidden_keys`` (batch, keys) bool: the padding, one row per block."""
        batch, heads, rows, _ = q_block.shape
        keys = k_band.shape[2]
        if first_column != 0 or keys != self.index.shape[1]:
            raise ValueError(f"ShawBand.band takes whole windows of {self.index.shape[1]} keys from column 0, got "
                             f"{keys} keys from column {first_column}")
        columns = slice(first_column, first_column + keys)
        index = self.index[:rows, columns].expand(batch, heads, rows, keys)
        hidden = self.hidden[:rows, columns]  # (rows, keys)
        if hidden_keys is not None:
            hidden = hidden | hidden_keys[:, None, None, :]  # (batch, 1, rows, keys)
        compute = self.rel_k_table.dtype  # float32 for 16-bit inputs, which stay 16-bit in the tails on CUDA
        q_block, k_band, v_band = q_block.to(compute), k_band.to(compute), v_band.to(compute)
        q_scaled = q_block * self.scale  # (batch, heads, rows, head_dim)
        relative = q_scaled @ self.rel_k_table.transpose(0, 1)  # (batch, heads, rows, 2k+1)
        logits = q_scaled @ k_band.transpose(-2, -1)  # (batch, heads, rows, keys)
        logits.add_(relative.gather(-1, index)).masked_fill_(hidden, float("-inf"))
        # softmax and log-sum-exp in place (each new (batch, heads, rows, keys) tensor costs an allocation)
        largest = logits.amax(dim=-1, keepdim=True)  # (batch, heads, rows, 1)
        weights = logits.sub_(largest).exp_()  # (batch, heads, rows, keys), unnormalized
        total = weights.sum(dim=-1, keepdim=True)  # (batch, heads, rows, 1)
        weights.div_(total)
        lse = (largest + total.log()).squeeze(-1)  # (batch, heads, rows)
        # Inside the band every key of a row has its own bucket c = r + k, 0 < c < 2k (the clipped ones, 0 and
        # 2k, are the tails'), so the weight of bucket c is the weight of one column: a gather, not a sum. The
        # columns of buckets whose key lies outside the sequence are padding, with weight 0.
        columns = self.bucket_columns[:rows].expand(batch, heads, rows, self.bucket_columns.shape[1])
        per_bucket = weights.gather(-1, columns)  # (batch, heads, rows, buckets)
        out = weights @ v_band  # (batch, heads, rows, head_dim)
        return out.add_(per_bucket @ self.rel_v_table[self.inner_buckets]), lse


def flash_below_shifted_diagonal(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, shift: int, scale: float
                                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """Row i attends to the keys j <= i + shift, by the kernel's causal mask (which is j <= i).

    shift <= 0: rows from -shift on, whose row index minus -shift is the diagonal. shift > 0: keys
    0..shift are seen by every row (one call without mask); the rest, j - shift - 1 <= i - 1, by the causal
    call on rows 1.. and keys shift+1..; the two merge. Returns (batch, heads, q_len, head_dim) and
    (batch, heads, q_len) with out 0 and lse -inf for rows that see no key.
    """
    batch, heads, q_len, head_dim = q.shape
    k_len = k.shape[2]
    if shift <= 0:
        first = min(-shift, q_len)
        out, lse = (flash_with_logsumexp(q[:, :, first:], k, v, scale=scale, diagonal=True) if first < q_len
                    else (None, None))
        if first == 0:
            return out, lse
        out_dtype = q.dtype if q.device.type == "cpu" else torch.float32  # what the kernels return here
        padded_out = q.new_empty(batch, heads, q_len, head_dim, dtype=out_dtype)  # zeros on the first rows only
        padded_lse = q.new_empty(batch, heads, q_len, dtype=torch.float32 if out is None else lse.dtype)
        padded_out[:, :, :first], padded_lse[:, :, :first] = 0.0, float("-inf")
        if out is not None:
            padded_out[:, :, first:], padded_lse[:, :, first:] = out, lse
        return padded_out, padded_lse
    seen_by_all = min(shift + 1, k_len)
    out, lse = flash_with_logsumexp(q, k[:, :, :seen_by_all], v[:, :, :seen_by_all], scale=scale)
    if seen_by_all < k_len and q_len > 1:
        rest = flash_with_logsumexp(q[:, :, 1:], k[:, :, seen_by_all:], v[:, :, seen_by_all:], scale=scale,
                                    diagonal=True)
        out[:, :, 1:], lse[:, :, 1:] = merge_two(out[:, :, 1:], lse[:, :, 1:], *rest)
    return out, lse


def _constant_tail(tail: Tail, side: str, q, k, v, *, scale: float, shift: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A constant tail for every row at once; ``shift`` puts the last key of row i's left tail at i + shift
    (for the right tail, after reversing both sequences)."""
    if side == "right":
        q, k, v = q.flip(2), k.flip(2), v.flip(2)
    out, lse = flash_below_shifted_diagonal(q, k, v, shift=shift, scale=scale)
    if side == "right":
        out, lse = out.flip(2), lse.flip(2)
    lse = lse + (tail.at_edge[:, None] if tail.at_edge.ndim == 1 else tail.at_edge)  # (batch, heads, q_len)
    if tail.value is not None:
        out = out.add_(tail.value)  # a new tensor: the kernel's output, or its reversed copy
    return out, lse


def _affine_tail(tail: Tail, q_block, k_tail, v_tail, *, scale: float, key_from_reference: torch.Tensor,
                 reference_from_row: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """An affine tail of one block: key term as a broadcast mask, row term added to the log-sum-exp.

    key_from_reference: (keys,) j - j_0; reference_from_row: (rows,) p_ref - p_i.
    """
    heads, rows, keys = q_block.shape[1], q_block.shape[2], k_tail.shape[2]
    key_term = tail.slope[:, None] * key_from_reference[None, :]  # (heads, keys)
    mask = key_term[None, :, None, :].expand(1, heads, rows, keys)  # broadcast over rows, no copy
    out, lse = flash_with_logsumexp(q_block, k_tail, v_tail, scale=scale, mask=mask)
    return out, lse + tail.at_edge[:, None] + tail.slope[:, None] * reference_from_row[None, :]


def merge_two(out_a: torch.Tensor, lse_a: torch.Tensor, out_b: torch.Tensor, lse_b: torch.Tensor
              ) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Attention over the union of two disjoint key sets from each one's normalized output and log-sum-exp.

    :math:`\text{out} = w\,\text{out}_a + (1 - w)\,\text{out}_b` with :math:`w = e^{L_a} / (e^{L_a} + e^{L_b})
    = \sigma(L_a - L_b)`, and :math:`L = \log(e^{L_a} + e^{L_b})`; a part with L = -inf weighs 0, and a row
    empty in both stays empty (out 0, L = -inf). out (batch, heads, rows, head_dim), lse (batch, heads, rows).
    """
    difference = lse_a - lse_b  # (batch, heads, rows); NaN where both are -inf
    weight_a = torch.sigmoid(difference.masked_fill_(difference.isnan(), 0.0))
    return torch.lerp(out_b, out_a, weight_a[..., None]), torch.logaddexp(lse_a, lse_b)


def _bands(position: BandedPosition, q, k, v, *, causal: bool, offset: int, block: int, band_rows: int):
    """Every query's band with constant tails, for rows 0 .. band_rows - 1 (the later ones have none).

    The blocks whose band lies inside the keys read it through one strided view of k and v (block b's
    window starts b * block keys further) and go to ``position.band`` together, blocks in the batch
    dimension; the first and last blocks, whose band is cut by the ends of the keys, go one by one.

    Yields (batch index or slice, first row, out (heads or batch, ...), lse) per call.
    """
    batch, heads, _, head_dim = q.shape
    k_len = k.shape[2]
    width = block + position.left_reach - 1 + (0 if causal else position.right_reach - 1)

    def window_start(start: int) -> int:  # first key of the band of the block starting at query row `start`
        return offset + start - position.left_reach + 1

    if getattr(position, "hides_padded_keys", False):
        yield from _padded_bands(position, q, k, v, block=block, band_rows=band_rows, width=width,
                                 first_key=window_start(0))
        return
    starts = list(range(0, band_rows, block))
    inside = [start for start in starts if start + block <= band_rows and window_start(start) >= 0
              and window_start(start) + width <= k_len]
    if len(inside) > 1:
        first, count = inside[0], len(inside)
        key_start = window_start(first)
        for b in range(batch):
            q_blocks = q[b, :, first:first + count * block].unflatten(1, (count, block)).transpose(0, 1)
            windows = [x[b].as_strided((count, heads, width, head_dim),
                                       (block * x.stride(2), x.stride(1), x.stride(2), x.stride(3)),
                                       x[b].storage_offset() + key_start * x.stride(2)) for x in (k, v)]
            out, lse = position.band(q_blocks, *windows, 0)  # (count, heads, block, ...)
            yield b, first, out.transpose(0, 1).flatten(1, 2), lse.transpose(0, 1).flatten(1, 2)
        starts = [start for start in starts if start not in inside]
    for start in starts:
        stop = min(start + block, band_rows)
        key_start = max(window_start(start), 0)
        key_stop = min(window_start(start) + width, k_len)
        if causal:
            key_stop = min(key_stop, offset + stop)
        out, lse = position.band(q[:, :, start:stop], k[:, :, key_start:key_stop], v[:, :, key_start:key_stop],
                                 key_start - window_start(start))
        yield slice(None), start, out, lse


def _padded_bands(position: BandedPosition, q, k, v, *, block: int, band_rows: int, width: int, first_key: int):
    """Every block's band in one call: q padded to whole blocks, k and v padded so that every window lies
    inside, the padding hidden per block. Yields as :func:`_bands`."""
    batch, heads, _, head_dim = q.shape
    k_len = k.shape[2]
    count = -(-band_rows // block)
    window_keys = first_key + block * torch.arange(count, device=q.device)[:, None] + torch.arange(
        width, device=q.device)[None, :]  # (count, width): the key of each column of each block
    hidden_keys = (window_keys < 0) | (window_keys >= k_len)
    front, back = max(0, -first_key), max(0, first_key + (count - 1) * block + width - k_len)
    k_padded, v_padded = (torch.cat((x.new_zeros(batch, heads, front, head_dim), x,
                                     x.new_zeros(batch, heads, back, head_dim)), dim=2) for x in (k, v))
    q_padded = q if count * block == q.shape[2] else torch.nn.functional.pad(
        q[:, :, :band_rows], (0, 0, 0, count * block - band_rows))
    for b in range(batch):
        q_blocks = q_padded[b].unflatten(1, (count, block)).transpose(0, 1)  # (count, heads, block, head_dim)
        windows = [x[b].as_strided((count, heads, width, head_dim),
                                   (block * x.stride(2), x.stride(1), x.stride(2), x.stride(3)),
                                   x[b].storage_offset() + (first_key + front) * x.stride(2))
                   for x in (k_padded, v_padded)]  # (count, heads, width, head_dim), overlapping views
        out, lse = position.band(q_blocks, *windows, 0, hidden_keys)
        yield b, 0, out.transpose(0, 1).flatten(1, 2)[:, :band_rows], lse.transpose(0, 1).flatten(1, 2)[:, :band_rows]


def _affine_blocks(position: BandedPosition, q, k, v, *, causal: bool, offset: int, scale: float, block: int
                   ) -> torch.Tensor:
    """Affine tails cut at the edges of each block of queries, the block's band, merged per block."""
    q_len, k_len = q.shape[2], k.shape[2]
    left_reach, right_reach = position.left_reach, position.right_reach
    out = torch.empty_like(q, memory_format=torch.contiguous_format)
    key_positions = torch.arange(k_len, device=q.device, dtype=q.dtype)  # (k_len,)
    rows_from_first = torch.arange(min(block, q_len), device=q.device, dtype=q.dtype)  # (block,)
    for start in range(0, q_len, block):
        stop = min(q_len, start + block)
        first, last = offset + start, offset + stop - 1  # positions p_0, p_1
        left_stop = min(max(first - left_reach + 1, 0), k_len)
        right_start = k_len if causal else min(max(last + right_reach, left_stop), k_len)
        band_stop = min(max(last + 1, left_stop), k_len) if causal else right_start
        q_block = q[:, :, start:stop]
        from_first = rows_from_first[: stop - start]  # p_i - p_0
        parts = []
        if left_stop > 0:
            parts.append(_affine_tail(position.tail("left", q_block), q_block, k[:, :, :left_stop],
                                      v[:, :, :left_stop], scale=scale,
                                      key_from_reference=key_positions[:left_stop] - (first - left_reach),
                                      reference_from_row=-from_first))
        if right_start < k_len:
            parts.append(_affine_tail(position.tail("right", q_block), q_block, k[:, :, right_start:],
                                      v[:, :, right_start:], scale=scale,
                                      key_from_reference=key_positions[right_start:] - (last + right_reach),
                                      reference_from_row=(stop - start - 1) - from_first))
        if band_stop > left_stop:
            first_column = left_stop - (first - left_reach + 1)
            parts.append(position.band(q_block, k[:, :, left_stop:band_stop], v[:, :, left_stop:band_stop],
                                       first_column))
        merged = parts[0]
        for part in parts[1:]:
            merged = merge_two(*merged, *part)
        out[:, :, start:stop] = merged[0]
    return out


def banded_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, position: BandedPosition, *,
                     causal: bool, offset: int, scale: float, block: int) -> torch.Tensor:
    """Attention with an offset position term: tails by the flash kernel, the band per block of queries.

    q (batch, heads, q_len, head_dim), k and v (batch, heads, k_len, head_dim), in the compute dtype of
    ``position``; query i sits at position offset + i. Returns (batch, heads, q_len, head_dim).
    """
    if not position.constant_tails:
        return _affine_blocks(position, q, k, v, causal=causal, offset=offset, scale=scale, block=block)
    q_len, k_len = q.shape[2], k.shape[2]
    shifts = {"left": offset - position.left_reach, "right": k_len - q_len - offset - position.right_reach}
    out, lse = _constant_tail(position.tail("left", q), "left", q, k, v, scale=scale, shift=shifts["left"])
    if not causal:
        right = _constant_tail(position.tail("right", q), "right", q, k, v, scale=scale, shift=shifts["right"])
        out, lse = merge_two(out, lse, *right)
    # queries from p = k_len - 1 + D_L on have every key in their left tail, and no band
    band_rows = min(max(k_len - 1 + position.left_reach - offset, 0), q_len)
    for batch_index, start, band_out, band_lse in _bands(position, q, k, v, causal=causal, offset=offset,
                                                          block=block, band_rows=band_rows):
        rows = (batch_index, slice(None), slice(start, start + band_lse.shape[-1]))
        difference = band_lse - lse[rows]  # every row of the band has a key there: finite
        out[rows].lerp_(band_out, torch.sigmoid(difference)[..., None])  # out + w (band - out), in place
    return out


def banded_offset_attention(q, k, v, position: str, params: dict[str, Any], *, causal: bool, scale: float,
                            offset: int, block: int | None = None) -> torch.Tensor:
    """ALiBi ("alibi": ``slopes``), T5 ("t5": ``bias_table``, ``bidirectional``, ``max_distance``) or Shaw
    ("shaw": ``rel_k_table``, ``rel_v_table``) by :func:`banded_attention`; params validated, any float dtype
    (16-bit computed in float32; on CUDA the tails' kernels take the 16-bit inputs as they are, and return
    float32). Returns (batch, heads, q_len, head_dim) in q's dtype."""
    compute = bias_compute_dtype(q.dtype)
    if block is None:
        block = {"alibi": AFFINE_BLOCK, "shaw": SHAW_BLOCK}.get(position, BAND_BLOCK)
    options = {"scale": scale, "causal": causal, "block": block, "dtype": compute}
    if position == "shaw":
        kind = ShawBand(params["rel_k_table"], params["rel_v_table"], **options)
    else:
        kind = offset_bias_band(position, params, device=q.device, **options)
    # the band's passes are small (a few MiB): one thread each, the tails' kernels on every thread
    band_elements = q.shape[0] * q.shape[1] * q.shape[2] * (block + kind.left_reach + kind.right_reach)
    with serial_unless_large(q.device, band_elements):
        inputs = (q, k, v) if q.device.type == "cuda" else (q.to(compute), k.to(compute), v.to(compute))
        out = banded_attention(*inputs, kind, causal=causal, offset=offset, scale=scale, block=block)
        return out.to(q.dtype)
