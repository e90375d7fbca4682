r"""Each student's parameters for the varied items: the allowed values, the draw, and ``your_parameters``.

A varied item (a hand-computed encoding, a prediction) asks the same question of every student with other
numbers: the position of an encoding, the distance of a dot product, the bucket counts of T5, ... Each
parameter is drawn from a short list of allowed values by a hash of the assignment, the item, the
parameter's name and the student ID,

.. math:: \text{index} = \operatorname{sha256}(\text{assignment} \,|\, \text{item} \,|\, \text{name} \,|\, \text{id}) \bmod |\text{values}|,

so that the draw needs no stored table, is the same in the student's notebook and in the grader, and differs
from student to student (an answer passed around a class is right for the students who drew the same
values only). The first allowed value of every parameter is the *one answer key*: the value every student
gets when the instructor turns variants off, with ``c.AutograderVariants.enabled = False`` in
``autograder/nbgrader_config.py`` (or ``python -m autograder grade --variants off`` for one batch).

Where the student ID comes from:

- in the student's notebook, from the ``STUDENT_ID = "..."`` line of its first code cell, else from
  ``JUPYTERHUB_USER`` (a JupyterHub sets it); :func:`your_parameters` prints them above the items;
- while grading, from the nbgrader student folder of the submission, which the grader puts in the kernel's
  environment (:data:`STUDENT_VARIABLE`, with :data:`ENABLED_VARIABLE`); a declared ``STUDENT_ID`` that
  differs is named in the feedback (:func:`declared_student_id`) and the folder's ID decides.

This module is the student's side of the varied items: it knows the questions' parameters, never their
answers. The expected values and the named mistakes of each item are computed by the grader only
(:mod:`autograder.variants`, which imports this module; never the other way round), and the grader's kernel
cannot import them (:mod:`autograder.sandbox.kernel_view`).
"""

from __future__ import annotations

import ast
import hashlib
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from autograder import CONFIG_FILE
from autograder.submitted_tables import BASES, SUBMITTED

CONFIG_SECTION = "AutograderVariants"
STUDENT_VARIABLE = "AUTOGRADER_STUDENT_ID"  # the student folder of the submission, in the grader's kernel
ENABLED_VARIABLE = "AUTOGRADER_VARIANTS"  # "1" or "0", in the grader's kernel
HUB_VARIABLE = "JUPYTERHUB_USER"
DECLARATION = "STUDENT_ID"
MAX_ID = 200  # characters; a longer ID is refused (nbgrader's student IDs are short names)


@dataclass(frozen=True)
class VariedItem:
    """One varied item as the student sees it: where it is and its parameters.

    ``choices`` maps each parameter name to its allowed values, the one answer key's first. ``describe``
    says the parameters in words ("position p = 7").
    """

    assignment: str
    item: str  # as the notebook numbers it: "2.2"
    choices: Mapping[str, tuple[Any, ...]]
    describe: Callable[[Mapping[str, Any]], str]

    @property
    def answer_key(self) -> dict[str, Any]:
        """The parameters of the one answer key: the first allowed value of each."""
        return {name: values[0] for name, values in self.choices.items()}


def _words(template: str) -> Callable[[Mapping[str, Any]], str]:
    """``describe`` for a :class:`VariedItem`: ``template`` filled with the parameters by name."""
    return lambda parameters: template.format(**parameters)


