"""The kernel's view of the course (autograder.sandbox.kernel_view): a student's kernel imports the student's side
(progress lines, answer checks, the parameter draw, 2.6's tables, posenc_ref) and cannot import, read or find the
grader's side (the expected values of autograder.variants, the hidden tests, the grader itself)."""

from __future__ import annotations

import ast
import json
import os
import stat
import subprocess
from pathlib import Path

import pytest
from planted import sandbox_missing

from autograder.sandbox import kernel_view
from autograder.sandbox.kernel_view import (
    MOUNT,
    STUDENT_FILES,
    default_kernel_view,
    kernel_packages,
    view_files,
)
from autograder.sandbox.launcher import Limits, Settings, bwrap_argv, kernel_environment, sandboxed_python
from autograder.variants import variants_of

REPOSITORY = Path(__file__).resolve().parents[1]
ASSIGNMENTS = ("01_permutation", "02_sinusoidal", "03_learned", "04_relative", "05_rope", "06_comparison")
NO_BWRAP = sandbox_missing()
needs_bwrap = pytest.mark.skipif(NO_BWRAP is not None, reason=f"bubblewrap cannot run here: {NO_BWRAP}")

# What the notebooks import, written out here (not taken from kernel_view), and what they must not.
STUDENT_MODULES = ("autograder", "autograder.progress", "autograder.answers", "autograder.parameters",
                   "autograder.submitted_tables", "posenc_ref")
GRADER_MODULES = ("autograder.variants", "autograder.variants.sinusoidal", "autograder.variants.registry",
                  "autograder.grade", "autograder.verdicts.verdict", "autograder.pipeline", "autograder.course",
                  "autograder.sandbox.launcher", "autograder.source")

IMPORTS_PROBE = """
import importlib, json, os, sys
outcomes = {}
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
        outcomes[name] = "imported"
    except Exception as error:
        outcomes[name] = type(error).__name__
finders = [getattr(finder, "__module__", "") or getattr(finder, "__name__", "") for finder in sys.meta_path]
print(json.dumps({"outcomes": outcomes, "path": sys.path, "finders": finders,
                  "autograder": os.path.dirname(sys.modules["autograder"].__file__)}))
"""

FILES_PROBE = """
import json, os, sys
repository = sys.argv[1]
try:
    listed = sorted(os.listdir(repository))
except FileNotFoundError:
    listed = None
found = [path for path in sys.argv[2:] if os.path.lexists(path)]
print(json.dumps({"listed": listed, "found": found}))
"""


def _run_sandboxed(settings: Settings, code: str, *args: str) -> dict:
    completed = subprocess.run(
        bwrap_argv(settings, [sandboxed_python(), "-c", code, *args]),
        capture_output=True, text=True, timeout=120, check=False, env=kernel_environment(settings),
    )
    assert completed.returncode == 0, completed.stderr[-2000:]
    return json.loads(completed.stdout)


@pytest.fixture(scope="module")
def built_view(tmp_path_factory) -> Path:
    return kernel_packages(tmp_path_factory.mktemp("kernel") / "view")


def _settings(tmp_path: Path, view: Path | None) -> Settings:
    runtime = tmp_path / "runtime"
    runtime.mkdir(exist_ok=True)
    return Settings(scratch=str(tmp_path), runtime=str(runtime), limits=Limits(tmp_mb=16),
                    kernel_view="" if view is None else str(view))


# ------------------------------------------------------------------------------------ in the sandbox


@needs_bwrap
@pytest.mark.parametrize("given", ["built for the batch", "cached default"])
def test_the_kernel_imports_the_students_side_and_not_the_graders(tmp_path, built_view, given):
    settings = _settings(tmp_path, built_view if given == "built for the batch" else None)
    seen = _run_sandboxed(settings, IMPORTS_PROBE, *STUDENT_MODULES, *GRADER_MODULES)
    assert {name: seen["outcomes"][name] for name in STUDENT_MODULES} == dict.fromkeys(STUDENT_MODULES, "imported")
    assert {name: seen["outcomes"][name] for name in GRADER_MODULES} == dict.fromkeys(
        GRADER_MODULES, "ModuleNotFoundError")
    assert seen["autograder"] == f"{MOUNT}/autograder"  # the view's copy, not a checkout's
    venv = Path(sandboxed_python()).parents[1]  # a checkout's own .venv is bound; nothing else of the checkout
    outside_venv = [entry for entry in seen["path"] if not Path(entry).is_relative_to(venv)]
    assert not any(entry == str(REPOSITORY) or entry.startswith(f"{REPOSITORY}/") for entry in outside_venv)
    # No editable install's finder: it would look for the grader's modules in a checkout.
    assert not any("editable" in finder for finder in seen["finders"]), seen["finders"]


