"""posenc_ref.lab's imports run one way: no circle, a declared order of layers, nothing outside imports it.

Every module of ``posenc_ref/lab/`` is read with :mod:`ast` (nothing is imported): its imports at the top and
inside functions, ``import x`` and ``from x import y``, absolute and relative. The imports between lab modules
form a graph, which must have no circle and must follow :data:`LAYERS`: a module imports only modules of
earlier layers. The rest of ``posenc_ref`` (attention, plots, widgets, bench, fast, ...) is what the lab
builds on, so none of it may import the lab. The checks are tested first on small graphs and sources made
here, so that a check that could never fail would show.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "posenc_ref"
LAB = PACKAGE / "lab"

LAYERS: tuple[tuple[str, ...], ...] = (
    ("__init__", "tasks", "models"),  # __init__ imports nothing: a lab module does not pull in the others
    ("train",),
    ("sweep",),
    ("settings",),
    ("results",),
    ("length_generalization",),
    ("extension", "fit_tuning", "recipe_search", "recall_collisions"),
    ("recipe_study",),  # runs the study under the search's choices
    ("attention_maps", "evidence"),
    ("comparisons",),
    ("cli",),
    ("__main__",),
)
"""The lab's modules in the order data flows through them: tasks and models -> train -> the studies (sweep,
settings, results, length generalization, context extension, the searches for a budget) -> what reads their trained models and scores
(attention maps, evidence) -> the reading of a study (comparisons) -> the command line. A module may import
modules of earlier layers only."""


def package_of(path: Path) -> str:
    """The package that relative imports in the file ``path`` start from: ``posenc_ref.lab`` for
    ``posenc_ref/lab/cli.py`` and for ``posenc_ref/lab/__init__.py`` alike."""
    return ".".join(path.parent.relative_to(PACKAGE.parent).parts)


def imported_names(source: str, package: str) -> set[str]:
    """The absolute name of everything that ``source`` imports, anywhere in it (inside functions too):
    ``x.y`` for ``import x.y``, ``m.a`` for ``from m import a`` (``a`` a module of package ``m`` or a name
    defined in module ``m``), relative imports resolved from ``package``."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = parts[: len(parts) - (node.level - 1)]
                origin = ".".join([*base, *([node.module] if node.module else [])])
            else:
                origin = node.module or ""
            found.update(f"{origin}.{alias.name}" for alias in node.names)
    return found


def is_lab(name: str) -> bool:
    return name == "posenc_ref.lab" or name.startswith("posenc_ref.lab.")


def lab_modules_imported(source: str, package: str, lab_modules: set[str]) -> set[str]:
    """The modules of ``lab_modules`` (their names inside ``posenc_ref.lab``, ``__init__`` for the package
    itself) that ``source`` imports: the longest module each imported name lies in. ``from posenc_ref.lab
    import sweep`` imports ``sweep``; ``from posenc_ref.lab.settings import Run`` imports ``settings``; a name
    of the package itself (``from posenc_ref.lab import NAME``, ``import posenc_ref.lab``), ``__init__``."""
    found = set()
    for name in filter(is_lab, imported_names(source, package)):
        inside = name.removeprefix("posenc_ref.lab").lstrip(".")
        while inside and inside not in lab_modules:
            inside = inside.rpartition(".")[0]
        found.add(inside or "__init__")
    return found


