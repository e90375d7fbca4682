r"""Causal ALiBi on CPU as two SDPA flash-kernel calls per block of queries: the diagonal square and a window.

Query i sits at position :math:`p = o + i` (o the query offset), key j at j; the logit is
:math:`s\,q_i \cdot k_j - m_h (p - j)` for :math:`j \le p`. The queries go in blocks of B rows,
:math:`p_0 .. p_1` (B about :math:`W_h / 4`, below), anchored at :math:`a = \min(p_0, k\_len)`; each block's
keys split into

- the *square* :math:`a \le j \le p_1`: the bias :math:`-m_h (t - c)` (row t, column c from a) and the causal
  mask are one (B, B) template per head, the same for every block, so all the complete squares go to one
  kernel call, stacked in the batch dimension (the kernel skips the tiles above the diagonal);
- the *window* :math:`a - W_h \le j < a`, every key visible, split as

  .. math:: -m_h (p - j) = \underbrace{-m_h (a - j)}_{\text{per key}} \; \underbrace{-\, m_h (p - a)}_{\text{per row}}:

  the per-key term is a mask broadcast over the rows and over the blocks (it depends on :math:`a - j` only),
  the per-row term shifts the window's log-sum-exp. Both are at most 0 and near 0 for the keys that matter,
  so float32 keeps its precision (folding :math:`m_h j` into the dot product as an extra feature would round
  the logits to the step of :math:`m_h L`, and the kernel is slower at head_dim + 1 than with the mask).

The keys before the window are dropped: their distance, less the nearest key's, exceeds
:math:`W_h \ge R_h`, the radius of :func:`posenc_ref.fast.flex.alibi_keep_radius` beyond which every weight
is below :math:`e^{-40}` of the row's largest (from the norms of q and k; :math:`W_h = k\_len`, nothing
dropped, for slopes that are not positive or tiny, and for float64 inputs). The two parts merge exactly by their log-sum-exps,
:math:`\text{out} = \text{out}_s + \sigma(L_w - L_s)(\text{out}_w - \text{out}_s)`.

Each (batch, head) is a task of its own. With at least :data:`TASKS_PER_THREAD` tasks per thread, each task
runs on one CPU thread, the tasks spread over the caller's threads, widest window first
(:func:`posenc_ref.fast.threads.each_on_one_thread`): a head's few kernel calls and merges never wait for
another thread. With fewer tasks (a machine with many cores) they run in turn, each kernel call on every
thread and the small passes on one (:func:`posenc_ref.fast.threads.serial_unless_large`). Within a head,
the blocks whose window lies inside the keys read it through one strided view of k and v, the first blocks
(window cut at key 0) go one by one. Causal only, CPU, no autograd (the kernel's log-sum-exp has no
gradient); 16-bit inputs are computed in float32. Working memory: the output, each running task's call outputs and log-sum-exps (about two (q_len, head_dim) each),
and the square templates, one per slope and block, kept for the next call (:data:`MAX_BLOCK` squared
elements at most each: 4 MiB in float32); never (q_len, k_len).
"""

from __future__ import annotations

import functools
import itertools
import math

import torch

from posenc_ref.fast.banded import flash_with_logsumexp as flash
from posenc_ref.fast.flex import alibi_keep_radius
from posenc_ref.fast.offset_bias import bias_compute_dtype
from posenc_ref.fast.threads import each_on_one_thread, serial_unless_large

MIN_BLOCK, MAX_BLOCK = 64, 1024  # query rows per block (see block_for_width); a template: 4 MiB in float32
TASKS_PER_THREAD = 2  # (batch, head) tasks per thread from which each task runs on one thread, largest first


def _blocks(x: torch.Tensor, first: int, count: int, width: int, step: int) -> torch.Tensor:
    """(count, heads, width, head_dim) overlapping view of x (heads, seq, head_dim): block c is rows
    first + c * step .. + width - 1."""
    heads, _, head_dim = x.shape
    return x.as_strided((count, heads, width, head_dim), (step * x.stride(1), x.stride(0), x.stride(1), x.stride(2)),
                        x.storage_offset() + first * x.stride(1))


