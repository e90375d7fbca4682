"""A student's notebook is rebuilt from an allowlist before any page shows it (autograder.feedback.outputs).

Hostile outputs, metadata and markdown are rebuilt one by one and compared with what a page may show, written
out here by hand; the feedback page of each is rendered as nbgrader's GenerateFeedback renders it and parsed.
A property test does the same with generated notebooks: whatever they hold, the page runs no script of
theirs, has no handler, no ``javascript:`` URL and no image size that is not digits. No kernel runs here.
"""

from __future__ import annotations

import base64
import re

import nbformat
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nbformat.v4 import new_notebook
from test_grader_escape import NBGRADER_TEMPLATE, PNG, _render_feedback, _tags

from autograder.feedback import outputs
from autograder.feedback.outputs import sanitize_notebook

JPEG = base64.b64encode(b"\xff\xd8\xff\xe0" + bytes(16)).decode()
SVG = base64.b64encode(b'<svg onload="alert(1)"/>').decode()
HOSTILE_WIDTH = "1 onerror=alert(1)"


def _notebook(*cells) -> nbformat.NotebookNode:
    """A notebook whose cells are set after construction: nbformat's constructors would refuse them."""
    notebook = new_notebook()
    notebook.cells = [nbformat.from_dict(cell) for cell in cells]
    return notebook


def _code(*outputs, metadata=None) -> dict:
    return {"cell_type": "code", "id": "c1", "source": "show()", "execution_count": 1,
            "metadata": metadata or {}, "outputs": list(outputs)}  # fmt: skip


def _display(data, metadata=None, kind="display_data") -> dict:
    output = {"output_type": kind, "data": data, "metadata": {} if metadata is None else metadata}
    return output | ({"execution_count": 1} if kind == "execute_result" else {})


def _rebuilt_outputs(*outputs) -> list[dict]:
    rebuilt = sanitize_notebook(_notebook(_code(*outputs)))
    nbformat.validate(rebuilt)
    return [dict(output) for output in rebuilt.cells[0].outputs]


def _attributes(page: str, tag: str, name: str) -> list[str]:
    return [attrs[name] for found, attrs in _tags(page) if found == tag and name in attrs]


# ---------------------------------------------------------------------------------------------------------
# The report's attack: an image size that is not a number
# ---------------------------------------------------------------------------------------------------------


def _hostile_image_notebook():
    return _notebook(_code(_display({"image/png": PNG}, {"image/png": {"width": HOSTILE_WIDTH, "height": 7}})))


def test_without_the_rebuild_a_string_width_becomes_an_event_handler():
    # The control: nbconvert's classic template, which nbgrader's feedback template extends, writes the width
    # unquoted.
    page = _render_feedback(_hostile_image_notebook(), NBGRADER_TEMPLATE)
    assert any("onerror" in attrs for tag, attrs in _tags(page) if tag == "img")


def test_the_courses_template_quotes_an_image_size_even_without_the_rebuild():
    page = _render_feedback(_hostile_image_notebook())
    assert [attrs for tag, attrs in _tags(page) if tag == "img" and "onerror" in attrs] == []


def test_a_width_that_is_not_an_int_is_dropped_and_the_page_has_no_handler():
    rebuilt = sanitize_notebook(_hostile_image_notebook())
    assert rebuilt.cells[0].outputs[0].metadata == {"image/png": {"height": 7}}
    page = _render_feedback(rebuilt)
    assert [attrs for tag, attrs in _tags(page) if tag == "img" and "onerror" in attrs] == []
    assert _attributes(page, "img", "height") == ["7"]
    assert _attributes(page, "img", "width") == []


@pytest.mark.parametrize(
    "sizes",
    [
        {"width": "640", "height": "480"},
        {"width": True, "height": False},
        {"width": 0, "height": -3},
        {"width": 1.5, "height": 10**9},
        {"width": {"nested": 1}, "height": [1]},
    ],
)
def test_image_sizes_are_positive_ints_only(sizes):
    (output,) = _rebuilt_outputs(_display({"image/png": PNG}, {"image/png": sizes}))
    assert output["metadata"] == {}


def test_image_metadata_keeps_width_and_height_and_nothing_else():
    metadata = {
        "image/png": {"width": 640, "height": 480, "alt": '" onerror="x', "unconfined": True, "x": {"y": 1}},
        "isolated": True,
        "text/html": {"isolated": True},
        "filenames": {"image/png": "javascript:alert(1)"},
    }
    (output,) = _rebuilt_outputs(_display({"image/png": PNG, "text/html": "<p>hi</p>"}, metadata))
    assert output["metadata"] == {"image/png": {"width": 640, "height": 480}}
    assert output["data"] == {"text/html": "<p>hi</p>", "image/png": PNG}


