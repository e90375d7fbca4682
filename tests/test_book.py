"""The built book (`make book` writes _build/html), checked as a reader gets it: offline, page by page.

The browser tests open every page in Debian's Chromium, driven by Playwright, with every request that is not
to the local test server aborted and recorded, and check that the math is typeset, every image loaded, the
console stayed free of errors and every solution starts folded. A full-page screenshot of each page goes to
_build/screenshots/. They skip only where /usr/bin/chromium is missing outside CI; in CI they fail instead.
The other tests read the built files: every page of the table of contents (the introduction, the chapters and the
guides) is a page of the site, no page loads anything from another site, each citation jumps to its own
chapter's reference list, and each chapter offers its executed notebook for download.
"""

import functools
import http.server
import json
import os
import tempfile
import threading
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
SITE = ROOT / "_build" / "html"
SCREENSHOTS = ROOT / "_build" / "screenshots"
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
IN_CI = os.environ.get("CI", "").lower() not in ("", "0", "false", "no")
MISSING_SITE = f"{SITE.relative_to(ROOT)} does not exist: build the book first with `make book`"
# Pages that are files of the site but not pages of the book.
NOT_PAGES = ("_static", "_sources", "_images", "_downloads")
# Delimiters that MathJax removes when it typesets: left in the visible text, they mean raw TeX on screen.
RAW_TEX = ("$$", "\\(", "\\)", "\\[", "\\]", "\\begin{")

needs_chromium = pytest.mark.skipif(
    not CHROMIUM.exists() and not IN_CI,
    reason=f"{CHROMIUM} is missing (`make chromium` installs it); in CI this test fails instead",
)


def _site_pages() -> list[str]:
    """Every HTML page of the built site, relative to its root; index.html only redirects (tested apart)."""
    if not SITE.is_dir():
        return []
    pages = []
    for path in sorted(SITE.rglob("*.html")):
        relative = path.relative_to(SITE)
        if relative.parts[0] not in NOT_PAGES and relative.as_posix() != "index.html":
            pages.append(relative.as_posix())
    return pages


# An empty site still yields one test, which fails and says why.
PAGES = _site_pages() or [pytest.param(None, id="no-built-book")]


def _require_site() -> None:
    if not SITE.is_dir():
        pytest.fail(MISSING_SITE)


# The attributes through which each tag makes the browser load something.
LOADING_ATTRIBUTES = {
    "script": ("src",),
    "link": ("href",),
    "img": ("src", "srcset"),
    "source": ("src", "srcset"),
    "iframe": ("src",),
    "video": ("src", "poster"),
    "audio": ("src",),
    "embed": ("src",),
    "object": ("data",),
}
# <link rel=...> values that only name another page.
NAVIGATION_LINKS = {"prev", "next", "index", "search", "canonical", "alternate", "author", "license", "help"}


class _Resources(HTMLParser):
    """The addresses a page loads (scripts, styles, images, frames, media) and the bodies of its scripts."""

    def __init__(self) -> None:
        super().__init__()
        self.addresses: list[str] = []
        self.inline_scripts: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        # Any other <link> (a stylesheet, an icon, a preload) is loaded.
        if tag == "link" and values.get("rel") in NAVIGATION_LINKS:
            return
        for name in LOADING_ATTRIBUTES.get(tag, ()):
            if values.get(name):
                self.addresses.append(values[name])
        self._in_script = tag == "script" and not values.get("src")

    def handle_endtag(self, tag: str) -> None:
        if tag == "script":
            self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script:
            self.inline_scripts.append(data)


def _is_remote(address: str) -> bool:
    return address.strip().lower().startswith(("http://", "https://", "//"))


@pytest.mark.parametrize("page", PAGES)
def test_page_loads_nothing_from_another_site(page: str | None) -> None:
    _require_site()
    resources = _Resources()
    resources.feed((SITE / page).read_text(encoding="utf-8"))
    remote = [address for address in resources.addresses if _is_remote(address)]
    scripts_with_addresses = [body.strip()[:120] for body in resources.inline_scripts if "://" in body]
    assert not remote, f"{page} loads from another site: {remote}"
    assert not scripts_with_addresses, f"{page} has inline scripts naming another site: {scripts_with_addresses}"


