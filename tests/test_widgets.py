"""Tests for posenc_ref.widgets: the explorers build and redraw, and their render functions draw the right numbers.

Expected values come from closed forms computed here with math/numpy, or from published numbers (the
worked example's softmax weights, T5's last bucket at distance 91, ALiBi's slopes from the authors' code).
The last test runs one cell per explorer in a real Jupyter kernel, as a notebook does.
"""

from __future__ import annotations

import base64
import inspect
import math
import re
from html.parser import HTMLParser
from pathlib import Path

import ipywidgets
import numpy as np
import pytest
import torch
from matplotlib.figure import Figure

from posenc_ref import widgets

ROOT = Path(__file__).resolve().parents[1]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def artists_with_gid(figure: Figure, gid: str) -> list:
    return [artist for artist in figure.findobj() if artist.get_gid() == gid]


def line_data(figure: Figure, gid: str) -> tuple[np.ndarray, np.ndarray]:
    (line,) = artists_with_gid(figure, gid)
    return np.asarray(line.get_xdata(), dtype=float), np.asarray(line.get_ydata(), dtype=float)


def bar_heights(figure: Figure, gid: str) -> list[float]:
    return [patch.get_height() for patch in artists_with_gid(figure, gid)]


def another_value(control: ipywidgets.ValueWidget):
    """A value the control allows that differs from its current one."""
    if isinstance(control, ipywidgets.Checkbox):
        return not control.value
    if isinstance(control, (ipywidgets.Dropdown, ipywidgets.SelectionSlider)):
        return next(option for option in control.options if option != control.value)
    if isinstance(control, ipywidgets.FloatLogSlider):
        low, high = control.base**control.min, control.base**control.max
        return high if not math.isclose(control.value, high) else low
    return control.max if control.value != control.max else control.min


# ------------------------------------------------------------------------------------------ the explorers


@pytest.mark.parametrize("name", sorted(widgets.EXPLORERS))
def test_explorer_builds_and_moving_each_control_redraws_the_picture_for_the_new_values(name):
    explorer = widgets.EXPLORERS[name]()
    assert isinstance(explorer, ipywidgets.VBox) and explorer.picture in explorer.children
    assert bytes(explorer.picture.value).startswith(PNG_SIGNATURE)
    assert explorer.controls, f"{name} has no control"
    render, calls = explorer.render, []
    explorer.render = lambda **values: calls.append(values) or render(**values)  # record what is drawn
    for argument, control in explorer.controls.items():
        assert argument in inspect.signature(render).parameters
        assert control in explorer.children[1].children  # shown in the row of controls
        before = bytes(explorer.picture.value)
        control.value = another_value(control)
        assert explorer.values()[argument] == control.value
        assert calls[-1] == explorer.values(), f"{name}: the picture was not drawn for the values shown"
        assert bytes(explorer.picture.value) != before, f"{name}: moving {argument} did not change the picture"


def test_the_pair_slider_follows_d_in_the_wavelengths_explorer():
    explorer = widgets.wavelengths_explorer()
    explorer.controls["pair"].value = 31  # the last pair of d = 64
    explorer.controls["d"].value = 16
    assert explorer.controls["pair"].max == 7 and explorer.controls["pair"].value == 7
    assert explorer.values() == {"pair": 7, "max_position": 256, "d": 16}
    # the picture is the render function's figure for the values now shown by the controls
    assert bytes(explorer.picture.value) == widgets.figure_png(widgets.render_wavelengths(7, 256, d=16))


def test_explorer_rejects_a_control_that_is_not_an_argument_of_its_render_function():
    with pytest.raises(ValueError, match="temperature"):
        widgets.Explorer(widgets.render_relative_bias, {"temperature": ipywidgets.FloatSlider()}, title="x")


# ------------------------------------------------------------------------------ what the render functions draw


def test_relative_bias_weights_of_the_worked_example_are_0506_0307_0186():
    figure = widgets.render_relative_bias(0.5, 0.0, -0.5)
    with_bias = bar_heights(figure, "weights-with-bias")
    np.testing.assert_allclose(with_bias, [0.506, 0.307, 0.186], atol=6e-4)  # the chapter's published numbers
    exponentials = [math.exp(0.5), math.exp(0.0), math.exp(-0.5)]
    np.testing.assert_allclose(with_bias, [value / sum(exponentials) for value in exponentials], rtol=1e-12)
    np.testing.assert_allclose(bar_heights(figure, "weights-without-bias"), [1 / 3] * 3, rtol=1e-12)


