"""Planted submissions: a class of made-up students whose grades are known in advance.

Every submission starts from the released notebook in ``notebooks/`` (what a student receives) and fills its
answer cells: with the solutions of ``autograder/source`` (the ``full`` student), with nothing (``blank``), or
with the solutions except for the answers listed below, which carry one named mistake each. The ``cheat``
student answers with objects that override comparison and arithmetic; the ``broken`` student sends files
that are not notebooks, an empty folder, a notebook with deleted cells and another kernel, a notebook that
kills its kernel and one that never stops. The expected grades are constants in the tests that use this class.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[2]
ASSIGNMENTS = ("01_permutation", "02_sinusoidal", "03_learned", "04_relative", "05_rope", "06_comparison")
SOLUTION_MARKERS = ("### BEGIN SOLUTION", "### END SOLUTION")


def source(assignment: str) -> nbformat.NotebookNode:
    return nbformat.read(ROOT / "autograder" / "source" / assignment / f"{assignment}.ipynb", as_version=4)


def released(assignment: str) -> nbformat.NotebookNode:
    return nbformat.read(ROOT / "notebooks" / f"{assignment}.ipynb", as_version=4)


def grade_id(cell) -> str | None:
    return cell.metadata.get("nbgrader", {}).get("grade_id")


def solutions(assignment: str) -> dict[str, str]:
    """The source's answer for every answer cell, markers removed; a written answer keeps its model answer."""
    answers = {}
    for cell in source(assignment).cells:
        meta = cell.metadata.get("nbgrader", {})
        if not meta.get("solution"):
            continue
        lines = [line for line in cell.source.splitlines() if line.strip() not in SOLUTION_MARKERS]
        text = "\n".join(lines)
        if cell.cell_type == "markdown":
            text = text.split("**Mark scheme")[0].replace("**Model answer.**", "").strip()
        answers[meta["grade_id"]] = text
    return answers


def filled(assignment: str, answers: dict[str, str]) -> nbformat.NotebookNode:
    """The released notebook with the given answer cells replaced."""
    notebook = copy.deepcopy(released(assignment))
    for cell in notebook.cells:
        if grade_id(cell) in answers:
            cell.source = answers[grade_id(cell)]
    unknown = set(answers) - {grade_id(cell) for cell in notebook.cells}
    assert not unknown, f"no answer cells {unknown} in {assignment}"
    return notebook


def with_mistakes(assignment: str, mistakes: dict[str, str]) -> nbformat.NotebookNode:
    return filled(assignment, {**solutions(assignment), **mistakes})


# ---------------------------------------------------------------------------------------------------------
# The mistakes the issue names: degrees, a doubled exponent, sin and cos swapped, the halves layout
# ---------------------------------------------------------------------------------------------------------

ROPE_VARIANT = """
def rope_rotate(x, positions, base=10000.0):
    d = x.shape[-1]
    inv_freq = base ** (-{exponent} * torch.arange(d // 2, dtype=torch.float64) / d)
    angles = positions.to(torch.float64)[:, None] * inv_freq[None, :]{degrees}
    cos, sin = torch.cos(angles), torch.sin(angles){swap}
    first, second = {pairs}
    out = torch.cat((first * cos - second * sin, first * sin + second * cos), dim=-1)
    {layout}
"""


def rope_variant(
    *, exponent: int = 2, degrees: bool = False, swap: bool = False, halves: bool = False
) -> str:
    interleave = "return torch.stack((out[:, : d // 2], out[:, d // 2 :]), dim=-1).flatten(-2).to(x.dtype)"
    return ROPE_VARIANT.format(
        exponent=exponent,
        degrees="\n    angles = torch.deg2rad(angles)" if degrees else "",
        swap="\n    cos, sin = sin, cos" if swap else "",
        pairs="x[:, : d // 2].double(), x[:, d // 2 :].double()"
        if halves
        else "x[:, 0::2].double(), x[:, 1::2].double()",
        layout="return out.to(x.dtype)" if halves else interleave,
    ).strip("\n")