def _window_widths(q: torch.Tensor, k: torch.Tensor, slopes: torch.Tensor, scale: float) -> list[int]:
    """W_h per head: the keep radius, rounded up, at most k_len; k_len for float64, whose precision the
    radius's gap of e^-40 does not cover."""
    k_len = k.shape[2]
    if q.dtype == torch.float64:
        return [k_len] * q.shape[1]
    radius = alibi_keep_radius(q, k, slopes, scale).amax(dim=1)  # (heads,)
    return [k_len if not math.isfinite(r) else min(k_len, max(1, math.ceil(r))) for r in radius.tolist()]


def block_for_width(width: int) -> int:
    """Query rows per block for a window of width W: about W / 4 (a power of two, 64 to 1024), so that a few
    blocks have their window cut at key 0 (a call each) and the squares stay a small part of the work."""
    return min(MAX_BLOCK, max(MIN_BLOCK, 1 << max(0, math.ceil(math.log2(max(width, 1) / 4)))))


@functools.lru_cache(maxsize=32)
def _square_template(slope: float, block: int, dtype: torch.dtype) -> torch.Tensor:
    """(1, 1, block, block): -m (t - c) for column c <= row t, -inf above the diagonal. Kept per slope value
    and block: building one of 1024 x 1024 takes longer than its kernel call saves."""
    rows = torch.arange(block)  # (block,)
    distance = (rows[:, None] - rows[None, :]).to(dtype)  # (block, block)
    template = -slope * distance  # (block, block)
    return template.masked_fill_(distance < 0, float("-inf"))[None, None]


def _one_head(q, k, v, slopes, out, *, width: int, scale: float, offset: int, block: int) -> None:
    """One head, window width W: q (1, q_len, d), k and v (1, k_len, d), slopes (1,); writes the result
    into out (1, q_len, d)."""
    heads, q_len, _ = q.shape
    k_len = k.shape[1]
    starts = list(range(0, q_len, block))
    # the squares: the complete ones (a prefix of the blocks) stacked in one call, the others one by one
    template = _square_template(slopes.item(), block, q.dtype)  # (1, 1, block, block)
    complete = [s for s in starts if s + block <= q_len and offset + s + block <= k_len]
    square_lse = q.new_full((heads, q_len), float("-inf"))  # rows with no key in a square keep -inf: weight 0
    if complete:
        count = len(complete)
        square_out, lse = flash(_blocks(q, 0, count, block, block), _blocks(k, offset, count, block, block),
                                _blocks(v, offset, count, block, block), scale=scale, mask=template,
                                diagonal=True)  # (count, 1, block, d), (count, 1, block)
        out[:, :count * block] = square_out.transpose(0, 1).flatten(1, 2)
        square_lse[:, :count * block] = lse.transpose(0, 1).flatten(1, 2)
    for s in starts[len(complete):]:
        stop, first = min(s + block, q_len), offset + s
        if first >= k_len:  # this block and the later ones: every key lies before them
            out[:, s:].zero_()
            break
        keys = min(block, k_len - first)
        square_out, lse = flash(q[None, :, s:stop], k[None, :, first:first + keys], v[None, :, first:first + keys],
                                scale=scale, mask=template[:, :, :stop - s, :keys], diagonal=True)
        out[:, s:stop], square_lse[:, s:stop] = square_out[0], lse[0]
    # the windows: the blocks whose window lies inside the keys stacked, the others (cut at key 0) one by one
    key_term = (-slopes[:, None] * torch.arange(width, 0, -1, device=q.device).to(q.dtype))[None, :, None, :]
    inside = [s for s in starts if s + block <= q_len and width <= offset + s <= k_len]
    parts = []  # (first row, rows, (out, lse))
    if inside:
        first, count = inside[0], len(inside)
        windows = [_blocks(x, offset + first - width, count, width, block) for x in (k, v)]
        parts.append((first, count * block, flash(_blocks(q, first, count, block, block), *windows, scale=scale,
                                                  mask=key_term)))
    for s in (s for s in starts if s not in inside):
        anchor, stop = min(offset + s, k_len), min(s + block, q_len)
        if anchor == 0:
            continue  # the block at position 0: no key before it
        low = max(0, anchor - width)
        parts.append((s, stop - s, flash(q[None, :, s:stop], k[None, :, low:anchor], v[None, :, low:anchor],
                                         scale=scale, mask=key_term[..., width - (anchor - low):])))
    for s, length, (window_out, window_lse) in parts:
        window_out = window_out.transpose(0, 1).flatten(1, 2)  # (1, length, d)
        row = torch.arange(s, s + length, device=q.device)  # (length,) query rows i
        anchor = torch.clamp(offset + row - row % block, max=k_len)  # a of each row's block
        # the per-row term -m (p - a), then the merge with the square
        window_lse = window_lse.transpose(0, 1).flatten(1, 2) - slopes[:, None] * (offset + row - anchor).to(q.dtype)
        weight = torch.sigmoid(window_lse - square_lse[:, s:s + length])  # (1, length)
        out[:, s:s + length].lerp_(window_out, weight[..., None])