def _toc_pages() -> list[str]:
    """The site's page of every document of _toc.yml: the introduction, the chapters and the guides."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
    documents = [toc["root"]] + [chapter["file"] for part in toc.get("parts", []) for chapter in part["chapters"]]
    return [f"{document}.html" for document in documents]


def test_every_page_of_the_table_of_contents_is_checked_page_by_page() -> None:
    """The per-page tests here and in test_book_a11y.py take the site's pages: the guides among them."""
    _require_site()
    pages = _toc_pages()
    assert {"book/guide_students.html", "book/guide_instructors.html"} <= set(pages), pages
    missing = sorted(set(pages) - set(_site_pages()))
    assert not missing, f"pages of _toc.yml missing from the built site: {missing}"


def test_index_redirects_to_the_introduction() -> None:
    _require_site()
    index = (SITE / "index.html").read_text(encoding="utf-8")
    assert 'http-equiv="Refresh"' in index and "url=book/intro.html" in index, index[:300]


class _Citations(HTMLParser):
    """The ids of a page's bibliography entries, and the targets of all its links."""

    def __init__(self) -> None:
        super().__init__()
        self.entry_ids: set[str] = set()
        self.link_targets: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        # docutils writes an entry as <div class="citation" id=...>, a list item of the page's reference list.
        if "citation" in (values.get("class") or "").split() and values.get("id"):
            self.entry_ids.add(values["id"])
        if tag == "a" and values.get("href"):
            self.link_targets.append(values["href"])


def test_citations_link_to_the_reference_list_of_their_own_page() -> None:
    """A work cited by two chapters is listed in both, and each citation jumps to its own chapter's list."""
    _require_site()
    pages = {page: _Citations() for page in _site_pages()}
    for page, citations in pages.items():
        citations.feed((SITE / page).read_text(encoding="utf-8"))
    with_references = [page for page, citations in pages.items() if citations.entry_ids]
    assert with_references, "no page has a reference list (<div class=\"citation\" id=...> entries)"
    problems = []
    for page, citations in pages.items():
        for target in citations.link_targets:
            path, _, fragment = target.partition("#")
            if not fragment or "://" in path:
                continue
            target_page = (Path(page).parent / path).as_posix() if path else page
            target_page = os.path.normpath(target_page)
            if target_page != page and fragment in getattr(pages.get(target_page), "entry_ids", ()):
                problems.append(f"{page} cites through another page's list: {target}")
    assert not problems, "\n".join(problems)


def _chapter_sources() -> list[Path]:
    """The chapters that are notebooks: their MyST source, as published in _sources, names a kernel."""
    sources = sorted((SITE / "_sources" / "book").glob("*.md")) if SITE.is_dir() else []
    return [source for source in sources if "kernelspec:" in source.read_text(encoding="utf-8")[:2000]]


def test_every_chapter_page_offers_its_executed_notebook() -> None:
    _require_site()
    chapters = _chapter_sources()
    assert chapters, "no chapter notebook (a MyST page with a kernelspec) in the built site's _sources/book/"
    problems = []
    for source in chapters:
        notebook_path = source.with_suffix(".ipynb")
        page = (SITE / "book" / source.name).with_suffix(".html").read_text(encoding="utf-8")
        if f'href="../_sources/book/{notebook_path.name}"' not in page:
            problems.append(f"book/{source.stem}.html has no download link to {notebook_path.name}")
        if not notebook_path.is_file():
            problems.append(f"{notebook_path.relative_to(SITE)} is missing")
            continue
        notebook = json.loads(notebook_path.read_text(encoding="utf-8"))
        code_cells = [cell for cell in notebook["cells"] if cell["cell_type"] == "code"]
        if code_cells and not any(cell.get("outputs") for cell in code_cells):
            problems.append(f"{notebook_path.name} has code cells but no outputs: it was not executed")
    assert not problems, "\n".join(problems)


# ------------------------------------------------------------------------------------------ in the browser


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def site_url() -> Iterator[str]:
    """The built site, served on the loopback interface for the length of this module."""
    _require_site()
    handler = functools.partial(_QuietHandler, directory=str(SITE))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


class _Offsite:
    """Every request the pages made that was not to the local server; each one was aborted."""

    def __init__(self, allowed_prefix: str) -> None:
        self.allowed_prefix = allowed_prefix
        self.requests: list[str] = []

    def route(self, route: Any) -> None:
        url = route.request.url
        if url.startswith(self.allowed_prefix):
            route.continue_()
        else:
            self.requests.append(url)
            route.abort()