# ---------------------------------------------------------------------------------------------------------
# Data: the MIME types a page may show
# ---------------------------------------------------------------------------------------------------------


def test_html_outputs_lose_scripts_frames_svg_handlers_and_script_links():
    html = (
        '<script>alert(1)</script><iframe src="https://evil.example"></iframe>'
        '<svg onload="alert(2)"><circle r="1"/></svg><b onmouseover="alert(3)">bold</b>'
        '<a href="javascript:alert(4)">a</a><a href=" JAVASCRIPT:alert(5)">b</a>'
        '<img src="x" onerror="alert(6)" width="1 onerror=alert(7)">'
        '<math><mi href="javascript:alert(8)" style="color:red" onclick="x">y</mi></math>'
    )
    (output,) = _rebuilt_outputs(_display({"text/html": html}))
    assert output["data"] == {
        "text/html": "alert(1)<b>bold</b><a>a</a><a>b</a><img alt=\"An image without a description\"><math><mi>y</mi></math>"
    }


def test_unknown_types_and_values_that_are_not_text_are_removed_with_a_notice():
    outputs = _rebuilt_outputs(
        _display({"application/javascript": "alert(1)", "image/svg+xml": "<svg/>", "text/plain": "kept"}),
        _display({"text/html": ["<b>", "x</b>"], "image/png": 12, "text/markdown": {"a": 1}}),
        _display({"image/png": SVG, "image/jpeg": PNG}),  # not the image their type says
        _display("not a dict", {"image/png": {"width": 2}}),
        {"output_type": "update_display_data", "data": {"text/plain": "x"}, "metadata": {}},
        {"output_type": "stream", "name": "stdin", "text": "x"},
        {"output_type": "error", "ename": "E", "evalue": "v", "traceback": [1, 2]},
    )
    assert [output["data"] for output in outputs] == [
        {"text/plain": "kept"},
        {"text/plain": "[removed from this page: an output of type image/png, text/html, text/markdown]"},
        {"text/plain": "[removed from this page: an output of type image/jpeg, image/png]"},
        {"text/plain": "[removed from this page: an output of type nothing]"},
        {"text/plain": "[removed from this page: an output of type update_display_data]"},
        {"text/plain": "[removed from this page: an output of type stream]"},
        {"text/plain": "[removed from this page: an error whose fields are not text]"},
    ]
    assert all(output["metadata"] == {} for output in outputs)


@pytest.mark.parametrize(
    "value",
    [
        PNG[:-2] + "!!",  # not base64
        PNG[:-1],  # wrong length
        PNG + "AAAA====",  # padding inside
        "\u0660" * 8,  # digits that are not ASCII
        "data:image/png;base64," + PNG,
    ],
)
def test_images_must_be_strict_base64(value):
    (output,) = _rebuilt_outputs(_display({"image/png": value, "text/plain": "figure"}))
    assert output["data"] == {"text/plain": "figure"}


def test_images_of_both_types_are_kept_with_line_breaks_removed():
    (output,) = _rebuilt_outputs(_display({"image/png": PNG[:20] + "\n" + PNG[20:] + "\n", "image/jpeg": JPEG}))
    assert output["data"] == {"image/png": PNG, "image/jpeg": JPEG}


def test_streams_errors_and_results_are_rebuilt_with_their_text():
    outputs = _rebuilt_outputs(
        {"output_type": "stream", "name": "stderr", "text": "<script>x</script>", "extra": {"a": 1}},
        {"output_type": "error", "ename": "ValueError", "evalue": "<b>", "traceback": ["line"], "x": 1},
        _display({"text/plain": "42"}, {"isolated": True}, kind="execute_result") | {"execution_count": "9"},
    )
    assert outputs == [
        {"output_type": "stream", "name": "stderr", "text": "<script>x</script>"},
        {"output_type": "error", "ename": "ValueError", "evalue": "<b>", "traceback": ["line"]},
        {"output_type": "execute_result", "data": {"text/plain": "42"}, "metadata": {}, "execution_count": None},
    ]


@pytest.mark.parametrize(("count", "expected"), [(3, 3), (0, 0), (-1, None), (True, None), (2.0, None), ("4", None)])
def test_execution_counts_are_non_negative_ints(count, expected):
    cell = _code(_display({"text/plain": "x"}, kind="execute_result") | {"execution_count": count})
    rebuilt = sanitize_notebook(_notebook(cell | {"execution_count": count}))
    nbformat.validate(rebuilt)
    assert rebuilt.cells[0].execution_count == expected
    assert rebuilt.cells[0].outputs[0].execution_count == expected


def test_long_text_is_cut_with_a_note():
    (output,) = _rebuilt_outputs({"output_type": "stream", "name": "stdout", "text": "x" * 300_000})
    assert output["text"] == "x" * 200_000 + "\n[... 100000 more characters not shown]"