def alibi_window_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, slopes: torch.Tensor, *,
                           scale: float, offset: int, block: int | None = None) -> torch.Tensor:
    """Causal ALiBi, softmax(s q k^T - m_h (p - j), j <= p) v, by the square and window split above.

    Args:
        q: (batch, heads, q_len, head_dim); k, v: (batch, heads, k_len, head_dim); CPU, any float dtype.
        slopes: (heads,) m_h, validated (see :mod:`posenc_ref.fast.params`).
        scale: s > 0, multiplies q . k only. offset: position of query 0, >= 0.
        block: query rows per block, >= 1; None chooses it per head (:func:`block_for_width`).

    Returns:
        (batch, heads, q_len, head_dim) in q's dtype.

    Raises:
        ValueError: tensors not on CPU, ``block`` < 1, ``offset`` < 0, or inputs that require grad.
    """
    if q.device.type != "cpu":
        raise ValueError(f"alibi_window_attention runs on cpu only, got q on {q.device}")
    if block is not None and (not isinstance(block, int) or block < 1):
        raise ValueError(f"block must be None or an int >= 1, got {block!r}")
    if not isinstance(offset, int) or offset < 0:
        raise ValueError(f"offset must be an int >= 0, got {offset!r}")
    if torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v, slopes)):
        raise ValueError("alibi_window_attention has no backward (the kernel's log-sum-exp has no gradient); "
                         "inputs require grad. Use implementation='auto' or run under torch.no_grad()")
    dtype, compute = q.dtype, bias_compute_dtype(q.dtype)
    q, k, v, slopes = q.to(compute), k.to(compute), v.to(compute), slopes.to(compute)
    with serial_unless_large(q.device, q.numel()):  # the norms: small passes, one thread
        widths = _window_widths(q, k, slopes, scale)  # W_h
    out = torch.empty_like(q, memory_format=torch.contiguous_format)  # (batch, heads, q_len, head_dim)

    def one_head(task: tuple[int, int]) -> None:
        b, h = task
        _one_head(q[b, h:h + 1], k[b, h:h + 1], v[b, h:h + 1], slopes[h:h + 1], out[b, h:h + 1], width=widths[h],
                  scale=scale, offset=offset, block=block or block_for_width(widths[h]))

    heads = itertools.product(range(q.shape[0]), range(q.shape[1]))  # (batch index, head)
    tasks = sorted(heads, key=lambda task: -widths[task[1]])  # widest window first
    if len(tasks) >= TASKS_PER_THREAD * torch.get_num_threads():
        each_on_one_thread(one_head, tasks)
    else:
        with serial_unless_large(q.device, q[0].numel()):  # masks, merges: one thread (the kernels on all)
            for task in tasks:
                one_head(task)
    return out.to(dtype)