# 1.5: the maps a student may be asked about, by name (whether each is permutation-equivariant is the grader's to say)
MAPS = {
    "column_softmax": "a softmax over the tokens: each feature (column) of X is normalised by a softmax over the n rows",
    "minus_mean": "subtracting from every row the mean of all rows",
    "learned_table": "adding row p of a learned table W to the token at position p",
    "sort_rows": "sorting the rows by their first feature",
    "distance_bias": "self-attention whose score for the query i and the key j gets the bias -|i - j|",
    "plain_block": ("a transformer block without positional encoding and without a mask: multi-head self-attention, "
                    "a residual connection, layer normalisation and a position-wise MLP"),
    "running_max": "a cumulative maximum over the sequence (row p holds the feature-wise maximum of the rows 0, ..., p)",
    "not_itself": "self-attention in which every token may attend to every token except itself",
    "kernel_one": "a 1-D convolution over the sequence with kernel size 1 (one linear map applied to every row)",
    "reverse_rows": "reversing the order of the rows",
    "content_mask": ("self-attention in which the query i may attend to the key j only when the first feature of "
                     "row j is at most that of row i"),
    "add_previous": "adding to every row p >= 1 the row p - 1 (row 0 is left as it is)",
    "broadcast_max": "replacing every row by the feature-wise maximum over all rows",
    "scale_by_position": "multiplying row p by p + 1",
}
# The eight maps of each allowed list, in the order of their letters a to h; the answer key's list first.
MAP_LISTS = (
    ("column_softmax", "minus_mean", "learned_table", "sort_rows", "distance_bias", "plain_block", "running_max",
     "not_itself"),
    ("kernel_one", "plain_block", "reverse_rows", "column_softmax", "sort_rows", "content_mask", "running_max",
     "learned_table"),
    ("minus_mean", "running_max", "distance_bias", "plain_block", "scale_by_position", "kernel_one", "learned_table",
     "column_softmax"),
    ("distance_bias", "plain_block", "reverse_rows", "column_softmax", "learned_table", "kernel_one", "minus_mean",
     "running_max"),
    ("column_softmax", "plain_block", "distance_bias", "kernel_one", "scale_by_position", "running_max",
     "learned_table", "add_previous"),
    ("scale_by_position", "content_mask", "distance_bias", "add_previous", "running_max", "plain_block", "sort_rows",
     "minus_mean"),
    ("not_itself", "kernel_one", "learned_table", "reverse_rows", "add_previous", "running_max", "broadcast_max",
     "minus_mean"),
    ("sort_rows", "content_mask", "minus_mean", "reverse_rows", "add_previous", "not_itself", "distance_bias",
     "scale_by_position"),
    ("broadcast_max", "minus_mean", "distance_bias", "running_max", "kernel_one", "reverse_rows", "scale_by_position",
     "add_previous"),
    ("not_itself", "sort_rows", "running_max", "reverse_rows", "content_mask", "broadcast_max", "plain_block",
     "add_previous"),
)
# 1.6: what the classifier must decide about a sequence of token ids
VERDICTS = {
    "palindrome": "it is a palindrome (it reads the same backwards, like [4, 7, 1, 7, 4])",
    "never_decreasing": "its ids never decrease from left to right (like [1, 1, 4, 7, 9])",
    "first_below_last": "its first id is smaller than its last (like [2, 9, 0, 5, 6])",
    "adjacent_pair": "two equal ids stand next to each other somewhere in it (like [3, 8, 8, 1, 5])",
}