def test_cells_and_outputs_past_the_notebooks_caps_become_notices():
    stream = {"output_type": "stream", "name": "stdout", "text": "."}
    cells = [{"cell_type": "markdown", "id": f"m{index}", "metadata": {}, "source": "x"} for index in range(1990)]
    cells += [{**_code(*[stream] * 3000), "id": f"c{index}"} for index in range(2)]  # 6000 outputs
    cells += [{"cell_type": "markdown", "id": f"n{index}", "metadata": {}, "source": "y"} for index in range(20)]
    rebuilt = sanitize_notebook(_notebook(*cells))
    nbformat.validate(rebuilt)
    assert len(rebuilt.cells) == outputs.MAX_CELLS + 1 == 2001
    assert "[removed from this page: 12 cells past the first 2000; the notebook holds them]" in rebuilt.cells[-1].source
    first, second = rebuilt.cells[1990].outputs, rebuilt.cells[1991].outputs
    assert len(first) == 3000 and len(second) == 2000 + 1 == outputs.MAX_OUTPUTS - 3000 + 1
    assert second[-1].text == "[removed from this page: 1000 outputs past the notebook's 5000; the notebook holds them]"


def test_latex_output_becomes_mathml_without_script():
    outputs = _rebuilt_outputs(
        _display({"text/latex": "$x^2$"}),
        _display({"text/latex": r"$\href{javascript:alert(1)}{x}$"}),
        _display({"text/latex": r"$\frac{1}{$"}),
    )
    assert outputs[0]["data"] == {
        "text/html": '<span class="formula" tabindex="0"><math xmlns="http://www.w3.org/1998/Math/MathML" '
        'display="inline"><mrow><msup><mi>x</mi><mn>2</mn></msup></mrow></math></span>',
        "text/plain": "$x^2$",
    }
    assert outputs[1]["data"]["text/html"] == (
        '<span class="formula" tabindex="0"><math xmlns="http://www.w3.org/1998/Math/MathML" display="inline">'
        "<mrow><mrow><mrow><mi>x</mi></mrow></mrow></mrow></math></span>"
    )
    assert outputs[2]["data"] == {"text/plain": r"$\frac{1}{$"}  # not one formula: shown as text


# ---------------------------------------------------------------------------------------------------------
# Markdown: rendered, math as MathML, bounded
# ---------------------------------------------------------------------------------------------------------


def _markdown(source: str, **extra) -> dict:
    return {"cell_type": "markdown", "id": "m1", "source": source, "metadata": {}} | extra


def test_markdown_math_is_mathml_and_carries_no_script():
    source = r"Square: $x^2$. Block: $$\sqrt{y}$$ and $\mathrm{<script>alert(1)</script>}$"
    (cell,) = sanitize_notebook(_notebook(_markdown(source))).cells
    assert cell.source.startswith(
        '<div><p>Square: <span class="formula" tabindex="0"><math xmlns="http://www.w3.org/1998/Math/MathML" '
        'display="inline"><mrow><msup><mi>x</mi><mn>2</mn></msup></mrow></math></span>. Block: '
        '<span class="formula formula-block" tabindex="0"><math xmlns="http://www.w3.org/1998/Math/MathML" '
        'display="block"><mrow><msqrt><mrow><mi>y</mi></mrow></msqrt></mrow></math></span> and '
        '<span class="formula" tabindex="0"><math'
    )
    assert "<script" not in cell.source
    page = _render_feedback(sanitize_notebook(_notebook(_markdown(source))))
    assert page.count("<math") == 3


def test_a_formula_over_the_cap_is_shown_as_tex_text():
    tex = "x+" * 1001 + "x"
    (cell,) = sanitize_notebook(_notebook(_markdown(f"${tex}$"))).cells
    assert cell.source == f"<div><p>${tex}$</p>&#10;</div>"


def test_attachments_other_than_png_and_jpeg_are_not_embedded():
    attachments = {"a.png": {"image/png": PNG}, "b.svg": {"image/svg+xml": SVG}, "c.png": {"image/png": SVG}}
    source = "![a](attachment:a.png) ![b](attachment:b.svg) ![c](attachment:c.png) ![d](attachment:d.png)"
    (cell,) = sanitize_notebook(_notebook(_markdown(source, attachments=attachments))).cells
    assert cell.source == (
        f'<div><p><img src="data:image/png;base64,{PNG}" alt="a"> <img src="data:image/png;base64," alt="b"> '
        '<img src="data:image/png;base64," alt="c"> <img src="data:image/png;base64," alt="d"></p>&#10;</div>'
    )
    assert "attachments" not in cell


MARKDOWN_NOTICE = (
    "<div>[removed from this page: a markdown cell too long to show; the notebook holds it]</div>"
)


