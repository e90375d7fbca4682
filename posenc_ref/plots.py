r"""The figures of the book and the notebooks.

Each function takes the data to draw (torch tensors, numpy arrays or nested lists) and returns a new
:class:`matplotlib.figure.Figure`; it computes nothing about positional encodings itself, so a figure shows
exactly the numbers the reader computed in the cell above it. Figures are created with ``pyplot`` (so that
``plt.show()`` displays them in a notebook) and use the constrained layout engine; nothing else is kept
between calls. Close a figure with ``plt.close(fig)`` when it is not shown.

Axes conventions: positions ``p`` run along the vertical axis of a table (rows, as in a ``(length, d)``
tensor) and along the horizontal axis of a curve; feature indices run along the horizontal axis of a table.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import FancyBboxPatch

__all__ = [
    "POSITION_DOORS",
    "plot_angle_ratios",
    "plot_attention_maps",
    "plot_bar_chart",
    "plot_binary_counter",
    "plot_curve_panels",
    "plot_curves",
    "plot_curves_with_spread",
    "plot_encoding_dimensions",
    "plot_grouped_bars",
    "plot_heatmaps",
    "plot_interval_panels",
    "plot_map_grid",
    "plot_marked_curves",
    "plot_plane_vectors",
    "plot_position_doors",
    "plot_similarity_matrices",
    "plot_wavelengths",
]

_ANNOTATE_UP_TO = 8  # attention maps up to this many tokens get their weights written in the cells
_PANEL_SIZE = 3.2  # inches per panel in a row of heatmaps


def _as_array(name: str, value: Any, *, ndim: int) -> np.ndarray:
    """``value`` as a float numpy array of rank ``ndim``; tensors are detached and moved to the CPU."""
    if hasattr(value, "detach"):
        value = value.detach().cpu().numpy()
    try:
        array = np.asarray(value, dtype=float)
    except (TypeError, ValueError) as error:
        raise TypeError(f"{name} must be a tensor or array of numbers, got {type(value).__name__}") from error
    if array.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimension(s), got shape {array.shape}")
    return array


def _check_same_length(name: str, items: Sequence[Any], other_name: str, other: Sequence[Any]) -> None:
    if len(items) != len(other):
        raise ValueError(f"{name} has {len(items)} entries but {other_name} has {len(other)}; they must match")


def _check_not_empty(name: str, items: Sequence[Any] | Mapping[str, Any]) -> None:
    if len(items) == 0:
        raise ValueError(f"{name} must not be empty")


def plot_heatmaps(
    images: Sequence[Any],
    titles: Sequence[str],
    *,
    xlabel: str = "feature",
    ylabel: str = "position p",
    colorbar_label: str | None = None,
    symmetric: bool = True,
    cmap: str | None = None,
    suptitle: str | None = None,
) -> Figure:
    """A row of heatmaps on one shared colour scale, with one colour bar.

    Args:
        images: 2-D arrays, each drawn with row 0 at the top (a ``(length, d)`` table puts positions down
            the vertical axis and features across).
        titles: one title per image.
        xlabel, ylabel: axis labels shared by every panel.
        colorbar_label: the label of the colour bar.
        symmetric: centre the scale on 0 (``[-m, m]`` with ``m`` the largest absolute value, diverging
            colour map), for signed data; otherwise span ``[min, max]`` with a sequential map.
        cmap: a matplotlib colour map name, overriding the default.
        suptitle: a title over the whole figure.

    Returns:
        A figure with ``len(images)`` image axes and one colour bar.

    Raises:
        ValueError: if ``images`` is empty, an image is not 2-D, or ``titles`` has another length.
    """
    _check_not_empty("images", images)
    _check_same_length("images", images, "titles", titles)
    arrays = [_as_array(f"images[{index}]", image, ndim=2) for index, image in enumerate(images)]
    if symmetric:
        limit = max(float(np.abs(array).max()) for array in arrays) or 1.0
        vmin, vmax, default_cmap = -limit, limit, "RdBu_r"
    else:
        vmin = min(float(array.min()) for array in arrays)
        vmax = max(float(array.max()) for array in arrays)
        default_cmap = "viridis"
    figure, axes = plt.subplots(
        1, len(arrays), figsize=(_PANEL_SIZE * len(arrays) + 1.0, _PANEL_SIZE), layout="constrained", squeeze=False
    )
    for axis, array, title in zip(axes[0], arrays, titles, strict=True):
        image = axis.imshow(array, aspect="auto", cmap=cmap or default_cmap, vmin=vmin, vmax=vmax,
                            interpolation="nearest")
        axis.set(title=title, xlabel=xlabel, ylabel=ylabel)
    colorbar = figure.colorbar(image, ax=list(axes[0]), shrink=0.9)
    if colorbar_label:
        colorbar.set_label(colorbar_label)
    if suptitle:
        figure.suptitle(suptitle)
    return figure


def plot_attention_maps(
    weights: Sequence[Any], titles: Sequence[str], tokens: Sequence[Sequence[str]]
) -> Figure:
    """Attention weights as heatmaps, one panel per map, with the tokens on both axes.

    Panel ``n`` draws ``weights[n][i, j]``, the weight that query ``i`` (row) gives to key ``j`` (column), on a
    colour scale from 0 to 1; maps of up to 8 tokens have each weight written in its cell.

    Args:
        weights: 2-D ``(q_len, k_len)`` arrays of attention weights (rows of a softmax sum to 1).
        titles: one title per map.
        tokens: per map, the token strings of its sequence (``k_len`` of them; queries and keys are the same
            tokens in self-attention, so ``q_len == k_len``).

    Raises:
        ValueError: if the lists differ in length, a map is not 2-D and square, or its tokens do not match
            its size.
    """
    _check_not_empty("weights", weights)
    _check_same_length("weights", weights, "titles", titles)
    _check_same_length("weights", weights, "tokens", tokens)
    arrays = [_as_array(f"weights[{index}]", map_, ndim=2) for index, map_ in enumerate(weights)]
    for index, (array, words) in enumerate(zip(arrays, tokens, strict=True)):
        if array.shape != (len(words), len(words)):
            raise ValueError(
                f"weights[{index}] has shape {array.shape} but tokens[{index}] has {len(words)} tokens; "
                f"a self-attention map must be ({len(words)}, {len(words)})"
            )
    figure, axes = plt.subplots(
        1, len(arrays), figsize=(2.9 * len(arrays) + 1.0, 3.0), layout="constrained", squeeze=False
    )
    for axis, array, title, words in zip(axes[0], arrays, titles, tokens, strict=True):
        image = axis.imshow(array, cmap="Blues", vmin=0.0, vmax=1.0, interpolation="nearest")
        positions = range(len(words))
        axis.set_xticks(positions, labels=list(words), rotation=45)
        axis.set_yticks(positions, labels=list(words))
        axis.set(title=title, xlabel="key", ylabel="query")
        if len(words) <= _ANNOTATE_UP_TO:
            for (row, column), value in np.ndenumerate(array):
                axis.text(column, row, f"{value:.2f}", ha="center", va="center", fontsize=8,
                          color="white" if value > 0.6 else "black")
    figure.colorbar(image, ax=list(axes[0]), shrink=0.9, label="attention weight")
    return figure


def plot_bar_chart(
    values: Mapping[str, float], *, ylabel: str, title: str | None = None, log_scale: bool = False
) -> Figure:
    """One bar per named value, each labelled with its value.

    Args:
        values: bar label -> height (e.g. setting -> measured error), drawn in the mapping's order.
        ylabel: the label of the vertical axis.
        title: the title of the axes.
        log_scale: use a logarithmic vertical axis (every value must then be > 0).

    Raises:
        ValueError: if ``values`` is empty, or ``log_scale`` is set and a value is not > 0.
    """
    _check_not_empty("values", values)
    labels = list(values)
    heights = np.array([float(values[label]) for label in labels])
    if log_scale and not (heights > 0).all():
        raise ValueError(f"log_scale=True needs every value > 0, got {dict(zip(labels, heights.tolist()))}")
    figure, axis = plt.subplots(figsize=(1.6 * len(labels) + 2.0, 3.4), layout="constrained")
    bars = axis.bar(range(len(labels)), heights, color="tab:blue")
    axis.set_xticks(range(len(labels)), labels=labels)
    axis.bar_label(bars, labels=[f"{height:.1e}" if log_scale else f"{height:.3g}" for height in heights],
                   padding=2, fontsize=8)
    axis.set_ylabel(ylabel)
    if log_scale:
        axis.set_yscale("log")
        axis.set_ylim(heights.min() / 10, heights.max() * 10)
    if title:
        axis.set_title(title)
    return figure


def plot_curves(
    x: Any,
    curves: Mapping[str, Any],
    *,
    xlabel: str,
    ylabel: str,
    title: str | None = None,
    boundary: float | None = None,
    boundary_label: str | None = None,
    log_y: bool = False,
    markers: bool = False,
    dashed: Sequence[str] = (),
) -> Figure:
    """Named curves ``y(x)`` on one set of axes, with a legend and an optional vertical boundary line.

    Args:
        x: 1-D array of abscissae, shared by every curve.
        curves: label -> 1-D array of ``len(x)`` ordinates, drawn in the mapping's order.
        xlabel, ylabel, title: the labels of the axes.
        boundary: draw a dashed vertical line at this ``x`` (e.g. the last trained position).
        boundary_label: the legend entry of the boundary line.
        log_y: logarithmic vertical axis.
        markers: draw a marker at each point.
        dashed: labels of curves to draw dashed and on top (e.g. a closed form to compare with).

    Returns:
        A figure with one axes holding ``len(curves)`` lines (plus one for the boundary).

    Raises:
        ValueError: if ``curves`` is empty, a curve's length differs from ``x``'s, or ``dashed`` names a
            label that is not in ``curves``.
    """
    _check_not_empty("curves", curves)
    unknown = [label for label in dashed if label not in curves]
    if unknown:
        raise ValueError(f"dashed names {unknown}, which are not labels of curves ({list(curves)})")
    abscissae = _as_array("x", x, ndim=1)
    figure, axis = plt.subplots(figsize=(6.4, 3.6), layout="constrained")
    for label, values in curves.items():
        ordinates = _as_array(f"curves[{label!r}]", values, ndim=1)
        if ordinates.shape != abscissae.shape:
            raise ValueError(f"curves[{label!r}] has {ordinates.shape[0]} values but x has {abscissae.shape[0]}")
        style = {"linestyle": "--", "zorder": 3} if label in dashed else {}
        axis.plot(abscissae, ordinates, label=label, marker="o" if markers else None, markersize=3, **style)
    if boundary is not None:
        axis.axvline(boundary, color="black", linestyle="--", linewidth=1, label=boundary_label)
    if log_y:
        axis.set_yscale("log")
    axis.set(xlabel=xlabel, ylabel=ylabel)
    if title:
        axis.set_title(title)
    axis.legend(fontsize=8)
    axis.grid(alpha=0.3)
    return figure


def plot_encoding_dimensions(table: Any, features: Sequence[int], *, title: str | None = None) -> Figure:
    """Selected features of a position table against the position: ``table[p, j]`` for each ``j`` in ``features``.

    Args:
        table: a ``(length, d)`` table, row ``p`` the encoding ``PE(p)``.
        features: the feature indices ``j`` to draw, one line each, labelled ``feature j``.
        title: the title of the axes.

    Raises:
        ValueError: if ``table`` is not 2-D, ``features`` is empty or a feature index is out of range.
    """
    array = _as_array("table", table, ndim=2)
    _check_not_empty("features", features)
    for feature in features:
        if not 0 <= feature < array.shape[1]:
            raise ValueError(f"features contains {feature}, outside 0..{array.shape[1] - 1} (the table's width)")
    curves = {f"feature {feature}": array[:, feature] for feature in features}
    return plot_curves(np.arange(array.shape[0]), curves, xlabel="position p", ylabel="PE(p) value", title=title)


def plot_wavelengths(wavelengths: Mapping[str, Any], *, title: str | None = None) -> Figure:
    """Wavelength ``2 pi / omega_i`` against the pair index ``i``, one line per set of frequencies, log scale.

    Args:
        wavelengths: label -> 1-D array of wavelengths (in positions), one entry per pair ``i``.
        title: the title of the axes.

    Raises:
        ValueError: if ``wavelengths`` is empty or a wavelength is not > 0.
    """
    _check_not_empty("wavelengths", wavelengths)
    figure, axis = plt.subplots(figsize=(6.4, 3.6), layout="constrained")
    for label, values in wavelengths.items():
        array = _as_array(f"wavelengths[{label!r}]", values, ndim=1)
        if not (array > 0).all():
            raise ValueError(f"wavelengths[{label!r}] must be > 0 everywhere (a log axis), got min {array.min()}")
        axis.plot(np.arange(array.shape[0]), array, marker="o", markersize=3, label=label)
    axis.set_yscale("log")
    axis.set(xlabel="pair index i", ylabel="wavelength (positions)")
    if title:
        axis.set_title(title)
    axis.legend(fontsize=8)
    axis.grid(alpha=0.3, which="both")
    return figure


def plot_binary_counter(bits: Any, sines: Any) -> Figure:
    """The binary counter beside the sinusoidal table: two images with the position along the horizontal axis.

    Left: ``bits[p, b]``, bit ``b`` of the integer ``p`` (bit 0, the fastest, on top). Right: the sign of
    ``sines[p, i] = sin(p omega_i)`` (pair 0, the fastest, on top). Both flip faster in the top rows.

    Args:
        bits: ``(length, num_bits)`` array of 0/1 values.
        sines: ``(length, num_pairs)`` array of the sine features of the same positions.

    Raises:
        ValueError: if either is not 2-D or they cover different numbers of positions.
    """
    bit_array = _as_array("bits", bits, ndim=2)
    sine_array = _as_array("sines", sines, ndim=2)
    if bit_array.shape[0] != sine_array.shape[0]:
        raise ValueError(
            f"bits covers {bit_array.shape[0]} positions but sines covers {sine_array.shape[0]}; they must match"
        )
    figure, (left, right) = plt.subplots(1, 2, figsize=(10.0, 3.4), layout="constrained")
    left.imshow(bit_array.T, aspect="auto", cmap="Greys", vmin=0, vmax=1, interpolation="nearest")
    left.set(title="bits of p (black = 1)", xlabel="position p", ylabel="bit b")
    right.imshow(np.sign(sine_array.T), aspect="auto", cmap="Greys", vmin=-1, vmax=1, interpolation="nearest")
    right.set(title="sign of sin(p ω_i) (black = positive)", xlabel="position p", ylabel="pair index i")
    return figure


def plot_similarity_matrices(matrices: Sequence[Any], titles: Sequence[str]) -> Figure:
    """Cosine-similarity matrices between positions, on the fixed scale ``[-1, 1]``.

    Args:
        matrices: square 2-D arrays, entry ``(p, q)`` the cosine similarity of the encodings of ``p`` and ``q``.
        titles: one title per matrix.

    Raises:
        ValueError: if a matrix is not square, a value lies outside ``[-1, 1]`` (beyond rounding), or the
            lists differ in length.
    """
    _check_not_empty("matrices", matrices)
    arrays = [_as_array(f"matrices[{index}]", matrix, ndim=2) for index, matrix in enumerate(matrices)]
    for index, array in enumerate(arrays):
        if array.shape[0] != array.shape[1]:
            raise ValueError(f"matrices[{index}] must be square, got shape {array.shape}")
        if np.abs(array).max() > 1.0 + 1e-5:
            raise ValueError(f"matrices[{index}] holds {np.abs(array).max():.4g}; cosine similarities lie in [-1, 1]")
    figure = plot_heatmaps(arrays, titles, xlabel="position q", ylabel="position p",
                           colorbar_label="cosine similarity", symmetric=True)
    for axis in figure.axes[: len(arrays)]:
        axis.images[0].set_clim(-1.0, 1.0)
    return figure


def plot_grouped_bars(
    categories: Sequence[str], groups: Mapping[str, Any], *, ylabel: str, title: str | None = None
) -> Figure:
    """Bars side by side: for each category one bar per group, each labelled with its value.

    Args:
        categories: the labels under the groups of bars (e.g. the keys a query attends to).
        groups: group label -> 1-D array of ``len(categories)`` heights (e.g. "without bias" -> weights), one
            colour per group, drawn in the mapping's order.
        ylabel: the label of the vertical axis.
        title: the title of the axes.

    Raises:
        ValueError: if ``categories`` or ``groups`` is empty, or a group's length differs from ``categories``.
    """
    _check_not_empty("categories", categories)
    _check_not_empty("groups", groups)
    arrays = {label: _as_array(f"groups[{label!r}]", values, ndim=1) for label, values in groups.items()}
    for label, array in arrays.items():
        if array.shape[0] != len(categories):
            raise ValueError(f"groups[{label!r}] has {array.shape[0]} values but there are {len(categories)} "
                             "categories; they must match")
    width = 0.8 / len(arrays)
    figure_width = 1.2 * len(categories) * len(arrays) + 2.5
    figure, axis = plt.subplots(figsize=(figure_width, 3.4), layout="constrained")
    centres = np.arange(len(categories))
    for index, (label, heights) in enumerate(arrays.items()):
        bars = axis.bar(centres + (index - (len(arrays) - 1) / 2) * width, heights, width, label=label)
        axis.bar_label(bars, labels=[f"{height:.3f}" for height in heights], padding=2, fontsize=8)
    axis.set_xticks(centres, labels=list(categories))
    axis.set_ylabel(ylabel)
    axis.set_ylim(0, max(float(array.max()) for array in arrays.values()) * 1.2 or 1.0)
    if title:
        axis.set_title(title)
    axis.legend(fontsize=8)
    return figure


def plot_marked_curves(
    x: Any,
    curves: Mapping[str, Any],
    *,
    xlabel: str,
    ylabel: str,
    vertical: Mapping[str, float] | None = None,
    horizontal: Mapping[str, float] | None = None,
    steps: bool = False,
    log_y: bool = False,
    title: str | None = None,
) -> Figure:
    """Named curves ``y(x)`` with labelled reference lines: vertical ones at given ``x``, horizontal at ``y``.

    Args:
        x: 1-D array of abscissae, shared by every curve.
        curves: label -> 1-D array of ``len(x)`` ordinates, drawn in the mapping's order.
        xlabel, ylabel, title: the labels of the axes.
        vertical: legend label -> ``x`` of a dotted vertical line (e.g. where a bucket begins).
        horizontal: legend label -> ``y`` of a dotted horizontal line (e.g. a context length).
        steps: draw each curve as a staircase (``drawstyle="steps-mid"``), for integer-valued functions such
            as a bucket index.
        log_y: logarithmic vertical axis.

    Returns:
        A figure with one axes holding the curves, then the vertical lines, then the horizontal lines.

    Raises:
        ValueError: if ``curves`` is empty or a curve's length differs from ``x``'s.
    """
    _check_not_empty("curves", curves)
    abscissae = _as_array("x", x, ndim=1)
    figure, axis = plt.subplots(figsize=(8.0, 3.6), layout="constrained")
    for label, values in curves.items():
        ordinates = _as_array(f"curves[{label!r}]", values, ndim=1)
        if ordinates.shape != abscissae.shape:
            raise ValueError(f"curves[{label!r}] has {ordinates.shape[0]} values but x has {abscissae.shape[0]}")
        axis.plot(abscissae, ordinates, label=label, drawstyle="steps-mid" if steps else "default")
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    lines = [*((label, value, axis.axvline) for label, value in (vertical or {}).items()),
             *((label, value, axis.axhline) for label, value in (horizontal or {}).items())]
    for index, (label, value, draw) in enumerate(lines):
        colour = colours[(len(curves) + index) % len(colours)]
        draw(value, color=colour, linestyle=":", linewidth=1.5, label=label)
    if log_y:
        axis.set_yscale("log")
    axis.set(xlabel=xlabel, ylabel=ylabel)
    if title:
        axis.set_title(title)
    axis.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0))  # beside the axes, off the curves
    axis.grid(alpha=0.3)
    return figure


def plot_curve_panels(
    x: Any,
    panels: Mapping[str, Mapping[str, Any]],
    *,
    xlabel: str,
    ylabels: Sequence[str],
    log_x: bool = False,
    log_y: bool = False,
    markers: bool = True,
) -> Figure:
    """A row of panels of named curves over the same abscissae, e.g. memory and time against the length.

    Args:
        x: 1-D array of abscissae, shared by every curve of every panel.
        panels: panel title -> (curve label -> 1-D array of ``len(x)`` ordinates); a label keeps its colour
            from panel to panel.
        xlabel: the label of every horizontal axis.
        ylabels: one vertical-axis label per panel.
        log_x, log_y: logarithmic axes (base 2 for ``x``, which suits lengths that double).
        markers: draw a marker at each point (for a few measured points; leave off for dense curves).

    Raises:
        ValueError: if ``panels`` or a panel is empty, ``ylabels`` has another length than ``panels``, or a
            curve's length differs from ``x``'s.
    """
    _check_not_empty("panels", panels)
    _check_same_length("panels", list(panels), "ylabels", ylabels)
    abscissae = _as_array("x", x, ndim=1)
    figure, axes = plt.subplots(1, len(panels), figsize=(4.6 * len(panels), 3.6), layout="constrained",
                                squeeze=False)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    labels: list[str] = []
    for axis, (title, curves), ylabel in zip(axes[0], panels.items(), ylabels, strict=True):
        _check_not_empty(f"panels[{title!r}]", curves)
        for label, values in curves.items():
            ordinates = _as_array(f"panels[{title!r}][{label!r}]", values, ndim=1)
            if ordinates.shape != abscissae.shape:
                raise ValueError(f"panels[{title!r}][{label!r}] has {ordinates.shape[0]} values but x has "
                                 f"{abscissae.shape[0]}")
            if label not in labels:
                labels.append(label)
            colour = colours[labels.index(label) % len(colours)]
            axis.plot(abscissae, ordinates, marker="o" if markers else None, markersize=4, label=label,
                      color=colour)
        if log_x:
            axis.set_xscale("log", base=2)
        if log_y:
            axis.set_yscale("log")
        axis.set(title=title, xlabel=xlabel, ylabel=ylabel)
        axis.legend(fontsize=8)
        axis.grid(alpha=0.3, which="both")
    return figure


def plot_plane_vectors(vectors: Mapping[str, Any], *, title: str | None = None) -> Figure:
    """Arrows from the origin in the plane, one colour per set, each arrow numbered by its row.

    Meant for one feature pair of a rotary embedding: row ``m`` of a set is the pair at position ``m``.

    Args:
        vectors: label -> ``(count, 2)`` array; row ``r`` is drawn as an arrow to ``(x, y)`` marked ``r``.
        title: the title of the axes.

    Raises:
        ValueError: if ``vectors`` is empty or a set is not of shape ``(count, 2)``.
    """
    _check_not_empty("vectors", vectors)
    arrays = {label: _as_array(f"vectors[{label!r}]", values, ndim=2) for label, values in vectors.items()}
    for label, array in arrays.items():
        if array.shape[1] != 2:
            raise ValueError(f"vectors[{label!r}] must have shape (count, 2), got {array.shape}")
    figure, axis = plt.subplots(figsize=(4.6, 4.6), layout="constrained")
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    reach = max(float(np.abs(array).max()) for array in arrays.values()) or 1.0
    for index, (label, array) in enumerate(arrays.items()):
        colour = colours[index % len(colours)]
        for row, (end_x, end_y) in enumerate(array):
            axis.annotate("", xy=(end_x, end_y), xytext=(0.0, 0.0),
                          arrowprops={"arrowstyle": "->", "color": colour, "linewidth": 1.4})
            axis.text(1.08 * end_x, 1.08 * end_y, str(row), color=colour, fontsize=8, ha="center",
                      va="center")
        axis.plot([], [], color=colour, label=label)  # a legend entry for the set
    axis.set_xlim(-1.2 * reach, 1.2 * reach)
    axis.set_ylim(-1.2 * reach, 1.2 * reach)
    axis.set_aspect("equal")
    axis.axhline(0.0, color="grey", linewidth=0.5)
    axis.axvline(0.0, color="grey", linewidth=0.5)
    axis.set(xlabel="first feature of the pair", ylabel="second feature of the pair")
    if title:
        axis.set_title(title)
    axis.legend(fontsize=8, loc="lower left")
    return figure


def plot_angle_ratios(
    pair_index: Any, ratios: Mapping[str, Any], *, first_slow_pair: int, title: str | None = None
) -> Figure:
    """Per RoPE pair, the largest angle met at the target length over the largest angle met in training.

    One curve per scaling rule against the pair index ``i`` on a logarithmic vertical axis, a line at 1 (no
    angle beyond the trained range), and a shaded band over the pairs from ``first_slow_pair`` on, which
    never complete a turn in training: there, and only there, a ratio above 1 means angles the model has
    never met (a pair that turned fully in training has met every angle modulo 2 pi).

    Args:
        pair_index: 1-D array of pair indices ``i``, increasing.
        ratios: rule label -> 1-D array of ``len(pair_index)`` ratios, each > 0 (e.g. from
            :func:`posenc_ref.rope.rope_angle_ratio`).
        first_slow_pair: the first pair index whose wavelength exceeds the trained length.
        title: the title of the axes.

    Returns:
        A figure with one axes: one line per rule, then the line at 1; the band is a patch.

    Raises:
        ValueError: if ``ratios`` is empty, a curve's length differs from ``pair_index``'s, a ratio is not
            > 0, or ``first_slow_pair`` lies outside the pair indices.
    """
    _check_not_empty("ratios", ratios)
    pairs = _as_array("pair_index", pair_index, ndim=1)
    if not pairs.min() <= first_slow_pair <= pairs.max():
        raise ValueError(f"first_slow_pair must lie among the pair indices {pairs.min():g}..{pairs.max():g}, "
                         f"got {first_slow_pair}")
    figure, axis = plt.subplots(figsize=(8.0, 3.8), layout="constrained")
    axis.axvspan(first_slow_pair - 0.5, pairs.max() + 0.5, color="grey", alpha=0.15,
                 label="pairs that never complete a turn in training")
    for label, values in ratios.items():
        ordinates = _as_array(f"ratios[{label!r}]", values, ndim=1)
        if ordinates.shape != pairs.shape:
            raise ValueError(f"ratios[{label!r}] has {ordinates.shape[0]} values but pair_index has {pairs.shape[0]}")
        if not (ordinates > 0).all():
            raise ValueError(f"ratios[{label!r}] must be > 0 everywhere (a log axis), got min {ordinates.min()}")
        axis.plot(pairs, ordinates, marker="o", markersize=3, label=label)
    axis.axhline(1.0, color="black", linestyle="--", linewidth=1, label="largest trained angle")
    axis.set_yscale("log", base=2)
    axis.set(xlabel="pair index i", ylabel="largest angle / largest trained angle")
    if title:
        axis.set_title(title)
    axis.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    axis.grid(alpha=0.3, which="both")
    return figure


POSITION_DOORS: tuple[str, ...] = ("input", "queries and keys", "keys and values", "logits")
"""Where a position kind can enter attention, in the order of the computation (see posenc_ref.attention)."""

# The steps of one attention layer, top to bottom, and the steps each door feeds.
_STEPS = (
    "token embeddings x_p",
    "h_p = x_p + PE(p)",
    "q_i = W_Q h_i,   k_j = W_K h_j,   v_j = W_V h_j",
    "rotate: q_i <- R(i) q_i,   k_j <- R(j) k_j",
    "logits s q_i · k_j   (Shaw: s q_i · (k_j + a^K_ij))",
    "+ bias B_ij, a function of j - i",
    "softmax over the keys j: weights α_ij",
    "z_i = Σ_j α_ij v_j   (Shaw: Σ_j α_ij (v_j + a^V_ij))",
)
_DOOR_STEPS = {"input": (1,), "queries and keys": (3,), "keys and values": (4, 7), "logits": (5,)}
_DOOR_TITLES = {"input": "added to the input", "queries and keys": "rotate queries and keys",
                "keys and values": "inside keys and values", "logits": "added to the logits"}
# Relative keys and values feed two steps far apart: their box sits on the left, the others on the right.
_DOOR_SIDES = {"input": "right", "queries and keys": "right", "keys and values": "left", "logits": "right"}


def plot_position_doors(doors: Mapping[str, Sequence[str]]) -> Figure:
    """Where each kind of position enters one attention layer: the steps of the layer and a box per door.

    The steps run top to bottom, from the token embeddings to the output of attention; each door of
    :data:`POSITION_DOORS` that holds kinds is a box on the right, listing them, with an arrow to the step
    it changes (two arrows for relative keys and values, which change the logits and the output).

    Args:
        doors: door -> the names of the kinds that enter there (e.g. ``{"logits": ["t5", "alibi"]}``);
            doors may be left out, and every kind appears once.

    Returns:
        A figure with one axes and no data axes: boxes, arrows and their text.

    Raises:
        ValueError: if ``doors`` holds no kind, names a door not in :data:`POSITION_DOORS`, or names a kind
            twice.
    """
    unknown = [door for door in doors if door not in POSITION_DOORS]
    if unknown:
        raise ValueError(f"doors names {unknown}; the doors are {list(POSITION_DOORS)}")
    kinds = [kind for door in doors for kind in doors[door]]
    if not kinds:
        raise ValueError("doors must hold at least one kind")
    repeated = sorted({kind for kind in kinds if kinds.count(kind) > 1})
    if repeated:
        raise ValueError(f"each kind enters through one door, but {repeated} appear more than once")
    figure, axis = plt.subplots(figsize=(10.0, 5.6), layout="constrained")
    axis.set(xlim=(0.0, 1.0), ylim=(0.0, 1.0))
    axis.axis("off")
    heights = np.linspace(0.94, 0.06, len(_STEPS))  # (steps,): the centre of each step's box
    step_box = {"boxstyle": "round,pad=0.35", "facecolor": "white", "edgecolor": "black"}
    steps = []
    for index, (text, height) in enumerate(zip(_STEPS, heights, strict=True)):
        steps.append(axis.text(0.5, height, text, ha="center", va="center", fontsize=9, bbox=step_box,
                               gid=f"step-{index}"))
        if index:
            axis.annotate("", xy=(0.5, 1.0), xycoords=steps[index], xytext=(0.5, 0.0), textcoords=steps[index - 1],
                          arrowprops={"arrowstyle": "->", "color": "grey"})
    # Every step from the projections on happens in each attention layer; the input is changed once.
    top, bottom = heights[2] + 0.05, heights[-1] - 0.05
    axis.add_patch(FancyBboxPatch((0.21, bottom), 0.58, top - bottom, boxstyle="round,pad=0.005", fill=False,
                                  linestyle=":", edgecolor="grey"))
    axis.text(0.215, top + 0.005, "in every attention layer", fontsize=8, color="grey", va="bottom")
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for index, door in enumerate(door for door in POSITION_DOORS if doors.get(door)):
        colour = colours[index % len(colours)]
        targets = _DOOR_STEPS[door]
        left = _DOOR_SIDES[door] == "left"
        height = float(np.mean([heights[step] for step in targets]))
        label = f"{_DOOR_TITLES[door]}:\n" + ", ".join(doors[door])
        box = axis.text(0.1 if left else 0.9, height, label, ha="center", va="center", fontsize=9, color=colour,
                        gid=f"door-{door}",
                        bbox={"boxstyle": "round,pad=0.4", "facecolor": "white", "edgecolor": colour})
        for step in targets:
            axis.annotate("", xy=(0.0 if left else 1.0, 0.5), xycoords=steps[step],
                          xytext=(1.0 if left else 0.0, 0.5), textcoords=box,
                          arrowprops={"arrowstyle": "->", "color": colour, "linewidth": 1.5,
                                      "shrinkA": 4, "shrinkB": 6})
    return figure


def _runs_array(name: str, values: Any, width: int) -> np.ndarray:
    """``values`` as a ``(runs, width)`` float array: one row per run (a 1-D array is one run)."""
    if hasattr(values, "detach"):
        values = values.detach().cpu().numpy()
    one_run = isinstance(values, np.ndarray | Sequence) and len(values) > 0 and np.isscalar(values[0])
    array = _as_array(name, values, ndim=1)[np.newaxis] if one_run else _as_array(name, values, ndim=2)
    if array.shape[0] == 0 or array.shape[1] != width:
        raise ValueError(f"{name} must have shape (runs, {width}) with at least one run, got {array.shape}")
    return array


def _grid_shape(panels: int, columns: int | None) -> tuple[int, int]:
    """(rows, columns) of a grid of ``panels`` panels with at most ``columns`` per row (default: one row)."""
    columns = panels if columns is None else columns
    if isinstance(columns, bool) or not isinstance(columns, int) or columns < 1:
        raise ValueError(f"columns must be a positive int, got {columns!r}")
    columns = min(columns, panels)
    return -(-panels // columns), columns


def _finish_grid(figure: Figure, axes: Any, used: int, columns: int, handles: Mapping[str, Any]) -> Figure:
    """Remove the grid's unused axes (after the first ``used``) and put one legend of ``handles`` outside."""
    rows = len(axes)
    for index in range(used, rows * columns):
        figure.delaxes(axes[index // columns][index % columns])
    figure.legend(list(handles.values()), list(handles), loc="outside right upper", fontsize=8)
    return figure


def plot_curves_with_spread(
    x: Any,
    panels: Mapping[str, Mapping[str, Any]],
    *,
    xlabel: str,
    ylabel: str,
    columns: int | None = None,
    boundary: float | None = None,
    boundary_label: str | None = None,
    references: Mapping[str, Any] | None = None,
    ylim: tuple[float, float] | None = None,
    spread: str = "band",
    notes: Mapping[str, str] | None = None,
) -> Figure:
    """Curves over several runs: for each label the mean over runs as a line and, at each ``x``, the band from the
    smallest to the largest run (``spread="band"``) or every run as a thin line of the same colour
    (``spread="runs"``: a bimodal set of seeds shows as two bundles), in a grid of panels that share their axes
    and one legend.

    Args:
        x: 1-D array of abscissae, shared by every curve.
        panels: panel title -> (curve label -> ``(runs, len(x))`` array, one row per run, e.g. per seed; a
            1-D array is one run and draws no band); a label keeps its colour in every panel.
        xlabel, ylabel: the labels of the axes (the vertical label on the first column only).
        columns: panels per row (default: all in one row).
        boundary: draw a dashed vertical line at this ``x`` in every panel (e.g. the training length).
        boundary_label: the legend entry of the boundary line.
        references: label -> 1-D array of ``len(x)`` ordinates drawn dotted in black in every panel (e.g. the
            entropy of uniform attention).
        ylim: the vertical range of every panel.
        spread: ``"band"`` or ``"runs"`` (see above).
        notes: panel title -> a short text written in that panel's lower left corner (e.g. which kinds fitted
            on how many seeds there: what differs from panel to panel cannot go in the shared legend).

    Returns:
        A figure with one axes per panel (unused cells of the grid removed); in each, per curve one line (the
        mean), then one filled band (min to max over runs) or one thin line per run, unlabelled, and its note
        as the axes' one text.

    Raises:
        ValueError: if ``panels`` or a panel is empty, ``columns`` is not a positive int, an array's shape
            does not match ``x``, ``spread`` is neither ``"band"`` nor ``"runs"``, or ``notes`` names a panel
            that ``panels`` does not have.
    """
    _check_not_empty("panels", panels)
    if spread not in ("band", "runs"):
        raise ValueError(f"spread must be 'band' or 'runs', got {spread!r}")
    unknown = sorted(set(notes or {}) - set(panels))
    if unknown:
        raise ValueError(f"notes must name panels of {list(panels)}, got {unknown}")
    abscissae = _as_array("x", x, ndim=1)
    rows, columns = _grid_shape(len(panels), columns)
    figure, axes = plt.subplots(rows, columns, figsize=(3.6 * columns + 1.6, 2.8 * rows + 0.4),
                                layout="constrained", squeeze=False, sharex=True, sharey=True)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    labels: list[str] = []
    handles: dict[str, Any] = {}
    for index, (title, curves) in enumerate(panels.items()):
        axis = axes[index // columns][index % columns]
        _check_not_empty(f"panels[{title!r}]", curves)
        for label, values in curves.items():
            runs = _runs_array(f"panels[{title!r}][{label!r}]", values, abscissae.shape[0])  # (runs, len(x))
            if label not in labels:
                labels.append(label)
            colour = colours[labels.index(label) % len(colours)]
            (line,) = axis.plot(abscissae, runs.mean(axis=0), color=colour, marker="o", markersize=2.5,
                                linewidth=1.8 if spread == "runs" else 1.2, label=label)
            handles.setdefault(label, line)
            if spread == "runs" and runs.shape[0] > 1:
                for run in runs:
                    axis.plot(abscissae, run, color=colour, linewidth=0.5, alpha=0.45, label="_run")
            elif runs.shape[0] > 1:
                axis.fill_between(abscissae, runs.min(axis=0), runs.max(axis=0), color=colour, alpha=0.15,
                                  linewidth=0)
        for label, values in (references or {}).items():
            ordinates = _as_array(f"references[{label!r}]", values, ndim=1)
            if ordinates.shape != abscissae.shape:
                raise ValueError(f"references[{label!r}] has {ordinates.shape[0]} values but x has "
                                 f"{abscissae.shape[0]}")
            handles.setdefault(label, axis.plot(abscissae, ordinates, color="black", linestyle=":",
                                                linewidth=1.5, label=label)[0])
        if boundary is not None:
            handles.setdefault(boundary_label or "boundary", axis.axvline(
                boundary, color="black", linestyle="--", linewidth=1, label=boundary_label or "boundary"))
        axis.set_title(title, fontsize=10)
        if (notes or {}).get(title):
            axis.text(0.02, 0.03, notes[title], transform=axis.transAxes, ha="left", va="bottom", fontsize=7,
                      bbox={"boxstyle": "round,pad=0.25", "facecolor": "white", "alpha": 0.8, "linewidth": 0})
        if index // columns == rows - 1:
            axis.set_xlabel(xlabel)
        if index % columns == 0:
            axis.set_ylabel(ylabel)
        axis.grid(alpha=0.3)
        if ylim is not None:
            axis.set_ylim(*ylim)
    return _finish_grid(figure, axes, len(panels), columns, handles)


def plot_interval_panels(
    categories: Sequence[str],
    panels: Mapping[str, Mapping[str, Any]],
    *,
    ylabel: str,
    columns: int | None = None,
    ylim: tuple[float, float] | None = None,
    runs_as_dots: bool = False,
) -> Figure:
    """Means with their min-max range over runs, side by side: per panel, for each category one marker per
    group at the mean over runs, with an error bar from the smallest to the largest run, and with
    ``runs_as_dots`` every run as a small open dot beside it (ten seeds at 0 and 1 read apart from ten at 0.5).

    Args:
        categories: the labels along the horizontal axis (e.g. the rules compared).
        panels: panel title -> (group label -> ``(runs, len(categories))`` array, one row per run); a group
            keeps its colour and horizontal offset in every panel.
        ylabel: the label of the vertical axis (first column only).
        columns: panels per row (default: all in one row).
        ylim: the vertical range of every panel.

    Returns:
        A figure with one axes per panel; in each, one error-bar container per group and, with
        ``runs_as_dots``, one scatter collection per group holding its runs, category by category.

    Raises:
        ValueError: if ``categories``, ``panels`` or a panel is empty, ``columns`` is not a positive int, or an
            array's shape does not match the categories.
    """
    _check_not_empty("categories", categories)
    _check_not_empty("panels", panels)
    rows, columns = _grid_shape(len(panels), columns)
    figure, axes = plt.subplots(rows, columns, figsize=(0.55 * len(categories) * columns + 2.4, 2.9 * rows + 0.4),
                                layout="constrained", squeeze=False, sharey=True)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    groups: list[str] = []
    handles: dict[str, Any] = {}
    centres = np.arange(len(categories))
    for index, (title, by_group) in enumerate(panels.items()):
        axis = axes[index // columns][index % columns]
        _check_not_empty(f"panels[{title!r}]", by_group)
        for group, values in by_group.items():
            runs = _runs_array(f"panels[{title!r}][{group!r}]", values, len(categories))  # (runs, categories)
            if group not in groups:
                groups.append(group)
            slot = groups.index(group)
            mean = runs.mean(axis=0)
            offset = (slot - 0.5) * 0.25 if len(by_group) <= 2 else (slot - (len(by_group) - 1) / 2) * 0.2
            colour = colours[slot % len(colours)]
            container = axis.errorbar(centres + offset, mean, yerr=[mean - runs.min(axis=0), runs.max(axis=0) - mean],
                                      fmt="o", markersize=4, capsize=2, color=colour, label=group)
            handles.setdefault(group, container)
            if runs_as_dots:
                beside = np.broadcast_to(centres + offset + 0.06, runs.shape)  # (runs, categories)
                axis.scatter(beside.ravel(), runs.ravel(), s=7, facecolors="none", edgecolors=colour,
                             linewidths=0.6, alpha=0.7, label="_run")
        axis.set_xticks(centres, labels=list(categories), rotation=45, ha="right")
        axis.set_title(title, fontsize=10)
        if index % columns == 0:
            axis.set_ylabel(ylabel)
        axis.grid(alpha=0.3, axis="y")
        if ylim is not None:
            axis.set_ylim(*ylim)
    return _finish_grid(figure, axes, len(panels), columns, handles)


def plot_map_grid(
    maps: Sequence[Any],
    titles: Sequence[str],
    *,
    columns: int,
    colorbar_label: str = "attention weight",
    xlabel: str = "key",
    ylabel: str = "query",
) -> Figure:
    """Maps in a grid of ``columns`` panels per row, on one colour scale from 0 to 1 (attention weights).

    The maps may differ in size (e.g. a short and a long input of one model side by side); each is drawn with
    row 0 at the top, without tick labels, under its title. Unused cells of the last row are removed.

    Raises:
        ValueError: if ``maps`` is empty, ``titles`` has another length, ``columns`` is not a positive int,
            or a map is not 2-D.
    """
    _check_not_empty("maps", maps)
    _check_same_length("maps", maps, "titles", titles)
    rows, columns = _grid_shape(len(maps), columns)
    arrays = [_as_array(f"maps[{index}]", map_, ndim=2) for index, map_ in enumerate(maps)]
    figure, axes = plt.subplots(rows, columns, figsize=(2.1 * columns + 1.0, 2.1 * rows), layout="constrained",
                                squeeze=False)
    drawn = []
    for index, (array, title) in enumerate(zip(arrays, titles, strict=True)):
        axis = axes[index // columns][index % columns]
        drawn.append(axis)
        image = axis.imshow(array, cmap="Blues", vmin=0.0, vmax=1.0, interpolation="nearest")
        axis.set_xticks([])
        axis.set_yticks([])
        axis.set_title(title, fontsize=9)
        axis.set_xlabel(xlabel, fontsize=8)
        if index % columns == 0:
            axis.set_ylabel(ylabel, fontsize=8)
    for index in range(len(arrays), rows * columns):
        figure.delaxes(axes[index // columns][index % columns])
    figure.colorbar(image, ax=drawn, shrink=0.6, label=colorbar_label)
    return figure
