"""Tests for posenc_ref.plots: each figure draws exactly the data it is given, with the labels it promises."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
from matplotlib.colors import to_rgb
from matplotlib.figure import Figure

from posenc_ref import plots


@pytest.fixture(autouse=True)
def agg_backend_and_no_leftover_figures():
    """Draw off-screen with Agg, as on a machine without a display, and close every figure afterwards."""
    plt.switch_backend("Agg")
    yield
    plt.close("all")


def image_axes(figure: Figure) -> list:
    """The axes that hold an image, i.e. the panels (colour bars hold none)."""
    return [axis for axis in figure.axes if axis.images]


# ---------------------------------------------------------------- plot_heatmaps


def test_heatmaps_draw_one_panel_per_image_with_the_data_titles_and_labels():
    first = torch.arange(12.0).reshape(3, 4) - 6.0
    second = np.ones((5, 2))
    figure = plots.plot_heatmaps([first, second], ["a", "b"], xlabel="feature", ylabel="position p",
                                 colorbar_label="value")
    assert isinstance(figure, Figure)
    panels = image_axes(figure)
    assert len(panels) == 2 and len(figure.axes) == 3  # two panels and one colour bar
    np.testing.assert_array_equal(panels[0].images[0].get_array(), first.numpy())
    np.testing.assert_array_equal(panels[1].images[0].get_array(), second)
    assert [axis.get_title() for axis in panels] == ["a", "b"]
    assert all(axis.get_xlabel() == "feature" and axis.get_ylabel() == "position p" for axis in panels)
    assert figure.axes[2].get_ylabel() == "value"


def test_heatmaps_share_a_symmetric_scale_around_zero_for_signed_data():
    figure = plots.plot_heatmaps([np.array([[-1.0, 0.5]]), np.array([[3.0, -2.0]])], ["a", "b"])
    for axis in image_axes(figure):
        assert axis.images[0].get_clim() == (-3.0, 3.0)


def test_heatmaps_span_min_to_max_when_not_symmetric():
    figure = plots.plot_heatmaps([np.array([[1.0, 2.0]]), np.array([[4.0, 3.0]])], ["a", "b"], symmetric=False)
    for axis in image_axes(figure):
        assert axis.images[0].get_clim() == (1.0, 4.0)


def test_heatmaps_reject_a_title_count_that_differs_from_the_images():
    with pytest.raises(ValueError, match="titles"):
        plots.plot_heatmaps([np.zeros((2, 2))], ["a", "b"])


def test_heatmaps_reject_an_image_that_is_not_two_dimensional():
    with pytest.raises(ValueError, match=r"images\[0\]"):
        plots.plot_heatmaps([np.zeros(3)], ["a"])


# ---------------------------------------------------------------- plot_attention_maps


def test_attention_maps_label_both_axes_with_the_tokens_and_write_each_weight():
    weights = torch.tensor([[0.5, 0.25, 0.25], [0.1, 0.8, 0.1], [1 / 3, 1 / 3, 1 / 3]])
    figure = plots.plot_attention_maps([weights, weights.T], ["one", "two"], [["a", "b", "c"], ["x", "y", "z"]])
    panels = image_axes(figure)
    assert len(panels) == 2
    first = panels[0]
    assert [label.get_text() for label in first.get_xticklabels()] == ["a", "b", "c"]
    assert [label.get_text() for label in first.get_yticklabels()] == ["a", "b", "c"]
    assert (first.get_xlabel(), first.get_ylabel(), first.get_title()) == ("key", "query", "one")
    assert first.images[0].get_clim() == (0.0, 1.0)
    written = [text.get_text() for text in first.texts]
    assert len(written) == 9 and written[:3] == ["0.50", "0.25", "0.25"] and written[4] == "0.80"
    np.testing.assert_allclose(panels[1].images[0].get_array(), weights.T.numpy())


def test_attention_maps_leave_large_maps_unannotated():
    tokens = [str(index) for index in range(9)]
    figure = plots.plot_attention_maps([np.full((9, 9), 1 / 9)], ["nine"], [tokens])
    assert len(image_axes(figure)[0].texts) == 0


def test_attention_maps_reject_a_map_whose_size_differs_from_its_tokens():
    with pytest.raises(ValueError, match=r"weights\[0\]"):
        plots.plot_attention_maps([np.eye(3)], ["t"], [["a", "b"]])


# ---------------------------------------------------------------- plot_bar_chart


def test_bar_chart_draws_one_bar_per_value_in_order_with_its_label():
    values = {"none": 1e-7, "sinusoidal": 0.1, "causal": 1.2}
    figure = plots.plot_bar_chart(values, ylabel="error", title="t", log_scale=True)
    axis = figure.axes[0]
    heights = [patch.get_height() for patch in axis.patches]
    np.testing.assert_allclose(heights, [1e-7, 0.1, 1.2])
    assert [label.get_text() for label in axis.get_xticklabels()] == ["none", "sinusoidal", "causal"]
    assert axis.get_yscale() == "log" and axis.get_ylabel() == "error" and axis.get_title() == "t"
    assert [text.get_text() for text in axis.texts] == ["1.0e-07", "1.0e-01", "1.2e+00"]


def test_bar_chart_on_a_log_scale_rejects_a_value_that_is_not_positive():
    with pytest.raises(ValueError, match="log_scale"):
        plots.plot_bar_chart({"a": 1.0, "b": 0.0}, ylabel="y", log_scale=True)


def test_bar_chart_rejects_no_values():
    with pytest.raises(ValueError, match="values"):
        plots.plot_bar_chart({}, ylabel="y")


# ---------------------------------------------------------------- plot_curves


def test_curves_draw_each_named_curve_and_the_boundary():
    x = torch.arange(5)
    curves = {"square": x**2, "linear": np.arange(5.0)}
    figure = plots.plot_curves(x, curves, xlabel="p", ylabel="y", boundary=2.5, boundary_label="edge",
                               dashed=["linear"])
    axis = figure.axes[0]
    lines = axis.get_lines()
    assert len(lines) == 3  # two curves and the boundary
    np.testing.assert_array_equal(lines[0].get_ydata(), [0, 1, 4, 9, 16])
    np.testing.assert_array_equal(lines[1].get_xdata(), np.arange(5))
    assert lines[0].get_linestyle() == "-" and lines[1].get_linestyle() == "--"
    np.testing.assert_array_equal(lines[2].get_xdata(), [2.5, 2.5])
    assert [text.get_text() for text in axis.get_legend().get_texts()] == ["square", "linear", "edge"]
    assert (axis.get_xlabel(), axis.get_ylabel()) == ("p", "y")


def test_curves_reject_a_curve_whose_length_differs_from_x():
    with pytest.raises(ValueError, match="'short'"):
        plots.plot_curves(np.arange(4), {"short": np.arange(3)}, xlabel="x", ylabel="y")


def test_curves_reject_a_dashed_label_that_is_not_a_curve():
    with pytest.raises(ValueError, match="dashed"):
        plots.plot_curves(np.arange(3), {"a": np.arange(3)}, xlabel="x", ylabel="y", dashed=["b"])


# ---------------------------------------------------------------- plot_encoding_dimensions


def test_encoding_dimensions_draw_the_chosen_columns_against_the_position():
    table = torch.arange(20.0).reshape(5, 4)  # table[p, j] = 4 p + j
    figure = plots.plot_encoding_dimensions(table, [1, 3])
    lines = figure.axes[0].get_lines()
    assert len(lines) == 2
    np.testing.assert_array_equal(lines[0].get_ydata(), [1, 5, 9, 13, 17])
    np.testing.assert_array_equal(lines[1].get_ydata(), [3, 7, 11, 15, 19])
    np.testing.assert_array_equal(lines[0].get_xdata(), np.arange(5))
    assert [text.get_text() for text in figure.axes[0].get_legend().get_texts()] == ["feature 1", "feature 3"]
    assert figure.axes[0].get_xlabel() == "position p"


def test_encoding_dimensions_reject_a_feature_outside_the_table():
    with pytest.raises(ValueError, match="features"):
        plots.plot_encoding_dimensions(np.zeros((3, 4)), [4])


# ---------------------------------------------------------------- plot_wavelengths


def test_wavelengths_draw_one_line_per_set_against_the_pair_index_on_a_log_axis():
    figure = plots.plot_wavelengths({"a": [1.0, 10.0, 100.0], "b": np.array([2.0, 4.0])})
    axis = figure.axes[0]
    lines = axis.get_lines()
    assert len(lines) == 2 and axis.get_yscale() == "log"
    np.testing.assert_array_equal(lines[0].get_xdata(), [0, 1, 2])
    np.testing.assert_array_equal(lines[1].get_ydata(), [2.0, 4.0])
    assert axis.get_xlabel() == "pair index i"


def test_wavelengths_reject_a_wavelength_that_is_not_positive():
    with pytest.raises(ValueError, match="'bad'"):
        plots.plot_wavelengths({"bad": [1.0, -2.0]})


# ---------------------------------------------------------------- plot_binary_counter


def test_binary_counter_draws_the_bits_and_the_signs_with_positions_across():
    positions = np.arange(8)
    bits = (positions[:, None] >> np.arange(3)[None, :]) & 1  # (8, 3)
    sines = np.sin(positions[:, None] * np.array([1.0, 0.1])[None, :])  # (8, 2)
    figure = plots.plot_binary_counter(bits, sines)
    left, right = image_axes(figure)
    np.testing.assert_array_equal(left.images[0].get_array(), bits.T)
    np.testing.assert_array_equal(right.images[0].get_array(), np.sign(sines.T))
    assert left.get_xlabel() == right.get_xlabel() == "position p"
    assert (left.get_ylabel(), right.get_ylabel()) == ("bit b", "pair index i")


def test_binary_counter_rejects_tables_of_different_lengths():
    with pytest.raises(ValueError, match="positions"):
        plots.plot_binary_counter(np.zeros((4, 2)), np.zeros((5, 2)))


# ---------------------------------------------------------------- plot_similarity_matrices


def test_similarity_matrices_use_the_fixed_scale_minus_one_to_one():
    matrix = np.array([[1.0, 0.2], [0.2, 1.0]])
    figure = plots.plot_similarity_matrices([matrix, -matrix * 0.5], ["a", "b"])
    panels = image_axes(figure)
    assert len(panels) == 2
    for axis in panels:
        assert axis.images[0].get_clim() == (-1.0, 1.0)
        assert (axis.get_xlabel(), axis.get_ylabel()) == ("position q", "position p")
    np.testing.assert_array_equal(panels[1].images[0].get_array(), -matrix * 0.5)


def test_similarity_matrices_reject_a_matrix_that_is_not_square():
    with pytest.raises(ValueError, match="square"):
        plots.plot_similarity_matrices([np.zeros((2, 3))], ["a"])


def test_similarity_matrices_reject_values_outside_minus_one_to_one():
    with pytest.raises(ValueError, match=r"\[-1, 1\]"):
        plots.plot_similarity_matrices([np.full((2, 2), 1.5)], ["a"])


# ---------------------------------------------------------------- plot_grouped_bars


def test_grouped_bars_draw_one_bar_per_category_and_group_with_its_value():
    groups = {"first": [0.5, 0.25, 0.25], "second": torch.tensor([0.1, 0.2, 0.7])}
    figure = plots.plot_grouped_bars(["a", "b", "c"], groups, ylabel="weight", title="t")
    axis = figure.axes[0]
    heights = [patch.get_height() for patch in axis.patches]
    np.testing.assert_allclose(heights, [0.5, 0.25, 0.25, 0.1, 0.2, 0.7])
    first_centres = [patch.get_x() + patch.get_width() / 2 for patch in axis.patches[:3]]
    second_centres = [patch.get_x() + patch.get_width() / 2 for patch in axis.patches[3:]]
    assert all(left < right for left, right in zip(first_centres, second_centres, strict=True))  # side by side
    assert [label.get_text() for label in axis.get_xticklabels()] == ["a", "b", "c"]
    assert [text.get_text() for text in axis.texts] == ["0.500", "0.250", "0.250", "0.100", "0.200", "0.700"]
    assert [text.get_text() for text in axis.get_legend().get_texts()] == ["first", "second"]
    assert (axis.get_ylabel(), axis.get_title()) == ("weight", "t")


def test_grouped_bars_reject_a_group_whose_length_differs_from_the_categories():
    with pytest.raises(ValueError, match="'short'"):
        plots.plot_grouped_bars(["a", "b"], {"short": [1.0]}, ylabel="y")


def test_grouped_bars_reject_no_groups():
    with pytest.raises(ValueError, match="groups"):
        plots.plot_grouped_bars(["a"], {}, ylabel="y")


# ---------------------------------------------------------------- plot_marked_curves


def test_marked_curves_draw_the_curves_then_the_vertical_and_horizontal_lines():
    x = np.arange(-3, 4)
    figure = plots.plot_marked_curves(x, {"abs": np.abs(x)}, xlabel="offset", ylabel="bucket",
                                      vertical={"start": 2.0}, horizontal={"level": 1.5}, steps=True)
    axis = figure.axes[0]
    curve, vertical, horizontal = axis.get_lines()
    np.testing.assert_array_equal(curve.get_ydata(), [3, 2, 1, 0, 1, 2, 3])
    assert curve.get_drawstyle() == "steps-mid"
    np.testing.assert_array_equal(vertical.get_xdata(), [2.0, 2.0])
    np.testing.assert_array_equal(horizontal.get_ydata(), [1.5, 1.5])
    assert vertical.get_linestyle() == horizontal.get_linestyle() == ":"
    assert [text.get_text() for text in axis.get_legend().get_texts()] == ["abs", "start", "level"]
    assert (axis.get_xlabel(), axis.get_ylabel(), axis.get_yscale()) == ("offset", "bucket", "linear")


def test_marked_curves_without_steps_draw_plain_lines_on_an_optional_log_axis():
    figure = plots.plot_marked_curves([1, 2, 3], {"a": [1.0, 10.0, 100.0]}, xlabel="x", ylabel="y", log_y=True)
    axis = figure.axes[0]
    assert len(axis.get_lines()) == 1 and axis.get_lines()[0].get_drawstyle() == "default"
    assert axis.get_yscale() == "log"


def test_marked_curves_reject_a_curve_whose_length_differs_from_x():
    with pytest.raises(ValueError, match="'short'"):
        plots.plot_marked_curves(np.arange(4), {"short": np.arange(3)}, xlabel="x", ylabel="y")


# ---------------------------------------------------------------- plot_curve_panels


def test_curve_panels_draw_one_panel_per_entry_and_keep_each_label_in_one_colour():
    x = [128, 256, 512]
    panels = {"memory": {"reference": [1.0, 4.0, 16.0], "fast": [1.0, 2.0, 4.0]},
              "time": {"fast": [0.5, 1.0, 2.0], "reference": [2.0, 8.0, 32.0]}}
    figure = plots.plot_curve_panels(x, panels, xlabel="L", ylabels=["MiB", "ms"], log_x=True, log_y=True)
    left, right = figure.axes
    assert (left.get_title(), right.get_title()) == ("memory", "time")
    assert (left.get_ylabel(), right.get_ylabel()) == ("MiB", "ms")
    assert left.get_xscale() == right.get_xscale() == "log" and left.get_yscale() == "log"
    np.testing.assert_array_equal(left.get_lines()[0].get_ydata(), [1.0, 4.0, 16.0])
    np.testing.assert_array_equal(right.get_lines()[1].get_xdata(), x)
    left_colours = {line.get_label(): line.get_color() for line in left.get_lines()}
    right_colours = {line.get_label(): line.get_color() for line in right.get_lines()}
    assert left_colours == right_colours and left_colours["fast"] != left_colours["reference"]
    assert left.get_lines()[0].get_marker() == "o"


def test_curve_panels_without_markers_draw_plain_lines_on_linear_axes():
    figure = plots.plot_curve_panels(np.arange(5), {"a": {"c": np.arange(5.0)}, "b": {"c": np.ones(5)}},
                                     xlabel="x", ylabels=["y", "z"], markers=False)
    for axis in figure.axes:
        assert axis.get_lines()[0].get_marker() == "None"
        assert axis.get_xscale() == axis.get_yscale() == "linear"


def test_curve_panels_reject_a_ylabel_count_that_differs_from_the_panels():
    with pytest.raises(ValueError, match="ylabels"):
        plots.plot_curve_panels([1, 2], {"a": {"c": [1, 2]}}, xlabel="x", ylabels=["y", "z"])


def test_curve_panels_reject_a_curve_whose_length_differs_from_x():
    with pytest.raises(ValueError, match="'short'"):
        plots.plot_curve_panels([1, 2], {"a": {"short": [1]}}, xlabel="x", ylabels=["y"])


# ---------------------------------------------------------------- plot_plane_vectors


def test_plane_vectors_draw_one_numbered_arrow_per_row_on_equal_axes():
    rows = np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])
    figure = plots.plot_plane_vectors({"q": rows, "k": torch.tensor([[0.5, 0.5]])}, title="pair 0")
    axis = figure.axes[0]
    arrows = [child for child in axis.texts if child.get_text() == ""]
    ends = [tuple(arrow.xy) for arrow in arrows]
    assert ends == [(1.0, 0.0), (0.0, 1.0), (-1.0, 0.0), (0.5, 0.5)]
    assert [text.get_text() for text in axis.texts if text.get_text()] == ["0", "1", "2", "0"]
    assert axis.get_aspect() == 1.0 and axis.get_title() == "pair 0"
    assert [text.get_text() for text in axis.get_legend().get_texts()] == ["q", "k"]


def test_plane_vectors_reject_a_set_that_is_not_pairs():
    with pytest.raises(ValueError, match="'bad'"):
        plots.plot_plane_vectors({"bad": np.zeros((2, 3))})


# ---------------------------------------------------------------- plot_angle_ratios


def test_angle_ratios_draw_each_rule_the_line_at_one_and_the_band_of_slow_pairs():
    pairs = np.arange(8)
    ratios = {"interpolation": np.ones(8), "NTK-aware": np.linspace(4.0, 1.0, 8)}
    figure = plots.plot_angle_ratios(pairs, ratios, first_slow_pair=5, title="d = 16")
    (axis,) = figure.axes
    assert [line.get_label() for line in axis.lines] == ["interpolation", "NTK-aware", "largest trained angle"]
    np.testing.assert_array_equal(axis.lines[1].get_ydata(), ratios["NTK-aware"])
    assert list(axis.lines[2].get_ydata()) == [1.0, 1.0]
    (band,) = axis.patches
    band_left = band.get_path().vertices[:, 0].min()
    assert band.get_transform().transform((band_left, 0))[0] == pytest.approx(
        axis.transData.transform((4.5, 0))[0])  # the band starts half a pair before pair 5
    assert axis.get_yscale() == "log" and axis.get_title() == "d = 16"


def test_angle_ratios_reject_a_ratio_that_is_not_positive_and_a_slow_pair_outside_the_pairs():
    with pytest.raises(ValueError, match="ratios\\['bad'\\].*> 0"):
        plots.plot_angle_ratios(np.arange(3), {"bad": [1.0, 0.0, 2.0]}, first_slow_pair=1)
    with pytest.raises(ValueError, match="first_slow_pair.*0..2.*got 7"):
        plots.plot_angle_ratios(np.arange(3), {"ok": [1.0, 1.0, 1.0]}, first_slow_pair=7)
    with pytest.raises(ValueError, match="ratios\\['short'\\] has 2 values"):
        plots.plot_angle_ratios(np.arange(3), {"short": [1.0, 1.0]}, first_slow_pair=1)


# ---------------------------------------------------------------- plot_position_doors


def door_texts(figure: Figure) -> dict[str, str]:
    return {text.get_gid(): text.get_text() for text in figure.axes[0].texts if text.get_gid()}


def test_position_doors_list_each_kind_in_the_box_of_its_door_with_an_arrow_per_step_it_changes():
    doors = {"input": ["sinusoidal", "learned"], "logits": ["t5", "alibi"], "keys and values": ["shaw"],
             "queries and keys": ["rope"]}
    figure = plots.plot_position_doors(doors)
    texts = door_texts(figure)
    assert texts["door-input"].endswith("sinusoidal, learned")
    assert texts["door-logits"].endswith("t5, alibi")
    assert texts["door-keys and values"].endswith("shaw")
    assert texts["door-queries and keys"].endswith("rope")
    steps = [gid for gid in texts if gid.startswith("step-")]
    assert len(steps) == 8 and "PE(p)" in texts["step-1"] and "R(i)" in texts["step-3"]
    arrows = [child for child in figure.axes[0].texts if child.get_gid() is None and child.get_text() == ""]
    assert len(arrows) == 7 + 5  # one between consecutive steps, one per door and two for keys and values


def test_position_doors_leave_out_a_door_without_kinds():
    texts = door_texts(plots.plot_position_doors({"logits": ["alibi"], "input": []}))
    assert [gid for gid in texts if gid.startswith("door-")] == ["door-logits"]


@pytest.mark.parametrize(
    ("doors", "message"),
    [({"output": ["x"]}, "doors names \\['output'\\]; the doors are"),
     ({"input": []}, "at least one kind"),
     ({"input": ["rope"], "queries and keys": ["rope"]}, "\\['rope'\\] appear more than once")],
)
def test_position_doors_reject_an_unknown_door_no_kind_and_a_kind_twice(doors, message):
    with pytest.raises(ValueError, match=message):
        plots.plot_position_doors(doors)


# ---------------------------------------------------------------- plot_curves_with_spread


def band_vertices(collection) -> np.ndarray:
    """The (x, y) vertices of a filled band drawn by ``fill_between``."""
    return np.concatenate([path.vertices for path in collection.get_paths()])


def test_curves_with_spread_draw_the_mean_and_a_band_from_the_lowest_to_the_highest_run():
    x = [3, 4, 5]
    runs = np.array([[1.0, 0.5, 0.0], [0.8, 0.9, 0.2], [0.6, 0.1, 0.1]])  # (seeds, lengths)
    figure = plots.plot_curves_with_spread(x, {"bites": {"rope": runs, "alibi": runs[:1]}}, xlabel="n",
                                           ylabel="exact match", boundary=4.5, boundary_label="L")
    (axis,) = figure.axes
    rope, alibi = axis.get_lines()[:2]
    np.testing.assert_allclose(rope.get_ydata(), [0.8, 0.5, 0.1])
    np.testing.assert_array_equal(alibi.get_ydata(), runs[0])
    (band,) = axis.collections  # one run draws no band
    vertices = band_vertices(band)
    upper = {(x_, y) for x_, y in zip(x, [1.0, 0.9, 0.2], strict=True)}
    lower = {(x_, y) for x_, y in zip(x, [0.6, 0.1, 0.0], strict=True)}
    drawn = {(float(a), float(b)) for a, b in vertices}
    assert upper <= drawn and lower <= drawn
    assert vertices[:, 1].min() == 0.0 and vertices[:, 1].max() == 1.0  # nothing outside the runs
    assert band.get_facecolor()[0][:3] == pytest.approx(to_rgb(rope.get_color()))
    assert axis.get_lines()[2].get_xdata()[0] == 4.5
    assert [text.get_text() for text in figure.legends[0].get_texts()] == ["rope", "alibi", "L"]


def test_curves_with_spread_lay_panels_in_a_grid_keep_each_label_in_one_colour_and_draw_references():
    x = np.arange(4)
    panels = {title: {"a": np.ones((2, 4)) * index, "b": np.zeros((2, 4))}
              for index, title in enumerate(["one", "two", "three"])}
    figure = plots.plot_curves_with_spread(x, panels, xlabel="n", ylabel="y", columns=2,
                                           references={"ln n": np.log1p(x)}, ylim=(0, 2))
    assert [axis.get_title() for axis in figure.axes] == ["one", "two", "three"]  # the fourth cell removed
    for axis in figure.axes:
        a, b, reference = axis.get_lines()
        assert (a.get_label(), b.get_label(), reference.get_label()) == ("a", "b", "ln n")
        assert a.get_color() == figure.axes[0].get_lines()[0].get_color() != b.get_color()
        np.testing.assert_allclose(reference.get_ydata(), np.log1p(x))
        assert reference.get_linestyle() == ":" and axis.get_ylim() == (0, 2)
    assert figure.axes[0].get_ylabel() == "y" and figure.axes[1].get_ylabel() == ""


def test_curves_with_spread_can_draw_every_run_as_a_thin_line_instead_of_a_band():
    x = [3, 4, 5]
    runs = np.array([[1.0, 1.0, 0.0], [0.0, 0.0, 0.0], [1.0, 1.0, 1.0]])  # bimodal seeds: a band would hide it
    figure = plots.plot_curves_with_spread(x, {"copy": {"shaw": runs}}, xlabel="n", ylabel="exact match",
                                           spread="runs")
    (axis,) = figure.axes
    mean, *seeds = axis.get_lines()
    np.testing.assert_allclose(mean.get_ydata(), [2 / 3, 2 / 3, 1 / 3])
    assert [list(line.get_ydata()) for line in seeds] == runs.tolist()
    assert all(line.get_color() == mean.get_color() and line.get_linewidth() < mean.get_linewidth()
               for line in seeds)
    assert not axis.collections  # no band
    assert [text.get_text() for text in figure.legends[0].get_texts()] == ["shaw"]
    with pytest.raises(ValueError, match="spread"):
        plots.plot_curves_with_spread(x, {"copy": {"shaw": runs}}, xlabel="n", ylabel="y", spread="range")


def test_curves_with_spread_write_each_panels_note_in_that_panel_only():
    x = [3, 4, 5]
    panels = {"copy": {"alibi": np.ones((3, 3))}, "recall": {"alibi": np.zeros((3, 3))}}
    figure = plots.plot_curves_with_spread(x, panels, xlabel="n", ylabel="y", notes={"recall": "alibi: 1/3 fitted"})
    copy_axis, recall_axis = figure.axes
    assert [text.get_text() for text in recall_axis.texts] == ["alibi: 1/3 fitted"]
    assert list(copy_axis.texts) == []
    with pytest.raises(ValueError, match=r"notes must name panels of \['copy', 'recall'\], got \['bites'\]"):
        plots.plot_curves_with_spread(x, panels, xlabel="n", ylabel="y", notes={"bites": "?"})


def test_curves_with_spread_reject_a_curve_whose_length_differs_from_x_and_bad_columns():
    with pytest.raises(ValueError, match=r"panels\['p'\]\['short'\]"):
        plots.plot_curves_with_spread([1, 2], {"p": {"short": [[1.0], [2.0]]}}, xlabel="x", ylabel="y")
    with pytest.raises(ValueError, match="columns"):
        plots.plot_curves_with_spread([1, 2], {"p": {"c": [1.0, 2.0]}}, xlabel="x", ylabel="y", columns=0)
    with pytest.raises(ValueError, match="references"):
        plots.plot_curves_with_spread([1, 2], {"p": {"c": [1.0, 2.0]}}, xlabel="x", ylabel="y",
                                      references={"r": [1.0]})


# ---------------------------------------------------------------- plot_interval_panels


def test_interval_panels_mark_the_mean_with_an_error_bar_from_the_lowest_to_the_highest_run():
    runs = np.array([[0.2, 0.9], [0.6, 0.7], [0.4, 0.8]])  # (seeds, categories)
    figure = plots.plot_interval_panels(["pi", "yarn"], {"3L": {"zero-shot": runs, "fine-tuned": runs + 0.1}},
                                        ylabel="exact match")
    (axis,) = figure.axes
    zero_shot, fine_tuned = axis.containers
    marker, _, (bars,) = zero_shot
    np.testing.assert_allclose(marker.get_ydata(), [0.4, 0.8])
    ends = np.array([segment[:, 1] for segment in bars.get_segments()])  # (categories, 2): bottom, top
    np.testing.assert_allclose(ends, [[0.2, 0.6], [0.7, 0.9]])
    assert marker.get_xdata()[0] < 0 < fine_tuned[0].get_xdata()[0] < 1  # side by side around each category
    assert [label.get_text() for label in axis.get_xticklabels()] == ["pi", "yarn"]
    assert axis.get_title() == "3L" and axis.get_ylabel() == "exact match"
    assert [text.get_text() for text in figure.legends[0].get_texts()] == ["zero-shot", "fine-tuned"]


def test_interval_panels_can_draw_every_run_as_a_dot_beside_its_mean():
    runs = np.array([[0.0, 1.0], [1.0, 1.0], [0.5, 0.0]])  # (seeds, categories)
    figure = plots.plot_interval_panels(["pi", "yarn"], {"3L": {"zero-shot": runs}}, ylabel="y", runs_as_dots=True)
    (axis,) = figure.axes
    (dots,) = axis.collections[-1:]
    points = dots.get_offsets()  # (seeds * categories, 2)
    assert sorted(map(tuple, np.asarray(points).round(6).tolist())) == sorted(
        (round(x, 6), y) for x, column in zip(axis.containers[0][0].get_xdata() + 0.06, runs.T) for y in column)
    assert [text.get_text() for text in figure.legends[0].get_texts()] == ["zero-shot"]  # the dots: no entry
    plain = plots.plot_interval_panels(["pi", "yarn"], {"3L": {"zero-shot": runs}}, ylabel="y")
    assert len(plain.axes[0].collections) == len(axis.collections) - 1


def test_interval_panels_reject_a_group_whose_length_differs_from_the_categories():
    with pytest.raises(ValueError, match=r"panels\['p'\]\['g'\]"):
        plots.plot_interval_panels(["a", "b"], {"p": {"g": [[1.0, 2.0, 3.0]]}}, ylabel="y")


# ---------------------------------------------------------------- plot_map_grid


def test_map_grid_draws_each_map_in_its_cell_on_the_scale_zero_to_one():
    short, long = np.eye(3), np.full((5, 5), 0.2)
    figure = plots.plot_map_grid([short, long, long], ["rope, n = 3", "rope, n = 5", "alibi, n = 5"], columns=2)
    panels = image_axes(figure)
    assert len(panels) == 3  # the fourth cell of the 2 x 2 grid is removed
    for panel, expected in zip(panels, [short, long, long], strict=True):
        np.testing.assert_array_equal(panel.images[0].get_array(), expected)
        assert panel.images[0].get_clim() == (0.0, 1.0)
    assert [axis.get_title() for axis in panels] == ["rope, n = 3", "rope, n = 5", "alibi, n = 5"]
    assert panels[0].get_ylabel() == "query" and panels[1].get_ylabel() == ""
    assert figure.axes[-1].get_ylabel() == "attention weight"


def test_map_grid_rejects_titles_that_do_not_match_the_maps_and_bad_columns():
    with pytest.raises(ValueError, match="titles"):
        plots.plot_map_grid([np.eye(2)], ["x", "y"], columns=1)
    with pytest.raises(ValueError, match="columns"):
        plots.plot_map_grid([np.eye(2)], ["x"], columns=0)
    with pytest.raises(ValueError, match=r"maps\[0\]"):
        plots.plot_map_grid([np.zeros(3)], ["x"], columns=1)
