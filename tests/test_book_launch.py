"""The book's launch buttons open the chapter's student notebook, and each service can run it.

The built pages are read (no browser): every Binder, JupyterHub and Colab link of a chapter must name the
student edition's repository and branch (`student_repository` of _config.yml, never the instructor's `repository`)
and a file that the edition holds, the chapter's `notebooks/<chapter>.ipynb`.
The JupyterHub link, which the book only has when a course sets `jupyterhub_url`, is checked from the function
that builds the links. Binder's environment (.binder/) must agree with requirements.txt and install the package;
the first code cell of each student notebook must install the package in Colab and do nothing anywhere else.
"""

import importlib
import json
import re
import subprocess
import sys
import tomllib
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import nbformat
import pytest
import test_book as book  # tests/ is on sys.path: pytest imports the test modules from their folder
import yaml

from autograder import ASSIGNMENTS, RELEASED_DIRECTORY
from autograder.authoring.publish import edition_files
from autograder.authoring.release import COLAB_CELL_ID

ROOT = book.ROOT
# book/_ext is not a package: the extension is imported from its folder, as Sphinx imports it.
sys.path.insert(0, str(ROOT / "book" / "_ext"))
launch_notebooks = importlib.import_module("launch_notebooks")

CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())
REPOSITORY_URL, BRANCH = CONFIG["student_repository"]["url"], CONFIG["student_repository"]["branch"]
ORG, REPO = REPOSITORY_URL.removeprefix("https://github.com/").split("/")
SERVICES_SET = {text for text, key in launch_notebooks.SERVICES.items() if CONFIG["launch_buttons"].get(key)}


class _LaunchLinks(HTMLParser):
    """The theme's launch links of a page: the text after "Launch on " in their title -> their address."""

    def __init__(self) -> None:
        super().__init__()
        self.links: dict[str, str] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        title = values.get("title") or ""
        if tag == "a" and title.startswith("Launch on "):
            self.links[title.removeprefix("Launch on ")] = values.get("href") or ""


def opened_file(service: str, url: str) -> tuple[str, str, str, str]:
    """``(org, repo, branch, path in the repository)`` that a launch link of ``service`` opens."""
    parts = urlsplit(url)
    query = {key: values[0] for key, values in parse_qs(parts.query).items()}
    if service == "Binder":
        match = re.fullmatch(r"/v2/gh/([^/]+)/([^/]+)/([^/]+)", parts.path)
        assert match and query["urlpath"].startswith("lab/tree/"), url
        return *match.groups(), query["urlpath"].removeprefix("lab/tree/")
    if service == "Colab":
        match = re.fullmatch(r"/github/([^/]+)/([^/]+)/blob/([^/]+)/(.+)", parts.path)
        assert match, url
        return match.groups()
    if service == "JupyterHub":
        assert parts.path.endswith("/hub/user-redirect/git-pull"), url
        org, repo = query["repo"].removeprefix("https://github.com/").split("/")
        # nbgitpuller clones into a folder named after the repository.
        prefix = f"lab/tree/{repo}/"
        assert query["urlpath"].startswith(prefix), url
        return org, repo, query["branch"], query["urlpath"].removeprefix(prefix)
    raise AssertionError(f"a launch link for an unknown service {service!r}: {url}")


def _check_opens_the_chapter_notebook(service: str, url: str, chapter: str) -> list[str]:
    org, repo, branch, path = opened_file(service, url)
    problems = []
    if (org, repo, branch) != (ORG, REPO, BRANCH):
        problems.append(f"{service} opens {org}/{repo}@{branch}, not {ORG}/{REPO}@{BRANCH} of _config.yml")
    if not path.endswith(".ipynb") or path not in edition_files():
        problems.append(f"{service} opens {path}, which is no notebook of the student edition")
    if path != f"notebooks/{chapter}.ipynb":
        problems.append(f"{service} opens {path}, not the chapter's student notebook notebooks/{chapter}.ipynb")
    return problems


def test_every_launch_button_opens_the_chapters_student_notebook() -> None:
    book._require_site()
    problems, chapters_with_buttons = [], set()
    for page in book._site_pages():
        parser = _LaunchLinks()
        parser.feed((book.SITE / page).read_text(encoding="utf-8"))
        chapter = Path(page).stem
        has_notebook = (RELEASED_DIRECTORY / f"{chapter}.ipynb").is_file()
        if not has_notebook:
            if parser.links:
                problems.append(f"{page} has no student notebook but launch buttons: {parser.links}")
            continue
        chapters_with_buttons.add(chapter)
        if set(parser.links) != SERVICES_SET:
            problems.append(f"{page} launches on {sorted(parser.links)}, not on {sorted(SERVICES_SET)}")
        for service, url in parser.links.items():
            problems += [f"{page}: {problem}" for problem in _check_opens_the_chapter_notebook(service, url, chapter)]
    assert chapters_with_buttons == set(ASSIGNMENTS), chapters_with_buttons
    assert not problems, "\n".join(problems)


def test_nothing_students_get_names_the_instructors_repository() -> None:
    """The instructor's repository holds the answer key and may be private: no page of the book and no student
    notebook links to it (the launch buttons, Binder, nbgitpuller and Colab's cell name the student edition)."""
    book._require_site()
    instructors = CONFIG["repository"]["url"].removesuffix("/")
    assert instructors != REPOSITORY_URL
    naming = [page for page in book._site_pages()
              if re.search(re.escape(instructors) + r"(?![\w-])", (book.SITE / page).read_text(encoding="utf-8"))]
    naming += [path.name for path in sorted(RELEASED_DIRECTORY.glob("*.ipynb"))
               if re.search(re.escape(instructors) + r"(?![\w-])", path.read_text(encoding="utf-8"))]
    assert naming == []


