"""The kernel's view of the course (autograder.sandbox.kernel_view): a student's kernel imports the student's side
(progress lines, answer checks, the parameter draw, 2.6's tables, posenc_ref) and cannot import, read or find the
grader's side (the expected values of autograder.variants, the hidden tests, the grader itself)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from planted import sandbox_missing
from two_sides import (
    every_variant_needle,
    hidden_test_needles,
    holding,
    imported_names,
    is_module,
    submission_bug_needles,
)

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
STUDENT_MODULES = ("autograder", "autograder.student.progress", "autograder.student.answers", "autograder.student.parameters",
                   "autograder.student.submitted_tables", "posenc_ref")
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
        f"for path in ({MOUNT!r} + '/pwned', {MOUNT!r} + '/autograder/pwned', {MOUNT!r} + '/autograder/student/answers.py'):\n"
        "    try:\n        open(path, 'a').close()\n        wrote.append(path)\n    except OSError:\n        pass\n"
        "print(json.dumps(wrote))\n"
    )
    assert _run_sandboxed(_settings(tmp_path, built_view), code) == []
    assert sorted(path.name for path in (built_view / "autograder").iterdir()) == ["__init__.py", "student"]


# ------------------------------------------------------------------------------------ the view's files


@pytest.fixture(scope="module")
def every_needle() -> dict[str, set[str]]:
    """The expected values and mistakes of every varied item, computed with the grader's side (outside any
    kernel), for the one answer key and two students."""
    return every_variant_needle()


def test_the_search_finds_the_answer_keys_values_where_the_grader_keeps_them(every_needle):
    # The hidden tests hold the answer key's constants: the same search over the view below would find them there.
    for assignment in ASSIGNMENTS:
        found = holding(REPOSITORY / "autograder" / "source" / assignment,
                        set().union(*(every_needle[variant.item] for variant in variants_of(assignment))))
        assert found, assignment
    # autograder/variants/ holds the mistakes' descriptions.
    assert holding(REPOSITORY / "autograder" / "variants", every_needle["2.2"])


def test_no_file_of_the_view_holds_an_expected_value_or_a_mistake(built_view, every_needle):
    assert holding(built_view, set().union(*every_needle.values())) == {}


@pytest.fixture(scope="module")
def hidden_needles() -> dict[str, set[str]]:
    """The constants of every hidden test of every assignment (the fixed items' answers too), read from source/."""
    return hidden_test_needles()


def test_no_file_of_the_view_holds_a_constant_of_a_hidden_test(built_view, hidden_needles):
    assert sum(map(bool, hidden_needles.values())) >= 20  # most hidden tests have constants long enough to search
    for assignment in ASSIGNMENTS:
        mine = set().union(*(needles for name, needles in hidden_needles.items() if name.startswith(assignment)))
        assert holding(REPOSITORY / "autograder" / "source" / assignment, mine), assignment  # found where they are
    assert holding(built_view, set().union(*hidden_needles.values())) == {}


def test_no_file_of_the_view_says_which_bug_a_submission_of_2_6_has(built_view):
    needles = submission_bug_needles()
    assert holding(REPOSITORY / "autograder" / "variants", needles)  # where the grader keeps them
    assert holding(built_view, needles) == {}


def test_the_view_is_the_allowlist_and_nothing_else(built_view):
    copied = sorted(path.relative_to(built_view).as_posix() for path in built_view.rglob("*") if path.is_file())
    assert copied == sorted(view_files())
    # The student's side, as the design names it: the package's paths and names, and the folder student/ whole.
    assert sorted(name for name in copied if name.startswith("autograder/")) == [
        "autograder/__init__.py", *(f"autograder/student/{name}.py" for name in (
            "__init__", "answers", "check", "kernels", "parameters", "progress", "received", "safe_files",
            "sanitize", "submitted_tables", "terminal"))]
    assert {name.split("/")[0] for name in copied} == {"autograder", "posenc_ref"}
    assert not any("__pycache__" in name or name.endswith(".pyc") for name in copied)
    for name in copied:
        assert (built_view / name).read_bytes() == (REPOSITORY / name).read_bytes(), name
        assert not (built_view / name).stat().st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH), name


