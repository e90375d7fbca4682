"""The built book for every reader: no serious accessibility fault on any page, and no sideways scroll on a phone.

Each page is opened in Debian's Chromium with every request off the local test server aborted (the fixtures of
tests/test_book.py). axe-core (fetched from the npm registry by `make axe`, never from a CDN) runs with its
default rules on the page in the light and in the dark colour mode, and no violation of impact "serious" or
"critical" may remain; a failure lists each rule with the elements it found. At a phone's viewport of 390 x 844
CSS pixels, no page may be wider than the screen. Like tests/test_book.py, these tests skip only where
/usr/bin/chromium or axe-core is missing outside CI; in CI they fail instead.
"""

import re
from typing import Any

import pytest
import test_book as book  # tests/ is on sys.path: pytest imports the test modules from their folder

site_url = book.site_url
browser = book.browser

ROOT = book.ROOT
AXE_VERSION = re.search(r"^AXE_VERSION := (\S+)$", (ROOT / "Makefile").read_text(), re.MULTILINE).group(1)
AXE = ROOT / "_build" / "test_vendor" / f"axe-core-{AXE_VERSION}" / "axe.min.js"
BLOCKING_IMPACTS = ("serious", "critical")
PHONE = {"width": 390, "height": 844}

needs_axe = pytest.mark.skipif(
    not AXE.exists() and not book.IN_CI,
    reason=f"{AXE.relative_to(ROOT)} is missing (`make axe` fetches it); in CI this test fails instead",
)

# axe.run with its default rules (WCAG 2 A and AA, and best practices); what the test needs from the result.
RUN_AXE = """async () => {
    const results = await axe.run(document);
    return results.violations.map(violation => ({
        id: violation.id,
        impact: violation.impact,
        targets: violation.nodes.map(node => node.target.join(' ')),
    }));
}"""

# The page's width, and the elements of the article that reach past the right edge of the screen.
MEASURE_WIDTH = """() => {
    const width = document.documentElement.clientWidth;
    const beyond = Array.from(document.querySelectorAll('.bd-article *'))
        .filter(element => element.getBoundingClientRect().right > width + 0.5)
        .filter(element => !element.parentElement.closest('pre, mjx-container, table, .highlight'))
        .slice(0, 5)
        .map(element => `${element.tagName.toLowerCase()}.${element.className}: ${element.textContent.slice(0, 60)}`);
    return {
        scrollWidth: document.documentElement.scrollWidth,
        bodyScrollWidth: document.body.scrollWidth,
        clientWidth: width,
        beyond: beyond,
    };
}"""


def _open(context: Any, site_url: str, page: str, *, color_scheme: str = "light", viewport: dict | None = None):
    tab = context.new_page()
    tab.emulate_media(color_scheme=color_scheme)
    if viewport:
        tab.set_viewport_size(viewport)
    tab.goto(site_url + page, wait_until="load")
    # The theme fades colours in when it switches to dark mode; axe judges the colours at rest, not mid-fade
    # (on a busy machine it once caught the search button's text halfway).
    tab.add_style_tag(content="*, *::before, *::after { transition: none !important; animation: none !important; }")
    tab.evaluate(book.WAIT_FOR_TYPESETTING)
    tab.wait_for_function("() => Array.from(document.images).every(image => image.complete)", timeout=15_000)
    return tab


@book.needs_chromium
@needs_axe
@pytest.mark.slow
@pytest.mark.parametrize("color_scheme", ["light", "dark"])
@pytest.mark.parametrize("page", book.PAGES)
def test_axe_finds_no_serious_or_critical_violation(
    browser: tuple[Any, Any], site_url: str, page: str | None, color_scheme: str
) -> None:
    if not AXE.exists():
        pytest.fail(f"{AXE.relative_to(ROOT)} is missing (`make axe` fetches it); in CI the axe test must run")
    context, offsite = browser
    offsite.requests.clear()
    tab = _open(context, site_url, page, color_scheme=color_scheme)
    try:
        # The theme's "auto" mode follows the reader's system setting: the page must be in the mode asked for.
        mode = tab.evaluate("() => document.documentElement.dataset.theme")
        assert mode == color_scheme, f"{page} shows the {mode!r} mode, not {color_scheme!r}"
        tab.add_script_tag(path=str(AXE))
        violations = tab.evaluate(RUN_AXE)
    finally:
        tab.close()
    blocking = [violation for violation in violations if violation["impact"] in BLOCKING_IMPACTS]
    report = "\n".join(f"  {violation['impact']} {violation['id']}: {violation['targets']}" for violation in blocking)
    assert not blocking, f"{page} ({color_scheme} mode), axe-core {AXE_VERSION}:\n{report}"
    assert not offsite.requests, f"requests left the machine (aborted): {offsite.requests}"


@book.needs_chromium
@pytest.mark.slow
@pytest.mark.parametrize("page", book.PAGES)
def test_no_page_is_wider_than_a_phone(browser: tuple[Any, Any], site_url: str, page: str | None) -> None:
    context, _ = browser
    tab = _open(context, site_url, page, viewport=PHONE)
    try:
        measured = tab.evaluate(MEASURE_WIDTH)
        book.SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        tab.screenshot(path=str(book.SCREENSHOTS / (page.removesuffix(".html").replace("/", "__") + "-390px.png")))
    finally:
        tab.close()
    assert measured["clientWidth"] == PHONE["width"], measured
    assert measured["scrollWidth"] <= PHONE["width"] and measured["bodyScrollWidth"] <= PHONE["width"], (
        f"{page} is {measured['scrollWidth']} px wide on a {PHONE['width']} px screen; "
        f"elements past the edge: {measured['beyond']}"
    )


def test_axe_is_fetched_by_the_test_target_of_the_makefile() -> None:
    """`make test` fetches axe-core before it runs the tests, from the pinned version the tests read."""
    makefile = (ROOT / "Makefile").read_text()
    test_prerequisites = re.search(r"^test: (.*)$", makefile, re.MULTILINE).group(1).split()
    assert "$(AXE)" in test_prerequisites, test_prerequisites
    assert "npm pack --silent axe-core@$(AXE_VERSION)" in makefile
    # A test tool, not part of the site: its folder is not among the folders the site serves.
    static_path = re.search(r"html_static_path: .*", (ROOT / "_config.yml").read_text()).group(0)
    assert "test_vendor" not in static_path, static_path