def test_the_introduction_has_no_launch_button() -> None:
    book._require_site()
    parser = _LaunchLinks()
    parser.feed((book.SITE / "book" / "intro.html").read_text(encoding="utf-8"))
    assert parser.links == {}


def test_a_jupyterhub_link_pulls_the_repository_and_opens_the_notebook() -> None:
    urls = launch_notebooks.launch_urls(
        "notebooks/04_relative.ipynb", repository_url=REPOSITORY_URL, branch=BRANCH,
        launch_buttons={**CONFIG["launch_buttons"], "jupyterhub_url": "https://hub.example.edu/"},
    )
    assert set(urls) == SERVICES_SET | {"JupyterHub"}
    assert urls["JupyterHub"].startswith("https://hub.example.edu/hub/user-redirect/git-pull?")
    for service, url in urls.items():
        assert _check_opens_the_chapter_notebook(service, url, "04_relative") == [], (service, url)


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"repository_url": "https://gitlab.com/a/b"}, "student_repository.url in _config.yml must be a GitHub repository"),
        ({"repository_url": "https://github.com/only-org"}, "'https://github.com/only-org'"),
        ({"branch": ""}, "student_repository.branch in _config.yml must name a branch, got ''"),
        ({"launch_buttons": {"notebook_interface": "lab"}}, "launch_buttons.notebook_interface must be one of"),
    ],
)
def test_launch_urls_reject_settings_naming_them(settings: dict, message: str) -> None:
    arguments = {"repository_url": REPOSITORY_URL, "branch": BRANCH, "launch_buttons": {}, **settings}
    with pytest.raises(ValueError, match=re.escape(message)):
        launch_notebooks.launch_urls("notebooks/01_permutation.ipynb", **arguments)


# ------------------------------------------------------------------------------------------------- Binder


def _pins(path: Path) -> dict[str, str]:
    """``name -> version`` of the ``name==version`` lines of a requirements file."""
    pins = {}
    for line in path.read_text().splitlines():
        match = re.fullmatch(r"([A-Za-z0-9_.-]+)==(\S+)", line.split("#")[0].strip())
        if match:
            pins[match.group(1).lower()] = match.group(2)
    return pins


def test_binder_installs_cpu_torch_the_package_and_the_versions_of_requirements_txt() -> None:
    binder = ROOT / ".binder" / "requirements.txt"
    lines = [line.split("#")[0].strip() for line in binder.read_text().splitlines()]
    binder_pins, pins = _pins(binder), _pins(ROOT / "requirements.txt")
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in lines
    assert binder_pins["torch"] == pins["torch"] + "+cpu"
    for name in ("numpy", "matplotlib", "ipywidgets", "tqdm"):
        assert binder_pins.get(name) == pins[name], f"{name}: .binder has {binder_pins.get(name)}, not {pins[name]}"
    disagreeing = {name: version for name, version in binder_pins.items()
                   if name != "torch" and pins.get(name) != version}
    assert not disagreeing, f".binder pins that requirements.txt does not: {disagreeing}"
    assert "-e ." in lines, "Binder must install the course's package from the repository"
    python = re.fullmatch(r"python-(3\.\d+)", (ROOT / ".binder" / "runtime.txt").read_text().strip())
    required = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    assert python and required == f">={python.group(1)}", (python, required)


# -------------------------------------------------------------------------------------------------- Colab


def _colab_cells() -> dict[str, nbformat.NotebookNode]:
    cells = {}
    for assignment in ASSIGNMENTS:
        notebook = nbformat.read(RELEASED_DIRECTORY / f"{assignment}.ipynb", as_version=4)
        first_code = next(cell for cell in notebook.cells if cell.cell_type == "code")
        cells[assignment] = first_code
    return cells


def test_the_first_code_cell_of_every_student_notebook_is_the_plain_colab_cell() -> None:
    for assignment, cell in _colab_cells().items():
        assert cell.get("id") == COLAB_CELL_ID, assignment
        assert "nbgrader" not in cell.metadata, f"{assignment}: the Colab cell must not be an nbgrader cell"
        assert f'"posenc-ref @ git+{REPOSITORY_URL}@{BRANCH}"' in cell.source, cell.source
        # The grader notes cells that name these (autograder/student/sanitize.py); this one must not be noted.
        assert not any(name in cell.source for name in ("autograder", "sys.modules", "builtins")), cell.source


def _run_cell(source: str, *, in_colab: bool) -> list[list[str]]:
    """Run ``source`` as Colab (a ``google.colab`` module) or not, and return the commands it ran."""
    script = f"""
import json, subprocess, sys, types
commands = []
subprocess.check_call = lambda command, *args, **kwargs: commands.append(list(command)) or 0
if {in_colab!r}:
    google = types.ModuleType("google")
    google.colab = types.ModuleType("google.colab")
    sys.modules["google"], sys.modules["google.colab"] = google, google.colab
exec(compile({source!r}, "colab_cell", "exec"), {{}})
print(json.dumps(commands))
"""
    completed = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                               check=True)
    return json.loads(completed.stdout)


def test_the_colab_cell_installs_the_package_in_colab_only() -> None:
    source = _colab_cells()["02_sinusoidal"].source
    assert _run_cell(source, in_colab=False) == []
    (command,) = _run_cell(source, in_colab=True)
    assert command[1:] == ["-m", "pip", "install", "--quiet", f"posenc-ref @ git+{REPOSITORY_URL}@{BRANCH}"]