@needs_bwrap
def test_the_repository_is_not_in_the_kernels_file_system(tmp_path, built_view):
    venv = Path(sandboxed_python()).parents[1]  # the virtual environment's real folder, which the kernel runs
    targets = [str(REPOSITORY / name) for name in ("autograder", "posenc_ref", "tests", ".git", "notebooks")]
    targets += [str(REPOSITORY / "autograder" / "variants" / "sinusoidal.py")]
    seen = _run_sandboxed(_settings(tmp_path, built_view), FILES_PROBE, str(REPOSITORY), *targets)
    assert seen["found"] == []
    if venv.is_relative_to(REPOSITORY):  # a checkout's own .venv is bound, and its folder holds nothing else
        assert seen["listed"] == [venv.relative_to(REPOSITORY).parts[0]]
    else:
        assert seen["listed"] is None


@needs_bwrap
def test_the_kernel_cannot_write_into_its_view(tmp_path, built_view):
    code = (
        "import json, os\nwrote = []\n"
        f"for path in ({MOUNT!r} + '/pwned', {MOUNT!r} + '/autograder/pwned', {MOUNT!r} + '/autograder/answers.py'):\n"
        "    try:\n        open(path, 'a').close()\n        wrote.append(path)\n    except OSError:\n        pass\n"
        "print(json.dumps(wrote))\n"
    )
    assert _run_sandboxed(_settings(tmp_path, built_view), code) == []
    assert sorted(path.name for path in (built_view / "autograder").iterdir()) == sorted(
        Path(name).name for name in STUDENT_FILES)


# ------------------------------------------------------------------------------------ the view's files


def _needles_of(value, found: set[str]) -> None:
    """Texts by which an expected value or a mistake's description would show in a file: long strings as they
    are, floats as Python and the hidden tests write them (repr, 12 significant digits), and lists whole. A
    single word (a choice, such as "sinusoidal") and a short list ([0, 0]) say nothing of an answer."""
    if type(value) is str:
        if len(value) >= 8 and not value.isalpha():
            found.add(value)
            found.add(json.dumps(value)[1:-1])  # as a notebook's JSON holds it
    elif type(value) is float:
        for text in (repr(value), f"{value:.12g}"):
            if len(text.lstrip("-0.")) >= 8:  # enough digits to be this value and no other
                found.add(text)
    elif type(value) in (list, tuple):
        if len(value) > 1 and all(type(item) in (int, float) for item in value) and len(repr(list(value))) >= 12:
            found.add(repr(list(value)))
        for item in value:
            _needles_of(item, found)
    elif type(value) is dict:
        for item in value.values():
            _needles_of(item, found)


def _needles(variant, students=("", "ana", "ben")) -> set[str]:
    from autograder.parameters import draw

    found: set[str] = set()
    for student in students:
        parameters = draw(variant, student) if student else variant.answer_key
        _needles_of(variant.constants(parameters), found)
    return found


def _holding(folder: Path, needles: set[str]) -> dict[str, list[str]]:
    """The files under ``folder`` that contain any of ``needles``, with the needles they contain."""
    hits = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            data = path.read_bytes()
            inside = sorted(needle for needle in needles if needle.encode() in data)
            if inside:
                hits[str(path.relative_to(folder))] = inside
    return hits


@pytest.fixture(scope="module")
def every_needle() -> dict[str, set[str]]:
    """The expected values and mistakes of every varied item, computed with the grader's side (outside any
    kernel), for the one answer key and two students."""
    return {variant.item: _needles(variant) for assignment in ASSIGNMENTS for variant in variants_of(assignment)}


def test_the_search_finds_the_answer_keys_values_where_the_grader_keeps_them(every_needle):
    # The hidden tests hold the answer key's constants: the same search over the view below would find them there.
    for assignment in ASSIGNMENTS:
        holding = _holding(REPOSITORY / "autograder" / "source" / assignment,
                           set().union(*(every_needle[variant.item] for variant in variants_of(assignment))))
        assert holding, assignment
    # autograder/variants/ holds the mistakes' descriptions.
    assert _holding(REPOSITORY / "autograder" / "variants", every_needle["2.2"])


def test_no_file_of_the_view_holds_an_expected_value_or_a_mistake(built_view, every_needle):
    assert _holding(built_view, set().union(*every_needle.values())) == {}


@pytest.fixture(scope="module")
def hidden_needles() -> dict[str, set[str]]:
    """The constants of every hidden test of every assignment (the fixed items' answers too), read from source/."""
    from item_grading import hidden_constants, source_cells

    found = {}
    for assignment in ASSIGNMENTS:
        for grade_id, source in source_cells(assignment).items():
            if "### BEGIN HIDDEN TESTS" in source:
                needles: set[str] = set()
                _needles_of(hidden_constants(assignment, grade_id), needles)
                found[f"{assignment}/{grade_id}"] = needles
    return found


def test_no_file_of_the_view_holds_a_constant_of_a_hidden_test(built_view, hidden_needles):
    assert sum(map(bool, hidden_needles.values())) >= 20  # most hidden tests have constants long enough to search
    for assignment in ASSIGNMENTS:
        mine = set().union(*(needles for name, needles in hidden_needles.items() if name.startswith(assignment)))
        assert _holding(REPOSITORY / "autograder" / "source" / assignment, mine), assignment  # found where they are
    assert _holding(built_view, set().union(*hidden_needles.values())) == {}


