"""The explorers of the built book, moved in a browser: each slider changes the picture it drives.

Each chapter's "Explore it" section holds pre-rendered explorers (posenc_ref.widgets.frame_slider: one PNG per
value of a control and an <input type="range">, driven by book/_static/frame_slider.js). The browser test
opens each page in Debian's Chromium with every request off the local test server aborted (the fixtures of
tests/test_book.py), moves each explorer's slider with the keyboard and by setting its value, and checks that
the picture's pixels change, that its label follows, that one frame shows at a time and that the console
stays free of errors. The screenshots go to _build/screenshots/explorers/. Like tests/test_book.py, it skips
only where /usr/bin/chromium is missing outside CI; in CI it fails instead.
"""

import io
import re
from html.parser import HTMLParser
from typing import Any

import pytest
import test_book as book  # tests/ is on sys.path: pytest imports the test modules from their folder

# The browser fixtures of test_book.py: the site served on the loopback interface, and Chromium with the
# network blocked.
site_url = book.site_url
browser = book.browser

SCREENSHOTS = book.SCREENSHOTS / "explorers"
# Every explorer of the book, by page: a test fails if one is missing, and one that is added must be listed.
EXPLORERS = {
    "book/01_permutation.html": ["dog_bites_man"],
    "book/02_sinusoidal.html": ["wavelengths", "encoding_heatmap", "similarity"],
    "book/04_relative.html": ["relative_bias", "alibi_slopes", "t5_buckets"],
    "book/05_rope.html": ["rope_dial"],
}
CASES = [pytest.param(page, name, id=name) for page, names in EXPLORERS.items() for name in names]


class _ExplorerNames(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        name = dict(attrs).get("data-frame-slider")
        if name:
            self.names.append(name)


def test_the_built_book_has_exactly_the_listed_explorers() -> None:
    book._require_site()
    found = {}
    for page in book._site_pages():
        parser = _ExplorerNames()
        parser.feed((book.SITE / page).read_text(encoding="utf-8"))
        if parser.names:
            found[page] = parser.names
    assert found == EXPLORERS


# What the test needs from an explorer, computed in the page.
INSPECT_EXPLORER = """(explorer) => {
    const frames = Array.from(explorer.querySelectorAll('.frame-slider-frames img'));
    const slider = explorer.querySelector('input[type=range]');
    return {
        shown: frames.filter(frame => frame.getBoundingClientRect().height > 0).map(frame => frames.indexOf(frame)),
        labels: frames.map(frame => frame.dataset.label),
        loaded: frames.every(frame => frame.complete && frame.naturalWidth > 0),
        value: Number(slider.value),
        max: Number(slider.max),
        readout: explorer.querySelector('output').textContent,
        // The control's name, the label's text before the slider: its whole width, and the slider after it.
        name: explorer.querySelector('label').firstChild.textContent.trim(),
        nameFits: (() => {
            const range = document.createRange();
            range.selectNodeContents(explorer.querySelector('label').firstChild);
            const name = range.getBoundingClientRect();
            return name.width > 0 && name.right <= slider.getBoundingClientRect().left;
        })(),
    };
}"""


def _control_in_chapter(page: str, name: str) -> str:
    """The argument that the chapter's ``frame_slider(widgets.render_<name>, "<argument>", ...)`` moves."""
    chapter = (book.ROOT / page).with_suffix(".md").read_text(encoding="utf-8")
    match = re.search(rf'frame_slider\(\s*widgets\.render_{name}, "(\w+)"', chapter)
    assert match, f"no frame_slider of render_{name} in {page}"
    return match.group(1)


def _pixels(png: bytes) -> Any:
    from PIL import Image

    return Image.open(io.BytesIO(png)).convert("RGB")


def _pixels_differ(first: bytes, second: bytes) -> bool:
    from PIL import ImageChops

    before, after = _pixels(first), _pixels(second)
    return before.size != after.size or ImageChops.difference(before, after).getbbox() is not None


@book.needs_chromium
@pytest.mark.slow
@pytest.mark.parametrize("page, name", CASES)
def test_moving_the_slider_changes_the_picture(browser: tuple[Any, Any], site_url: str, page: str, name: str) -> None:
    context, offsite = browser
    offsite.requests.clear()
    console_errors: list[str] = []
    tab = context.new_page()
    tab.on("console", lambda message: console_errors.append(message.text) if message.type == "error" else None)
    tab.on("pageerror", lambda error: console_errors.append(f"uncaught: {error}"))
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    prefix = SCREENSHOTS / f"{page.removeprefix('book/').removesuffix('.html')}__{name}"
    try:
        tab.goto(site_url + page, wait_until="load")
        tab.evaluate(book.WAIT_FOR_TYPESETTING)
        explorer = tab.locator(f'[data-frame-slider="{name}"]')
        explorer.scroll_into_view_if_needed()
        picture, slider = explorer.locator(".frame-slider-frames"), explorer.locator("input[type=range]")
        state = explorer.evaluate(INSPECT_EXPLORER)
        assert state["loaded"], f"{name}: a frame did not load"
        assert state["shown"] == [state["value"]] and state["readout"] == state["labels"][state["value"]], state
        assert state["nameFits"] and state["name"] == _control_in_chapter(page, name), state
        initial = picture.screenshot(path=f"{prefix}-1-initial.png")

        # The keyboard, as a reader moves a focused slider: End goes to the last frame (Home if already there).
        key, target = ("Home", 0) if state["value"] == state["max"] else ("End", state["max"])
        slider.focus()
        tab.keyboard.press(key)
        moved = explorer.evaluate(INSPECT_EXPLORER)
        assert moved["value"] == target and moved["shown"] == [target], moved
        assert moved["readout"] == moved["labels"][target], moved
        by_keyboard = picture.screenshot(path=f"{prefix}-2-{key.lower()}.png")
        assert _pixels_differ(initial, by_keyboard), f"{name}: the picture did not change after pressing {key}"

        # Setting the value (Playwright's fill dispatches input and change), as a script or a click would.
        middle = state["max"] // 2 if state["max"] // 2 != target else 1
        slider.fill(str(middle))
        set_state = explorer.evaluate(INSPECT_EXPLORER)
        assert set_state["shown"] == [middle] and set_state["readout"] == set_state["labels"][middle], set_state
        by_value = picture.screenshot(path=f"{prefix}-3-frame{middle}.png")
        assert _pixels_differ(by_keyboard, by_value), f"{name}: the picture did not change for frame {middle}"
        explorer.screenshot(path=f"{prefix}-4-with-slider.png")
    finally:
        tab.close()
    assert not offsite.requests, f"requests left the machine (aborted): {offsite.requests}"
    assert not console_errors, f"console errors: {console_errors}"


# ------------------------------------------------------------------------------ the live explorers' labels


def test_every_live_explorer_control_shows_its_whole_description() -> None:
    """In JupyterLab, ipywidgets gives a description a fixed width and cuts a longer one ("num_buck...");
    a description width of "initial" fits the text. Checkboxes write theirs beside the box, uncut."""
    import ipywidgets

    from posenc_ref import widgets

    cut = []
    for explorer_name, make in widgets.EXPLORERS.items():
        for argument, control in make().controls.items():
            if isinstance(control, ipywidgets.Checkbox) or not control.description:
                continue
            if control.style.description_width != "initial":
                cut.append(f"{explorer_name}: {argument} ({control.description!r}, "
                           f"description_width={control.style.description_width!r})")
    assert not cut, "descriptions that JupyterLab cuts:\n" + "\n".join(cut)