def _table(rows: int) -> str:
    return "| position | angle |\n|---|---|\n" + "| 0 | 0.5 |\n" * rows


def test_a_huge_markdown_table_shows_a_notice():
    (cell,) = sanitize_notebook(_notebook(_markdown(_table(20_000)))).cells  # 0.24 MB
    assert cell.source == MARKDOWN_NOTICE


def test_a_small_table_is_rendered():
    (cell,) = sanitize_notebook(_notebook(_markdown(_table(2)))).cells
    assert cell.source.count("<td>0.5</td>") == 2


def test_a_50_mb_notebook_hands_bounded_input_to_the_renderer_and_bleach(monkeypatch):
    rendered: list[int] = []
    cleaned: list[str] = []
    render, clean = outputs.render_markdown, outputs.clean_html
    monkeypatch.setattr(outputs, "render_markdown", lambda text, *a: rendered.append(len(text)) or render(text, *a))
    monkeypatch.setattr(outputs, "clean_html", lambda text: cleaned.append(text) or clean(text))
    huge = _table(21_000)  # 0.25 MB each, 50 MB in all
    many_tags = _table(3_000)  # 36 kB, 6,000 tags once rendered: too many for one text
    small = "| a |\n|---|\n" + "| 1 |\n" * 300  # 1.8 kB, 600 tags once rendered
    notebook = _notebook(*[_markdown(huge)] * 200, _markdown(many_tags), *[_markdown(small)] * 200)
    assert sum(len(c.source) for c in notebook.cells) > 50_000_000
    rebuilt = sanitize_notebook(notebook)
    # Bounds written out: 0.2 MB for one cell; 4 MB and 40,000 tags for the notebook, 4,000 for one text.
    assert rendered and max(rendered) <= 200_000
    assert sum(rendered) <= 4_000_000 and sum(map(len, cleaned)) <= 4_000_000
    assert sum(text.count("<") for text in cleaned) <= 40_000
    assert max(text.count("<") for text in cleaned) <= 4_000
    sources = [cell.source for cell in rebuilt.cells]
    assert sources[:201] == [MARKDOWN_NOTICE] * 201
    assert "<td>1</td>" in sources[201] and sources[-1] == MARKDOWN_NOTICE  # until the notebook's budget ends


def test_code_is_highlighted_by_the_python_lexer_whatever_the_notebook_names():
    notebook = _notebook(_code())
    notebook.metadata = {"language_info": {"name": "python", "pygments_lexer": "ipython3"}}
    assert sanitize_notebook(notebook).metadata["language_info"] == {"name": "python", "pygments_lexer": "python3"}
    # A fenced code block in markdown is shown as text, whichever language its fence names.
    (cell,) = sanitize_notebook(_notebook(_markdown("```ipython3\n@a.a.a\n```"))).cells
    assert "<pre><code>@a.a.a&#10;</code></pre>" in cell.source and "highlight" not in cell.source


def test_code_is_cut_per_cell_and_per_notebook_before_any_renderer_highlights_it():
    long_cell = "x = 1\n" * 50_000  # 300,000 characters
    notebook = _notebook(*[nbformat.v4.new_code_cell(long_cell) for _ in range(12)], nbformat.v4.new_code_cell("y = 2"))
    sources = [cell.source for cell in sanitize_notebook(notebook).cells]
    # Bounds written out: 200,000 characters a cell, then a line saying how many were cut; 1,000,000 in all.
    assert sources[0] == long_cell[:200_000] + "\n[... 100000 more characters not shown]"
    assert sum(map(len, sources)) <= 1_000_000 + 13 * 100
    shown = [source for source in sources if not source.startswith("[removed from this page")]
    assert len(shown) == 4  # 4 cells of 200,039 characters fit in 1,000,000; the fifth does not
    assert sources[4] == ("[removed from this page: 200039 characters of code; the notebook's code passed 1000000 "
                          "characters, and the notebook holds it]")
    assert sources[12].startswith("[removed from this page")  # the budget is spent: nothing after it is shown


# ---------------------------------------------------------------------------------------------------------
# Metadata
# ---------------------------------------------------------------------------------------------------------


def test_cell_metadata_keeps_nbgrader_fields_of_their_types():
    metadata = {
        "nbgrader": {
            "grade": True, "solution": "yes", "locked": 1, "grade_id": "answer", "points": 2, "score": True,
            "schema_version": 3, "checksum": "abc", "onload": "x", "task": False,
        },
        "jupyter": {"source_hidden": True},
        "tags": ["<script>"],
        "widgets": {},
    }  # fmt: skip
    (cell,) = sanitize_notebook(_notebook(_code(metadata=metadata))).cells
    assert cell.metadata == {
        "nbgrader": {"grade": True, "grade_id": "answer", "points": 2, "schema_version": 3, "checksum": "abc",
                     "task": False}
    }  # fmt: skip