def test_no_file_of_the_view_says_which_bug_a_submission_of_2_6_has(built_view):
    from autograder.variants.sinusoidal import SUBMISSIONS, WRONG_LETTER

    needles = {f"{number}: {letter!r}" for number, letter in SUBMISSIONS.items()}
    needles |= {f'{number}: "{letter}"' for number, letter in SUBMISSIONS.items()}
    needles |= {why[:40] for why in WRONG_LETTER.values()}
    assert _holding(REPOSITORY / "autograder" / "variants", needles)  # where the grader keeps them
    assert _holding(built_view, needles) == {}


def test_the_view_is_the_allowlist_and_nothing_else(built_view):
    copied = sorted(path.relative_to(built_view).as_posix() for path in built_view.rglob("*") if path.is_file())
    assert copied == sorted(view_files())
    assert sorted(name for name in copied if name.startswith("autograder/")) == [
        "autograder/__init__.py", "autograder/answers.py", "autograder/parameters.py", "autograder/progress.py",
        "autograder/submitted_tables.py",
    ]
    assert {name.split("/")[0] for name in copied} == {"autograder", "posenc_ref"}
    assert not any("__pycache__" in name or name.endswith(".pyc") for name in copied)
    for name in copied:
        assert (built_view / name).read_bytes() == (REPOSITORY / name).read_bytes(), name
        assert not (built_view / name).stat().st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH), name


# ------------------------------------------------------------------------------------ the two sides, statically


def _is_module(name: str) -> bool:
    """Whether ``name`` is a module or package of the repository (``autograder.variants``, not ``autograder.ASSIGNMENTS``)."""
    path = REPOSITORY.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _imported_modules(path: Path) -> set[str]:
    """Every module of the repository that ``path`` imports, at its top or inside a function (``from x import y``
    imports x, and x.y when y is a module; relative imports resolved)."""
    package = path.relative_to(REPOSITORY).with_suffix("").parts[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            parent = list(package[: len(package) - node.level + 1]) if node.level else []
            base = ".".join([*parent, *([node.module] if node.module else [])])
            found |= {base} | {f"{base}.{alias.name}" for alias in node.names}
    return {name for name in found if _is_module(name)}


STUDENT_SIDE = {"autograder", "autograder.progress", "autograder.answers", "autograder.parameters",
                "autograder.submitted_tables"}


def test_no_module_of_the_students_side_imports_the_graders():
    for path in [REPOSITORY / name for name in STUDENT_FILES]:
        imported = {name for name in _imported_modules(path) if name.split(".")[0] == "autograder"}
        assert imported <= STUDENT_SIDE, (path.name, sorted(imported - STUDENT_SIDE))
    for path in sorted((REPOSITORY / "posenc_ref").rglob("*.py")):
        assert not any(name.split(".")[0] == "autograder" for name in _imported_modules(path)), path


def test_the_search_for_imports_sees_the_graders_modules():
    # A module of the grader's side imports both sides, and both are seen: a student's module that did so would fail.
    imported = _imported_modules(REPOSITORY / "autograder" / "variants" / "sinusoidal.py")
    assert {"autograder.submitted_tables", "autograder.variants"} <= imported
    assert "autograder.variants.registry" in _imported_modules(REPOSITORY / "autograder" / "variants" / "__init__.py")
    assert not imported <= STUDENT_SIDE


def test_the_students_side_and_the_graders_name_the_same_varied_items():
    from autograder.parameters import varied_items
    from autograder.submitted_tables import SUBMITTED
    from autograder.variants.sinusoidal import BUGS, SUBMISSIONS

    for assignment in ASSIGNMENTS:
        assert [variant.varied for variant in variants_of(assignment)] == list(varied_items(assignment))
    assert sorted(SUBMISSIONS) == sorted(SUBMITTED)  # each submission has exactly one bug of the list
    assert sorted(SUBMISSIONS.values()) == sorted(BUGS)


# ------------------------------------------------------------------------------------ the cached default


def test_the_cached_view_is_kept_in_a_folder_of_this_user_only(tmp_path, monkeypatch):
    monkeypatch.setattr(kernel_view.tempfile, "gettempdir", lambda: str(tmp_path))
    default_kernel_view.cache_clear()
    try:
        view = default_kernel_view()
        assert view.parent == tmp_path / f"autograder-{os.getuid()}"
        assert stat.S_IMODE(view.parent.stat().st_mode) == 0o700
        assert sorted(path.relative_to(view).as_posix() for path in view.rglob("*") if path.is_file()) == sorted(
            view_files())
        default_kernel_view.cache_clear()
        assert default_kernel_view() == view  # found again by its hash, not built twice
        assert [path.name for path in view.parent.iterdir()] == [view.name]
        default_kernel_view.cache_clear()
        view.parent.chmod(0o777)  # anyone could have put files there
        with pytest.raises(ValueError, match="not a private folder"):
            default_kernel_view()
    finally:
        (tmp_path / f"autograder-{os.getuid()}").chmod(0o700)
        default_kernel_view.cache_clear()
