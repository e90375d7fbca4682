r"""Interactive explorers of the course: ipywidgets controls around pure render functions.

Each explorer has two layers.

- A **render function** ``render_<name>(**controls) -> Figure`` computes what it draws with ``posenc_ref`` and
  returns a new :class:`matplotlib.figure.Figure`. It is built without ``pyplot``, so nothing is displayed,
  registered or kept between calls, and the same call gives the same picture (random vectors come from a
  seeded generator).
- An **explorer function** ``<name>_explorer() -> Explorer`` takes no argument and returns an ipywidgets box
  with one control per argument of the render function and the rendered picture, drawn again whenever a
  control changes. It displays itself when it is the last expression of a notebook cell.

=========================  ==================================  =============================================
explorer                   render function                     controls
=========================  ==================================  =============================================
``wavelengths_explorer``   :func:`render_wavelengths`          pair ``i`` (the dimension shown), zoom on the
                                                               position axis, ``d``
``heatmap_explorer``       :func:`render_encoding_heatmap`     ``d``, base
``similarity_explorer``    :func:`render_similarity`           ``d``, base, starting position ``p``
``rope_dial_explorer``     :func:`render_rope_dial`            ``m``, ``n``, the pair shown on the dial
``relative_bias_explorer`` :func:`render_relative_bias`        ``b(-1)``, ``b(0)``, ``b(+1)``
``alibi_explorer``         :func:`render_alibi_slopes`         number of heads, largest distance
``t5_buckets_explorer``    :func:`render_t5_buckets`           ``max_distance``, ``num_buckets``, direction
``dog_bites_man_explorer`` :func:`render_dog_bites_man`        strength of the positions, causal mask
=========================  ==================================  =============================================

Without a kernel (a static web page), :func:`frame_slider` renders one frame per value of one control and
returns a :class:`FrameSlider`, which displays as HTML: the frames as PNG data URIs and an
``<input type="range">``. A page script that shows frame ``k`` when the slider is at ``k`` makes it move
(the course book ships one); without it the first frame shows.
"""

from __future__ import annotations

import base64
import html
import inspect
import io
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import ipywidgets
import numpy as np
import PIL.Image
import torch
from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from posenc_ref._checks import check_even_dim, check_int, check_positive_float, check_positive_int
from posenc_ref.attention import attention
from posenc_ref.relative import alibi_slopes, relative_position_bucket
from posenc_ref.rope import apply_rope
from posenc_ref.sinusoidal import sinusoidal_frequencies, sinusoidal_table

__all__ = [
    "EXPLORERS",
    "Explorer",
    "FrameSlider",
    "alibi_explorer",
    "dog_bites_man_explorer",
    "figure_png",
    "frame_slider",
    "heatmap_explorer",
    "relative_bias_explorer",
    "render_alibi_slopes",
    "render_dog_bites_man",
    "render_encoding_heatmap",
    "render_relative_bias",
    "render_rope_dial",
    "render_similarity",
    "render_t5_buckets",
    "render_wavelengths",
    "rope_dial_explorer",
    "similarity_explorer",
    "t5_buckets_explorer",
    "wavelengths_explorer",
]

DOG_BITES_MAN = ("dog bites man", "man bites dog")
_DPI = 96  # pixels per inch of the live pictures; frame_slider takes its own
_WIDE = (8.4, 3.4)  # inches: two panels side by side


# ----------------------------------------------------------------------------------------------------------
# Small checks this module needs beyond posenc_ref._checks
# ----------------------------------------------------------------------------------------------------------


