"""The formgrader reads its XSRF cookie as its pages do.

Browsers keep cookies per host, not per port: a page of a student's own server on another port of
``127.0.0.1``, opened by a link in a written answer, can set cookies for that host, path ``/``, for a year. The
pages' scripts (nbgrader's and JupyterLab's) send back as the request's XSRF token the first match of
``\b_xsrf=([^;]*)\b`` in ``document.cookie``, which also matches a cookie named ``-_xsrf``; tornado compared it
with the last cookie named exactly ``_xsrf``. A student who set ``_xsrf`` (round 32), or ``-_xsrf`` and enough
other cookies to push the formgrader's own out (round 33), made every later save of a score or a comment fail
(403), silently, in every later formgrader run in that browser. This Jupyter server extension rewrites each
request's ``Cookie`` header, before any handler reads a cookie, into the first cookie of each name, with
``_xsrf`` read the way the pages read it (the header lists cookies in the order ``document.cookie`` does):

    Cookie: a=1; -_xsrf=<S>; _xsrf=<F>   ->   Cookie: a=1; _xsrf=<S>

So the token the page sends and the cookie the server compares it with are the same, whoever set them. A
student who chose that value would still need the run's random path and the instructor's browser to use it
(Jupyter's API also checks the request's origin), and the server answers no other account's connection
(:mod:`autograder.formgrader.peers`).
"""

from __future__ import annotations

import re

from tornado.web import OutputTransform

# What the pages' scripts match in document.cookie (JavaScript's \b is ASCII's)
PAGE_XSRF = re.compile(r"\b_xsrf=([^;]*)\b", re.ASCII)


def first_of_each_name(header: str) -> str:
    """A ``Cookie`` header with only the first ``name=value`` pair of each name, in its order, and ``_xsrf``
    the value the pages read (:data:`PAGE_XSRF`), or none."""
    seen: set[str] = {"_xsrf"}
    kept = []
    for pair in header.split(";"):
        name = pair.split("=", 1)[0].strip() if "=" in pair else ""
        if name in seen or not pair.strip():
            continue
        seen.add(name)
        kept.append(pair.strip())
    if (page_token := PAGE_XSRF.search(header)) is not None:
        kept.append(f"_xsrf={page_token[1]}")
    return "; ".join(kept)


class FirstCookieOfEachName(OutputTransform):
    """tornado makes each transform from the request before the handler runs: the header is rewritten there."""

    def __init__(self, request) -> None:
        super().__init__(request)
        header = request.headers.get("Cookie")
        if header is not None:
            request.headers["Cookie"] = first_of_each_name(header)


def _load_jupyter_server_extension(serverapp) -> None:
    serverapp.web_app.transforms.insert(0, FirstCookieOfEachName)
    serverapp.log.info("autograder: the first cookie of each name is read, and _xsrf as the pages read it")


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    return [{"module": "autograder.formgrader.cookies"}]