def test_notebook_metadata_keeps_the_kernel_and_language_names():
    notebook = _notebook(_code())
    notebook.metadata = {
        "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python", "env": {"A": 1}},
        "language_info": {"name": "python", "version": "3.11.2", "codemirror_mode": {"name": "ipython"},
                          "pygments_lexer": "<script>"},
        "widgets": {"application/vnd.jupyter.widget-state+json": {}},
        "title": "<script>alert(1)</script>",
    }  # fmt: skip
    assert sanitize_notebook(notebook).metadata == {
        "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
        "language_info": {"name": "python", "version": "3.11.2", "pygments_lexer": "python3"},
    }


# ---------------------------------------------------------------------------------------------------------
# Any notebook: a property of the page
# ---------------------------------------------------------------------------------------------------------

PIECES = [
    "<", ">", '"', "'", "=", " ", "\n", "\n\n", "a", "x^2", "$", "$$", "on", "onerror=", "onload=alert(1)",
    "javascript:", "JaVaScRiPt:", "&#106;avascript:", "<script>", "</script>", "<img src=x ", "<svg ",
    "<a href=", "<math>", "<mi ", "<mtext>", "<style>", "<iframe ", "<!--", "-->", "|", "---", "`", "[x](",
    ")", "![i](attachment:a.png)", r"\href{javascript:x}{y}", "width=", "1 onerror=alert(1)", "{", "}",
]
MIME_TYPES = ["text/plain", "text/html", "text/markdown", "text/latex", "image/png", "image/jpeg",
              "image/svg+xml", "application/javascript", "application/x-other"]  # fmt: skip
KEYS = ["width", "height", "isolated", "alt", "onload", "nbgrader", "grade", "points", "grade_id"]

hostile_text = st.one_of(st.lists(st.sampled_from(PIECES), max_size=12).map("".join), st.text(max_size=20))
scalars = st.one_of(st.none(), st.booleans(), st.integers(-5, 10**6), st.floats(allow_nan=False), hostile_text)
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.one_of(st.sampled_from(KEYS + MIME_TYPES), hostile_text), inner, max_size=3),
    ),
    max_leaves=8,
)
data_values = st.one_of(hostile_text, st.just(PNG), st.just(JPEG), st.just(SVG), json_values)
bundles = st.dictionaries(st.sampled_from(MIME_TYPES), data_values, max_size=4)
metadata = st.dictionaries(st.sampled_from(MIME_TYPES + KEYS), json_values, max_size=3)
hostile_outputs = st.one_of(
    st.builds(lambda data, meta, kind: _display(data, meta, kind), bundles, metadata,
              st.sampled_from(["display_data", "execute_result"])),
    st.fixed_dictionaries({"output_type": st.just("stream"), "name": st.sampled_from(["stdout", "x"]),
                           "text": hostile_text}),
    st.fixed_dictionaries({"output_type": st.sampled_from(["error", "other"]), "ename": json_values,
                           "evalue": hostile_text, "traceback": st.lists(hostile_text, max_size=3)}),
    st.dictionaries(st.sampled_from(["output_type", "data", "metadata"]), json_values, max_size=3),
)  # fmt: skip
cells = st.one_of(
    st.builds(lambda outs, meta, count: _code(*outs, metadata=meta) | {"execution_count": count},
              st.lists(hostile_outputs, max_size=4),
              st.dictionaries(st.sampled_from(["nbgrader", "tags", "x"]), json_values, max_size=2), json_values),
    st.builds(lambda source, files: _markdown(source, attachments=files), hostile_text,
              st.dictionaries(st.just("a.png"), st.dictionaries(st.sampled_from(MIME_TYPES), data_values))),
)  # fmt: skip


@pytest.fixture(scope="module")
def template_page() -> str:
    """The feedback page of an empty notebook: the template's own scripts and styles."""
    return _render_feedback(new_notebook())


def _check_page(page: str, template_page: str) -> None:
    tags = _tags(page)
    for active in ("script", "style"):
        assert [attrs for tag, attrs in tags if tag == active] == [
            attrs for tag, attrs in _tags(template_page) if tag == active
        ]
        assert page.count(f"<{active}") == template_page.count(f"<{active}")
    for tag, attrs in tags:
        assert tag not in {"iframe", "object", "embed", "svg", "base", "form"}, tag
        for name, value in attrs.items():
            assert not name.startswith("on"), (tag, name, value)
            assert not re.sub(r"[\s\x00-\x1f]", "", value).lower().startswith("javascript:"), (tag, name, value)
        if tag == "img":
            assert all(re.fullmatch(r"[0-9]+", attrs[size]) for size in ("width", "height") if size in attrs)


