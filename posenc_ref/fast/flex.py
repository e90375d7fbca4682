r"""Offset biases (ALiBi, T5, any per-offset scalar) as FlexAttention ``score_mod``\ s.

FlexAttention (``torch.nn.attention.flex_attention``) computes softmax(score_mod(s q k^T)) v block by block,
never holding the (q_len, k_len) matrix. The ``score_mod``\ s here add the bias of the logit's offset,
either read from a per-offset table (any such bias; T5)

.. math:: \text{score}_{h,i,j} \mapsto \text{score}_{h,i,j} + \text{bias\_offsets}[h,\ j - i + q\_len - 1]

(see :mod:`posenc_ref.fast.offset_bias`) or computed (ALiBi: :math:`-m_h |m - n|`). A block mask skips
the key blocks a causal query never sees and, for ALiBi, the key blocks so far away that the linear penalty
makes their weights vanish in float32 (a bound from the norms of q and k, see :func:`alibi_keep_radius`):
ALiBi attends like a soft sliding window, and this path computes only the window.

Compiled with ``torch.compile(dynamic=False)``, which works on CUDA and on CPU (inductor's CPU flex
template) in the torch versions tested. Each new shape compiles once (seconds); symbolic shapes are avoided
because inductor's CPU flex lowering fails on them in torch 2.13, and past dynamo's recompile limit (8
shapes) dynamo itself runs the function eagerly, with its own warning. If compiling fails, the failure
is remembered for that device type, dtype and head_dim, a warning is issued, and the eager FlexAttention (which materializes the scores: correct, not fast) is used. FlexAttention has no
backward on CPU, so :func:`flex_bias_attention` refuses inputs that need gradients there.
"""

from __future__ import annotations

import functools
import warnings

import torch

from posenc_ref.fast.threads import serial_unless_large

_SPARSE_BLOCK = 128  # FlexAttention's default block size for block masks
_COMPILE_FAILED: set[tuple[str, torch.dtype, int]] = set()  # (device type, dtype, head_dim) that failed


@functools.cache
def flex_available() -> bool:
    """True when this torch has ``torch.nn.attention.flex_attention`` (torch >= 2.5)."""
    try:
        from torch.nn.attention import flex_attention  # noqa: F401
    except ImportError:
        return False
    return True


def flex_backward_supported(device: torch.device | str) -> bool:
    """FlexAttention's backward runs on CUDA, not on CPU (``NotImplementedError`` there)."""
    return torch.device(device).type != "cpu"


def compile_allowed(device: torch.device | str, dtype: torch.dtype | None = None, head_dim: int | None = None
                    ) -> bool:
    """False once ``torch.compile`` of FlexAttention has failed in this process for this device type, dtype
    and head_dim (any dtype / head_dim when they are None)."""
    device_type = torch.device(device).type
    return not any(failed[0] == device_type and dtype in (None, failed[1]) and head_dim in (None, failed[2])
                   for failed in _COMPILE_FAILED)


def _block_bounds(length: int, first_position: int, device: torch.device):
    """First and last position of each block of ``length`` rows starting at ``first_position``, and whether the
    block is complete (tail blocks shorter than B are never "full", as in ``create_block_mask``)."""
    starts = torch.arange(0, length, _SPARSE_BLOCK, device=device)  # (blocks,)
    stops = torch.clamp(starts + _SPARSE_BLOCK, max=length)  # (blocks,)
    return first_position + starts, first_position + stops - 1, stops - starts == _SPARSE_BLOCK


@functools.lru_cache(maxsize=64)
def cached_causal_block_mask(q_len: int, k_len: int, offset: int, device: torch.device):
    """The causal :func:`block_mask` for one shape, built once: building it takes a few dozen small device
    operations, which on a GPU would cost more host time than the attention itself at moderate lengths."""
    return block_mask(q_len, k_len, offset, device, causal=True)


@functools.lru_cache(maxsize=64)
def device_scalar(value: int, device: torch.device) -> torch.Tensor:
    """A 0-d int64 tensor on ``device``, made once: ``torch.tensor(value, device="cuda")`` copies from the
    host and waits for it, a synchronization per call."""
    return torch.tensor(value, device=device)