VARIED_ITEMS: dict[str, tuple[VariedItem, ...]] = {
    "01_permutation": (
        # (prefix k, shuffle) on 6 tokens: row i of the shuffled input is row shuffle[i] of x. Each setting's rows
        # differ from the rows a token keeps, from the causal mask's and from all six (a test of the course checks it).
        VariedItem("01_permutation", "1.4",
                   {"setting": ((3, (0, 2, 1, 4, 3, 5)), (4, (0, 2, 3, 1, 5, 4)), (2, (1, 0, 5, 2, 3, 4)),
                                (2, (1, 0, 4, 3, 2, 5)), (3, (1, 2, 0, 5, 4, 3)), (3, (0, 2, 3, 1, 4, 5)),
                                (2, (0, 2, 1, 3, 4, 5)), (2, (1, 0, 3, 2, 4, 5)))},
                   lambda parameters: "prefix k = {}, shuffle = {}".format(
                       parameters["setting"][0], list(parameters["setting"][1]))),
        # Eight maps of MAPS each, lettered a to h in this order; the answer key's are the first eight
        VariedItem("01_permutation", "1.5", {"maps": MAP_LISTS}, lambda parameters: "eight maps, a to h:" + "".join(
            f"\n  {letter}: {MAPS[name]}" for letter, name in zip("abcdefgh", parameters["maps"], strict=True))),
        VariedItem("01_permutation", "1.6",
                   {"verdict": ("palindrome", "never_decreasing", "first_below_last", "adjacent_pair"),
                    "length": (5, 6, 7)},
                   lambda parameters: "sequences of {} token ids; the classifier says whether {}".format(
                       parameters["length"], VERDICTS[parameters["verdict"]])),
        # (first value, value of the seven others); the answer key's first. The prefix k of 1.1's mask.
        VariedItem("01_permutation", "1.7",
                   {"values": ((3, 1), (5, 1), (7, 1), (4, 2), (6, 2), (9, 3), (2, 5), (1, 4)), "prefix": (3, 2, 4, 5)},
                   lambda parameters: "first value {}, the seven others {}".format(*parameters["values"])
                   + ", prefix k = {}".format(parameters["prefix"])),
    ),
    "02_sinusoidal": (
        # The book works PE(0) and PE(1) for d = 4 and PE(2) for d = 6 out in full: no student draws them.
        VariedItem("02_sinusoidal", "2.1", {"position": (7, 3, 4, 5, 6, 8, 9, 10, 11, 12)}, _words("position p = {position}")),
        VariedItem("02_sinusoidal", "2.2", {"position": (3, 4, 5, 6, 7, 8, 9, 10, 11)}, _words("position p = {position}")),
        # Distances k whose farthest-moving pair is not pair 0, and beats the others by more than 0.05 (a test of
        # the course checks it)
        VariedItem("02_sinusoidal", "2.3", {"distance": (13, 6, 12, 19, 25, 31, 38, 44, 50, 63, 18)},
                   _words("distance k = {distance}")),
        # Bases whose wavelengths 2 pi base**(2i/16) all lie at least 0.04 from a whole number, so that rounding
        # to whole positions is never a matter of the last decimal (a test of the course checks it).
        VariedItem("02_sinusoidal", "2.5", {"base": (10000, 1000, 3000, 40000, 100000, 500)}, _words("base = {base}")),
        # The numbers of autograder.submitted_tables: which table of numbers, not which bug.
        VariedItem("02_sinusoidal", "2.6", {"submission": tuple(SUBMITTED)},
                   lambda parameters: "submission number {}, made for base {:g}".format(
                       parameters["submission"], BASES[parameters["submission"]])),
        VariedItem("02_sinusoidal", "2.7", {"distance": (10, 3, 5, 6, 7, 12, 15, 20, 25)},
                   _words("distance k = {distance}")),
    ),
    "03_learned": (
        VariedItem("03_learned", "3.6", {"rows": (512, 1024, 256, 2048), "longest": (100, 60, 128, 200, 90)},
                   _words("{rows} rows, lengths 1 to {longest}")),
        # lr * weight_decay * steps lies between 0.125 and 1.9, and differs for every combination: far enough from 0
        # that 1 - s * lr * wd and the compounded factor differ by more than the tolerance, the ratio far from 0
        VariedItem("03_learned", "3.7", {"lr": (2e-3, 1e-3, 3e-3), "weight_decay": (0.05, 0.09), "steps": (4000, 2500, 7000)},
                   _words("lr = {lr:g}, weight_decay = {weight_decay:g}, {steps} steps")),
    ),
    "04_relative": (
        # no 32 buckets: the book draws T5's 32 buckets for max_distance 32 to 256, where the answer can be read
        VariedItem("04_relative", "4.7", {"num_buckets": (64, 128, 48, 96), "max_distance": (256, 128, 512, 1024)},
                   _words("{num_buckets} buckets, max_distance = {max_distance}")),
        # lead / slope is never a whole number for these, so no distance is a tie (a test of the course checks it)
        VariedItem("04_relative", "4.8", {"lead": (1.3, 0.9, 1.7, 2.2, 1.1), "heads": (8, 16, 4)},
                   _words("a content lead of {lead}, {heads} heads")),
    ),
    "05_rope": (
        # no head of 128 features: the book counts the slow pairs of d = 128 for bases 10000 and 500000
        VariedItem("05_rope", "5.6",
                   {"base": (500_000, 10_000, 1_000_000, 100_000), "head_dim": (96, 64, 256),
                    "context": (8192, 4096, 32768, 2048)},
                   _words("base {base}, head dimension d = {head_dim}, sequences of up to {context} tokens")),
    ),
    "06_comparison": (
        # batch * head_dim differs for every pair, and by a factor other than 4 or 16 (n's steps): every
        # combination has its own answer; n >= 512 keeps every count a whole number of MiB
        VariedItem("06_comparison", "6.4",
                   {"batch": (4, 3, 5, 7), "heads": (12, 8, 6, 10), "tokens": (1024, 512, 2048),
                    "head_dim": (64, 72, 88, 104)},
                   _words("batch {batch}, {heads} heads, n = {tokens} tokens, d_head = {head_dim}")),
    ),
}


