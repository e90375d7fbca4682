"""The formgrader's server is locked down without a browser (autograder.formgrader.server, autograder.formgrader.csp):
terminals off, the policy extension enabled, and the policy allows exactly the templates' inline scripts.

nbgrader's own Jinja templates are rendered here as its handlers render them, and the hashes are computed here
with hashlib; tests/test_grader_formgrader.py checks the same in Chromium."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

import nbgrader
import pytest
from jinja2 import Environment, FileSystemLoader

from autograder.formgrader.csp import InlineScripts, _templates, content_security_policy
from autograder.formgrader.server import jupyterlab_command, jupyterlab_environment

TEMPLATES = Path(nbgrader.__file__).parent / "server_extensions" / "formgrader" / "templates"


def _hash(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


@pytest.fixture(scope="module")
def inline_scripts() -> InlineScripts:
    return InlineScripts(_templates())


def _render(name: str, **values) -> str:
    return Environment(loader=FileSystemLoader([str(TEMPLATES)])).get_template(name).render(**values)


def test_jupyterlab_runs_without_terminals_and_with_the_peer_cookie_policy_refusal_and_view_extensions(tmp_path):
    command = jupyterlab_command(tmp_path, "127.0.0.1", open_browser=False)
    assert "--ServerApp.terminals_enabled=False" in command
    assert "--LabApp.extension_manager=readonly" in command
    assert not any("port=" in argument.lower() or "token" in argument.lower() for argument in command)
    environment = jupyterlab_environment("a-token", 8765)  # readable by the instructor's account only
    assert environment["JUPYTER_PORT"] == "8765" and environment["JUPYTER_TOKEN"] == "a-token"
    assert "--ServerApp.kernel_manager_class=autograder.formgrader.no_kernels.NoKernels" in command
    extensions = ("{'autograder.formgrader.peers': True, 'autograder.formgrader.cookies': True, "
                  "'autograder.formgrader.csp': True, 'autograder.formgrader.refusals': True, "
                  "'autograder.formgrader.views': True, 'nbgrader.server_extensions.validate_assignment': False, "
                  "'nbgrader.server_extensions.assignment_list': False, 'nbgrader.server_extensions.course_list': "
                  "False}")
    assert f"--ServerApp.jpserver_extensions={extensions}" in command


def test_the_manage_submissions_page_gets_the_hashes_of_its_two_scripts(inline_scripts):
    page = _render("manage_submissions.tpl", base_url="", assignment_id="04_relative", url_prefix=".",
                   mathjax_url="", windows=False)  # fmt: skip
    hashes = inline_scripts.hashes(page.encode())
    assert _hash('\n  var base_url = "";\n  ') in hashes
    assert _hash('\nvar assignment_id = "04_relative";\n') in hashes


def test_a_name_that_could_leave_its_string_gives_a_script_without_hash(inline_scripts):
    name = '"; window.x = 1; "'  # nbgrader writes it unescaped
    page = _render("manage_submissions.tpl", base_url="", assignment_id=name, url_prefix=".",
                   mathjax_url="", windows=False)  # fmt: skip
    assert f'var assignment_id = "{name}";' in page
    assert _hash(f'\nvar assignment_id = "{name}";\n') not in inline_scripts.hashes(page.encode())


def test_a_planted_script_gets_no_hash(inline_scripts):
    page = b"<html><body><script>alert(1)</script><script>\nvar assignment_id = 'x';\n</script></body></html>"
    hashes = inline_scripts.hashes(page)
    assert _hash("alert(1)") not in hashes and _hash("\nvar assignment_id = 'x';\n") not in hashes


def test_a_copy_of_a_template_script_further_down_the_page_gets_no_hash(inline_scripts):
    page = _render("manage_submissions.tpl", base_url="", assignment_id="04_relative", url_prefix=".",
                   mathjax_url="", windows=False)  # fmt: skip
    copy = '<script type="text/javascript">\nvar assignment_id = "05_rope";\n</script>'
    planted = page.replace("</body>", f"<div class='notebook'>{copy}</div></body>")
    assert copy in planted
    hashes = inline_scripts.hashes(planted.encode())
    assert _hash('\nvar assignment_id = "04_relative";\n') in hashes  # the page's own, first
    assert _hash('\nvar assignment_id = "05_rope";\n') not in hashes
    assert _hash('\nvar assignment_id = "05_rope";\n') in inline_scripts.hashes(copy.encode())  # alone, it would match


def test_no_template_script_is_allowed_inside_the_notebook_of_the_grading_view(inline_scripts, tmp_path):
    """Round 16: a script of another template than the page's (``base.tpl``'s ``var base_url = ...;``) brought
    by the notebook was a first match, and ran. Nothing from the page's first ``<main`` on, where nbconvert
    puts the notebook, gets a hash; the page's own scripts, all above it, keep theirs."""
    from nbconvert.exporters import HTMLExporter
    from test_grader_formgrader_views import FORMGRADE, RESOURCES, _notebook

    honest, _ = HTMLExporter(**FORMGRADE).from_filename(str(_notebook(tmp_path / "04_relative.ipynb")),
                                                        resources=dict(RESOURCES))
    copy = '<script>\n  var base_url = "/nowhere";\n  </script>'
    assert _hash('\n  var base_url = "/nowhere";\n  ') in inline_scripts.hashes(copy.encode())  # alone, it matches
    planted = honest.replace('<div class="cell', f'{copy}<div class="cell', 1)
    assert copy in planted and planted.index("<main") < planted.index(copy)
    assert inline_scripts.hashes(planted.encode()) == inline_scripts.hashes(honest.encode())
    assert len(inline_scripts.hashes(honest.encode())) > len(inline_scripts.hashes(b""))  # the page's own scripts