def test_relative_bias_weights_do_not_depend_on_the_common_content_score():
    low = bar_heights(widgets.render_relative_bias(1.0, -2.0, 0.3, content_score=0.2), "weights-with-bias")
    high = bar_heights(widgets.render_relative_bias(1.0, -2.0, 0.3, content_score=7.5), "weights-with-bias")
    np.testing.assert_allclose(low, high, rtol=1e-12)


def plain_t5_bucket_of_past_distance(distance: int, per_direction: int, max_distance: int) -> int:
    """T5's bucket of the offset -distance (the past side), from the formula in plain Python."""
    exact = per_direction // 2
    if distance < exact:
        return distance
    log_part = math.log(distance / exact) / math.log(max_distance / exact) * (per_direction - exact)
    return min(per_direction - 1, exact + int(log_part))


@pytest.mark.parametrize("bidirectional, per_direction", [(True, 16), (False, 32)])
def test_t5_marker_is_where_the_last_bucket_begins(bidirectional, per_direction):
    figure = widgets.render_t5_buckets(128, 32, bidirectional)
    marker_x, _ = line_data(figure, "last-bucket-start")
    expected = next(distance for distance in range(1000)
                    if plain_t5_bucket_of_past_distance(distance, per_direction, 128) == per_direction - 1)
    if bidirectional:
        assert expected == 91  # 8 * 2^3.5 = 90.5, as derived in the chapter and in T5's code
    assert set(marker_x.tolist()) == {-expected}
    offsets, buckets = line_data(figure, "buckets")
    bucket_at = dict(zip(offsets.astype(int).tolist(), buckets.astype(int).tolist(), strict=True))
    assert bucket_at[-expected] == per_direction - 1 and bucket_at[-expected + 1] == per_direction - 2
    for offset in (-300, -40, -7, 0, 3, 20, 300):
        if offset <= 0:
            expected_bucket = plain_t5_bucket_of_past_distance(-offset, per_direction, 128)
        else:  # keys after the query: the upper half in the encoder, bucket 0 in the decoder
            expected_bucket = per_direction + plain_t5_bucket_of_past_distance(offset, 16, 128) if bidirectional else 0
        assert bucket_at[offset] == expected_bucket, offset


def numpy_rope_logit(m: int, n: int, d: int = 16, seed: int = 0) -> float:
    """<R(m) q, R(n) k> with complex numbers, for the documented query and key of the dial."""
    generator = torch.Generator().manual_seed(seed)
    query, key = torch.randn(2, d, dtype=torch.float64, generator=generator).numpy()
    theta = 10000.0 ** (-np.arange(0, d, 2) / d)  # (d/2,)
    query_pairs = (query[0::2] + 1j * query[1::2]) * np.exp(1j * m * theta)
    key_pairs = (key[0::2] + 1j * key[1::2]) * np.exp(1j * n * theta)
    return float(np.real(np.sum(query_pairs * np.conj(key_pairs))))


def test_rope_dial_logit_is_the_rotated_dot_product_and_depends_on_m_minus_n_only():
    marked = {}
    for m, n in [(5, 2), (12, 9), (31, 28), (2, 5), (0, 0)]:
        _, (logit,) = line_data(widgets.render_rope_dial(m, n), "current-logit")
        marked[m, n] = logit
        # rope_frequencies rounds the frequencies to float32: a relative error of about 1e-7 per angle
        assert logit == pytest.approx(numpy_rope_logit(m, n), abs=1e-5)
    assert abs(marked[5, 2] - marked[12, 9]) < 1e-9 and abs(marked[5, 2] - marked[31, 28]) < 1e-9
    assert abs(marked[5, 2] - marked[2, 5]) > 1e-3  # RoPE tells before from after
    figure = widgets.render_rope_dial(7, 3)
    offsets, curve = line_data(figure, "logit-curve")
    assert offsets.tolist() == list(range(-31, 32))
    np.testing.assert_allclose(curve, [numpy_rope_logit(31 + offset, 31) for offset in range(-31, 32)], atol=1e-5)
    assert line_data(figure, "current-logit")[1][0] == pytest.approx(curve[offsets.tolist().index(4)], abs=1e-9)