D6_DEGREES = (
    '["sin(3*pi/180)", "cos(3*pi/180)", "sin(pi/60/10000^(1/3))", "cos(pi/60/10000^(1/3))", '
    '"sin(pi/60*10^(-8/3))", "cos(pi/60*10^(-8/3))"]'
)
D6_DOUBLED = (
    '["sin(3)", "cos(3)", "sin(3/10000^(4/6))", "cos(3/10000^(4/6))", "sin(3/10000^(8/6))", '
    '"cos(3/10000^(8/6))"]'
)
D6_SWAPPED = (
    '["cos(3)", "sin(3)", "cos(3/10000^(1/3))", "sin(3/10000^(1/3))", "cos(3/10000^(2/3))", '
    '"sin(3/10000^(2/3))"]'
)
D6_HALVES = (
    '["sin(3)", "sin(3/10000^(1/3))", "sin(3/10000^(2/3))", "cos(3)", "cos(3/10000^(1/3))", '
    '"cos(3/10000^(2/3))"]'
)

# For the one answer key: p = 7 in 2.1, p = 3 in 2.2.
NAMED_MISTAKES = {
    "degrees": {
        "02_sinusoidal": {
            "pe_d4_at_p_answer": "pe_d4_at_p = [0.12, 0.99, 0.0, 1.0]  # sin(7 degrees), cos(7 degrees), ...",
            "pe_d6_at_p_answer": f"pe_d6_at_p = {D6_DEGREES}",
        },
        "05_rope": {"rope_answer": rope_variant(degrees=True)},
    },
    "doubled": {
        "02_sinusoidal": {
            "pe_d4_at_p_answer": "pe_d4_at_p = [0.66, 0.75, 0.0, 1.0]",
            "pe_d6_at_p_answer": f"pe_d6_at_p = {D6_DOUBLED}",
            "first_turn_answer": "first_full_turn = [7, 63, 629, 6284, 62832, 628319, 6283186, 62831854]",
        },
        "05_rope": {"rope_answer": rope_variant(exponent=4)},
    },
    "swapped": {
        "02_sinusoidal": {
            "pe_d4_at_p_answer": "pe_d4_at_p = [0.75, 0.66, 1.0, 0.07]",
            "pe_d6_at_p_answer": f"pe_d6_at_p = {D6_SWAPPED}",
        },
        "05_rope": {"rope_answer": rope_variant(swap=True)},
    },
    "halves": {
        "02_sinusoidal": {
            "pe_d4_at_p_answer": "pe_d4_at_p = [0.66, 0.07, 0.75, 1.0]",
            "pe_d6_at_p_answer": f"pe_d6_at_p = {D6_HALVES}",
        },
        "05_rope": {"rope_answer": rope_variant(halves=True)},
    },
}

