"""The student edition (``python -m autograder publish``): exactly the files of its allowlist, none of which holds
or computes an answer, whose Python imports nothing of the grader's side, and whose ``check`` runs on its own."""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import nbformat
import pytest
from two_sides import (
    every_variant_needle,
    hidden_section_needles,
    hidden_test_needles,
    holding,
    imported_names,
    is_module,
    submission_bug_needles,
    written_answer_needles,
)

from autograder.authoring.publish import publish

REPOSITORY = Path(__file__).resolve().parents[1]
ASSIGNMENTS = ("01_permutation", "02_sinusoidal", "03_learned", "04_relative", "05_rope", "06_comparison")
# Written out here, not taken from autograder.authoring.publish; posenc_ref's Python files are added below.
ALLOWLIST = {
    ".binder/requirements.txt", ".binder/runtime.txt", ".gitignore", "README.md", "pyproject.toml",
    "requirements.txt",
    *(f"notebooks/{assignment}.ipynb" for assignment in ASSIGNMENTS),
    "autograder/__init__.py", "autograder/__main__.py", "autograder/nbgrader_config.py",
    *(f"autograder/student/{name}.py" for name in (
        "__init__", "answers", "check", "kernels", "parameters", "progress", "received", "safe_files", "sanitize",
        "submitted_tables", "terminal")),
}
GRADERS_SIDE = ("autograder.variants", "autograder.verdicts", "autograder.grade", "autograder.pipeline",
                "autograder.sandbox.grading_stage", "autograder.source", "autograder.course", "autograder.gradebook",
                "autograder.sandbox", "autograder.authoring.release", "autograder.authoring.publish", "autograder.records")
FIRST_PARTY = ("autograder", "posenc_ref")


