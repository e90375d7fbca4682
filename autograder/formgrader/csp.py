"""The formgrader's Content-Security-Policy: the instructor's browser runs the server's scripts, never a
student's.

A Jupyter server extension (``jpserver_extensions``, enabled by :mod:`autograder.formgrader.server`) that sets one
header on every response of the server: scripts load from the server itself (``'self'``); an inline script
runs only where its text is one of the inline scripts of the pages' own templates (nbgrader's formgrader,
JupyterLab's page, Jupyter server's pages), each allowed by its SHA-256 hash for that response; an inline
event handler (``onclick="toggle_name(true);"``) runs only where it is one written in those templates, by its
hash too (``'unsafe-hashes'`` lets hashes, and only hashes, name handlers). ``'unsafe-inline'`` is never
allowed: whatever a notebook smuggles into a page does not run, not even a copy of a template's script with
other plain values (each template script is allowed once, in its first place, and never inside the notebook
nbconvert shows: :meth:`InlineScripts.hashes`).
``'unsafe-eval'`` is allowed on JupyterLab's own page (``/lab`` and below) only, which cannot start without it: its settings registry compiles JSON schemas
into functions (ajv), and under a policy without eval Chromium refuses that ("EvalError: Evaluating a string as
JavaScript violates the following Content Security Policy directive") and most of its plugins fail to
activate. nbgrader's formgrader pages, where student notebooks are shown, run without it.

A student's file is never a document of the server's origin. jupyter_server puts ``sandbox allow-scripts``
in the policy of the routes that serve a file of the served folder as it is (``/files/``, ``/nbconvert/``),
and nbgrader's formgrader serves the files beside an autograded notebook (``/formgrader/submissions/<id>/
<file>``) with no sandbox at all. Every response of those routes gets this policy with ``sandbox`` added,
without ``allow-scripts``: a page or an SVG opened there runs no script, and its origin is a unique one. A
response that is not a raster image (:data:`INLINE_IMAGE_TYPES`; SVG is a document that can hold script) is
sent as ``application/octet-stream`` with ``Content-Disposition: attachment`` besides (and jupyter_server's
``X-Content-Type-Options: nosniff``), so the browser saves it rather than showing it, and no page of the
server can load it as a script or a style sheet either.

nbgrader's templates fill some inline scripts with the page's names (``var assignment_id = "{{ assignment_id
}}";``). A script matches its template only where each such value is a plain name (letters, digits and
``_ . : / + @ -`` and spaces): no quote, backslash, ``<`` or line break, so the script only assigns a string;
a name that could break out of the string (nbgrader writes it unescaped) gives a script that does not run.
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Iterable
from pathlib import Path

from tornado.web import OutputTransform

PLAIN_VALUE = rb"[A-Za-z0-9_.:/+@ -]*"
# What a route that serves a file of the served folder may show in the browser; anything else is saved.
INLINE_IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
# nbgrader's SubmissionFilesHandler: any path under a submission that is not its page, a navigation or the
# formgrader's own components (tests/test_grader_formgrader_files.py opens it in Chromium).
_SUBMISSION_FILE = re.compile(
    r"/formgrader/submissions/(?!components/)[^/]+/(?!(?:next_incorrect|prev_incorrect|next|prev)/?$).+"
)
_SCRIPT = re.compile(rb"<script(?P<attributes>[^>]*)>(?P<text>.*?)</script", re.DOTALL | re.IGNORECASE)
_JAVASCRIPT_TYPE = re.compile(rb"""\btype\s*=\s*["']?(text|application)/(javascript|ecmascript)["']?""", re.IGNORECASE)
_TEMPLATE_VALUE = re.compile(rb"\{\{.*?\}\}", re.DOTALL)
_HANDLER = re.compile(rb'\son[a-z]+="([^"]*)"')


def _template_folders() -> list[Path]:
    """The folders of the page templates whose inline scripts and handlers are allowed."""
    import jupyter_server
    import jupyterlab
    import nbgrader

    return [
        Path(nbgrader.__file__).parent / "server_extensions" / "formgrader" / "templates",
        Path(jupyterlab.__file__).parent / "static",
        Path(jupyter_server.__file__).parent / "templates",
    ]


def _templates() -> list[bytes]:
    return [
        path.read_bytes()
        for folder in _template_folders()
        for path in sorted(folder.rglob("*"))
        if path.suffix in (".tpl", ".j2", ".html") and path.is_file()
    ]


def _is_inline_javascript(attributes: bytes) -> bool:
    """A ``<script>`` with no ``src`` whose type, if any, is JavaScript (not JSON data, not a module)."""
    if re.search(rb"\ssrc\s*=", attributes, re.IGNORECASE):
        return False
    return b"type" not in attributes.lower() or _JAVASCRIPT_TYPE.search(attributes) is not None


def template_script_patterns(templates: Iterable[bytes]) -> list[re.Pattern[bytes]]:
    """Each inline script of ``templates`` as a pattern of its rendered text: the literal text, each
    ``{{ value }}`` a :data:`PLAIN_VALUE`. Scripts with Jinja statements or comments are left out."""
    patterns = []
    for template in templates:
        for match in _SCRIPT.finditer(template):
            text = match["text"]
            if not _is_inline_javascript(match["attributes"]) or b"{%" in text or b"{#" in text:
                continue
            literal = [re.escape(part) for part in _TEMPLATE_VALUE.split(text)]
            patterns.append(re.compile(PLAIN_VALUE.join(literal), re.DOTALL))
    return patterns


def template_handlers(templates: Iterable[bytes]) -> set[bytes]:
    """The texts of the inline event handlers written in ``templates`` (those without a template value)."""
    return {
        handler
        for template in templates
        for handler in _HANDLER.findall(template)
        if b"{{" not in handler and b"{%" not in handler
    }


def sha256_source(text: bytes) -> str:
    """``text`` as a CSP hash source: ``'sha256-<base64 of its SHA-256>'``."""
    return "'sha256-" + base64.b64encode(hashlib.sha256(text).digest()).decode() + "'"


def content_security_policy(script_hashes: Iterable[str], allow_eval: bool = False) -> str:
    """The header: scripts from the server and the hashed inline ones (and ``eval`` where ``allow_eval``: see
    the module's docstring); styles inline too (nbgrader's pages and JupyterLab set them); images and fonts
    also from ``data:`` and ``blob:`` (plots, JupyterLab's icons); connections (the kernel's websocket
    included) to the server only; no plugin; framed by the server only."""
    evaluation = ["'unsafe-eval'"] if allow_eval else []
    scripts = " ".join(["'self'", "'report-sample'", "'unsafe-hashes'", *evaluation, *sorted(set(script_hashes))])
    return "; ".join(
        [
            "default-src 'self'",
            f"script-src {scripts}",
            "object-src 'none'",
            "base-uri 'self'",
            "form-action 'self'",
            "frame-ancestors 'self'",
            "style-src 'self' 'unsafe-inline'",
            "img-src 'self' data: blob:",
            "font-src 'self' data:",
            "connect-src 'self'",
            "worker-src 'self' blob:",
        ]
    )


class InlineScripts:
    """The inline scripts and handlers the templates allow, and the ones of a page that match them."""

    def __init__(self, templates: Iterable[bytes]) -> None:
        templates = list(templates)
        self.patterns = template_script_patterns(templates)
        self.handler_hashes = [sha256_source(handler) for handler in template_handlers(templates)]

    def hashes(self, page: bytes) -> list[str]:
        """The hash of every inline script of ``page`` that one of the templates wrote, and the handlers'.

        A template writes each of its scripts once in a page, before the content it shows: so each template
        script is allowed in its first match only, and none from the page's first ``<main`` on, where
        nbconvert puts the notebook of the formgrader's view (no template of the server writes ``<main``). A
        copy in the notebook (``var submission_id = "another";`` with plain values, to overwrite the page's
        own, or ``var base_url = ...;`` of another template than the page's) gets no hash."""
        found, used = [], set()
        for match in _SCRIPT.finditer(page.split(b"<main", 1)[0]):
            if not _is_inline_javascript(match["attributes"]):
                continue
            template = next((pattern.pattern for pattern in self.patterns if pattern.fullmatch(match["text"])), None)
            if template is not None and template not in used:
                used.add(template)
                found.append(match["text"])
        return [*map(sha256_source, found), *self.handler_hashes]


class ScriptPolicy(OutputTransform):
    """tornado's hook on the first bytes of every response: the Content-Security-Policy, with the hashes of
    the allowed inline scripts of an HTML page (a page sent in several pieces gets those of its first)."""

    inline_scripts: InlineScripts | None = None
    jupyterlab_path = "/lab"  # under the server's base URL, set when the extension loads
    base_url = "/"

    def __init__(self, request) -> None:
        self.path = request.path

    def is_jupyterlab(self) -> bool:
        return self.path == self.jupyterlab_path or self.path.startswith(self.jupyterlab_path + "/")

    def serves_a_file(self, handler_policy: str) -> bool:
        """Whether this response is a file of the served folder: the handler's own policy has a sandbox
        (jupyter_server's ``/files/`` and ``/nbconvert/``), or the path is one of nbgrader's submission files."""
        sandboxed = any(part.split()[:1] == ["sandbox"] for part in handler_policy.split(";"))
        relative = self.path[len(self.base_url) - 1 :] if self.path.startswith(self.base_url) else self.path
        return sandboxed or _SUBMISSION_FILE.fullmatch(relative) is not None

    def transform_first_chunk(self, status_code, headers, chunk, finishing):
        if ScriptPolicy.inline_scripts is None:
            ScriptPolicy.inline_scripts = InlineScripts(_templates())
        if self.serves_a_file(headers.get("Content-Security-Policy", "")):
            headers["Content-Security-Policy"] = content_security_policy([]) + "; sandbox"
            headers["X-Content-Type-Options"] = "nosniff"
            content_type = headers.get("Content-Type", "").split(";")[0].strip().lower()
            if 200 <= status_code < 300 and content_type not in INLINE_IMAGE_TYPES:
                headers["Content-Type"] = "application/octet-stream"
                if not headers.get("Content-Disposition", "").startswith("attachment"):
                    headers["Content-Disposition"] = "attachment"
            return status_code, headers, chunk
        is_html = headers.get("Content-Type", "").startswith("text/html")
        hashes = ScriptPolicy.inline_scripts.hashes(chunk if is_html else b"")
        headers["Content-Security-Policy"] = content_security_policy(hashes, allow_eval=self.is_jupyterlab())
        if is_html:
            # The policy names the hashes of this page's scripts, so it is only right with this very body. A page
            # the browser kept would be revalidated with a 304, whose empty body gives a policy without hashes
            # that the browser then applies to the kept page: its scripts are blocked and the grading page
            # saves nothing. A page that is never stored is never revalidated; it comes back whole, with its
            # own policy.
            headers["Cache-Control"] = "no-store"
        return status_code, headers, chunk


def _load_jupyter_server_extension(serverapp) -> None:
    """Jupyter server's entry point: the policy goes first among the transforms (before compression)."""
    ScriptPolicy.jupyterlab_path = serverapp.base_url.rstrip("/") + "/lab"
    ScriptPolicy.base_url = serverapp.base_url.rstrip("/") + "/"
    serverapp.web_app.transforms.insert(0, ScriptPolicy)
    serverapp.log.info("autograder: every response carries a Content-Security-Policy without inline script")


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    return [{"module": "autograder.formgrader.csp"}]