# One typical mistake in each of several items of the other chapters.
OTHER_MISTAKES = {
    "01_permutation": {
        "attention_answer": """
def self_attention(x, w_query, w_key, w_value, prefix=None):
    scores = (x @ w_query) @ (x @ w_key).T  # not divided by sqrt(d_k)
    if prefix is not None:
        positions = torch.arange(x.shape[0])
        visible = (positions[None, :] <= positions[:, None]) | (positions[None, :] < prefix)
        scores = scores.masked_fill(~visible, float("-inf"))
    return torch.softmax(scores, dim=-1) @ (x @ w_value)
""",
        "equivariance_answer": """
def equivariance_error(layer, x, shuffle):
    return (layer(shuffle @ x) - layer(x)).abs().max().item()
""",
        "conclusions_answer": "agreeing_rows = [0, 5]  # the rows whose token stays in place",
        "maps_answer": 'equivariant_maps = {"a", "b", "f"}',
        "blind_answer": "blind_pair = ([1, 2, 3, 2, 1], [1, 2, 3, 4, 5])  # a palindrome and a sequence that is not",
        "quiz_attention_symmetry_answer": 'quiz_attention_symmetry = my_parameters.letter("Quiz 1", "A")',
    },
    "03_learned": {
        "learned_answer": """
class PaddedLearnedPositions(nn.Module):
    def __init__(self, max_len, d):
        super().__init__()
        self.max_len = max_len
        self.position_embeddings = nn.Embedding(max_len, d)
        nn.init.normal_(self.position_embeddings.weight, std=0.02)

    def forward(self, embeddings, attention_mask):
        if embeddings.shape[1] > self.max_len:  # the places of the batch, padding included
            raise ValueError(f"{embeddings.shape[1]} tokens, but max_len is {self.max_len}")
        position_ids = (attention_mask.cumsum(dim=-1) - 1).clamp(min=0)
        return embeddings + self.position_embeddings(position_ids)
""",
        "extend_answer": 'extend_plan = "A"',
        "packed_counts_answer": "packed_counts = [16, 16]  # every document whole",
        "offset_answer": "offset_rows = [0, 99, 412]",
    },
    "04_relative": {
        "bias_answer": """
scores = [0.3 - 0.4, 0.9, 0.6 + 0.8]  # the biases the wrong way round
total = sum(math.exp(score) for score in scores)
relative_bias_weights = [math.exp(score) / total for score in scores]
""",
        "bucket_answer": """
def t5_bucket(relative_position, bidirectional=True, num_buckets=32, max_distance=128):
    n, start = num_buckets, 0
    if bidirectional:
        n //= 2
        start = n if relative_position < 0 else 0  # the halves the wrong way round
        distance = abs(relative_position)
    else:
        distance = max(-relative_position, 0)
    max_exact = n // 2
    if distance < max_exact:
        return start + distance
    scaled = math.log(distance / max_exact) / math.log(max_distance / max_exact) * (n - max_exact)
    return start + min(n - 1, max_exact + int(scaled))
""",
        "alibi_answer": """
def alibi_slopes(num_heads, max_bias=8.0):
    return [2 ** (-max_bias * h / num_heads) for h in range(1, num_heads + 1)]
""",
        "t5_shared_answer": "t5_shared_distances = [127, 163]  # the encoder's layout: 32 buckets a direction",
        "quiz_absolute_relative_answer": 'quiz_absolute_relative = my_parameters.letter("Quiz 3", "C")',
    },
    "05_rope": {
        "relative_answer": """
def relative_gap(rotate, q, k, m, n, shift):
    def score(query_position, key_position):
        rotated_q = rotate(q[None, :], torch.tensor([query_position]))[0]
        rotated_k = rotate(k[None, :], torch.tensor([key_position]))[0]
        return (rotated_q * rotated_k).sum().item()

    return score(m, n) - score(m + shift, n + shift)
""",
        "layouts_answer": """
def half_to_interleaved(x):
    d = x.shape[-1]
    return x[..., torch.cat((torch.arange(0, d, 2), torch.arange(1, d, 2)))]


def interleaved_to_half(x):
    d = x.shape[-1]
    return torch.stack((x[..., : d // 2], x[..., d // 2 :]), dim=-1).flatten(-2)
""",
        "slow_pairs_answer": "ntk_slow_pairs = [27, 5]  # the first: the pairs that do complete a turn",
        "quiz_raised_base_answer": 'quiz_raised_base = my_parameters.letter("Quiz 2", "A")',
    },
    "06_comparison": {
        "choice_b_answer": 'choice_b = "t5"  # never one of the cases of (b)',
        "parameters_answer": """
position_parameters = {"none": 0, "sinusoidal": 0, "learned": 8192, "shaw": 264, "t5": 256,
                       "alibi": 0, "rope": 0}
""",
        "shaw_memory_answer": """
sizes = my_parameters["6.4"]
b, h, n, d, k = (sizes[name] for name in ("batch", "heads", "tokens", "head_dim", "max_distance"))
relative, placed = b * h * n * (2 * k + 1) * 32 / 2**20, b * h * n * n * 32 / 2**20  # bits
shaw_rewrite = [relative, placed, b * h * n * n * d * 32 / 2**20 / (relative + placed)]
""",
        "seeds_answer": """
import itertools
import statistics

from posenc_ref.lab.evidence import paired_t_test

scores = my_parameters["6.3"]["table"]["scores"]
pairs = list(itertools.combinations(scores, 2))
means = {kind: statistics.fmean(values) for kind, values in scores.items()}
# every p-value times the number of comparisons (Bonferroni's correction, where Holm's is asked for)
adjusted_p = [min(1.0, 6 * paired_t_test(scores[a], scores[b]).p_value) for a, b in pairs]
ordered_pairs = [p < 0.05 and abs(means[a] - means[b]) >= 0.05 and max(means[a], means[b]) >= 0.05
                 for p, (a, b) in zip(adjusted_p, pairs)]
""",
    },
}

