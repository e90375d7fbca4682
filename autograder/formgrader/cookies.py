"""The formgrader reads the first cookie of each name, as its pages do.

Browsers keep cookies per host, not per port: a page of a student's own server on another port of
``127.0.0.1``, opened by a link in a written answer, can set ``_xsrf`` for that host, path ``/``, for a year. The
browser then sends two ``_xsrf`` cookies to the formgrader, its own first (a cookie with a longer path comes
first: the formgrader's is limited to the run's random base path), then the student's. The pages' scripts send
the first back as the request's XSRF token, while tornado keeps the last of each name: every save of a score
or a comment was refused (403), silently, in every later formgrader run in that browser. This Jupyter server
extension keeps, before any handler reads a cookie, only the first cookie of each name in a request's
``Cookie`` header, the one the browser ranks first and the pages read:

    Cookie: _xsrf=<the formgrader's>; _xsrf=<the student's>   ->   Cookie: _xsrf=<the formgrader's>

A student who could set a cookie at the run's own path would still need that random path, which no page of
the formgrader gives to another origin, and the server answers no other account's connection
(:mod:`autograder.formgrader.peers`).
"""

from __future__ import annotations

from tornado.web import OutputTransform


def first_of_each_name(header: str) -> str:
    """A ``Cookie`` header with only the first ``name=value`` pair of each name, in its order."""
    seen: set[str] = set()
    kept = []
    for pair in header.split(";"):
        name = pair.split("=", 1)[0].strip() if "=" in pair else ""
        if name in seen or not pair.strip():
            continue
        seen.add(name)
        kept.append(pair.strip())
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
    serverapp.log.info("autograder: the first cookie of each name is read, as the pages read it")


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    return [{"module": "autograder.formgrader.cookies"}]
