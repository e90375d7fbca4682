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
import itertools
import math
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from autograder import CONFIG_FILE
from autograder.student.submitted_tables import BASES, SUBMITTED

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
    in_summary: bool = True  # listed at the top of the notebook (a quiz shows its order where it is asked)

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
        # The numbers of autograder.student.submitted_tables: which table of numbers, not which bug.
        VariedItem("02_sinusoidal", "2.6", {"submission": tuple(SUBMITTED)},
                   lambda parameters: "submission number {}, made for base {:g}".format(
                       parameters["submission"], BASES[parameters["submission"]])),
        VariedItem("02_sinusoidal", "2.7", {"distance": (10, 3, 5, 6, 7, 12, 15, 20, 25)},
                   _words("distance k = {distance}")),
    ),
    "03_learned": (
        # 3.4: rows of 128 tokens; one longest document longer than a row. L - min(128, D) differs for every pair,
        # and L - max(128, D), the mistake, from it (128 is no allowed D)
        VariedItem("03_learned", "3.4", {"rows": (512, 1024, 384, 640), "longest": (72, 300, 48, 96, 100, 60)},
                   _words("a table of {rows} rows, documents of up to {longest} tokens, rows of 128 tokens")),
        # 3.5: D < C and C no multiple of D, so that rows cut documents; the stream is twice lcm(C, D) tokens
        VariedItem("03_learned", "3.5", {"document": (48, 40, 56, 36, 72), "context": (128, 100, 150, 176)},
                   lambda parameters: "documents of {d} tokens, rows of {c} tokens: {n} documents fill {r} rows".format(
                       d=parameters["document"], c=parameters["context"],
                       n=2 * math.lcm(parameters["document"], parameters["context"]) // parameters["document"],
                       r=2 * math.lcm(parameters["document"], parameters["context"]) // parameters["context"])),
        VariedItem("03_learned", "3.6", {"rows": (512, 1024, 256, 2048), "longest": (100, 60, 128, 200, 90)},
                   _words("{rows} rows, lengths 1 to {longest}")),
        # lr * steps is at most a fifth of the start: the entry moves by 0.96 to 1.0 times lr * steps (measured),
        # so "about lr a step" lies within the tolerance lr * steps / 10
        VariedItem("03_learned", "3.7", {"lr": (1e-4, 5e-5, 1.5e-4), "steps": (100, 60, 120),
                                         "start": (0.1, 0.2, 0.15, 0.25)},
                   _words("lr = {lr:g}, {steps} steps, entries starting at {start:g}")),
    ),
    "04_relative": (
        # no 32 buckets (the book draws T5's 32 buckets); every L is shorter than every max_distance, and no distance
        # up to L lies within 5e-4 of a bucket's edge (a test of the course checks it)
        VariedItem("04_relative", "4.3",
                   {"num_buckets": (64, 48, 96, 128), "max_distance": (1000, 256, 600, 2000),
                    "length": (100, 60, 200, 150, 80)},
                   _words("{num_buckets} buckets, max_distance = {max_distance}, sequences of at most L = {length} tokens")),
        # a decoder's inner bucket: no 32 buckets, a distance in the logarithmic range below the last bucket, and
        # no edge of its bucket within 1e-4 of a boundary (a test of the course checks it)
        VariedItem("04_relative", "4.7",
                   {"num_buckets": (64, 48, 96, 128), "max_distance": (1000, 256, 700, 2000),
                    "distance": (150, 100, 120, 180, 90)},
                   _words("a decoder with {num_buckets} buckets, max_distance = {max_distance}, a key a = {distance} tokens back")),
        # lead / slope is never a whole number for these, so no distance is a tie (a test of the course checks it)
        VariedItem("04_relative", "4.8", {"lead": (1.3, 0.9, 1.7, 2.2, 1.1), "heads": (8, 16, 4)},
                   _words("a content lead of {lead}, {heads} heads")),
    ),
    "05_rope": (
        # No head of 128 features (the book counts the slow pairs of d = 128) and factors of 8 or more (with 4 most
        # answers would be 0); no wavelength lies within 10 tokens of L - 1 or L, and no pair's ratio of angles
        # within 0.5% of 2 (a test of the course checks both).
        VariedItem("05_rope", "5.6",
                   {"base": (500_000, 10_000, 1_000_000, 100_000), "head_dim": (96, 64, 256),
                    "context": (8192, 4096, 2048), "factor": (8, 16, 32, 12)},
                   _words("base {base}, head dimension d = {head_dim}, trained on {context} tokens, "
                          "NTK-aware factor s = {factor}")),
        # Which of the notebook's six mystery_rope_<n> is yours (the grader alone knows their bugs), and the
        # position at which you measure it: every bug gives its own angle there (a test of the course checks it).
        VariedItem("05_rope", "5.7", {"mystery": (3, 1, 2, 4, 5, 6), "position": (9, 7, 8, 10, 11, 13, 14)},
                   _words("mystery_rope_{mystery}, position m = {position}")),
    ),
    "06_comparison": (
        # 6.1: each part draws one of three cases, each met by another position kind (the grader's side knows
        # which); the one answer key's first. The case is printed above the part's answer. The parameters' names
        # enter the hash of the draw only.
        VariedItem("06_comparison", "6.1 (a)", {"case": (
            ("The input is an unordered set of sensor readings, and the model's pooled output must not change when "
             "the readings are listed in another order."),
            ("Each head adds to its keys a trained vector for the offset j - i between query and key, and a second "
             "one to its values, with one vector per offset from -k to k and every larger offset sharing the vector "
             "at its end."),
            ("The encoding has no trained parameters, is added to the token embeddings before the first layer, and "
             "gives every absolute position, however large, a vector of its own computed by a formula."),
        )}, _words("{case}")),
        VariedItem("06_comparison", "6.1 (b)", {"situation": (
            ("A decoder trained on 1k-token inputs must read 8k-token inputs without further training. The position "
             "signal may have no trained parameters, and it must enter as a bias added to the attention scores (not "
             "through the embeddings or the query and key vectors)."),
            ("Keys are cached during generation with their position already applied, the encoding has no trained "
             "parameters, and the scores must depend on the positions through n - m only: a query at position m and "
             "a key at position n score the same as at m + s and n + s, for every shift s."),
            ("A decoder must get no position signal at all, no table, bias or rotation: all it knows of order comes "
             "from its causal mask."),
        )}, _words("{situation}")),
        VariedItem("06_comparison", "6.1 (c)", {"case": (
            ("The scores must depend on the positions only through m - n, the encoding must have no trained "
             "parameters, and it must act on the query and key vectors themselves, so that a cache can store keys "
             "with their position already applied."),
            ("A decoder with a context of 1,024 tokens, never asked to read longer inputs, should learn any vector "
             "for each absolute position, added to the input, as GPT-2 does."),
            ("Each head must lower its scores linearly with the distance between query and key, by a fixed slope of "
             "its own, with no trained position parameters."),
        )}, _words("{case}")),
        VariedItem("06_comparison", "6.1 (d)", {"situation": (
            ("Each head should learn its own scalar preference for each distance, exactly for small distances and in "
             "coarser, logarithmically spaced ranges for large ones, added to the attention scores."),
            ("Attention must read the offset between query and key as a trained vector of d_head features, added to "
             "the key inside the dot product, not as a scalar added to the score."),
            ("The input gets, at each position p, a fixed vector of sines and cosines of p at geometrically spaced "
             "frequencies, with no trained parameters, as in the original Transformer."),
        )}, _words("{situation}")),
        VariedItem("06_comparison", "6.1 (e)", {"constraints": (
            ("A classifier reads inputs of at most 512 tokens and should be free to learn any vector for each "
             "absolute position, added to the token embeddings, as BERT does."),
            ("An encoder-decoder should share, across all its layers, one table of trained scalars per head, indexed "
             "by the bucket of the offset j - i and added to the scores."),
            ("Each pair of features of the queries and keys must be turned by an angle proportional to the token's "
             "position, at a frequency of its own, with no trained parameters."),
        )}, _words("{constraints}")),
        # 6.3: a table of the committed study (book/data/length-generalization/results.csv): one task, one range
        # of sizes, four kinds and six seeds; each score is a seed's mean exact match over the range, to two
        # decimals. Every table has a defined paired test for each pair, at least one ordered pair and one not.
        VariedItem("06_comparison", "6.3", {"table": (
            {"task": "who-bites-whom", "sizes": (17, 24), "seeds": (3, 4, 5, 6, 7, 8),
             "scores": {"none": (0.3, 0.39, 0.32, 0.37, 0.33, 0.39), "t5": (0.28, 0.31, 0.21, 0.31, 0.17, 0.31),
                        "sinusoidal": (0.11, 0.09, 0.21, 0.23, 0.32, 0.27), "learned": (0.23, 0.1, 0.12, 0.14, 0.18, 0.2)}},
            {"task": "who-bites-whom", "sizes": (17, 24), "seeds": (3, 4, 5, 6, 7, 8),
             "scores": {"none": (0.3, 0.39, 0.32, 0.37, 0.33, 0.39), "t5": (0.28, 0.31, 0.21, 0.31, 0.17, 0.31),
                        "shaw": (0.22, 0.26, 0.24, 0.49, 0.22, 0.08), "sinusoidal": (0.11, 0.09, 0.21, 0.23, 0.32, 0.27)}},
            {"task": "who-bites-whom", "sizes": (17, 24), "seeds": (3, 4, 5, 6, 7, 8),
             "scores": {"t5": (0.28, 0.31, 0.21, 0.31, 0.17, 0.31), "sinusoidal": (0.11, 0.09, 0.21, 0.23, 0.32, 0.27),
                        "learned": (0.23, 0.1, 0.12, 0.14, 0.18, 0.2), "rope": (0.19, 0.15, 0.13, 0.21, 0.14, 0.14)}},
            {"task": "who-bites-whom", "sizes": (17, 24), "seeds": (4, 5, 6, 7, 8, 9),
             "scores": {"shaw": (0.26, 0.24, 0.49, 0.22, 0.08, 0.58), "t5": (0.31, 0.21, 0.31, 0.17, 0.31, 0.16),
                        "learned": (0.1, 0.12, 0.14, 0.18, 0.2, 0.14), "rope": (0.15, 0.13, 0.21, 0.14, 0.14, 0.11)}},
            {"task": "who-bites-whom", "sizes": (9, 16), "seeds": (2, 3, 4, 5, 6, 7),
             "scores": {"none": (0.79, 0.77, 0.81, 0.76, 0.77, 0.76), "shaw": (0.71, 0.69, 0.7, 0.7, 0.88, 0.69),
                        "t5": (0.68, 0.74, 0.78, 0.73, 0.74, 0.67), "sinusoidal": (0.59, 0.52, 0.49, 0.55, 0.54, 0.66)}},
            {"task": "associative recall", "sizes": (17, 24), "seeds": (2, 3, 4, 5, 6, 7),
             "scores": {"sinusoidal": (0.34, 0.28, 0.4, 0.36, 0.31, 0.29), "learned": (0.26, 0.31, 0.3, 0.29, 0.28, 0.33),
                        "rope": (0.26, 0.41, 0.3, 0.23, 0.27, 0.23), "none": (0.18, 0.19, 0.19, 0.18, 0.19, 0.19)}},
            {"task": "who-bites-whom", "sizes": (9, 16), "seeds": (3, 4, 5, 6, 7, 8),
             "scores": {"t5": (0.74, 0.78, 0.73, 0.74, 0.67, 0.78), "shaw": (0.69, 0.7, 0.7, 0.88, 0.69, 0.55),
                        "sinusoidal": (0.52, 0.49, 0.55, 0.54, 0.66, 0.56), "rope": (0.52, 0.57, 0.45, 0.54, 0.49, 0.47)}},
        )}, lambda parameters: "{task}, sizes {low} to {high}, seeds {first} to {last}, the kinds {kinds}".format(
            task=parameters["table"]["task"], low=parameters["table"]["sizes"][0], high=parameters["table"]["sizes"][1],
            first=parameters["table"]["seeds"][0], last=parameters["table"]["seeds"][-1],
            kinds=", ".join(parameters["table"]["scores"]))),
        # 6.4: batch * head_dim differs for every pair, and by a factor other than 4 or 16 (n's steps); the
        # clipping distance k changes the rewrite's table of relative scores only
        VariedItem("06_comparison", "6.4",
                   {"batch": (4, 3, 5, 7), "heads": (12, 8, 6, 10), "tokens": (1024, 512, 2048),
                    "head_dim": (64, 72, 88, 104), "max_distance": (16, 8, 32, 64)},
                   _words("batch {batch}, {heads} heads, n = {tokens} tokens, d_head = {head_dim}, clipping distance "
                          "k = {max_distance}")),
        # 6.5: a table of the committed study with three seeds, a sample the size of the live run: one task,
        # four kinds (in the order of their mean at sizes 17 to 24), each score a seed's mean exact match over
        # sizes 9 to 16 and 17 to 24, to two decimals. The answers of the tables all differ.
        VariedItem("06_comparison", "6.5", {"table": (
            {"task": "who-bites-whom", "seeds": (3, 4, 5), "scores": {
                "beyond": {"none": (0.77, 0.81, 0.76), "t5": (0.74, 0.78, 0.73), "learned": (0.41, 0.29, 0.39), "sinusoidal": (0.52, 0.49, 0.55)},
                "far": {"none": (0.3, 0.39, 0.32), "t5": (0.28, 0.31, 0.21), "learned": (0.23, 0.1, 0.12), "sinusoidal": (0.11, 0.09, 0.21)},
            }},
            {"task": "who-bites-whom", "seeds": (1, 2, 3), "scores": {
                "beyond": {"none": (0.8, 0.79, 0.77), "shaw": (0.69, 0.71, 0.69), "rope": (0.49, 0.52, 0.52), "sinusoidal": (0.54, 0.59, 0.52)},
                "far": {"none": (0.46, 0.44, 0.3), "shaw": (0.23, 0.19, 0.22), "rope": (0.14, 0.15, 0.19), "sinusoidal": (0.16, 0.2, 0.11)},
            }},
            {"task": "associative recall", "seeds": (0, 1, 2), "scores": {
                "beyond": {"rope": (0.84, 0.83, 0.81), "sinusoidal": (0.57, 0.65, 0.59), "learned": (0.52, 0.55, 0.52), "none": (0.29, 0.31, 0.3)},
                "far": {"rope": (0.38, 0.36, 0.26), "sinusoidal": (0.32, 0.33, 0.34), "learned": (0.32, 0.31, 0.26), "none": (0.19, 0.19, 0.18)},
            }},
            {"task": "associative recall", "seeds": (3, 4, 5), "scores": {
                "beyond": {"alibi": (0.64, 0.63, 0.61), "sinusoidal": (0.59, 0.66, 0.69), "rope": (0.84, 0.83, 0.8), "none": (0.29, 0.3, 0.3)},
                "far": {"alibi": (0.45, 0.43, 0.41), "sinusoidal": (0.28, 0.4, 0.36), "rope": (0.41, 0.3, 0.23), "none": (0.19, 0.19, 0.18)},
            }},
            {"task": "who-bites-whom", "seeds": (0, 1, 2), "scores": {
                "beyond": {"none": (0.74, 0.8, 0.79), "shaw": (0.68, 0.69, 0.71), "sinusoidal": (0.55, 0.54, 0.59), "learned": (0.31, 0.39, 0.43)},
                "far": {"none": (0.28, 0.46, 0.44), "shaw": (0.17, 0.23, 0.19), "sinusoidal": (0.12, 0.16, 0.2), "learned": (0.06, 0.15, 0.16)},
            }},
            {"task": "who-bites-whom", "seeds": (6, 7, 8), "scores": {
                "beyond": {"none": (0.77, 0.76, 0.77), "sinusoidal": (0.54, 0.66, 0.56), "shaw": (0.88, 0.69, 0.55), "learned": (0.31, 0.38, 0.38)},
                "far": {"none": (0.37, 0.33, 0.39), "sinusoidal": (0.23, 0.32, 0.27), "shaw": (0.49, 0.22, 0.08), "learned": (0.14, 0.18, 0.2)},
            }},
            {"task": "associative recall", "seeds": (4, 5, 6), "scores": {
                "beyond": {"alibi": (0.63, 0.61, 0.58), "sinusoidal": (0.66, 0.69, 0.59), "learned": (0.5, 0.43, 0.44), "rope": (0.83, 0.8, 0.79)},
                "far": {"alibi": (0.43, 0.41, 0.39), "sinusoidal": (0.4, 0.36, 0.31), "learned": (0.3, 0.29, 0.28), "rope": (0.3, 0.23, 0.27)},
            }},
        )}, lambda parameters: "{task}, seeds {seeds}, the kinds {kinds}".format(
            task=parameters["table"]["task"], seeds=", ".join(map(str, parameters["table"]["seeds"])),
            kinds=", ".join(parameters["table"]["scores"]["far"]))),
    ),
}


# Every quiz question shows its four options in an order of the student's own, so that a letter passed around a
# class is right for a quarter of it at best: the order is a parameter like any other, drawn from the 24
# orders of the options as the source writes them (the one answer key's, "ABCD", first). ``"CABD"`` shows the
# source's option C as A, its A as B, and so on.
QUIZ_LETTERS = "ABCD"
QUIZ_ORDERS = tuple("".join(order) for order in itertools.permutations(QUIZ_LETTERS))
QUIZZES: dict[str, tuple[str, ...]] = {
    "01_permutation": ("Quiz 1", "Quiz 2"),
    "02_sinusoidal": ("Quiz 1", "Quiz 2", "Quiz 3"),
    "03_learned": ("Quiz 1", "Quiz 2"),
    "04_relative": ("Quiz 1", "Quiz 2", "Quiz 3"),
    "05_rope": ("Quiz 1", "Quiz 2", "Quiz 3"),
    "06_comparison": ("Quiz 1", "Quiz 2"),
}


def _quiz_item(assignment: str, quiz: str) -> VariedItem:
    return VariedItem(assignment, quiz, {"order": QUIZ_ORDERS},
                      lambda parameters: "the options in the order " + ", ".join(parameters["order"]) + " of the source",
                      in_summary=False)


QUIZ_ITEMS: dict[str, tuple[VariedItem, ...]] = {
    assignment: tuple(_quiz_item(assignment, quiz) for quiz in quizzes) for assignment, quizzes in QUIZZES.items()
}


def varied_items(assignment: str) -> tuple[VariedItem, ...]:
    """The varied items of ``assignment``, in the notebook's order (none for an assignment without any), then
    its quiz questions."""
    return VARIED_ITEMS.get(assignment, ()) + QUIZ_ITEMS.get(assignment, ())


def shown_letter(order: str, source_letter: str) -> str:
    """The letter under which a student whose quiz order is ``order`` sees the option that the source writes as
    ``source_letter``: ``shown_letter("CABD", "C") == "A"``."""
    if order not in QUIZ_ORDERS or source_letter not in QUIZ_LETTERS:
        raise ValueError(f"order must be an order of {QUIZ_LETTERS} and source_letter one of its letters, got "
                         f"{order!r} and {source_letter!r}")
    return QUIZ_LETTERS[order.index(source_letter)]


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
        except (SyntaxError, RecursionError, MemoryError):  # code nested deeper than the parser goes: not read
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

    def show_options(self, item: str, options: list[str]) -> None:
        """Print the four options of the quiz question ``item`` (written in the source's order A, B, C, D) under
        the letters of this student's order."""
        order = self[item]["order"]
        if type(options) is not list or len(options) != len(QUIZ_LETTERS):
            raise ValueError(f"options must be a list of {len(QUIZ_LETTERS)} texts, got {options!r:.80}")
        shown = [(letter, options[QUIZ_LETTERS.index(source_letter)]) for letter, source_letter in zip(QUIZ_LETTERS, order)]
        plain = "\n".join(f"{letter}  {text}" for letter, text in shown)
        try:
            from IPython import get_ipython
            from IPython.display import display
        except ImportError:
            get_ipython = None
        if get_ipython is None or get_ipython() is None:  # plain Python: no notebook to render markdown
            print(plain)
            return
        # markdown where a notebook renders it (the options may hold formulas), plain text elsewhere
        display({"text/markdown": "\n".join(f"- **{letter}** {text}" for letter, text in shown), "text/plain": plain},
                raw=True)

    def letter(self, item: str, source_letter: str) -> str:
        """The letter this student gives for the option the source writes as ``source_letter`` (the solutions use
        it: a student answers with the letter printed beside the option)."""
        return shown_letter(self[item]["order"], source_letter)

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
        listed = [varied.item for varied in varied_items(self.assignment) if varied.in_summary and varied.item in self.by_item]
        return "\n".join([head, *(f"  {self.line(item)}" for item in listed)])


def your_parameters(assignment: str, student_id: str = "") -> YourParameters:
    """The parameters of the student working in this notebook, printed, for every varied item of ``assignment``.

    The ID is ``student_id`` (the notebook's ``STUDENT_ID``), else ``$JUPYTERHUB_USER``; in the grader's
    kernel it is the submission's student folder.
    """
    from autograder.student.progress import grading

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