def test_heatmap_is_the_interleaved_sinusoidal_table():
    figure = widgets.render_encoding_heatmap(16, 100.0, length=20)
    (image,) = figure.axes[0].images
    positions, features = np.arange(20)[:, None], np.arange(16)[None, :]
    angles = positions * 100.0 ** (-(features // 2 * 2) / 16)
    expected = np.where(features % 2 == 0, np.sin(angles), np.cos(angles))
    np.testing.assert_allclose(np.asarray(image.get_array()), expected, atol=1e-12)


@pytest.mark.parametrize("start", [0, 1000])
def test_similarity_curve_from_any_start_lies_on_the_closed_form(start):
    figure = widgets.render_similarity(32, 10000.0, start, max_offset=50)
    offsets, measured = line_data(figure, "measured")
    inv_freq = 10000.0 ** (-np.arange(0, 32, 2) / 32)
    expected = np.array([np.mean(np.cos(k * inv_freq)) for k in range(51)])
    np.testing.assert_array_equal(offsets, np.arange(51))
    np.testing.assert_allclose(measured, expected, atol=1e-9)
    np.testing.assert_allclose(line_data(figure, "closed-form")[1], expected, atol=1e-12)


def test_alibi_bars_are_the_slopes_of_the_authors_code():
    np.testing.assert_allclose(bar_heights(widgets.render_alibi_slopes(8), "slopes"),
                               [2.0**-h for h in range(1, 9)], rtol=1e-6)
    twelve = [2.0**-h for h in range(1, 9)] + [2.0**-0.5, 2.0**-1.5, 2.0**-2.5, 2.0**-3.5]
    np.testing.assert_allclose(bar_heights(widgets.render_alibi_slopes(12), "slopes"), twelve, rtol=1e-6)


def test_wavelength_marker_is_two_pi_base_to_the_2i_over_d():
    figure = widgets.render_wavelengths(10, 500, d=64, base=10000.0)
    pair, wavelength = line_data(figure, "selected-wavelength")
    assert pair.tolist() == [10.0]
    assert wavelength[0] == pytest.approx(2 * math.pi * 10000.0 ** (20 / 64), rel=1e-12)
    sine = figure.axes[0].lines[0]
    np.testing.assert_allclose(sine.get_ydata(), np.sin(np.arange(501) * 10000.0 ** (-20 / 64)), atol=1e-12)


def attention_maps(position_scale: float, causal: bool = False) -> tuple[np.ndarray, np.ndarray]:
    figure = widgets.render_dog_bites_man(position_scale, causal)
    first, second = (np.asarray(axis.images[0].get_array()) for axis in figure.axes[:2])
    return first, second


def test_dog_bites_man_maps_are_reorderings_without_positions_only():
    swap = [2, 1, 0]  # "man bites dog" is "dog bites man" with words 0 and 2 swapped
    first, second = attention_maps(0.0)
    np.testing.assert_allclose(first.sum(axis=1), 1.0, rtol=1e-12)
    np.testing.assert_allclose(second, first[np.ix_(swap, swap)], atol=1e-12)
    for scale, causal in [(1.0, False), (0.25, False), (0.0, True)]:
        first, second = attention_maps(scale, causal)
        assert np.abs(second - first[np.ix_(swap, swap)]).max() > 1e-3, (scale, causal)
    first, _ = attention_maps(0.0, True)
    np.testing.assert_allclose(np.triu(first, 1), 0.0)  # the causal mask hides the later words


# ---------------------------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("call, error, argument", [
    (lambda: widgets.render_wavelengths(32, d=64), ValueError, "pair"),
    (lambda: widgets.render_wavelengths(0, 0), ValueError, "max_position"),
    (lambda: widgets.render_encoding_heatmap(7), ValueError, "d"),
    (lambda: widgets.render_similarity(8, -1.0), ValueError, "base"),
    (lambda: widgets.render_rope_dial(-1, 0), ValueError, "m"),
    (lambda: widgets.render_relative_bias("0.5"), TypeError, "b_previous"),
    (lambda: widgets.render_relative_bias(0.5, float("nan")), TypeError, "b_same"),
    (lambda: widgets.render_alibi_slopes(0), ValueError, "num_heads"),
    (lambda: widgets.render_t5_buckets(128, 32, 1), TypeError, "bidirectional"),
    (lambda: widgets.render_t5_buckets(4, 32), ValueError, "max_distance"),
    (lambda: widgets.render_dog_bites_man(1.0, causal="yes"), TypeError, "causal"),
    (lambda: widgets.figure_png(Figure(), colors=300), ValueError, "colors"),
])
def test_bad_arguments_raise_errors_that_name_them(call, error, argument):
    with pytest.raises(error, match=rf"\b{argument}\b"):
        call()


# ------------------------------------------------------------------------------------------ static frames