def _check_schema(notebook) -> None:
    nbformat.validate(notebook)
    assert set(notebook.metadata) <= {"kernelspec", "language_info"}
    for cell in notebook.cells:
        assert set(cell.metadata) <= {"nbgrader", "autograder"}
        if "autograder" in cell.metadata:  # the item of a graded cell, as a short text
            assert cell.metadata["nbgrader"]["grade"] is True
            assert set(cell.metadata["autograder"]) == {"item"} and 0 < len(cell.metadata["autograder"]["item"]) <= 40
        for output in cell.get("outputs", []):
            assert set(output.get("data", {})) <= {"text/plain", "text/html", "image/png", "image/jpeg"}
            for kind, sizes in output.get("metadata", {}).items():
                assert kind in ("image/png", "image/jpeg") and set(sizes) <= {"width", "height"}
                assert all(type(value) is int and value > 0 for value in sizes.values())


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])  # fmt: skip
@given(st.lists(cells, min_size=1, max_size=4))
def test_any_notebook_gives_a_page_with_no_script_handler_or_script_url(template_page, generated):
    rebuilt = sanitize_notebook(_notebook(*generated))
    _check_schema(rebuilt)
    _check_page(_render_feedback(rebuilt), template_page)


def test_cell_ids_are_kept_when_valid_and_unique():
    cells = [_markdown("a", id="same"), _markdown("b", id="same"), _markdown("c", id="<bad id>"), _code()]
    rebuilt = sanitize_notebook(_notebook(*cells))
    ids = [cell.id for cell in rebuilt.cells]
    assert ids[0] == "same" and ids[3] == "c1"
    assert len(set(ids)) == 4 and all(re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", cell_id) for cell_id in ids)


# ---------------------------------------------------------------------------------------------------------
# What a student reads: items by their numbers, the checks' verdicts, not the grader's machinery
# ---------------------------------------------------------------------------------------------------------

VISIBLE_CHECKS = 'with visible_test("4.2", "T5 buckets", "t5_bucket"):\n    assert isinstance(t5_bucket(3), int)\n'
HIDDEN_TESTS = (
    "\n### BEGIN HIDDEN TESTS\n"
    "def _autograder_report(step, values, _marker='AUTOGRADER-REPORT-0123'):\n    pass\n"
    "_autograder_report(0, {'buckets': [1, 2]})\n"
    "### END HIDDEN TESTS\n"
)
# A student who writes the markers into an answer: the answer is theirs, and is kept as it is.
ANSWER = "def t5_bucket(r):\n    ### BEGIN HIDDEN TESTS\n    return 0  # _autograder_report\n"
REPORT = {"text/x-autograder-report": "AUTOGRADER-REPORT-0123 {\"step\": 0, \"values\": {}}"}
VERDICT = {"output_type": "error", "ename": "Not right", "evalue": "t5_bucket(-3) should be 2, not 0",
           "traceback": ["Not right: t5_bucket(-3) should be 2, not 0"]}  # fmt: skip


def _graded(kind: str, grade_id: str, source: str, solution: bool, outputs=()) -> dict:
    metadata = {"nbgrader": {"grade": True, "solution": solution, "grade_id": grade_id, "points": 1}}
    cell = {"cell_type": kind, "id": grade_id.replace("_", "-"), "source": source, "metadata": metadata}
    return cell | ({"outputs": list(outputs), "execution_count": 1} if kind == "code" else {})


def _exercise_notebook() -> nbformat.NotebookNode:
    return _notebook(
        _markdown("## 4.2 T5 buckets (1 point)\n\nWrite `t5_bucket`."),
        {"cell_type": "code", "id": "bucket-answer", "source": ANSWER, "execution_count": 1, "outputs": [],
         "metadata": {"nbgrader": {"grade": False, "solution": True, "grade_id": "bucket_answer"}}},
        _graded("code", "bucket_test", VISIBLE_CHECKS + HIDDEN_TESTS, False, [
            {"output_type": "stream", "name": "stdout", "text": "✓ 4.2 T5 buckets: format ok\n"},
            _display(REPORT), _display(REPORT | {"text/plain": "a report that also has text"}), VERDICT,
        ]),
        _markdown("## 4.6 A local head (3 points, written)", id="m2"),
        _graded("markdown", "self_bias_answer", "The bias depends on the distance only.", True),
        _markdown("**Quiz 1.** Which head looks furthest back?", id="m3"),
        _graded("code", "quiz_test", 'with visible_test("Quiz 1", "", "quiz_1"):\n    pass\n' + HIDDEN_TESTS, False),
        _graded("code", "unnumbered_test", "assert True\n### BEGIN HIDDEN TESTS\nsecret = 1\n", False),
    )  # fmt: skip


def test_a_test_cell_keeps_its_visible_checks_and_verdict_but_not_its_hidden_tests_or_reports():
    cells = sanitize_notebook(_exercise_notebook()).cells
    test = cells[2]
    assert test.source == VISIBLE_CHECKS.rstrip()
    assert [output.output_type for output in test.outputs] == ["stream", "error"]  # the reports: no notice either
    assert test.outputs[0].text == "✓ 4.2 T5 buckets: format ok\n"
    assert (test.outputs[1].ename, test.outputs[1].evalue) == ("Not right", "t5_bucket(-3) should be 2, not 0")
    assert cells[6].source == 'with visible_test("Quiz 1", "", "quiz_1"):\n    pass'
    assert cells[7].source == "assert True"  # a hidden block without its end marker: cut to the end of the cell
    assert cells[1].source == ANSWER  # the student's own cell, markers and all


def test_every_graded_cell_is_named_as_the_notebook_numbers_its_item():
    rebuilt = sanitize_notebook(_exercise_notebook())
    items = {cell.metadata["nbgrader"]["grade_id"]: cell.metadata.get("autograder") for cell in rebuilt.cells
             if cell.metadata.get("nbgrader", {}).get("grade")}  # fmt: skip
    assert items == {
        "bucket_test": {"item": "4.2"}, "self_bias_answer": {"item": "4.6"}, "quiz_test": {"item": "Quiz 1"},
        "unnumbered_test": {"item": "Quiz 1"},  # no check of its own names it: the heading above it does
    }  # fmt: skip
    again = sanitize_notebook(rebuilt)  # the markdown is HTML now: the numbers kept in the metadata stay
    assert [cell.metadata.get("autograder") for cell in again.cells] == [cell.metadata.get("autograder") for cell in rebuilt.cells]


def test_an_item_number_is_kept_short_and_only_on_a_graded_cell():
    long_item = _graded("code", "long_test", 'with visible_test("' + "9" * 100 + '", ""):\n    pass\n', False)
    plain = _code(metadata={"nbgrader": {"grade": False, "grade_id": "x"}, "autograder": {"item": "4.1"}})
    rebuilt = sanitize_notebook(_notebook(long_item, plain))
    assert rebuilt.cells[0].metadata["autograder"] == {"item": "9" * 40}
    assert "autograder" not in rebuilt.cells[1].metadata


def _scored_exercise_notebook() -> nbformat.NotebookNode:
    """The rebuilt notebook with the scores that nbgrader's GetGrades writes into it from the gradebook."""
    notebook = sanitize_notebook(_exercise_notebook())
    for cell in notebook.cells:
        if cell.metadata.get("nbgrader", {}).get("grade"):
            cell.metadata["nbgrader"]["score"] = 0
    return notebook


def test_the_feedback_page_names_items_by_number_and_shows_no_machinery():
    page = _render_feedback(_scored_exercise_notebook())
    toc = re.search(r'<nav [^>]*id="toc"[^>]*>(.*?)</nav>', page, re.DOTALL).group(1)
    assert re.findall(r'<a href="#[a-z_]+">([^<]*)</a>', toc) == ["4.2", "4.6", "Quiz 1", "Quiz 1"]
    assert "Checks of 4.2" in page and "Your answer to 4.6" in page and "Test cell" not in page
    for machinery in ("END HIDDEN TESTS", "AUTOGRADER-REPORT", "x-autograder-report", "removed from this page",
                      "a report that also has text", "secret = 1"):  # fmt: skip
        assert machinery not in page, machinery
    # Once each: in the student's own answer, which keeps them.
    assert page.count("### BEGIN HIDDEN TESTS") == 1 and page.count("_autograder_report") == 1
    assert "t5_bucket(-3) should be 2, not 0" in page


def test_an_instructor_s_comment_and_an_item_number_are_shown_as_text():
    notebook = _scored_exercise_notebook()
    written = notebook.cells[4]
    written.metadata["nbgrader"]["comment"] = "<b>x</b> and <img src=x onerror=alert(1)>\n**not bold**"
    written.metadata["autograder"]["item"] = "<i>4.6</i>"
    page = _render_feedback(notebook)
    assert "&lt;b&gt;x&lt;/b&gt; and &lt;img src=x onerror=alert(1)&gt;\n**not bold**" in page
    assert "<b>x</b>" not in page and "<strong>not bold</strong>" not in page
    assert "&lt;i&gt;4.6&lt;/i&gt;" in page and "<i>4.6</i>" not in page


# ---------------------------------------------------------------------------------------------------------
# Cleaned again: what the renderers outside the stage do to a notebook that crossed
# ---------------------------------------------------------------------------------------------------------

# HTML that a stage which was not itself could send in a notebook of the crossing's shape: the crossing checks
# types and fields, not what HTML says, so these reach the renderers outside the stage.
HOSTILE_HTML = ('<style>body{display:none}</style><script>var submission_id = "other";</script>'
                '<b onclick="alert(1)">ok</b><a href="javascript:alert(2)">link</a>')


def _crossed_hostile_notebook() -> nbformat.NotebookNode:
    return _notebook(
        _markdown("<div>" + HOSTILE_HTML + "&#10;<i>second line</i></div>"),
        _markdown("# not in the stage's form\n" + HOSTILE_HTML, id="m2"),
        {"cell_type": "raw", "id": "r1", "source": HOSTILE_HTML, "metadata": {}},
        _code(_display({"text/html": HOSTILE_HTML, "text/plain": "x"})),
    )


def test_a_crossed_notebook_s_metadata_is_rebuilt_again_and_a_grade_id_is_a_plain_id_only():
    """Round 16: nbgrader's formgrade template writes ``grade_id`` into the page unescaped; the renderers rebuild
    the metadata as the stage does, and a text that is not a plain id is dropped."""
    hostile = {"nbgrader": {"grade": True, "grade_id": 'q1"><style>x</style>', "points": 2, "checksum": "ab12"},
               "autograder": {"item": "4.2"}, "tags": ["x"]}
    notebook = _notebook(_code(metadata=hostile), _code(metadata={"nbgrader": {"grade": True, "grade_id": "t_1-a"}}))
    notebook.metadata = {"widgets": {"state": {}}, "title": "<b>", "kernelspec": {"name": "python3"}}
    cleaned = outputs.cleaned_again(notebook)
    assert cleaned.cells[0].metadata == {"nbgrader": {"grade": True, "points": 2, "checksum": "ab12"},
                                         "autograder": {"item": "4.2"}}
    assert cleaned.cells[1].metadata == {"nbgrader": {"grade": True, "grade_id": "t_1-a"}}
    assert set(cleaned.metadata) == {"kernelspec", "language_info"}


@pytest.mark.parametrize("points", [float("inf"), float("nan"), float("-inf")])
def test_the_rebuild_keeps_finite_points_only_so_its_notebook_crosses(points):
    """Round 20: points of 1e999 (infinity) or NaN survived the rebuild and the crossing refused the notebook: a
    grader's failure after the whole notebook ran. The rebuild drops them, and what it writes crosses."""
    from autograder.sandbox.crossing import check_autograded

    metadata = {"nbgrader": {"grade": True, "grade_id": "t", "points": points}}
    rebuilt = sanitize_notebook(_notebook(_code(metadata=metadata)))
    assert rebuilt.cells[0].metadata["nbgrader"] == {"grade": True, "grade_id": "t"}
    check_autograded(nbformat.writes(rebuilt))


def test_a_crossed_notebook_is_cleaned_again_wherever_a_page_shows_html():
    notebook = outputs.cleaned_again(_crossed_hostile_notebook())
    nbformat.validate(notebook)
    block, text, raw, code = notebook.cells
    assert block.source == '<div>body{display:none}var submission_id = "other";<b>ok</b><a>link</a>&#10;<i>second line</i></div>'
    assert text.source.startswith("<div># not in the stage&#x27;s form&#10;&lt;style&gt;")  # shown as text
    assert "<" not in text.source[5:-6]
    for html in (raw.source, code.outputs[0]["data"]["text/html"]):
        assert html == 'body{display:none}var submission_id = "other";<b>ok</b><a>link</a>'
    assert code.outputs[0]["data"]["text/plain"] == "x"


@pytest.mark.parametrize("markdown", [
    "# Title\n\nSome *text*, $x^2$ and <b>bold</b>.\n\n| a | b |\n|---|---|\n| 1 | 2 |",
    "1. one\n2. two\n\n```python\nprint('<b>')\n```\n\n> quoted & <i>kept</i>",
    "$$\\sum_{i=1}^n i = \\frac{n(n+1)}{2}$$\n\nA [link](https://example.org) and an ![image](x.png).",
])
def test_the_stages_own_notebook_is_left_as_it_is(markdown):
    """Cleaning again changes nothing the stage's rebuild wrote: the pages of honest notebooks stay the same."""
    graded = {"nbgrader": {"grade": True, "solution": False, "locked": True, "grade_id": "rope_test", "points": 2,
                           "checksum": "0f3a", "schema_version": 3, "cell_type": "code"}}
    rebuilt = sanitize_notebook(_notebook(_markdown(markdown), _code(_display({"text/html": "<table><tr><td>1</td></tr></table>"}),
                                                                     metadata=graded)))
    again = outputs.cleaned_again(nbformat.reads(nbformat.writes(rebuilt), as_version=4))  # as a renderer reads it
    assert again == rebuilt