# Objects that claim to equal anything: none of them may earn a point.
CHEAT_PRELUDE = """
class AlwaysEqual(float):
    def __eq__(self, other): return True
    def __ne__(self, other): return False
    def __lt__(self, other): return True
    def __le__(self, other): return True
    def __gt__(self, other): return False
    def __ge__(self, other): return True
    def __sub__(self, other): return AlwaysEqual(0.0)
    def __rsub__(self, other): return AlwaysEqual(0.0)
    def __abs__(self): return AlwaysEqual(0.0)
    def __float__(self): return 0.0
    __hash__ = float.__hash__


class AnyText(str):
    def __eq__(self, other): return True
    def __ne__(self, other): return False
    def strip(self, *args): return self
    def upper(self): return self
    def lower(self): return self
    __hash__ = str.__hash__


class AnyInt(int):
    def __eq__(self, other): return True
    def __ne__(self, other): return False
    __hash__ = int.__hash__


class AnyList(list):
    def __eq__(self, other): return True
    def __ne__(self, other): return False
"""

CHEATS = {
    "02_sinusoidal": {
        "pe_d4_at_p_answer": CHEAT_PRELUDE + "\npe_d4_at_p = [AlwaysEqual(0.5)] * 4",  # the first item: the classes
        "most_moved_answer": "most_moved = [AlwaysEqual(0.5)] * 2",
        "pe_d6_at_p_answer": 'pe_d6_at_p = [AnyText("sin(1)")] * 6',
        "decode_answer": """
def decode_positions(rows, base=10000.0):
    return AnyList([0] * rows.shape[0])
""",
        "first_turn_answer": "first_full_turn = AnyList([7] * 8)",
        "planted_bug_answer": 'bug_evidence = AnyList([0.0] * 5)\nplanted_bug = AnyText("A")',
        "dot_answer": 'pe_gap_d6_at_k = AnyText("cos(10)")',
        "quiz_formula_answer": 'quiz_formula = AnyText("A")',
        "quiz_frequencies_answer": 'quiz_frequencies = AnyText("A")',
        "quiz_combining_answer": 'quiz_combining = AnyText("B")',
    },
    "04_relative": {
        "bias_answer": CHEAT_PRELUDE + "\nrelative_bias_weights = [AlwaysEqual(0.3)] * 3",
        "bucket_answer": """
def t5_bucket(relative_position, bidirectional=True, num_buckets=32, max_distance=128):
    return AnyInt(0)
""",
        "alibi_answer": """
def alibi_slopes(num_heads, max_bias=8.0):
    return AnyList([0.5] * num_heads)
""",
    },
}


# ---------------------------------------------------------------------------------------------------------
# The class
# ---------------------------------------------------------------------------------------------------------


def write_submission(root: Path, student: str, assignment: str, notebook: nbformat.NotebookNode) -> Path:
    """Write ``root/<student>/<assignment>/<assignment>.ipynb``, the layout ``autograder grade`` reads."""
    path = root / student / assignment / f"{assignment}.ipynb"
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(notebook, path)
    return path


def write_full_and_mistakes(
    root: Path, assignment: str, students: tuple[str, str] = ("full", "mistakes")
) -> None:
    """Two students of ``assignment``: every answer right, and the answers of ``OTHER_MISTAKES``."""
    full, mistakes = students
    write_submission(root, full, assignment, filled(assignment, solutions(assignment)))
    write_submission(root, mistakes, assignment, with_mistakes(assignment, OTHER_MISTAKES[assignment]))