class _Markup(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.images: list[dict[str, str | None]] = []
        self.inputs: list[dict[str, str | None]] = []
        self.figures: list[dict[str, str | None]] = []
        self.output_text = ""
        self._in_output = False

    def handle_starttag(self, tag, attrs):
        {"img": self.images, "input": self.inputs, "figure": self.figures}.get(tag, []).append(dict(attrs))
        self._in_output = tag == "output"

    def handle_endtag(self, tag):
        self._in_output = False if tag == "output" else self._in_output

    def handle_data(self, data):
        if self._in_output:
            self.output_text += data


def test_frame_slider_holds_one_png_per_value_and_shows_the_initial_one():
    values = [4, 8, 16]
    slider = widgets.frame_slider(widgets.render_similarity, "d", values, initial=1, base=100.0, dpi=40)
    markup = _Markup()
    markup.feed(slider._repr_html_())
    assert [figure["data-frame-slider"] for figure in markup.figures] == ["similarity"]
    assert [image["data-label"] for image in markup.images] == ["d = 4", "d = 8", "d = 16"]
    assert ["hidden" in image for image in markup.images] == [True, False, True]
    pngs = [base64.b64decode(re.sub("^data:image/png;base64,", "", image["src"])) for image in markup.images]
    assert all(png.startswith(PNG_SIGNATURE) for png in pngs) and len(set(pngs)) == 3
    (range_input,) = markup.inputs
    assert (range_input["type"], range_input["min"], range_input["max"], range_input["value"]) == ("range", "0", "2", "1")
    assert markup.output_text == "d = 8"


def test_frame_slider_frames_are_the_render_functions_pictures():
    slider = widgets.frame_slider(widgets.render_relative_bias, "b_previous", [0.0, 1.0], labels=["a", "b"],
                                  b_next=0.25, dpi=30, colors=None)
    expected = widgets.figure_png(widgets.render_relative_bias(b_previous=1.0, b_next=0.25), dpi=30)
    assert slider.frames[1] == ("b", expected)


@pytest.mark.parametrize("arguments, message", [
    ({"control": "temperature", "values": [1, 2]}, "temperature"),
    ({"control": "d", "values": [8, 16], "dimension": 3}, "dimension"),
    ({"control": "d", "values": [8, 16], "d": 8}, "control 'd'"),
    ({"control": "d", "values": [8]}, "values"),
    ({"control": "d", "values": [8, 16], "labels": ["x"]}, "labels"),
    ({"control": "d", "values": [8, 16], "initial": 2}, "initial"),
])
def test_frame_slider_rejects_bad_arguments_naming_them(arguments, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        widgets.frame_slider(widgets.render_similarity, **arguments)


# ----------------------------------------------------------------------------------------- in a real kernel


def assert_cells_display_widgets(sources: list[str], labels: list[str]) -> None:
    """Execute the cells with nbclient in the venv's python3 kernel, as JupyterLab would, and check that each
    displays a widget (no error, nothing printed) and that each widget drew its picture in the kernel."""
    import nbformat
    from nbclient import NotebookClient

    from autograder.student.kernels import execute_in_own_loop

    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(source) for source in sources]
    client = NotebookClient(notebook, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}})
    execute_in_own_loop(client)
    images = [model["state"] for model in notebook.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]
              ["state"].values() if model["model_name"] == "ImageModel"]
    for label, cell in zip(labels, notebook.cells, strict=True):
        kinds = [output["output_type"] for output in cell.outputs]
        assert "error" not in kinds, f"{label}: {cell.outputs}"
        streams = [output.get("text", "") for output in cell.outputs if output["output_type"] == "stream"]
        assert not streams, f"{label} printed {streams}"
        (result,) = [output for output in cell.outputs if output["output_type"] == "execute_result"]
        assert "application/vnd.jupyter.widget-view+json" in result["data"], f"{label}: {result['data'].keys()}"
        assert result["data"]["application/vnd.jupyter.widget-view+json"]["model_id"]
    assert len(images) == len(sources)  # one picture per explorer, drawn in the kernel


@pytest.mark.slow
def test_every_explorer_runs_in_a_jupyter_kernel_and_displays_a_widget():
    names = sorted(widgets.EXPLORERS)
    assert_cells_display_widgets([f"from posenc_ref import widgets\nwidgets.{name}()" for name in names], names)


@pytest.mark.slow
def test_the_student_notebooks_explorer_cells_run_in_a_jupyter_kernel():
    """The released notebooks carry every explorer (in its chapter's notebook), and their cells run as is."""
    import nbformat

    sources, labels = [], []
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        for cell in nbformat.read(path, as_version=4).cells:
            grade_id = cell.metadata.get("nbgrader", {}).get("grade_id", "")
            if cell.cell_type == "code" and grade_id.startswith("explore_"):
                sources.append(cell.source)
                labels.append(f"{path.name}: {cell.metadata.nbgrader.grade_id}")
    shown = {name for name in widgets.EXPLORERS if any(f"widgets.{name}()" in source for source in sources)}
    assert shown == set(widgets.EXPLORERS), f"explorers missing from the notebooks: {set(widgets.EXPLORERS) - shown}"
    assert_cells_display_widgets(sources, labels)