def lab_graph() -> dict[str, set[str]]:
    """{lab module: the lab modules it imports}, read from the files of ``posenc_ref/lab/``."""
    paths = {}
    for path in sorted(LAB.rglob("*.py")):
        parts = path.relative_to(LAB).with_suffix("").parts
        paths[".".join(parts[:-1] if parts[-1] == "__init__" and len(parts) > 1 else parts)] = path
    return {name: lab_modules_imported(path.read_text(), package_of(path), set(paths)) - {name}
            for name, path in paths.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A circle of ``graph`` as a path that ends where it starts (``[a, b, a]``), or None if there is none."""
    state: dict[str, str] = {}  # "open" while on the current path, "done" once every path from it is known
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = "open"
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                cycle = visit(nxt)
                if cycle:
                    return cycle
        path.pop()
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


def layer_violations(graph: dict[str, set[str]], layers) -> list[str]:
    """Every import of ``graph`` from a module to one of the same or a later layer, as a sentence."""
    layer = {name: index for index, names in enumerate(layers) for name in names}
    return [f"{module} (layer {layer[module]}) imports {imported} (layer {layer[imported]})"
            for module in sorted(graph) for imported in sorted(graph[module])
            if layer[imported] >= layer[module]]


# The checks, on graphs and sources made here.

def test_the_cycle_finder_finds_a_circle_and_only_a_circle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"a"}}) == ["a", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set(), "d": {"a", "c"}}) is None  # a diamond
    assert find_cycle({}) is None


def test_the_layer_check_names_an_import_that_goes_back():
    layers = (("tasks",), ("train",), ("cli",))
    assert layer_violations({"tasks": set(), "train": {"tasks"}, "cli": {"train", "tasks"}}, layers) == []
    assert layer_violations({"tasks": {"cli"}, "train": {"train"}, "cli": set()}, layers) == [
        "tasks (layer 0) imports cli (layer 2)", "train (layer 1) imports train (layer 1)"]


def test_the_reader_sees_every_kind_of_import_of_a_lab_module():
    source = '''
import torch
import posenc_ref.lab.models
from posenc_ref import plots
from posenc_ref.lab import sweep, train as training
from posenc_ref.lab.settings import Run
from . import evidence
from .results import read_results

def later():
    from posenc_ref.lab.extension import run_context_extension  # inside a function: read too
'''
    lab = {"__init__", "models", "sweep", "train", "settings", "evidence", "results", "extension", "cli"}
    assert lab_modules_imported(source, "posenc_ref.lab", lab) == {
        "models", "sweep", "train", "settings", "evidence", "results", "extension"}
    assert lab_modules_imported("import posenc_ref.lab\n", "posenc_ref.lab", lab) == {"__init__"}
    assert lab_modules_imported("from posenc_ref.lab import NAME\n", "posenc_ref.lab", lab) == {"__init__"}
    # From outside the lab: every way in is seen.
    for outside in ("from posenc_ref import lab\n", "from . import lab\n", "from .lab.tasks import TASKS\n",
                    "import posenc_ref.lab.train\n", "def f():\n    from posenc_ref.lab import evidence\n"):
        assert any(map(is_lab, imported_names(outside, "posenc_ref"))), outside
    assert not any(map(is_lab, imported_names("from posenc_ref import plots\nfrom . import attention\n",
                                              "posenc_ref")))


def test_the_old_circle_of_experiments_and_extension_would_be_caught():
    """Before the lab, experiments.py imported extension inside a function, and extension imported
    experiments at the top: the circle that this test keeps out."""
    lab = {"experiments", "extension"}
    experiments = "def _extension_main():\n    from posenc_ref.lab.extension import run_context_extension\n"
    extension = "from posenc_ref.lab.experiments import load_trained_model\n"
    graph = {"experiments": lab_modules_imported(experiments, "posenc_ref.lab", lab),
             "extension": lab_modules_imported(extension, "posenc_ref.lab", lab)}
    assert find_cycle(graph) == ["experiments", "extension", "experiments"]


# The lab as it is.

def test_every_lab_module_has_one_layer():
    modules = set(lab_graph())
    declared = [name for names in LAYERS for name in names]
    assert len(declared) == len(set(declared)), "a module is declared in two layers"
    assert modules - set(declared) == set(), "a lab module has no layer in LAYERS: give it one"
    assert set(declared) - modules == set(), "LAYERS names a module that posenc_ref/lab/ does not have"


def test_the_graph_is_read_from_the_files():
    graph = lab_graph()
    # A few imports the lab is known to make: a reader that found nothing would pass the checks below.
    assert graph["__main__"] == {"cli"}
    assert {"length_generalization", "settings", "sweep"} <= graph["extension"]
    assert {"models", "tasks"} == graph["train"]


def test_the_lab_imports_form_no_circle():
    cycle = find_cycle(lab_graph())
    assert cycle is None, "posenc_ref.lab's imports form a circle: " + " -> ".join(cycle)


def test_the_lab_imports_follow_the_layers():
    violations = layer_violations(lab_graph(), LAYERS)
    assert not violations, "imports against the order of LAYERS:\n" + "\n".join(violations)


def test_the_package_init_imports_nothing_of_the_lab():
    # So that importing one lab module (the tasks, say) does not import the whole lab with it.
    assert lab_graph()["__init__"] == set()


@pytest.mark.parametrize("path", sorted(path for path in PACKAGE.rglob("*.py") if LAB not in path.parents),
                         ids=lambda path: path.relative_to(PACKAGE).as_posix())
def test_nothing_outside_the_lab_imports_it(path):
    """The lab builds on the rest of posenc_ref (attention, plots, ...), never the other way: before the lab
    existed, none of attention.py, plots.py, widgets.py, bench.py or fast/ imported its modules either."""
    lab = sorted(filter(is_lab, imported_names(path.read_text(), package_of(path))))
    assert not lab, f"posenc_ref/{path.relative_to(PACKAGE).as_posix()} imports {lab}"