def test_the_grading_pages_name_toggles_are_allowed_by_hash(inline_scripts):
    handlers = inline_scripts.hashes(b"")
    assert {_hash("toggle_name(true);"), _hash("toggle_name(false);"), _hash("toggleAllNames()")} <= set(handlers)


def test_the_policy_forbids_inline_script_and_allows_eval_only_when_asked():
    policy = content_security_policy(["'sha256-abc='"])
    script_src = next(part for part in policy.split("; ") if part.startswith("script-src "))
    assert script_src == "script-src 'self' 'report-sample' 'unsafe-hashes' 'sha256-abc='"
    assert "object-src 'none'" in policy and "frame-ancestors 'self'" in policy
    assert "'unsafe-eval'" in content_security_policy([], allow_eval=True)
    assert "'unsafe-inline'" not in next(
        part for part in content_security_policy([], allow_eval=True).split("; ") if part.startswith("script-src")
    )


def _transformed(path: str, content_type: str, handler_policy: str = "frame-ancestors 'self'"):
    from types import SimpleNamespace

    from tornado.httputil import HTTPHeaders

    from autograder.formgrader.csp import ScriptPolicy

    headers = HTTPHeaders({"Content-Type": content_type, "Content-Security-Policy": handler_policy})
    _, headers, _ = ScriptPolicy(SimpleNamespace(path=path)).transform_first_chunk(200, headers, b"<p>", True)
    return headers


@pytest.mark.parametrize(
    ("path", "content_type", "handler_policy"),
    [
        ("/files/submitted/s/04_relative/figure.html", "text/html", "frame-ancestors 'self'; sandbox allow-scripts"),
        ("/files/submitted/s/04_relative/figure.svg", "image/svg+xml", "frame-ancestors 'self'; sandbox allow-scripts"),
        ("/nbconvert/html/submitted/s/04_relative/04_relative.ipynb", "text/html", "sandbox allow-scripts"),
        ("/formgrader/submissions/3f2a/figure.html", "text/html", "frame-ancestors 'self'"),
        ("/formgrader/submissions/3f2a/sub/figure.js", "application/javascript", "frame-ancestors 'self'"),
    ],
)
def test_a_file_of_the_served_folder_is_sandboxed_without_scripts_and_saved(path, content_type, handler_policy):
    headers = _transformed(path, content_type, handler_policy)
    directives = [part.split() for part in headers["Content-Security-Policy"].split(";")]
    assert ["sandbox"] in directives and not any("allow-scripts" in directive for directive in directives)
    assert headers["Content-Type"] == "application/octet-stream"
    assert headers["Content-Disposition"] == "attachment"
    assert headers["X-Content-Type-Options"] == "nosniff"


def test_a_raster_image_is_sandboxed_and_still_shown():
    headers = _transformed("/files/autograded/s/04_relative/figure.png", "image/png", "sandbox allow-scripts")
    assert headers["Content-Security-Policy"].endswith("; sandbox")
    assert headers["Content-Type"] == "image/png" and "Content-Disposition" not in headers


@pytest.mark.parametrize(
    "path",
    ["/formgrader/submissions/3f2a/", "/formgrader/submissions/3f2a/next", "/formgrader/submissions/components/a.js"],
)
def test_the_formgraders_own_pages_and_scripts_are_not_files_of_the_folder(path):
    headers = _transformed(path, "text/html")
    assert "sandbox" not in headers["Content-Security-Policy"] and "Content-Disposition" not in headers
    assert headers["Content-Type"] == "text/html"


def test_a_page_whose_policy_names_its_scripts_is_never_stored():
    """A stored page would come back as a 304 with an empty body, whose policy has no hashes (the grading page's
    scripts then blocked on the second visit); a file of the folder and a script keep the server's caching."""
    assert _transformed("/formgrader/submissions/3f2a/", "text/html; charset=UTF-8")["Cache-Control"] == "no-store"
    assert "Cache-Control" not in _transformed("/static/notebook/main.js", "application/javascript")
    assert "Cache-Control" not in _transformed("/files/autograded/s/04_relative/figure.png", "image/png",
                                               "sandbox allow-scripts")


def test_every_route_of_nbgraders_formgrader_api_that_grades_writes_feedback_or_collects_is_refused():
    """The routes are read from nbgrader's own handlers: a route whose POST calls one of the refused methods of
    its API (a new one in a later nbgrader included) must be among the refusals, with the same pattern."""
    import inspect

    from nbgrader.server_extensions.formgrader.apihandlers import default_handlers

    from autograder.formgrader.refusals import REFUSED_API_CALLS, ROUTES

    calling = {
        route: method
        for route, handler in default_handlers
        if hasattr(handler, "post")
        for method in REFUSED_API_CALLS
        if f"self.api.{method}(" in inspect.getsource(handler.post)
    }
    assert calling == ROUTES
    assert set(calling.values()) == {"autograde", "generate_feedback", "release_feedback", "collect",
                                     "generate_assignment"}