def _check_real(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise TypeError(f"{name} must be a finite real number, got {value!r} of type {type(value).__name__}")
    return float(value)


def _check_bool(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {value!r} of type {type(value).__name__}")
    return value


def _check_below(name: str, value: Any, limit: int, what: str) -> int:
    """An int in ``0 .. limit - 1``."""
    check_int(name, value, minimum=0)
    if value >= limit:
        raise ValueError(f"{name} must be an int in 0..{limit - 1} ({what}), got {value}")
    return value


def _new_figure(size: tuple[float, float] = _WIDE, panels: int = 2) -> tuple[Figure, list[Axes]]:
    figure = Figure(figsize=size, layout="constrained")
    return figure, list(figure.subplots(1, panels, squeeze=False)[0])


# ----------------------------------------------------------------------------------------------------------
# Render functions: control values in, a new Figure out
# ----------------------------------------------------------------------------------------------------------


def render_wavelengths(pair: int = 0, max_position: int = 200, *, d: int = 64, base: float = 10000.0) -> Figure:
    r"""The two features of one pair of the sinusoidal table against the position, and every pair's wavelength.

    Left: :math:`\sin(p\,\omega_i)` and :math:`\cos(p\,\omega_i)` (features ``2i`` and ``2i + 1``) for the
    integer positions ``p = 0 .. max_position``, with :math:`\omega_i = \text{base}^{-2i/d}` from
    :func:`~posenc_ref.sinusoidal.sinusoidal_frequencies`. Right: the wavelengths
    :math:`\lambda_i = 2\pi / \omega_i` of all ``d/2`` pairs (log scale), pair ``i`` marked, and the zoom
    ``max_position`` as a horizontal line: pairs below it complete a turn within the positions shown.

    Args:
        pair: the pair index ``i``, in ``0 .. d/2 - 1`` (the dimension selector).
        max_position: the last position shown (the zoom on the position axis), >= 1.
        d: the model dimension, positive and even.
        base: the base of the frequencies, > 0.

    Raises:
        TypeError, ValueError: naming the argument, for a value outside the ranges above.
    """
    check_even_dim("d", d)
    _check_below("pair", pair, d // 2, f"a pair index for d = {d}")
    check_positive_int("max_position", max_position)
    base = check_positive_float("base", base)
    inv_freq = sinusoidal_frequencies(d, base=base).numpy()  # (d/2,)
    wavelengths = 2 * math.pi / inv_freq  # (d/2,)
    positions = np.arange(max_position + 1)  # (max_position + 1,)
    angles = positions * inv_freq[pair]

    figure, (left, right) = _new_figure()
    marker = "o" if max_position <= 64 else None
    left.plot(positions, np.sin(angles), marker=marker, markersize=3, label=f"feature {2 * pair}: sin")
    left.plot(positions, np.cos(angles), marker=marker, markersize=3, label=f"feature {2 * pair + 1}: cos")
    left.set(xlabel="position p", ylabel="PE(p) value", ylim=(-1.15, 1.15),
             title=f"pair {pair}: wavelength {wavelengths[pair]:,.1f} positions")
    left.legend(fontsize=8, loc="lower left")
    left.grid(alpha=0.3)

    right.plot(np.arange(d // 2), wavelengths, marker="o", markersize=2, color="tab:gray")
    right.plot([pair], [wavelengths[pair]], "o", color="tab:red", markersize=7, gid="selected-wavelength",
               label=f"pair {pair}")
    right.axhline(max_position, color="tab:blue", linestyle="--", linewidth=1,
                  label=f"positions shown: {max_position:,}")
    right.set_yscale("log")
    right.set(xlabel="pair index i", ylabel="wavelength (positions)", title=f"d = {d}, base = {base:g}")
    right.legend(fontsize=8, loc="upper left")
    right.grid(alpha=0.3)
    return figure


def render_encoding_heatmap(d: int = 64, base: float = 10000.0, *, length: int = 128) -> Figure:
    r"""The sinusoidal table :math:`\mathrm{PE}(p)` of ``length`` positions as a heatmap, positions down.

    The image is :func:`~posenc_ref.sinusoidal.sinusoidal_table` ``(length, d, base=base)`` (interleaved:
    feature ``2i`` is :math:`\sin(p\,\omega_i)`, feature ``2i + 1`` is :math:`\cos(p\,\omega_i)`,
    :math:`\omega_i = \text{base}^{-2i/d}`), on the colour scale ``[-1, 1]``.

    Args:
        d: the model dimension, positive and even.
        base: the base of the frequencies, > 0.
        length: the number of positions, >= 1.

    Raises:
        TypeError, ValueError: naming the argument, for a value outside the ranges above.
    """
    check_even_dim("d", d)
    base = check_positive_float("base", base)
    check_positive_int("length", length)
    table = sinusoidal_table(length, d, base=base, dtype=torch.float64).numpy()  # (length, d)
    slowest = 2 * math.pi / sinusoidal_frequencies(d, base=base)[-1].item()
    figure = Figure(figsize=(6.4, 3.6), layout="constrained")
    axis = figure.subplots()
    image = axis.imshow(table, aspect="auto", cmap="RdBu_r", vmin=-1.0, vmax=1.0, interpolation="nearest")
    axis.set(xlabel="feature", ylabel="position p",
             title=f"d = {d}, base = {base:,.0f}: slowest wavelength {slowest:,.0f} positions")
    figure.colorbar(image, ax=axis, label="PE(p) value")
    return figure


def render_similarity(d: int = 64, base: float = 10000.0, start: int = 0, *, max_offset: int = 128) -> Figure:
    r"""Cosine similarity of :math:`\mathrm{PE}(p)` and :math:`\mathrm{PE}(p + k)` against the offset ``k``.

    Measured on the table from the starting position ``p = start`` for ``k = 0 .. max_offset``, and the
    closed form :math:`\frac{2}{d}\sum_i \cos(k\,\omega_i)` (dashed), which does not involve ``p``: the two
    curves coincide for every ``start``. Every row of the table has squared norm ``d/2``.

    Args:
        d: the model dimension, positive and even.
        base: the base of the frequencies, > 0.
        start: the starting position ``p``, >= 0.
        max_offset: the largest offset ``k`` shown, >= 1.

    Raises:
        TypeError, ValueError: naming the argument, for a value outside the ranges above.
    """
    check_even_dim("d", d)
    base = check_positive_float("base", base)
    check_int("start", start, minimum=0)
    check_positive_int("max_offset", max_offset)
    offsets = np.arange(max_offset + 1)  # (max_offset + 1,)
    rows = sinusoidal_table(max_offset + 1, d, base=base, offset=start, dtype=torch.float64).numpy()
    measured = rows @ rows[0] / (d / 2)  # (max_offset + 1,): cos(PE(start), PE(start + k))
    inv_freq = sinusoidal_frequencies(d, base=base).numpy()
    closed_form = np.cos(offsets[:, None] * inv_freq[None, :]).mean(axis=1)  # (max_offset + 1,)

    figure = Figure(figsize=(6.4, 3.6), layout="constrained")
    axis = figure.subplots()
    axis.plot(offsets, measured, linewidth=2.5, alpha=0.6, gid="measured", label=f"from p = {start:,}")
    axis.plot(offsets, closed_form, "--", color="black", linewidth=1, gid="closed-form",
              label="(2/d) Σ cos(k ω_i)")
    axis.set(xlabel="offset k", ylabel="cos(PE(p), PE(p + k))", ylim=(-1.05, 1.05),
             title=f"d = {d}, base = {base:,.0f}")
    axis.legend(fontsize=8, loc="upper right")
    axis.grid(alpha=0.3)
    return figure


def _rope_dial_vectors(d: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The query and key of the dial: ``torch.randn(2, d)`` in float64 from a generator seeded with ``seed``."""
    generator = torch.Generator().manual_seed(seed)
    query, key = torch.randn(2, d, dtype=torch.float64, generator=generator).unbind(0)  # (d,) each
    return query, key


def _rotated(vector: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """``vector`` (d,) rotated by RoPE to each of ``positions``: (len(positions), d)."""
    rows = vector.expand(positions.shape[0], vector.shape[0])[None, None]  # (1, 1, count, d)
    return apply_rope(rows, positions)[0, 0]  # (count, d)


def render_rope_dial(m: int = 3, n: int = 1, *, pair: int = 0, d: int = 16, seed: int = 0,
                     max_offset: int = 31) -> Figure:
    r"""RoPE on a dial: one pair of a query at position ``m`` and a key at ``n``, and the logit against m - n.

    The query ``q`` and key ``k`` are random, ``torch.randn(2, d)`` in float64 from a generator seeded with
    ``seed``. Left: pair ``i = pair`` of :math:`R(m)q` and of :math:`R(n)k` (interleaved layout, frequency
    :math:`\theta_i = 10000^{-2i/d}`), with the unrotated pairs drawn faintly; the angle between the two
    arrows is :math:`(m - n)\theta_i` plus the angle they started with. Right: the logit
    :math:`\langle R(m')q, R(n')k\rangle` for every offset :math:`m' - n'` in ``-max_offset .. max_offset``
    (computed with the key at position ``n' = max_offset`` and the query at ``n' + offset``), and the logit of
    the current ``m``, ``n`` (computed at those positions) as a red dot: it lies on the curve, at ``m - n``.

    Args:
        m: the query position, >= 0.
        n: the key position, >= 0.
        pair: the pair shown on the dial, in ``0 .. d/2 - 1``.
        d: the head dimension, positive and even.
        seed: the seed of the random query and key.
        max_offset: the largest offset on the curve, >= 1; the curve is extended to ``|m - n|`` if needed.

    Raises:
        TypeError, ValueError: naming the argument, for a value outside the ranges above.
    """
    check_int("m", m, minimum=0)
    check_int("n", n, minimum=0)
    check_even_dim("d", d)
    _check_below("pair", pair, d // 2, f"a pair index for d = {d}")
    check_int("seed", seed, minimum=0)
    check_positive_int("max_offset", max_offset)
    query, key = _rope_dial_vectors(d, seed)
    rotated_query = _rotated(query, torch.tensor([m]))[0]  # (d,)
    rotated_key = _rotated(key, torch.tensor([n]))[0]  # (d,)
    logit = float(rotated_query @ rotated_key)
    reach = max(max_offset, abs(m - n))
    offsets = np.arange(-reach, reach + 1)  # (2 reach + 1,)
    curve_queries = _rotated(query, torch.arange(2 * reach + 1))  # (2 reach + 1, d): q at m' = reach + offset
    curve = (curve_queries @ _rotated(key, torch.tensor([reach]))[0]).numpy()  # (2 reach + 1,)

    figure, (dial, logits) = _new_figure((8.8, 3.8))
    theta = 10000.0 ** (-2 * pair / d)
    pairs = {"query": (query, rotated_query, "tab:blue"), "key": (key, rotated_key, "tab:orange")}
    for name, (vector, rotated, colour) in pairs.items():
        start, end = vector[2 * pair : 2 * pair + 2].numpy(), rotated[2 * pair : 2 * pair + 2].numpy()
        dial.annotate("", xy=start, xytext=(0, 0), arrowprops={"arrowstyle": "->", "color": colour, "alpha": 0.3})
        dial.annotate("", xy=end, xytext=(0, 0), arrowprops={"arrowstyle": "->", "color": colour, "linewidth": 2})
        position = m if name == "query" else n
        dial.plot([], [], color=colour, linewidth=2, label=f"{name} at {position}")
    radius = 1.15 * max(float(vector[2 * pair : 2 * pair + 2].norm()) for vector in (query, key))
    circle = np.linspace(0, 2 * math.pi, 200)
    for fraction in (1.0, 0.5):
        dial.plot(fraction * radius * np.cos(circle), fraction * radius * np.sin(circle), color="grey",
                  linewidth=0.5)
    dial.set(xlim=(-1.1 * radius, 1.1 * radius), ylim=(-1.1 * radius, 1.1 * radius), aspect="equal",
             xlabel=f"feature {2 * pair}", ylabel=f"feature {2 * pair + 1}",
             title=f"pair {pair}: θ = {theta:.3g} rad per position")
    dial.legend(fontsize=8, loc="lower left")

    logits.plot(offsets, curve, color="tab:gray", marker="o", markersize=2, gid="logit-curve")
    logits.plot([m - n], [logit], "o", color="tab:red", markersize=8, gid="current-logit",
                label=f"m = {m}, n = {n}: logit {logit:.3f}")
    logits.axvline(m - n, color="tab:red", linewidth=0.8, alpha=0.5)
    logits.set(xlabel="offset m - n", ylabel="<R(m) q, R(n) k>", title=f"d = {d}: the logit depends on m - n")
    logits.legend(fontsize=8, loc="lower left")
    logits.grid(alpha=0.3)
    return figure


def render_relative_bias(b_previous: float = 0.5, b_same: float = 0.0, b_next: float = -0.5, *,
                         content_score: float = 0.2) -> Figure:
    r"""Attention weights of one query over three keys, at offsets -1, 0, +1, with a relative bias.

    The content scores :math:`q \cdot k_j` all equal ``content_score``; the biases :math:`b(-1), b(0), b(+1)`
    are added (no :math:`1/\sqrt{d}` scaling), and :func:`~posenc_ref.attention.attention` gives the weights
    :math:`\alpha_j = e^{s + b(r_j)} / \sum_l e^{s + b(r_l)}`, which do not depend on ``s``. Bars without the
    bias (a third each) and with it, each labelled with its value.

    Args:
        b_previous, b_same, b_next: the biases :math:`b(-1)`, :math:`b(0)`, :math:`b(+1)`, finite reals.
        content_score: the common content score ``s``, a finite real.

    Raises:
        TypeError: naming the argument, for a value that is not a finite real number.
    """
    biases = [_check_real(name, value) for name, value in
              (("b_previous", b_previous), ("b_same", b_same), ("b_next", b_next))]
    content_score = _check_real("content_score", content_score)
    query = torch.full((1, 1, 1, 1), content_score, dtype=torch.float64)  # q . k = s for every key
    keys = torch.ones(1, 1, 3, 1, dtype=torch.float64)
    values = torch.eye(3, dtype=torch.float64)[None, None]  # (1, 1, 3, 3): the output is the weights
    bias = torch.tensor(biases, dtype=torch.float64)[None, None, :]  # (heads, q_len, k_len) = (1, 1, 3)
    _, plain = attention(query, keys, values, scale=1.0, return_weights=True)
    _, biased = attention(query, keys, values, bias=bias, scale=1.0, return_weights=True)
    groups = {"without bias": plain[0, 0, 0].numpy(), "with bias": biased[0, 0, 0].numpy()}  # (3,) each

    figure = Figure(figsize=(6.4, 3.6), layout="constrained")
    axis = figure.subplots()
    centres = np.arange(3)
    for index, (label, weights) in enumerate(groups.items()):
        gid = "weights-with-bias" if index else "weights-without-bias"
        bars = axis.bar(centres + (index - 0.5) * 0.38, weights, 0.38, label=label, gid=gid)
        axis.bar_label(bars, labels=[f"{weight:.3f}" for weight in weights], padding=2, fontsize=8)
    names = ("j = i - 1", "j = i", "j = i + 1")
    axis.set_xticks(centres, labels=[f"{name}\nb = {bias:+.2f}" for name, bias in zip(names, biases, strict=True)])
    axis.set(ylabel="attention weight", ylim=(0, 1.12), title="one query, three keys with equal content scores")
    axis.legend(fontsize=8, loc="upper right")
    return figure


def render_alibi_slopes(num_heads: int = 8, *, max_distance: int = 32) -> Figure:
    r"""ALiBi's slope of every head, and the bias :math:`-m_h |i - j|` each head adds against the distance.

    The slopes are :func:`~posenc_ref.relative.alibi_slopes` ``(num_heads)``: :math:`2^{-8h/n}` when the
    number of heads ``n`` is a power of two; otherwise the slopes of the largest power of two below ``n``
    (blue) followed by the odd-numbered slopes of twice as many heads (orange).

    Args:
        num_heads: the number of heads, >= 1.
        max_distance: the largest distance ``|i - j|`` on the right panel, >= 1.

    Raises:
        TypeError, ValueError: naming the argument, for a value outside the ranges above.
    """
    check_positive_int("num_heads", num_heads)
    check_positive_int("max_distance", max_distance)
    slopes = alibi_slopes(num_heads).double().numpy()  # (num_heads,)
    power_of_two = 2 ** (num_heads.bit_length() - 1)
    heads = np.arange(1, num_heads + 1)
    distances = np.arange(max_distance + 1)

    figure, (bars_axis, lines_axis) = _new_figure()
    colours = ["tab:blue"] * power_of_two + ["tab:orange"] * (num_heads - power_of_two)
    bars_axis.bar(heads, slopes, color=colours, gid="slopes")
    bars_axis.set_yscale("log", base=2)
    bars_axis.set(xlabel="head h", ylabel="slope m_h", ylim=(2.0**-9, 1.0),
                  title=f"{num_heads} heads" + ("" if num_heads == power_of_two else
                                                f": {power_of_two} + {num_heads - power_of_two} appended"))
    bars_axis.set_xticks(heads if num_heads <= 16 else heads[::4])
    bars_axis.grid(alpha=0.3, axis="y")
    shades = colormaps["viridis"](np.linspace(0.0, 0.9, num_heads))  # (num_heads, 4): one colour per head
    for head, slope, shade in zip(heads, slopes, shades, strict=True):
        lines_axis.plot(distances, -slope * distances, color=shade,
                        label=f"head {head}: m = 2^{math.log2(slope):g}" if num_heads <= 8 else None)
    lines_axis.set(xlabel="distance |i - j|", ylabel="bias -m_h |i - j|", title="bias added to the score")
    if num_heads <= 8:
        lines_axis.legend(fontsize=7, loc="lower left")
    lines_axis.grid(alpha=0.3)
    return figure


def _last_bucket_start(bidirectional: bool, num_buckets: int, max_distance: int) -> int:
    """The smallest distance ``a`` whose past offset ``-a`` falls into the last bucket of its direction."""
    last = (num_buckets // 2 if bidirectional else num_buckets) - 1
    distances = torch.arange(0, 4 * max_distance + 1)  # the last bucket begins before max_distance
    buckets = relative_position_bucket(-distances, bidirectional=bidirectional, num_buckets=num_buckets,
                                       max_distance=max_distance)
    return int((buckets == last).nonzero()[0])


def render_t5_buckets(max_distance: int = 128, num_buckets: int = 32, bidirectional: bool = True, *,
                      max_offset: int = 320) -> Figure:
    r"""T5's bucket against the offset ``r = j - i``, with the distance where the last bucket begins.

    The buckets are :func:`~posenc_ref.relative.relative_position_bucket` of the offsets
    ``-max_offset .. max_offset`` (extended to show the markers if needed). A dotted line marks the offset
    ``-a`` from which every key further in the past shares the last bucket, a dashed one ``-max_distance``.

    Args:
        max_distance: T5's ``max_distance``, larger than a quarter (bidirectional) or half of ``num_buckets``.
        num_buckets: T5's ``num_buckets``, even and >= 4 when bidirectional, >= 2 otherwise.
        bidirectional: the encoder's buckets (both directions) or the decoder's (the past only).
        max_offset: the largest ``|r|`` shown, >= 1.

    Raises:
        TypeError, ValueError: naming the argument, as :func:`~posenc_ref.relative.relative_position_bucket`.
    """
    check_positive_int("max_distance", max_distance)
    check_positive_int("num_buckets", num_buckets)
    _check_bool("bidirectional", bidirectional)
    check_positive_int("max_offset", max_offset)
    last_start = _last_bucket_start(bidirectional, num_buckets, max_distance)
    reach = max(max_offset, last_start + 20, max_distance + 20)
    offsets = torch.arange(-reach, reach + 1)  # (2 reach + 1,)
    buckets = relative_position_bucket(offsets, bidirectional=bidirectional, num_buckets=num_buckets,
                                       max_distance=max_distance)  # (2 reach + 1,)

    figure = Figure(figsize=(6.8, 3.6), layout="constrained")
    axis = figure.subplots()
    axis.plot(offsets.numpy(), buckets.numpy(), drawstyle="steps-mid", gid="buckets",
              label="encoder (bidirectional)" if bidirectional else "decoder (unidirectional)")
    axis.axvline(-last_start, color="tab:red", linestyle=":", gid="last-bucket-start",
                 label=f"last bucket from distance {last_start}")
    axis.axvline(-max_distance, color="black", linestyle="--", linewidth=1, label=f"-max_distance = {-max_distance}")
    axis.set(xlabel="offset r = j - i", ylabel="bucket", ylim=(-1, num_buckets),
             title=f"num_buckets = {num_buckets}, max_distance = {max_distance}")
    axis.legend(fontsize=8, loc="upper left")
    axis.grid(alpha=0.3)
    return figure


def _dog_bites_man_weights(position_scale: float, causal: bool, seed: int) -> list[np.ndarray]:
    """One head's attention weights (3, 3) for each sentence of DOG_BITES_MAN; see render_dog_bites_man."""
    dim = 8
    generator = torch.Generator().manual_seed(seed)
    words = {word: torch.randn(dim, dtype=torch.float64, generator=generator) for word in ("dog", "bites", "man")}
    w_query, w_key = (torch.randn(dim, dim, dtype=torch.float64, generator=generator) / math.sqrt(dim)
                      for _ in range(2))
    positions = position_scale * sinusoidal_table(3, dim, dtype=torch.float64)  # (3, 8)
    maps = []
    for sentence in DOG_BITES_MAN:
        x = torch.stack([words[word] for word in sentence.split()]) + positions  # (3, 8)
        query, key = (x @ w_query)[None, None], (x @ w_key)[None, None]  # (1, 1, 3, 8) each
        _, weights = attention(query, key, key, causal=causal, return_weights=True)  # (1, 1, 3, 3)
        maps.append(weights[0, 0].numpy())
    return maps


def render_dog_bites_man(position_scale: float = 1.0, causal: bool = False, *, seed: int = 0) -> Figure:
    r"""One head's attention maps for "dog bites man" and "man bites dog", with positions of a chosen strength.

    Each word has a random embedding of dimension 8 and the head random projections (``torch.randn`` in
    float64 from a generator seeded with ``seed``: the three words, then :math:`W_Q`, :math:`W_K`, each
    divided by :math:`\sqrt{8}`). The input is :math:`X + s\,\mathrm{PE}` with ``s = position_scale`` and PE
    the sinusoidal table of 3 positions, and :func:`~posenc_ref.attention.attention` gives the weights. With
    ``s = 0`` and no causal mask, the second map is the first with rows and columns reordered ("dog" gives
    "man" the same weight in both); positions or the causal mask break that symmetry.

    Args:
        position_scale: the strength ``s`` of the positions, a finite real (0: no positions).
        causal: apply the causal mask (each word sees itself and the words before it).
        seed: the seed of the random embeddings and projections, >= 0.

    Raises:
        TypeError, ValueError: naming the argument, for a value outside the ranges above.
    """
    position_scale = _check_real("position_scale", position_scale)
    _check_bool("causal", causal)
    check_int("seed", seed, minimum=0)
    maps = _dog_bites_man_weights(position_scale, causal, seed)
    swap = [2, 1, 0]  # "man bites dog" is "dog bites man" with words 0 and 2 swapped
    mismatch = float(np.abs(maps[1] - maps[0][np.ix_(swap, swap)]).max())

    figure, axes = _new_figure((7.6, 3.5))
    for axis, weights, sentence in zip(axes, maps, DOG_BITES_MAN, strict=True):
        image = axis.imshow(weights, cmap="Blues", vmin=0.0, vmax=1.0, interpolation="nearest")
        words = sentence.split()
        axis.set_xticks(range(3), labels=words)
        axis.set_yticks(range(3), labels=words)
        axis.set(title=sentence, xlabel="key", ylabel="query")
        for (row, column), value in np.ndenumerate(weights):
            axis.text(column, row, f"{value:.2f}", ha="center", va="center", fontsize=9,
                      color="white" if value > 0.6 else "black")
    figure.colorbar(image, ax=axes, shrink=0.9, label="attention weight")
    setting = ("no positions" if position_scale == 0 else f"positions × {position_scale:g}") + (
        ", causal mask" if causal else "")
    figure.suptitle(f"{setting}: the maps differ from a reordering by {mismatch:.2f}", fontsize=10)
    return figure


# ----------------------------------------------------------------------------------------------------------
# Live explorers (ipywidgets)
# ----------------------------------------------------------------------------------------------------------


def figure_png(figure: Figure, *, dpi: int = _DPI, colors: int | None = None) -> bytes:
    """The PNG bytes of ``figure`` at ``dpi`` pixels per inch.

    With ``colors``, the image is reduced to a palette of that many colours (2 to 256), which makes the file
    about three times smaller for figures such as these (flat colours, a few gradients).

    Raises:
        TypeError, ValueError: ``dpi`` is not an int >= 1, or ``colors`` is not None or an int in 2..256.
    """
    check_positive_int("dpi", dpi)
    if colors is not None:
        check_int("colors", colors, minimum=2)
        if colors > 256:
            raise ValueError(f"colors must be an int in 2..256 (a PNG palette), got {colors}")
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=dpi)
    if colors is None:
        return buffer.getvalue()
    image = PIL.Image.open(buffer).convert("RGB").quantize(colors=colors, method=PIL.Image.Quantize.MEDIANCUT)
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", optimize=True)
    return buffer.getvalue()


class Explorer(ipywidgets.VBox):
    """A render function with one control per argument, and its picture, drawn again when a control changes.

    Attributes:
        render: the render function, called as ``render(**values)``.
        controls: argument name -> ipywidgets control whose ``value`` is passed for that argument.
        picture: the :class:`ipywidgets.Image` holding the PNG of the last rendered figure.
    """

    def __init__(self, render: Callable[..., Figure], controls: Mapping[str, ipywidgets.ValueWidget], *,
                 title: str) -> None:
        unknown = sorted(set(controls) - set(inspect.signature(render).parameters))
        if unknown:
            raise ValueError(f"controls names {unknown}, which are not arguments of {render.__name__}")
        self.render = render
        self.controls = dict(controls)
        self.picture = ipywidgets.Image(format="png", layout=ipywidgets.Layout(max_width="100%", height="auto"))
        heading = ipywidgets.HTML(f"<b>{html.escape(title)}</b>")
        panel = ipywidgets.HBox(list(self.controls.values()), layout=ipywidgets.Layout(flex_flow="row wrap"))
        super().__init__([heading, panel, self.picture])
        self.redraw()
        for control in self.controls.values():
            control.observe(self.redraw, names="value")

    def values(self) -> dict[str, Any]:
        """The current value of every control, by argument name."""
        return {name: control.value for name, control in self.controls.items()}

    def redraw(self, change: Any = None) -> None:
        """Render the figure for the current values into the picture."""
        self.picture.value = figure_png(self.render(**self.values()))


# ipywidgets gives a description a fixed width and cuts a longer one ("num_buck..."); "initial" fits the text.
_FULL_DESCRIPTION = {"description_width": "initial"}


def _slider_style() -> dict[str, Any]:
    return {"style": _FULL_DESCRIPTION, "continuous_update": False}


def _d_dropdown(value: int = 64) -> ipywidgets.Dropdown:
    return ipywidgets.Dropdown(options=[8, 16, 32, 64, 128, 256, 512], value=value, description="d",
                               style=_FULL_DESCRIPTION)


def _base_slider() -> ipywidgets.FloatLogSlider:
    return ipywidgets.FloatLogSlider(value=10000.0, base=10, min=1, max=6, step=0.25, description="base",
                                     readout_format=",.0f", **_slider_style())


def wavelengths_explorer() -> Explorer:
    """The sinusoidal pairs: pick a pair (the dimension), zoom on the position axis, change ``d``."""
    d = _d_dropdown()
    pair = ipywidgets.IntSlider(value=0, min=0, max=d.value // 2 - 1, description="pair i", **_slider_style())
    zoom = ipywidgets.SelectionSlider(options=[2**power for power in range(4, 17)], value=256,
                                      description="positions shown", **_slider_style())

    def follow_d(change: Any) -> None:  # registered before the explorer's own observer: it runs first
        pair.max = change["new"] // 2 - 1

    d.observe(follow_d, names="value")
    return Explorer(render_wavelengths, {"pair": pair, "max_position": zoom, "d": d},
                    title="Wavelengths of the sinusoidal table")


def heatmap_explorer() -> Explorer:
    """The sinusoidal table as a heatmap, with sliders for ``d`` and the base."""
    d = ipywidgets.SelectionSlider(options=[8, 16, 32, 64, 128, 256, 512], value=64, description="d",
                                   **_slider_style())
    return Explorer(render_encoding_heatmap, {"d": d, "base": _base_slider()},
                    title="The sinusoidal table PE(p)")


def similarity_explorer() -> Explorer:
    """Similarity of two encodings against their offset, for any ``d``, base and starting position."""
    start = ipywidgets.IntSlider(value=0, min=0, max=5000, step=50, description="start p", **_slider_style())
    return Explorer(render_similarity, {"d": _d_dropdown(), "base": _base_slider(), "start": start},
                    title="Similarity of PE(p) and PE(p + k) against the offset k")


def rope_dial_explorer() -> Explorer:
    """RoPE's rotation of one query/key pair, and the logit against ``m - n``."""
    m = ipywidgets.IntSlider(value=3, min=0, max=31, description="query position m", **_slider_style())
    n = ipywidgets.IntSlider(value=1, min=0, max=31, description="key position n", **_slider_style())
    pair = ipywidgets.IntSlider(value=0, min=0, max=7, description="pair i", **_slider_style())
    return Explorer(render_rope_dial, {"m": m, "n": n, "pair": pair}, title="The RoPE dial")


def relative_bias_explorer() -> Explorer:
    """Softmax weights of one query over three keys under the biases ``b(-1)``, ``b(0)``, ``b(+1)``."""
    sliders = {name: ipywidgets.FloatSlider(value=value, min=-3.0, max=3.0, step=0.1, description=label,
                                            **_slider_style())
               for name, value, label in (("b_previous", 0.5, "b(-1)"), ("b_same", 0.0, "b(0)"),
                                          ("b_next", -0.5, "b(+1)"))}
    return Explorer(render_relative_bias, sliders, title="A relative bias in the softmax")


def alibi_explorer() -> Explorer:
    """ALiBi's slopes per head, for any number of heads."""
    heads = ipywidgets.IntSlider(value=8, min=1, max=32, description="heads", **_slider_style())
    distance = ipywidgets.IntSlider(value=32, min=4, max=256, description="largest distance", **_slider_style())
    return Explorer(render_alibi_slopes, {"num_heads": heads, "max_distance": distance},
                    title="ALiBi slopes per head")


def t5_buckets_explorer() -> Explorer:
    """T5's buckets against the distance, for several ``max_distance`` and ``num_buckets``."""
    max_distance = ipywidgets.SelectionSlider(options=[32, 48, 64, 96, 128, 192, 256, 384, 512], value=128,
                                              description="max_distance", **_slider_style())
    num_buckets = ipywidgets.Dropdown(options=[8, 16, 32], value=32, description="num_buckets",
                                     style=_FULL_DESCRIPTION)
    bidirectional = ipywidgets.Checkbox(value=True, description="bidirectional (encoder)")
    return Explorer(render_t5_buckets,
                    {"max_distance": max_distance, "num_buckets": num_buckets, "bidirectional": bidirectional},
                    title="T5 buckets against the offset")


def dog_bites_man_explorer() -> Explorer:
    """Attention maps of "dog bites man" and "man bites dog", with and without positions."""
    scale = ipywidgets.FloatSlider(value=0.0, min=0.0, max=2.0, step=0.25, description="positions ×",
                                   **_slider_style())
    causal = ipywidgets.Checkbox(value=False, description="causal mask")
    return Explorer(render_dog_bites_man, {"position_scale": scale, "causal": causal},
                    title="Dog bites man, man bites dog")


EXPLORERS: dict[str, Callable[[], Explorer]] = {
    function.__name__: function
    for function in (wavelengths_explorer, heatmap_explorer, similarity_explorer, rope_dial_explorer,
                     relative_bias_explorer, alibi_explorer, t5_buckets_explorer, dog_bites_man_explorer)
}


# ----------------------------------------------------------------------------------------------------------
# Static frames, for pages without a kernel
# ----------------------------------------------------------------------------------------------------------


class FrameSlider:
    """Pre-rendered frames of an explorer along one control; displays as HTML with a range input.

    The markup is ``<figure class="frame-slider" data-frame-slider="NAME">`` holding one ``<img>`` per frame
    (a PNG data URI; all but the initial one ``hidden``, each with its label in ``data-label``), an
    ``<input type="range">`` from 0 to the number of frames minus one, and an ``<output>`` for the label. A
    page script shows frame ``k`` and its label when the input is at ``k``.

    Attributes:
        name: the explorer's name (its render function without ``render_``).
        control: the argument the slider moves.
        frames: ``(label, png bytes)`` per value, in order.
        initial: the index of the frame shown first.
    """

    def __init__(self, name: str, control: str, frames: Sequence[tuple[str, bytes]], initial: int) -> None:
        self.name, self.control, self.frames, self.initial = name, control, list(frames), initial

    def _repr_html_(self) -> str:
        images = []
        for index, (label, png) in enumerate(self.frames):
            source = "data:image/png;base64," + base64.b64encode(png).decode("ascii")
            hidden = "" if index == self.initial else " hidden"
            alt = html.escape(f"{self.name}, {label}", quote=True)
            images.append(f'<img src="{source}" alt="{alt}" data-label="{html.escape(label, quote=True)}"{hidden}>')
        label = html.escape(self.frames[self.initial][0])
        return (
            f'<figure class="frame-slider" data-frame-slider="{html.escape(self.name, quote=True)}">'
            f'<div class="frame-slider-frames">{"".join(images)}</div>'
            f'<label class="frame-slider-control">{html.escape(self.control)} '
            f'<input type="range" min="0" max="{len(self.frames) - 1}" step="1" value="{self.initial}">'
            f"<output>{label}</output></label></figure>"
        )

    def __repr__(self) -> str:
        return f"FrameSlider({self.name!r}, {self.control!r}, {len(self.frames)} frames)"


def frame_slider(render: Callable[..., Figure], control: str, values: Sequence[Any], *,
                 labels: Sequence[str] | None = None, initial: int = 0, dpi: int = 80, colors: int | None = 256,
                 **fixed: Any) -> FrameSlider:
    """Render ``render(control=value, **fixed)`` for each value, as the frames of a :class:`FrameSlider`.

    Args:
        render: a render function of this module.
        control: the name of the argument of ``render`` that the slider moves.
        values: its values, one frame each (at least 2).
        labels: the label shown for each value; default ``"{control} = {value}"``.
        initial: the index of the frame shown first.
        dpi: pixels per inch of the frames.
        colors: the size of each frame's palette (see :func:`figure_png`); None keeps full colour.
        **fixed: the other arguments of ``render``.

    Raises:
        ValueError: ``control`` or a key of ``fixed`` is not an argument of ``render``, ``control`` is also
            in ``fixed``, fewer than 2 values, ``labels`` of another length, or ``initial`` out of range.
    """
    parameters = inspect.signature(render).parameters
    unknown = sorted({control, *fixed} - set(parameters))
    if unknown:
        raise ValueError(f"{unknown} are not arguments of {render.__name__} (it takes {list(parameters)})")
    if control in fixed:
        raise ValueError(f"control {control!r} is also given as a fixed argument; give it in values only")
    if len(values) < 2:
        raise ValueError(f"values must hold at least 2 values of {control!r} (one frame each), got {len(values)}")
    labels = [f"{control} = {value}" for value in values] if labels is None else list(labels)
    if len(labels) != len(values):
        raise ValueError(f"labels has {len(labels)} entries but values has {len(values)}; they must match")
    _check_below("initial", initial, len(values), "the index of a value")
    frames = [(label, figure_png(render(**{control: value}, **fixed), dpi=dpi, colors=colors))
              for label, value in zip(labels, values, strict=True)]
    return FrameSlider(render.__name__.removeprefix("render_"), control, frames, initial)
