"""No file of a student's runs script in the formgrader's origin, whichever route of the server serves it.

The formgrader (``python -m autograder formgrader --out DIR --no-browser``, started as the instructors' guide
writes it) serves DIR. A student's ``figure.html``, ``figure.svg`` and ``figure.js`` are planted where a
submission's files would land if anything put them there (``autograded/<student>/<assignment>/``, which
nbgrader's formgrader serves beside the submission, and ``submitted/<student>/<assignment>/``, where nbgrader's
own collect copies a submission's every file), with a notebook whose markdown holds a ``<script>``, a ``<script
src="figure.js">`` and an ``<img onerror>``. Each script, if it ran, would do what the attack that this test
keeps out did: write a file through ``PUT /api/contents`` with the instructor's login (which the server now
refuses too: its files are read-only), and log a line.

Debian's Chromium, driven by Playwright, opens every route that can serve such a file: ``/files/``, ``/view/``,
``/nbconvert/html/`` and nbgrader's ``/formgrader/submissions/<id>/<file>``. No planted file may appear, no
planted line be logged, and each response carries the policy with ``sandbox`` (never ``allow-scripts``) and,
unless it is a raster image, ``Content-Disposition: attachment`` and a type no page can run as a script; under
``submitted/`` every route answers 403 (the server serves no student's raw file). A PNG is still shown. The payload itself is run once in the formgrader's own page, to show that it would write its
file if a route let it run.
"""

from __future__ import annotations

import base64
import http.client
import os
import sys
import tempfile
import urllib.parse
from pathlib import Path

import nbformat
import pytest
from test_grader_formgrader import CHROMIUM, CHROMIUM_ARGS, IN_CI, Formgrader

pytestmark = pytest.mark.slow

ASSIGNMENT = "04_relative"
STUDENT = "hostile"
# A 1x1 PNG.
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


def payload(name: str) -> str:
    """Script that writes ``ran-<name>.txt`` at the served folder's top through the contents API, as the instructor
    (the login cookie and the ``_xsrf`` cookie of the formgrader's origin), and logs that it ran."""
    return (
        "(function(){var m=document.cookie.match(/_xsrf=([^;]+)/);"
        f"console.log('planted script ran: {name}');"
        # under the run's random path, which the server's routes start with
        "var b=(location.pathname.match(/^\\/[0-9a-f]{16}/)||[''])[0];"
        f"fetch(b+'/api/contents/ran-{name}.txt',{{method:'PUT',credentials:'include',"
        "headers:{'Content-Type':'application/json','X-XSRFToken':m?decodeURIComponent(m[1]):''},"
        "body:JSON.stringify({type:'file',format:'text',content:'ran'})});})();"
    )


def _plant(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "figure.js").write_text(payload("js"), encoding="utf-8")
    (folder / "figure.html").write_text(
        f"<!doctype html><title>figure</title><script>{payload('html')}</script>"
        f'<script src="figure.js"></script><img src="x" onerror="{payload("handler")}">',
        encoding="utf-8",
    )
    (folder / "figure.svg").write_text(
        f'<svg xmlns="http://www.w3.org/2000/svg"><script>{payload("svg")}</script>'
        f'<image href="x" onerror="{payload("svghandler")}"/></svg>',
        encoding="utf-8",
    )
    (folder / "figure.png").write_bytes(PNG)
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [
        nbformat.v4.new_markdown_cell(
            f"<script>{payload('notebook')}</script>\n\n<script src=\"figure.js\"></script>\n\n"
            f'<img src="x" onerror="{payload("notebookhandler")}">'
        )
    ]
    nbformat.write(notebook, folder / f"{ASSIGNMENT}.ipynb")