# ------------------------------------------------------------------------------------ the two sides, statically


def _imported_modules(path: Path) -> set[str]:
    """Every module of the repository that ``path`` imports (:func:`two_sides.imported_names`)."""
    return {name for name in imported_names(path, REPOSITORY) if is_module(name, REPOSITORY)}


STUDENT_FOLDER = REPOSITORY / "autograder" / "student"


def _on_the_students_side(module: str) -> bool:
    return module in ("autograder", "autograder.student") or module.startswith("autograder.student.")


def test_no_module_of_the_students_side_imports_the_graders():
    student_modules = [REPOSITORY / name for name in STUDENT_FILES] + sorted(STUDENT_FOLDER.rglob("*.py"))
    assert len(student_modules) >= 10  # __init__ twice, progress, answers, parameters, check, kernels, ...
    for path in student_modules:
        imported = {name for name in _imported_modules(path) if name.split(".")[0] == "autograder"}
        outside = sorted(name for name in imported if not _on_the_students_side(name))
        assert not outside, (path.name, outside)
    for path in sorted((REPOSITORY / "posenc_ref").rglob("*.py")):
        assert not any(name.split(".")[0] == "autograder" for name in _imported_modules(path)), path


def test_the_search_for_imports_sees_the_graders_modules():
    # A module of the grader's side imports both sides, and both are seen: a student's module that did so would fail.
    imported = _imported_modules(REPOSITORY / "autograder" / "variants" / "__init__.py")
    assert {"autograder.student.parameters", "autograder.variants.registry"} <= imported
    assert "autograder.variants" in _imported_modules(REPOSITORY / "autograder" / "variants" / "sinusoidal.py")
    assert not all(_on_the_students_side(name) for name in imported)


def test_the_students_side_and_the_graders_name_the_same_varied_items():
    from autograder.student.parameters import varied_items
    from autograder.student.submitted_tables import SUBMITTED
    from autograder.variants.sinusoidal import BUGS, SUBMISSIONS

    for assignment in ASSIGNMENTS:
        assert [variant.varied for variant in variants_of(assignment)] == list(varied_items(assignment))
    assert sorted(SUBMISSIONS) == sorted(SUBMITTED)  # each submission has exactly one bug of the list
    assert sorted({letter for letter, _ in SUBMISSIONS.values()}) == sorted(BUGS)


# ------------------------------------------------------------------------------------ the cached default


def test_the_default_view_is_made_in_a_new_folder_of_this_user_only(tmp_path, monkeypatch):
    monkeypatch.setattr(kernel_view.tempfile, "gettempdir", lambda: str(tmp_path))
    squatted = tmp_path / f"autograder-{os.getuid()}"  # the fixed name an earlier version used, taken first
    squatted.mkdir(mode=0o777)
    squatted.chmod(0o777)
    default_kernel_view.cache_clear()
    try:
        view = default_kernel_view()
        assert view.parent.parent == tmp_path and view.parent.name.startswith("autograder-view-")
        assert stat.S_IMODE(view.parent.stat().st_mode) == 0o700 and view.parent.stat().st_uid == os.getuid()
        assert sorted(path.relative_to(view).as_posix() for path in view.rglob("*") if path.is_file()) == sorted(
            view_files())
        assert default_kernel_view() == view  # once per process
        default_kernel_view.cache_clear()
        assert default_kernel_view().parent != view.parent  # a name drawn anew, never one another account knows
        assert list(squatted.iterdir()) == []
    finally:
        default_kernel_view.cache_clear()


def test_the_default_view_is_removed_when_its_process_exits(tmp_path):
    made = subprocess.run(
        [sys.executable, "-c", "from autograder.sandbox.kernel_view import default_kernel_view as v; print(v())"],
        capture_output=True, text=True, timeout=120, check=True, env={**os.environ, "TMPDIR": str(tmp_path)},
    )
    view = Path(made.stdout.strip())
    assert view.parent.parent == tmp_path and view.name == "view"
    assert not view.parent.exists()