@pytest.fixture(scope="module")
def edition(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("publish") / "edition"
    publish(out)
    return out


def _files(folder: Path) -> set[str]:
    return {path.relative_to(folder).as_posix() for path in folder.rglob("*") if path.is_file()}


def test_the_edition_is_the_allowlist_and_nothing_else(edition):
    package = {path.relative_to(REPOSITORY).as_posix() for path in (REPOSITORY / "posenc_ref").rglob("*.py")
               if "__pycache__" not in path.parts}
    assert len(package) > 20
    assert _files(edition) == ALLOWLIST | package
    assert not any(path.is_symlink() for path in edition.rglob("*"))
    for relative in _files(edition) - {"README.md", "requirements.txt", "pyproject.toml", ".gitignore",
                                       "autograder/__main__.py"}:
        assert (edition / relative).read_bytes() == (REPOSITORY / relative).read_bytes(), relative
    for relative in ("README.md", "requirements.txt", "pyproject.toml", "autograder/__main__.py"):
        assert (edition / relative).read_bytes() != (REPOSITORY / relative).read_bytes(), relative  # its own


# ------------------------------------------------------------------------------------ the answer key


@pytest.fixture(scope="module")
def answer_key() -> dict[str, set[str]]:
    """Every text of the answer key, computed with the grader's side outside the edition, by where it comes from."""
    needles = {f"variant {item}": found for item, found in every_variant_needle().items()}
    needles |= {f"hidden constants {name}": found for name, found in hidden_test_needles().items()}
    needles |= {f"hidden code {name}": found for name, found in hidden_section_needles().items()}
    needles |= {f"solution {name}": found for name, found in written_answer_needles().items()}
    needles["2.6 submissions' bugs"] = submission_bug_needles()
    return {name: found for name, found in needles.items() if found}


def test_the_search_finds_the_answer_key_where_the_instructor_keeps_it(answer_key):
    assert sum(name.startswith("solution ") for name in answer_key) >= 25
    assert sum(name.startswith("hidden code ") for name in answer_key) >= 40
    assert sum(name.startswith("hidden constants ") for name in answer_key) >= 20
    mark_schemes = set().union(*(found for name, found in answer_key.items() if name.startswith("solution ")))
    assert any("1 point: " in needle for needle in mark_schemes)  # the mark schemes' lines are searched for
    kept = [REPOSITORY / "autograder" / "source", REPOSITORY / "autograder" / "variants"]
    written = ("solution ", "hidden code ", "2.6")  # texts of the sources, found each
    missed = [name for name, found in answer_key.items()
              if name.startswith(written) and not any(holding(folder, found) for folder in kept)]
    assert missed == []
    # Values: a few hidden tests compute theirs (a sine, a permutation), so they are looked for per assignment.
    for assignment in ASSIGNMENTS:
        values = set().union(*(found for name, found in answer_key.items()
                               if name.startswith("hidden constants ") and assignment in name))
        assert holding(REPOSITORY / "autograder" / "source" / assignment, values), assignment
    assert holding(REPOSITORY / "autograder" / "variants", answer_key["variant 2.2"])


def test_no_file_of_the_edition_holds_the_answer_key(edition, answer_key):
    found = {name: hits for name, needles in answer_key.items() if (hits := holding(edition, needles))}
    assert found == {}


# ------------------------------------------------------------------------------------ 2.6's submissions

# The words of a bug's description (the arguments of a table built with one thing changed, and the bugs' names).
BUG_WORDS = ("swap", "halves", "exponent", "degrees", "shift", "bug")


def _names_a_bug(name: str) -> bool:
    """Whether the identifier or key ``name`` has a word of :data:`BUG_WORDS` among its parts (``swap``,
    ``half_swap``, ``exponent``; not ``debugger``)."""
    return any(part.rstrip("s") in {word.rstrip("s") for word in BUG_WORDS} for part in name.lower().split("_"))


def _numbers_only(node: ast.AST) -> bool:
    """Whether ``node`` is a literal of numbers only: a number (not a bool), a negated one, a tuple or list of them."""
    if isinstance(node, ast.Constant):
        return type(node.value) in (int, float)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        return _numbers_only(node.operand)
    if isinstance(node, (ast.Tuple, ast.List)):
        return all(_numbers_only(element) for element in node.elts)
    return False


def _answer_maps(source: str, where: str, numbers: set[int]) -> list[str]:
    """Every place of the Python ``source`` that maps submission numbers to anything but numbers: a dict display
    with two or more of ``numbers`` among its keys and a value that is not numbers only (a letter, a flag, a dict
    of flags, a name, a call), a dict whose keys name a bug, a call or function whose
    switches (keyword arguments given a constant, parameters with a default) name a bug, and a comparison of a number with a submission number that chooses a branch."""
    found = []
    for node in ast.walk(ast.parse(source)):
        line = f"{where}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Dict):
            keys = {key.value for key in node.keys if isinstance(key, ast.Constant) and type(key.value) is int}
            if len(keys & numbers) >= 2 and not all(_numbers_only(value) for value in node.values):
                found.append(f"{line}: a dict from submission numbers to something other than numbers")
            words = {key.value for key in node.keys if isinstance(key, ast.Constant) and isinstance(key.value, str)}
            if any(_names_a_bug(key) for key in words):
                found.append(f"{line}: a dict whose keys name a bug ({sorted(words)})")
        elif isinstance(node, ast.Call):
            named = [keyword.arg for keyword in node.keywords if keyword.arg and isinstance(keyword.value, ast.Constant)]
            if any(_names_a_bug(name) for name in named):
                found.append(f"{line}: a call whose arguments name a bug ({named})")
        elif isinstance(node, (ast.FunctionDef, ast.Lambda)):
            positional = [*node.args.posonlyargs, *node.args.args]
            defaulted = [argument.arg for argument in positional[len(positional) - len(node.args.defaults):]]
            defaulted += [argument.arg for argument, default in zip(node.args.kwonlyargs, node.args.kw_defaults)
                          if default is not None]
            if any(_names_a_bug(name) for name in defaulted):
                found.append(f"{line}: a function whose switches name a bug ({defaulted})")
        elif isinstance(node, ast.Compare):
            constants = {part.value for part in [node.left, *node.comparators]
                         if isinstance(part, ast.Constant) and type(part.value) is int}
            if constants & numbers and any(isinstance(op, (ast.Eq, ast.NotEq, ast.In)) for op in node.ops):
                found.append(f"{line}: a comparison with submission number(s) {sorted(constants & numbers)}")
    return found


def _edition_answer_maps(edition: Path) -> list[str]:
    """:func:`_answer_maps` over the edition's Python files under ``autograder/`` and its notebooks' code cells."""
    from autograder.student.parameters import varied_item

    numbers = set(varied_item("02_sinusoidal", "2.6").choices["submission"])
    found = []
    for path in sorted((edition / "autograder").rglob("*.py")):
        found += _answer_maps(path.read_text(encoding="utf-8"), path.relative_to(edition).as_posix(), numbers)
    for path in sorted((edition / "notebooks").glob("*.ipynb")):
        notebook = nbformat.read(path, as_version=4)
        for index, cell in enumerate(notebook.cells):
            if cell.cell_type == "code":
                source = "\n".join(line for line in cell.source.splitlines() if not line.lstrip().startswith(("%", "!")))
                found += _answer_maps(source, f"{path.name} cell {index}", numbers)
    return found


@pytest.fixture(scope="module")
def edition_by_command(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("publish_command") / "edition"
    completed = subprocess.run([sys.executable, "-m", "autograder", "publish", "--out", str(out)],
                               cwd=REPOSITORY, capture_output=True, text=True, timeout=300, check=False)
    assert completed.returncode == 0, completed.stderr
    return out


def test_the_edition_maps_no_submission_to_a_bug(edition_by_command):
    assert (edition_by_command / "autograder" / "student" / "submitted_tables.py").is_file()  # the submissions are there
    assert _edition_answer_maps(edition_by_command) == []


@pytest.mark.parametrize("planted", [
    # The submissions as the edition once shipped them: flags by number, and the closure that builds a table
    ('SUBMITTED = {1: {"exponent": 4.0}, 2: {"shift": 1}, 3: {"swap": True}}\n'
     "def submitted_table(number):\n"
     "    flags = SUBMITTED[number]\n"
     "    def candidate_table(length, d, base=10000.0):\n"
     "        return table_with(length, d, base, **flags)\n"
     "    return candidate_table\n"),
    'BUG_OF = {26: "C", 51: "A", 75: "F"}\n',
    "BUG_OF = {26: ('C', 10000.0), 51: ('A', 2000.0)}\n",
    "def table(number):\n    return pe(number, 8, degrees=True)\n",
    "def which(number):\n    return 'swapped' if number == 51 else 'right'\n",
    "PARTS = {'swap': (51, 87), 'halves': (93, 90)}\n",
])
def test_the_search_for_answer_maps_finds_them(tmp_path, edition_by_command, planted):
    planted_edition = tmp_path / "edition"
    for relative in ("autograder/student/parameters.py", "autograder/student/submitted_tables.py"):
        (planted_edition / relative).parent.mkdir(parents=True, exist_ok=True)
        (planted_edition / relative).write_bytes((edition_by_command / relative).read_bytes())
    (planted_edition / "notebooks").mkdir()
    assert _edition_answer_maps(planted_edition) == []
    (planted_edition / "autograder" / "student" / "submitted_tables.py").write_text(
        (edition_by_command / "autograder" / "student" / "submitted_tables.py").read_text(encoding="utf-8") + "\n" + planted,
        encoding="utf-8")
    assert _edition_answer_maps(planted_edition) != []


# ------------------------------------------------------------------------------------ imports


def _import_problems(edition: Path) -> list[str]:
    """Every import of a Python file of ``edition`` that does not resolve inside it (for ``autograder`` and
    ``posenc_ref``) or to an installed package (for any other), or that names a module of the grader's side."""
    problems = []
    for path in sorted(edition.rglob("*.py")):
        for name in sorted(imported_names(path, edition)):
            where = f"{path.relative_to(edition)} imports {name}"
            if name == "__future__" or name.startswith("__future__."):
                continue
            if any(name == graders or name.startswith(f"{graders}.") for graders in GRADERS_SIDE):
                problems.append(f"{where}, of the grader's side")
            elif name.split(".")[0] in FIRST_PARTY:
                # `from autograder import ASSIGNMENTS` names a value; `from autograder import course` a module
                if is_module(name, REPOSITORY) and not is_module(name, edition):
                    problems.append(f"{where}, not in the edition")
            elif "." not in name and importlib.util.find_spec(name) is None:
                problems.append(f"{where}, which is not installed")
    return problems


def test_every_import_of_the_edition_resolves_in_it_or_to_an_installed_package(edition):
    assert _import_problems(edition) == []


def test_the_import_search_sees_a_graders_module_and_a_missing_one(tmp_path, edition):
    copy = tmp_path / "edition"
    publish(copy)
    (copy / "autograder" / "planted.py").write_text(
        "from autograder.variants import variants_of\nfrom . import course\n\n\ndef f():\n    import no_such_package\n")
    assert _import_problems(copy) == [
        "autograder/planted.py imports autograder.course, of the grader's side",
        "autograder/planted.py imports autograder.variants, of the grader's side",
        "autograder/planted.py imports autograder.variants.variants_of, of the grader's side",
        "autograder/planted.py imports no_such_package, which is not installed",
    ]


def test_the_editions_requirements_are_the_courses_pins(edition):
    def requirements(path: Path) -> set[str]:
        return {line.strip() for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")}

    mine = requirements(edition / "requirements.txt")
    assert {"torch==2.13.0", "nbformat==5.11.1", "jupyterlab==4.6.6"} <= mine
    assert mine <= requirements(REPOSITORY / "requirements.txt")


# ------------------------------------------------------------------------------------ refusals


def test_publish_refuses_a_folder_that_is_not_empty(tmp_path):
    out = tmp_path / "edition"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match=f"--out must be a new or an empty folder, got {out}"):
        publish(out)
    assert [path.name for path in out.iterdir()] == ["notes.txt"]
    (tmp_path / "file").write_text("")
    with pytest.raises(ValueError, match="--out"):
        publish(tmp_path / "file")


@pytest.mark.parametrize("inside", ["autograder/edition", "autograder", "posenc_ref/edition"])
def test_publish_refuses_a_folder_inside_the_packages(inside):
    with pytest.raises(ValueError, match=f"--out must lie outside .*, got {REPOSITORY / inside}"):
        publish(REPOSITORY / inside)
    assert not (REPOSITORY / inside).exists() or inside == "autograder"


def test_the_command_refuses_a_folder_that_is_not_empty(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    completed = subprocess.run([sys.executable, "-m", "autograder", "publish", "--out", str(tmp_path)],
                               cwd=REPOSITORY, capture_output=True, text=True, timeout=120, check=False)
    assert completed.returncode == 2
    assert f"--out must be a new or an empty folder, got {tmp_path}" in completed.stderr


# ------------------------------------------------------------------------------------ check, on its own

PROBE_CELL = """import json, sys
import autograder.student.progress, posenc_ref
finders = [getattr(finder, "__module__", "") or getattr(finder, "__name__", "") for finder in sys.meta_path]
with open("where.json", "w") as file:
    json.dump({"autograder": autograder.student.progress.__file__, "posenc_ref": posenc_ref.__file__, "finders": finders}, file)
"""
PROBE = """import autograder, json, sys
finders = [getattr(finder, "__module__", "") or getattr(finder, "__name__", "") for finder in sys.meta_path]
print(json.dumps({"autograder": autograder.__file__, "path": sys.path, "finders": finders}))
"""


def _isolated_python(folder: Path) -> Path:
    """A new virtual environment that sees this one's installed packages but none of its editable installs: a
    path file names this environment's site-packages, whose own path files (the editable finder of the course's
    checkout) are then not run."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True, timeout=120)
    python = folder / "bin" / "python"
    site_packages = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                   capture_output=True, text=True, check=True).stdout.strip()
    Path(site_packages, "course_packages.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python


@pytest.mark.slow
def test_check_runs_in_the_edition_alone_and_finds_nothing_answered(tmp_path):
    edition = tmp_path / "edition"
    publish(edition)
    notebook_path = edition / "notebooks" / "01_permutation.ipynb"
    notebook = nbformat.read(notebook_path, as_version=4)
    tests = sum(bool(cell.metadata.get("nbgrader", {}).get("grade")) and cell.cell_type == "code"
                for cell in notebook.cells)
    notebook.cells.append(nbformat.v4.new_code_cell(PROBE_CELL))
    nbformat.write(notebook, notebook_path)

    python = _isolated_python(tmp_path / "venv")
    environment = {name: value for name, value in os.environ.items() if not name.startswith("PYTHON")}
    environment |= {"PYTHONPATH": str(edition), "PATH": f"{python.parent}{os.pathsep}{os.environ.get('PATH', '')}"}

    def run(*arguments: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(python), *arguments], cwd=edition, env=environment, capture_output=True,
                              text=True, timeout=600, check=False)

    probe = run("-c", PROBE)
    assert probe.returncode == 0, probe.stderr
    seen = json.loads(probe.stdout)
    assert Path(seen["autograder"]).is_relative_to(edition)
    assert not any(Path(entry).resolve() == REPOSITORY.resolve() for entry in seen["path"] if entry)
    assert not any("editable" in finder for finder in seen["finders"]), seen["finders"]
    assert importlib.util.find_spec("autograder.variants") is not None  # what the isolation hides, here
    hidden = run("-c", "import autograder.variants")
    assert hidden.returncode == 1 and "ModuleNotFoundError" in hidden.stderr, hidden.stderr

    completed = run("-m", "autograder", "check", "notebooks/01_permutation.ipynb")
    output = completed.stdout + completed.stderr
    assert completed.returncode == 1, output  # as check exits for a notebook with no answer yet
    lines = [line for line in completed.stdout.splitlines() if line.strip()]
    assert len(lines) == tests + 1 and all(line.lstrip().startswith("NOT ANSWERED") for line in lines[:-1]), output
    assert lines[-1].startswith(f"0 of {tests} visible tests pass ({tests} not answered yet)"), output
    kernel = json.loads((edition / "notebooks" / "where.json").read_text())  # what the notebook's kernel imported
    assert Path(kernel["autograder"]).is_relative_to(edition) and Path(kernel["posenc_ref"]).is_relative_to(edition)
    assert not any("editable" in finder for finder in kernel["finders"]), kernel["finders"]

    usage = run("-m", "autograder", "grade", "x", "--out", "y")  # the edition offers check only
    assert usage.returncode == 2 and "invalid choice: 'grade'" in usage.stderr, usage.stderr


@pytest.mark.slow
def test_the_guides_recipes_create_and_update_the_editions_repository(tmp_path):
    """The two recipes of the instructors' guide ("The student edition"), run as written from a folder whose parent
    is ``tmp_path`` (their ``../posenc-notebooks``), less the lines that reach the network (``git remote add``,
    ``git push``): the update keeps the repository's history and drops a file the new edition no longer has."""
    import os
    import re
    import subprocess
    import sys

    from planted import ROOT

    guide = (ROOT / "book" / "guide_instructors.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```bash\n(.*?)```", guide, flags=re.DOTALL)
    create = next(block for block in blocks if "git init -b main" in block)
    update = next(block for block in blocks if "posenc-notebooks-new" in block)
    here = tmp_path / "course"
    here.mkdir()
    environment = {**os.environ, "GIT_AUTHOR_NAME": "i", "GIT_AUTHOR_EMAIL": "i@example.org",
                   "GIT_COMMITTER_NAME": "i", "GIT_COMMITTER_EMAIL": "i@example.org"}

    def run(block: str) -> None:
        lines = [line.replace(" && git push", "") for line in block.splitlines()
                 if not line.startswith("git remote add") and "release --check" not in line]
        script = "set -e\n" + "\n".join(line.replace("python -m", f"{sys.executable} -m", 1) for line in lines)
        completed = subprocess.run(["bash", "-c", script], cwd=here, env=environment, capture_output=True,
                                   text=True, timeout=600, check=False)
        assert completed.returncode == 0, completed.stderr

    run(create)
    edition = tmp_path / "posenc-notebooks"
    (edition / "stray.txt").write_text("a file of an older edition\n")
    subprocess.run(["git", "add", "stray.txt"], cwd=edition, check=True)
    subprocess.run(["git", "commit", "-qm", "an older edition"], cwd=edition, env=environment, check=True)
    run(update)
    log = subprocess.run(["git", "log", "--format=%s"], cwd=edition, capture_output=True, text=True, check=True)
    assert log.stdout.splitlines() == ["The course's notebooks, updated", "an older edition", "The course's notebooks"]
    assert not (edition / "stray.txt").exists() and (edition / "notebooks" / "01_permutation.ipynb").is_file()
    status = subprocess.run(["git", "status", "--porcelain"], cwd=edition, capture_output=True, text=True, check=True)
    assert status.stdout == ""