def _served_folder(root: Path, monkeypatch) -> tuple[Path, int]:
    """A course folder as ``grade`` writes it (configuration, gradebook with the hostile student's
    submission) with the planted files; the submission notebook's id."""
    from nbgrader.api import Gradebook

    # nbgrader makes a new gradebook with the alembic program installed beside this interpreter.
    monkeypatch.setenv("PATH", os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
    from autograder.course_directory import write_course_files

    out = root / "graded"
    write_course_files(out, out, f"sqlite:///{out / 'gradebook.db'}", [ASSIGNMENT])
    with Gradebook(f"sqlite:///{out / 'gradebook.db'}", course_id="posenc") as gradebook:
        gradebook.add_assignment(ASSIGNMENT)
        gradebook.add_notebook(ASSIGNMENT, ASSIGNMENT)
        gradebook.add_student(STUDENT)
        gradebook.add_submission(ASSIGNMENT, STUDENT)
        submission = gradebook.find_submission_notebook(ASSIGNMENT, ASSIGNMENT, STUDENT).id
    for kind in ("autograded", "submitted"):
        _plant(out / kind / STUDENT / ASSIGNMENT)
    return out, submission


def _routes(submission) -> list[str]:
    """Every route of the server that can serve a planted file, relative to the server's root."""
    routes = []
    for kind in ("autograded", "submitted"):
        folder = f"{kind}/{STUDENT}/{ASSIGNMENT}"
        routes += [f"files/{folder}/figure.{suffix}" for suffix in ("html", "svg", "js", "png")]
        routes += [f"view/{folder}/figure.html", f"view/{folder}/figure.svg"]
        routes += [f"nbconvert/html/{folder}/{ASSIGNMENT}.ipynb", f"files/{folder}/{ASSIGNMENT}.ipynb"]
    routes += [f"formgrader/submissions/{submission}/figure.{suffix}" for suffix in ("html", "svg", "js", "png")]
    return routes


def _directives(policy: str) -> dict[str, list[str]]:
    return {part.split()[0]: part.split()[1:] for part in policy.split(";") if part.split()}


@pytest.mark.skipif(
    not CHROMIUM.exists() and not IN_CI,
    reason=f"{CHROMIUM} is missing (`make chromium` installs it); in CI this test fails instead",
)
def test_no_planted_file_runs_script_on_any_route_that_serves_it(tmp_path, monkeypatch):
    try:
        from playwright.sync_api import Error as PlaywrightError
        from playwright.sync_api import sync_playwright
    except ImportError as error:
        pytest.fail(f"Playwright for Python is not installed (it is in requirements.txt): {error}")
    out, submission = _served_folder(tmp_path, monkeypatch)
    home = tmp_path / "home"
    home.mkdir()
    server = Formgrader(out, home, tmp_path / "formgrader.log")
    ran: list[str] = []
    try:
        url = server.url()
        base = url.split("/formgrader", 1)[0]
        token = url.split("token=", 1)[1]
        with tempfile.TemporaryDirectory(prefix="formgrader-files-") as profile, sync_playwright() as playwright:
            context = playwright.chromium.launch_persistent_context(
                profile, executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True, accept_downloads=True,
                service_workers="block",
            )  # fmt: skip
            context.route("**/*", lambda route: route.continue_() if route.request.url.startswith(base + "/")
                          else route.abort())  # fmt: skip
            page = context.new_page()
            page.on("console", lambda message: "planted script ran" in message.text and ran.append(message.text))
            page.goto(url)  # logs in: the token sets the login cookie of the origin
            page.wait_for_url("**/formgrader/manage_assignments")

            for route in _routes(submission):
                address = f"{base}/{route}"
                if route.startswith("nbconvert/") or "submitted/" in route:
                    # an export would render in the server, and submitted/ holds the students' raw files: both
                    # refused outright (autograder.formgrader.refusals, autograder.formgrader.contents)
                    response = context.request.get(address, headers={"Authorization": f"token {token}"})
                    assert response.status == 403 and "Not served by the formgrader" in response.text(), route
                elif not route.startswith("view/"):  # /view/ is the server's own page; its frame is /files/
                    response = context.request.get(address, headers={"Authorization": f"token {token}"})
                    headers = response.headers
                    assert response.status == 200, (route, response.status)
                    policy = _directives(headers.get("content-security-policy", ""))
                    assert policy.get("sandbox") == [], (route, headers)  # sandbox, and no allow-scripts
                    image = route.endswith(".png")
                    assert ("attachment" in headers.get("content-disposition", "")) != image, (route, headers)
                    expected_type = "image/png" if image else "application/octet-stream"
                    assert headers.get("content-type") == expected_type, (route, headers)
                    assert headers.get("x-content-type-options") == "nosniff", (route, headers)
                try:
                    page.goto(address)
                    page.wait_for_load_state("networkidle")
                except PlaywrightError as error:
                    assert "Download is starting" in str(error) or "ERR_ABORTED" in str(error), (route, error)
                page.wait_for_timeout(300)
                shown = page.evaluate("() => document.title")
                assert "ran" not in shown, (route, shown)

            # the same refusal for paths that reach submitted/ (or the gradebook) only once decoded or normalized,
            # sent as written with the browser's login and _xsrf cookies
            where = urllib.parse.urlsplit(base)
            host, port, prefix = where.hostname, where.port, where.path  # prefix: the run's random path
            cookies = {cookie["name"]: cookie["value"] for cookie in context.cookies()}
            login = {"Authorization": f"token {token}", "X-XSRFToken": cookies.get("_xsrf", ""),
                     "Cookie": "; ".join(f"{name}={value}" for name, value in cookies.items())}
            for route in (f"files/submitted%2F{STUDENT}%2F{ASSIGNMENT}%2Ffigure.html",
                          f"api/contents/autograded/..%2Fsubmitted/{STUDENT}/{ASSIGNMENT}/{ASSIGNMENT}.ipynb",
                          f"api/contents/autograded/../submitted/{STUDENT}/{ASSIGNMENT}/{ASSIGNMENT}.ipynb",
                          "api/contents/autograded/..%2Fsubmitted",
                          f"formgrader/submissions/{submission}/..%2F..%2F..%2Fgradebook.db",
                          f"formgrader/submissions/{submission}/../../../gradebook.db",
                          (f"formgrader/submissions/{submission}/%2e%2e/%2e%2e/%2e%2e/submitted/{STUDENT}/{ASSIGNMENT}/"
                           "figure.png"),
                          f"files/autograded/..%2Fsubmitted/{STUDENT}/{ASSIGNMENT}/figure.html",
                          f"files/autograded/../submitted/{STUDENT}/{ASSIGNMENT}/figure.html",
                          f"files/source/%2E%2E/submitted/{STUDENT}/{ASSIGNMENT}/{ASSIGNMENT}.ipynb"):
                connection = http.client.HTTPConnection(host, int(port), timeout=30)
                connection.request("GET", f"{prefix}/{route}", headers=login)
                answer = connection.getresponse()
                body = answer.read()
                # nbgrader's pages answer with its own error page, the server's with the refusal's reason
                reason = route.startswith("formgrader/") or b"Not served by the formgrader" in body
                assert answer.status == 403 and reason and b"SQLite format" not in body, (route, answer.status)
                connection.close()
            connection = http.client.HTTPConnection(host, int(port), timeout=30)  # the same login, a file in place
            connection.request("GET", f"{prefix}/formgrader/submissions/{submission}/figure.png", headers=login)
            assert connection.getresponse().status == 200
            connection.close()

            page.goto(f"{base}/formgrader/submissions/{submission}/figure.png")
            assert page.evaluate("() => document.images.length && document.images[0].naturalWidth") == 1
            assert not ran and not list(out.glob("ran-*.txt")), (ran, sorted(out.glob("ran-*.txt")))

            # The payload runs where script may run, in the formgrader's own page, and its write reaches the
            # server with the instructor's login, which refuses it: the formgrader's files are read-only.
            page.goto(f"{base}/formgrader/manage_assignments")
            with page.expect_response(lambda response: "/api/contents/ran-control.txt" in response.url) as written:
                page.evaluate(payload("control").removesuffix(";"))
            assert written.value.status == 403 and "read-only" in written.value.text(), written.value.status
            assert ran == ["planted script ran: control"] and not (out / "ran-control.txt").exists()
            context.close()
    finally:
        server.stop()
