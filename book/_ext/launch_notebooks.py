"""Point each chapter's launch buttons at the chapter's student notebook, ``notebooks/<chapter>.ipynb``.

sphinx-book-theme builds its Binder, JupyterHub and Colab links from the page's own source file
(``book/02_sinusoidal.md``): Colab cannot open a Markdown file, and Binder opens it as text. What a reader
runs is the chapter's student notebook, which shares the chapter's name (``notebooks/02_sinusoidal.ipynb``).
This extension runs after the theme has made its buttons and gives each the URL of that notebook in the student
edition's repository, ``student_repository`` of ``_config.yml`` (its ``url`` and ``branch``: the instructor's own
``repository`` holds the answer key and is never linked), and the services of ``launch_buttons``:

    Binder      {binderhub_url}/v2/gh/{org}/{repo}/{branch}?urlpath=lab/tree/notebooks/{chapter}.ipynb
    JupyterHub  {jupyterhub_url}/hub/user-redirect/git-pull?repo={repository url}&branch={branch}
                    &urlpath=lab/tree/{repo}/notebooks/{chapter}.ipynb          (nbgitpuller clones into {repo}/)
    Colab       {colab_url}/github/{org}/{repo}/blob/{branch}/notebooks/{chapter}.ipynb

A page without a student notebook (the introduction) gets no launch button.
"""

from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import yaml
from sphinx.application import Sphinx
from sphinx.errors import ExtensionError
from sphinx.util import logging

LOGGER = logging.getLogger(__name__)
NOTEBOOKS = "notebooks"
# The JupyterLab path of a file, as Binder and nbgitpuller take it in `urlpath`.
INTERFACE_PREFIXES = {"jupyterlab": "lab/tree", "classic": "tree"}
# The theme's launch buttons, by the text it gives them, and the setting that turns each on.
SERVICES = {"Binder": "binderhub_url", "JupyterHub": "jupyterhub_url", "Colab": "colab_url"}


def github_repository(url: str) -> tuple[str, str]:
    """``(org, repo)`` of ``https://github.com/{org}/{repo}``; ValueError naming the setting otherwise."""
    prefix = "https://github.com/"
    parts = url.strip().removesuffix("/").removesuffix(".git").removeprefix(prefix).split("/")
    if not url.strip().startswith(prefix) or len(parts) != 2 or not all(parts):
        raise ValueError(
            f"student_repository.url in _config.yml must be a GitHub repository, https://github.com/ORG/REPO "
            f"(Binder and Colab open notebooks from it), got {url!r}"
        )
    return parts[0], parts[1]


def launch_urls(notebook: str, *, repository_url: str, branch: str, launch_buttons: dict[str, Any]) -> dict[str, str]:
    """The URL that opens ``notebook`` (a path from the repository's root) on each service that is set.

    Args:
        notebook: e.g. ``notebooks/02_sinusoidal.ipynb``.
        repository_url: ``https://github.com/{org}/{repo}``.
        branch: the branch the services check out.
        launch_buttons: the ``launch_buttons`` settings: ``binderhub_url``, ``jupyterhub_url``, ``colab_url``
            (an empty or missing one is not offered) and ``notebook_interface`` (``jupyterlab`` or ``classic``).

    Returns:
        The text of the theme's button (``Binder``, ``JupyterHub``, ``Colab``) -> its URL.

    Raises:
        ValueError: naming the setting, for a repository that is not on GitHub, an empty branch or an unknown
            notebook interface.
    """
    org, repo = github_repository(repository_url)
    if not branch:
        raise ValueError(f"student_repository.branch in _config.yml must name a branch, got {branch!r}")
    interface = launch_buttons.get("notebook_interface", "jupyterlab")
    if interface not in INTERFACE_PREFIXES:
        raise ValueError(
            f"launch_buttons.notebook_interface must be one of {sorted(INTERFACE_PREFIXES)}, got {interface!r}"
        )
    tree = INTERFACE_PREFIXES[interface]
    binderhub, jupyterhub, colab = (str(launch_buttons.get(key) or "").rstrip("/") for key in SERVICES.values())
    urls = {}
    if binderhub:
        urls["Binder"] = f"{binderhub}/v2/gh/{org}/{repo}/{branch}?urlpath={tree}/{notebook}"
    if jupyterhub:
        # nbgitpuller clones the repository into a folder named after it, in the user's home.
        query = urlencode({"repo": f"https://github.com/{org}/{repo}", "branch": branch,
                           "urlpath": f"{tree}/{repo}/{notebook}"}, safe="/")
        urls["JupyterHub"] = f"{jupyterhub}/hub/user-redirect/git-pull?{query}"
    if colab:
        urls["Colab"] = f"{colab}/github/{org}/{repo}/blob/{branch}/{notebook}"
    return urls


def student_repository(book_root: Path) -> tuple[str, str]:
    """``(url, branch)`` of ``student_repository`` in ``book_root/_config.yml`` (empty strings where unset: the
    checks of :func:`launch_urls` name the setting). Jupyter Book passes its own settings to Sphinx, not this one."""
    config = yaml.safe_load((book_root / "_config.yml").read_text(encoding="utf-8")) or {}
    repository = config.get("student_repository") or {}
    return str(repository.get("url") or ""), str(repository.get("branch") or "")


def student_notebook(repository_root: Path, pagename: str) -> str | None:
    """``notebooks/<page name>.ipynb`` when the repository holds it, else None."""
    path = f"{NOTEBOOKS}/{Path(pagename).name}.ipynb"
    return path if (repository_root / path).is_file() else None


def _point_buttons_at_the_notebook(app: Sphinx, pagename: str, templatename: str, context: dict[str, Any],
                                   doctree: Any) -> None:
    buttons = context.get("header_buttons", [])
    group = next((button for button in buttons if button.get("label") == "launch-buttons"), None)
    if group is None:
        return
    notebook = student_notebook(Path(app.srcdir), pagename)
    if notebook is None:
        buttons.remove(group)
        return
    repository_url, branch = student_repository(Path(app.srcdir))
    try:
        urls = launch_urls(notebook, repository_url=repository_url, branch=branch,
                           launch_buttons=app.config.html_theme_options.get("launch_buttons", {}))
    except ValueError as error:
        raise ExtensionError(f"launch_notebooks: {error}") from error
    for button in group["buttons"]:
        if button.get("text") in urls:
            button["url"] = urls[button["text"]]
        else:
            LOGGER.warning(f"launch_notebooks: no notebook URL for the theme's {button.get('text')!r} launch "
                           f"button; only {sorted(SERVICES)} open {notebook}", location=pagename)


def setup(app: Sphinx) -> dict[str, Any]:
    # sphinx-book-theme adds its launch buttons at priority 501; this runs after it.
    app.connect("html-page-context", _point_buttons_at_the_notebook, priority=510)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