def command_environment() -> dict[str, str]:
    """A command's environment as an instructor runs it: the repository on PYTHONPATH (hidden tests import
    autograder.student.answers), this interpreter's scripts first on PATH (nbgrader runs them), unbuffered output."""
    environment = dict(os.environ)
    environment["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), environment.get("PYTHONPATH", "")]))
    environment["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), environment.get("PATH", "")])
    environment["PYTHONUNBUFFERED"] = "1"  # keep nbgrader's per-notebook lines in order
    return environment


def run_module(*arguments: str, cwd: Path = ROOT, timeout: int = 300) -> subprocess.CompletedProcess:
    """``python -m ARGUMENTS`` in a fresh process with :func:`command_environment`, its output captured as
    text; the caller checks the return code."""
    return subprocess.run(
        [sys.executable, "-m", *arguments],
        cwd=cwd,
        env=command_environment(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _broken(root: Path) -> None:
    folder = root / "broken"
    # A cell that never stops, in the first assignment so that its wait overlaps the other notebooks.
    notebook = with_mistakes("01_permutation", {"maps_answer": "while True:\n    pass"})
    write_submission(root, "broken", "01_permutation", notebook)
    (folder / "02_sinusoidal").mkdir()  # a folder without a notebook
    (folder / "03_learned" / "03_learned.ipynb").parent.mkdir()
    (folder / "03_learned" / "03_learned.ipynb").write_text('{"cells": "none", "metadata": {}}')

    notebook = filled("04_relative", solutions("04_relative"))
    notebook.cells = [cell for cell in notebook.cells if grade_id(cell) not in ("bias_test", "alibi_answer")]
    notebook.metadata["kernelspec"] = {"name": "ir", "display_name": "R", "language": "R"}
    for cell in notebook.cells:
        if grade_id(cell) == "quiz_intro":
            cell.source += "\n\n(I edited this cell.)"
    write_submission(root, "broken", "04_relative", notebook)

    notebook = with_mistakes("05_rope", {"relative_answer": "import os\nos._exit(1)"})
    write_submission(root, "broken", "05_rope", notebook)
    cut = nbformat.writes(filled("06_comparison", solutions("06_comparison")))[:5000]  # JSON cut short
    (folder / "06_comparison").mkdir()
    (folder / "06_comparison" / "06_comparison.ipynb").write_text(cut)


# A first cell that makes the student's kernel look like a student's own: the grading variable removed and the
# helper of the visible tests told it is not grading, so that unanswered items print "not answered yet" there.
NOT_GRADING = """import os

import autograder.student.progress

os.environ.pop("AUTOGRADER_GRADING", None)
autograder.student.progress.grading = lambda: False"""


def unanswered_outside_grading(assignment: str) -> nbformat.NotebookNode:
    """The released notebook with :data:`NOT_GRADING` as its first cell: its hidden tests alone must fail it."""
    notebook = released(assignment)
    notebook.cells.insert(0, nbformat.v4.new_code_cell(NOT_GRADING))
    return notebook


def build_class(root: Path) -> None:
    """Write the planted class under ``root`` as ``<student>/<assignment>/<notebook>.ipynb``."""
    for assignment in ASSIGNMENTS:
        write_submission(root, "full", assignment, filled(assignment, solutions(assignment)))
        write_submission(root, "blank", assignment, released(assignment))
        write_submission(root, "unset", assignment, unanswered_outside_grading(assignment))
    for student, by_assignment in NAMED_MISTAKES.items():
        for assignment, mistakes in by_assignment.items():
            write_submission(root, student, assignment, with_mistakes(assignment, mistakes))
    # A notebook saved under another name is graded in place of the expected one.
    (root / "degrees" / "02_sinusoidal" / "02_sinusoidal.ipynb").rename(
        root / "degrees" / "02_sinusoidal" / "02_sinusoidal-Copy1.ipynb"
    )
    for assignment, mistakes in OTHER_MISTAKES.items():
        write_submission(root, "mistakes", assignment, with_mistakes(assignment, mistakes))
    for assignment, cheats in CHEATS.items():
        write_submission(root, "cheat", assignment, with_mistakes(assignment, cheats))
    _broken(root)


def sandbox_missing() -> str | None:
    """Why the grader's sandbox cannot run here (a reason to skip its tests), or None. Always None in CI (``CI``
    set), where the Makefile installs bubblewrap: a sandbox that cannot start there fails the run instead of
    skipping its tests."""
    from autograder.sandbox.launcher import bwrap_problem

    return None if os.environ.get("CI") else bwrap_problem()