def varied_items(assignment: str) -> tuple[VariedItem, ...]:
    """The varied items of ``assignment``, in the notebook's order (none for an assignment without any)."""
    return VARIED_ITEMS.get(assignment, ())


def varied_item(assignment: str, item: str) -> VariedItem:
    """The varied item ``item`` ("2.2") of ``assignment``; KeyError when it has none of that number."""
    found = [varied for varied in varied_items(assignment) if varied.item == item]
    if not found:
        raise KeyError(f"{assignment} has no varied item {item!r}")
    return found[0]


def check_student_id(name: str, student_id: Any) -> str:
    """``student_id`` (a string, or a whole number such as 12345) as a string stripped of surrounding blanks;
    TypeError / ValueError naming ``name`` otherwise."""
    if type(student_id) is int and student_id >= 0:
        student_id = str(student_id)
    if type(student_id) is not str:
        raise TypeError(f"{name} must be a string such as \"jdoe\", got {type(student_id).__name__} {student_id!r}")
    stripped = student_id.strip()
    if len(stripped) > MAX_ID or any(not character.isprintable() for character in stripped):
        raise ValueError(f"{name} must be a printable ID of at most {MAX_ID} characters, got {student_id[:40]!r}")
    return stripped


def draw(varied: VariedItem, student_id: str) -> dict[str, Any]:
    """The parameters of ``student_id`` for ``varied`` (see the module's docstring for the formula); ``varied``
    is anything with its ``assignment``, ``item`` and ``choices``."""
    drawn = {}
    for name, values in varied.choices.items():
        key = f"{varied.assignment}|{varied.item}|{name}|{student_id}".encode()
        index = int.from_bytes(hashlib.sha256(key).digest()[:8], "big") % len(values)
        drawn[name] = values[index]
    return drawn


def enabled_in_config() -> bool:
    """``c.AutograderVariants.enabled`` of ``autograder/nbgrader_config.py`` (True when it is not set)."""
    from traitlets.config.loader import PyFileConfigLoader

    config = PyFileConfigLoader(CONFIG_FILE.name, path=str(CONFIG_FILE.parent)).load_config()
    value = config.get(CONFIG_SECTION, {}).get("enabled", True)
    if type(value) is not bool:
        raise ValueError(f"c.{CONFIG_SECTION}.enabled in {CONFIG_FILE} must be True or False, got {value!r}")
    return value