def block_mask(
    q_len: int, k_len: int, offset: int, device: torch.device, *, causal: bool,
    keep_radius: torch.Tensor | None = None,
):
    r"""FlexAttention ``BlockMask`` from block bounds (O(blocks^2) work, never an O(q_len k_len) mask).

    Query block a holds queries at positions P_a = [offset + aB, ...], key block b keys J_b = [bB, ...]
    (B = 128). A block pair is computed when some pair in it is visible (causal: min J_b <= max P_a) and,
    if ``keep_radius`` (heads, q_blocks) is given, when
    :math:`\operatorname{dist}(P_a, J_b) - d_\min(a) < R_{h,a}`, with :math:`d_\min` the distance from the
    block's last query to its nearest key (0 unless queries lie past the keys) -- see
    :func:`alibi_keep_radius`. It is *full* (mask not evaluated inside) when both blocks are complete and,
    causal, max J_b <= min P_a. The visible/full classification is that of ``create_block_mask``.
    """
    from torch.nn.attention.flex_attention import BlockMask

    query_first, query_last, query_complete = _block_bounds(q_len, offset, device)  # (q_blocks,) each
    key_first, key_last, key_complete = _block_bounds(k_len, 0, device)  # (k_blocks,) each
    complete = query_complete[:, None] & key_complete[None, :]  # (q_blocks, k_blocks)
    if causal:
        visible = key_first[None, :] <= query_last[:, None]  # (q_blocks, k_blocks)
        full = complete & (key_last[None, :] <= query_first[:, None])
    else:
        visible = torch.ones_like(complete)
        full = complete
    visible, full = visible[None], full[None]  # (1, q_blocks, k_blocks)
    if keep_radius is not None:
        gap = torch.clamp(torch.maximum(key_first[None, :] - query_last[:, None],
                                        query_first[:, None] - key_last[None, :]), min=0)  # (q_blocks, k_blocks)
        nearest = torch.clamp(query_last - (k_len - 1), min=0)  # (q_blocks,)
        visible = visible & ((gap - nearest[:, None])[None] < keep_radius[:, :, None])  # (heads, q_b, k_b)
        full = full & visible
    partial = visible & ~full
    offset_tensor = device_scalar(offset, device)  # a tensor: a new offset does not recompile

    def causal_visible(batch, head, q_index, kv_index):
        return kv_index <= q_index + offset_tensor

    def every_key(batch, head, q_index, kv_index):
        return kv_index >= 0

    def counts_and_indices(blocks: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        counts = blocks.sum(-1).to(torch.int32)[None]  # (1, heads, q_blocks)
        # the chosen blocks first, in increasing key order, then the others (ignored)
        indices = torch.argsort(blocks.to(torch.int32), dim=-1, descending=True, stable=True)
        return counts, indices.to(torch.int32)[None]  # (1, heads, q_blocks, k_blocks)

    return BlockMask.from_kv_blocks(
        *counts_and_indices(partial), *counts_and_indices(full), BLOCK_SIZE=_SPARSE_BLOCK,
        mask_mod=causal_visible if causal else every_key, seq_lengths=(q_len, k_len),
    )


ALIBI_SKIP_GAP = 40.0  # nats: a skipped key weighs < e^-40 ~ 4e-18 of the row's largest weight


def alibi_keep_radius(q: torch.Tensor, k: torch.Tensor, slopes: torch.Tensor, scale: float) -> torch.Tensor:
    r"""Per (head, query block), the distance beyond which ALiBi makes every attention weight negligible.

    For query i (position p, nearest visible key at distance :math:`d_\min`) and key j at distance d, by
    Cauchy-Schwarz the row's largest logit is at least :math:`-s|q_i|K - m_h d_\min` (the nearest key) and
    key j's logit at most :math:`s|q_i|K - m_h d`, with :math:`K = \max_j |k_j|`. So once
    :math:`m_h (d - d_\min) \ge 2 s |q_i| K + G` key j's weight is below :math:`e^{-G}` times the row's
    largest one, i.e. it does not change the float32 result (:data:`ALIBI_SKIP_GAP` G = 40; even a
    million such keys add < 1e-11 relative). Returns :math:`R_{h,a} = (2 s \max_{i \in a} |q_i| K + G) / m_h`
    (heads, q_blocks), with a 1% margin on the norms, and infinity where the slope is not positive or the
    norms are not finite (nothing is skipped then).
    """
    q_norm = torch.linalg.vector_norm(q, dim=-1, dtype=torch.float32).amax(dim=0)  # (heads, q_len)
    k_norm = torch.linalg.vector_norm(k, dim=-1, dtype=torch.float32).amax(dim=(0, 2))  # (heads,)
    padding = (-q_norm.shape[1]) % _SPARSE_BLOCK
    q_block_norm = torch.nn.functional.pad(q_norm, (0, padding)).unflatten(1, (-1, _SPARSE_BLOCK)).amax(-1)
    threshold = 2.0 * scale * 1.01 * q_block_norm * k_norm[:, None] + ALIBI_SKIP_GAP  # (heads, q_blocks)
    slopes = slopes.to(torch.float32)[:, None]  # (heads, 1)
    radius = threshold / torch.where(slopes > 0, slopes, 1.0)
    return torch.where((slopes > 0) & torch.isfinite(radius), radius, torch.inf)  # (heads, q_blocks)


def _flex_with_offset_table(q, k, v, bias_offsets, query_offset, block_mask, scale):
    """Any per-offset bias: one table entry per logit (T5's buckets, precomputed per offset)."""
    from torch.nn.attention.flex_attention import flex_attention

    shift = q.shape[2] - 1

    def add_offset_bias(score, batch, head, q_index, kv_index):
        return score + bias_offsets[head, kv_index - q_index + shift]

    return flex_attention(q, k, v, score_mod=add_offset_bias, block_mask=block_mask, scale=scale)


def _flex_with_alibi(q, k, v, slopes, query_offset, block_mask, scale):
    """ALiBi by arithmetic, -m_h |m - n|: no table read per logit (faster on GPUs than a gather)."""
    from torch.nn.attention.flex_attention import flex_attention

    def add_alibi(score, batch, head, q_index, kv_index):
        return score - slopes[head] * (q_index + query_offset - kv_index).abs()

    return flex_attention(q, k, v, score_mod=add_alibi, block_mask=block_mask, scale=scale)


@functools.cache
def _compiled(function):
    return torch.compile(function, dynamic=False)


def flex_bias_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool,
    scale: float,
    offset: int,
    bias_offsets: torch.Tensor | None = None,
    alibi_slopes: torch.Tensor | None = None,
    compiled: bool = True,
) -> torch.Tensor:
    """softmax(s q k^T + B) v by FlexAttention, B given per offset or as ALiBi slopes (exactly one).

    Args:
        q: (batch, heads, q_len, head_dim); k, v: (batch, heads, k_len, head_dim).
        causal, offset: query i sits at position m = offset + i; causal allows key n only when n <= m (a
            block mask skips the key blocks no query of a block sees).
        scale: the factor s applied to q k^T (not to the bias).
        bias_offsets: (heads, q_len + k_len - 1) table, B[h, i, j] = bias_offsets[h, j - i + q_len - 1]
            (see :mod:`posenc_ref.fast.offset_bias`).
        alibi_slopes: (heads,) slopes m_h, B[h, i, j] = -m_h |offset + i - j|.
        compiled: use compiled FlexAttention (falls back to eager, with a warning, if compiling
            fails); False runs eager FlexAttention (materializes the scores; for tests and debugging).

    Bias tables and slopes should be float32 (float64 for float64 inputs): the bias is added to the scaled
    logits in that precision inside the kernel, whatever q's dtype.

    Returns:
        (batch, heads, q_len, head_dim) in q's dtype.

    Raises:
        RuntimeError: FlexAttention missing from this torch.
        ValueError: not exactly one of bias_offsets and alibi_slopes; autograd needed on a device whose
            FlexAttention has no backward (CPU).
    """
    if not flex_available():
        raise RuntimeError("this torch has no torch.nn.attention.flex_attention (needs torch >= 2.5)")
    if (bias_offsets is None) == (alibi_slopes is None):
        raise ValueError("give exactly one of bias_offsets and alibi_slopes")
    bias = bias_offsets if alibi_slopes is None else alibi_slopes
    function = _flex_with_offset_table if alibi_slopes is None else _flex_with_alibi
    needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v, bias))
    if needs_grad and not flex_backward_supported(q.device):
        raise ValueError(
            f"FlexAttention has no backward on {q.device.type}; inputs require grad. Use "
            "implementation='sdpa_bias' (or 'auto', which picks it), or run under torch.no_grad()"
        )
    q_len, k_len = q.shape[2], k.shape[2]
    causal = causal and offset < k_len - 1  # otherwise every key is visible to every query
    # The ALiBi window depends on the data (the norms of q and k), so its block mask is built per call: worth
    # it on a CPU, where skipped blocks save milliseconds; on a GPU the dense causal kernel is fast enough that
    # the per-call host work would cost more than it saves, so only the cached causal mask is used there.
    skip_far_blocks = alibi_slopes is not None and q.device.type == "cpu"
    if skip_far_blocks:
        with serial_unless_large(q.device, q.numel()):  # norms and block bounds: small passes, one thread
            radius = alibi_keep_radius(q, k, alibi_slopes, scale)
            mask = block_mask(q_len, k_len, offset, q.device, causal=causal, keep_radius=radius)
    else:
        mask = cached_causal_block_mask(q_len, k_len, offset, q.device) if causal else None
    # the offset travels as a tensor so that a new offset does not recompile
    arguments = (q, k, v, bias, device_scalar(offset, q.device), mask, scale)
    if compiled and compile_allowed(q.device, q.dtype, q.shape[-1]):
        try:
            return _compiled(function)(*arguments)
        except Exception as error:  # noqa: BLE001 -- inductor fails in many types; any means: cannot compile here
            _COMPILE_FAILED.add((q.device.type, q.dtype, q.shape[-1]))
            warnings.warn(
                f"torch.compile of FlexAttention failed on {q.device.type} for {q.dtype}, head_dim "
                f"{q.shape[-1]} ({type(error).__name__}: {error}); using eager FlexAttention for these",
                RuntimeWarning,
                stacklevel=2,
            )
    with warnings.catch_warnings():
        # eager use is deliberate here; torch's advice to compile is already acted upon above
        warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
        return function(*arguments)