@pytest.fixture(scope="module")
def browser(site_url: str) -> Iterator[tuple[Any, _Offsite]]:
    """Chromium with a fresh profile; every request that is not to the local server is aborted and recorded."""
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing (`make chromium` installs it); in CI the browser test must run")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as error:
        pytest.fail(f"Playwright for Python is not installed (it is in requirements.txt): {error}")
    offsite = _Offsite(site_url)
    with tempfile.TemporaryDirectory(prefix="book-chromium-") as profile, sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            profile,
            executable_path=str(CHROMIUM),
            args=CHROMIUM_ARGS,
            headless=True,
            viewport={"width": 1280, "height": 900},
            service_workers="block",
        )
        context.route("**/*", offsite.route)
        try:
            yield context, offsite
        finally:
            context.close()


# Waits for MathJax (when the page loads it) to finish its first typesetting, and for the web fonts.
WAIT_FOR_TYPESETTING = """async () => {
    if (window.MathJax && window.MathJax.startup && window.MathJax.startup.promise) {
        await window.MathJax.startup.promise;
    }
    await document.fonts.ready;
}"""

# What the checks need from the page, computed in the page.
INSPECT_PAGE = """(rawTex) => {
    const math = Array.from(document.querySelectorAll('.math'));
    const skip = 'pre, code, script, style, textarea, mjx-container, .highlight';
    const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
    const rawTexLeft = [];
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
        if (node.parentElement.closest(skip)) continue;
        const text = node.textContent;
        if (rawTex.some(delimiter => text.includes(delimiter))) rawTexLeft.push(text.trim().slice(0, 80));
    }
    const solutions = Array.from(document.querySelectorAll('div.solution'));
    // sphinx-togglebutton folds a dropdown by marking it toggle-hidden and collapsing all but its title.
    const unfolded = solutions.filter(solution => !solution.classList.contains('toggle-hidden')
        || Array.from(solution.children).some(child => !child.classList.contains('admonition-title')
                                                      && child.getBoundingClientRect().height > 0));
    return {
        mathElements: math.length,
        mathjaxLoaded: Boolean(window.MathJax && window.MathJax.version),
        untypesetMath: math.filter(element => !element.querySelector('mjx-container'))
            .map(element => element.textContent.trim().slice(0, 80)),
        mathjaxErrors: Array.from(document.querySelectorAll('mjx-merror'))
            .map(element => element.getAttribute('data-mjx-error') || element.textContent),
        rawTexLeft: rawTexLeft,
        brokenImages: Array.from(document.images).filter(image => image.naturalWidth === 0)
            .map(image => image.getAttribute('src')),
        unfoldedSolutions: unfolded.map(solution => solution.id),
    };
}"""


@needs_chromium
@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES)
def test_page_renders_offline_with_math_images_and_a_quiet_console(
    browser: tuple[Any, _Offsite], site_url: str, page: str | None
) -> None:
    context, offsite = browser
    offsite.requests.clear()
    console_errors: list[str] = []
    failed_responses: list[str] = []
    tab = context.new_page()
    tab.on("console", lambda message: console_errors.append(message.text) if message.type == "error" else None)
    tab.on("pageerror", lambda error: console_errors.append(f"uncaught: {error}"))
    tab.on("response", lambda response: failed_responses.append(f"{response.status} {response.url}")
           if response.status >= 400 else None)
    try:
        tab.goto(site_url + page, wait_until="load")
        tab.evaluate(WAIT_FOR_TYPESETTING)
        tab.wait_for_function("() => Array.from(document.images).every(image => image.complete)", timeout=15_000)
        found = tab.evaluate(INSPECT_PAGE, list(RAW_TEX))
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        tab.screenshot(path=str(SCREENSHOTS / (page.removesuffix(".html").replace("/", "__") + ".png")),
                       full_page=True)
    finally:
        tab.close()

    problems = []
    if offsite.requests:
        problems.append(f"requests left the machine (aborted): {offsite.requests}")
    if failed_responses:
        problems.append(f"failed requests to the local site: {failed_responses}")
    if console_errors:
        problems.append(f"console errors: {console_errors}")
    if found["mathElements"] and not found["mathjaxLoaded"]:
        problems.append(f"{found['mathElements']} math elements but MathJax did not load")
    if found["untypesetMath"]:
        problems.append(f"math not typeset: {found['untypesetMath']}")
    if found["mathjaxErrors"]:
        problems.append(f"MathJax errors: {found['mathjaxErrors']}")
    if found["rawTexLeft"]:
        problems.append(f"raw TeX in the visible text: {found['rawTexLeft']}")
    if found["brokenImages"]:
        problems.append(f"images that did not load: {found['brokenImages']}")
    if found["unfoldedSolutions"]:
        problems.append(f"solutions not folded on load (use `:class: dropdown`): {found['unfoldedSolutions']}")
    assert not problems, f"{page}:\n" + "\n".join(problems)