def parameters_for(assignment: str, student_id: str, *, enabled: bool) -> dict[str, dict[str, Any]]:
    """Every varied item's parameters, by item number: the student's when ``enabled`` and the ID is not empty,
    else the answer key's (an empty ID is nobody's: the instructor's source notebook runs with it)."""
    return {
        varied.item: draw(varied, student_id) if enabled and student_id else varied.answer_key
        for varied in varied_items(assignment)
    }


def declared_student_id(notebook: Any) -> str | None:
    """The ID of the notebook's ``STUDENT_ID = "..."`` line, read without running anything; None when the
    notebook has no such line, or leaves it empty."""
    for cell in notebook.get("cells", []):
        if cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        source = "".join(source) if isinstance(source, list) else str(source)
        if DECLARATION not in source:
            continue
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        for statement in tree.body:
            if (
                isinstance(statement, ast.Assign)
                and [getattr(target, "id", None) for target in statement.targets] == [DECLARATION]
                and isinstance(statement.value, ast.Constant)
                and type(statement.value.value) in (str, int)
            ):
                declared = str(statement.value.value).strip()
                return declared[:MAX_ID] or None
    return None


# ---------------------------------------------------------------------------------------------------------
# In the student's notebook
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class YourParameters(Mapping):
    """A student's parameters for the varied items of one assignment, by item number (``parameters["2.2"]``
    is a dict such as ``{"position": 7}``); :meth:`show` prints the line above an item."""

    assignment: str
    student_id: str
    source: str  # where the ID came from, in words
    enabled: bool
    by_item: Mapping[str, Mapping[str, Any]]

    def __getitem__(self, item: str) -> Mapping[str, Any]:
        if item not in self.by_item:
            raise KeyError(f"item must be one of {sorted(self.by_item)} (the varied items of {self.assignment}), got {item!r}")
        return dict(self.by_item[item])

    def __iter__(self) -> Iterator[str]:
        return iter(self.by_item)

    def __len__(self) -> int:
        return len(self.by_item)

    def line(self, item: str) -> str:
        parameters = self[item]  # a KeyError that lists the varied items, for any other
        return f"Your parameters for {item}: {varied_item(self.assignment, item).describe(parameters)}"

    def show(self, item: str) -> None:
        """Print the parameters of ``item``, and what is missing if the student ID is not set."""
        print(self.line(item) + ("" if self.student_id or not self.enabled else "  (set STUDENT_ID first!)"))

    def summary(self) -> str:
        if not self.enabled:
            head = "Variants are turned off for this class: every student answers with the same parameters."
        elif self.student_id:
            head = f"Student ID: {self.student_id} ({self.source}). These parameters are yours alone:"
        else:
            head = (
                f"{DECLARATION} is empty: write your student ID between the quotes of {DECLARATION} = \"\" in the "
                "cell above and run the notebook again. The parameters below are the one answer key's, not yours yet:"
            )
        return "\n".join([head, *(f"  {self.line(item)}" for item in self.by_item)])


def your_parameters(assignment: str, student_id: str = "") -> YourParameters:
    """The parameters of the student working in this notebook, printed, for every varied item of ``assignment``.

    The ID is ``student_id`` (the notebook's ``STUDENT_ID``), else ``$JUPYTERHUB_USER``; in the grader's
    kernel it is the submission's student folder.
    """
    from autograder.progress import grading

    if grading():  # the folder decides; a malformed declaration is the feedback's business, not a crash
        student, source = os.environ.get(STUDENT_VARIABLE, ""), "the folder of your submission"
        enabled = os.environ.get(ENABLED_VARIABLE, "1") == "1"
    else:
        declared = check_student_id("STUDENT_ID", student_id)
        hub_user = os.environ.get(HUB_VARIABLE, "").strip()
        student, source = (declared, "STUDENT_ID") if declared else (hub_user, f"${HUB_VARIABLE}")
        enabled = enabled_in_config()
    parameters = YourParameters(assignment, student, source, enabled, parameters_for(assignment, student, enabled=enabled))
    print(parameters.summary())
    return parameters
