r"""Synthetic tasks for the length-generalization experiment of chapter 6, generated on the fly from a seed.

Every example is a *prompt* followed by an *answer*; a model reads the prompt and must produce the answer.
Nothing is downloaded: examples come from :class:`random.Random`, so one seed gives one stream of examples
on every machine.

Tokens: three special tokens, then ``num_symbols`` content symbols.

- ``SEPARATOR`` (0) ends the input part of a prompt;
- ``BLANK`` (1) fills the answer slots that an encoder is asked to fill in;
- ``VERB`` (2) is the action word of the ``"bites"`` task;
- symbols are ``NUM_SPECIAL_TOKENS, ..., NUM_SPECIAL_TOKENS + num_symbols - 1``.

The tasks, for an input of size ``n`` (``length``) with symbols :math:`x_1, \dots, x_n`:

========  ===========================================================  ====================================
task      prompt                                                       answer
========  ===========================================================  ====================================
copy      :math:`x_1 \dots x_n` SEP                                      :math:`x_1 \dots x_n`
reverse   :math:`x_1 \dots x_n` SEP                                      :math:`x_n \dots x_1`
bites     :math:`x_1 \dots x_{v-1}` VERB :math:`x_{v+1} \dots x_n` SEP     :math:`x_{v-1}\; x_{v+1}` (who acts,
                                                                       on whom)
recall    :math:`k_1 v_1 \dots k_n v_n` SEP :math:`k_q`                    :math:`v_q`
lookup    :math:`k_1 v_1 \dots k_n v_n` SEP :math:`k_q`, values apart       :math:`v_q`
========  ===========================================================  ====================================

``bites`` is order-sensitive in the spirit of "dog bites man": the answer names the symbol just before the
verb (the agent) and the one just after it (the patient), which are always different, so the same bag of
tokens in another order has another answer. ``recall`` is retrieval by relative position: the ``n`` keys
are distinct and the value sought stands one position after its key. Its values are drawn from all the
symbols, so a value may be the asked key itself: then the asked symbol stands twice, once as a key and once as
a value, and only the parity of its place tells them apart. An absolute encoding gives that parity directly; a
relative one only through the exact distance to the query (odd to a key, even to a value), which ALiBi's
penalty, T5's logarithmic buckets and a decoder without positions do not keep.
``lookup`` is associative recall as Ba et al. (2016) and Arora et al. (2023, "multi-query associative recall")
define it: keys and values come from disjoint symbols (the keys from all but the last
:data:`LOOKUP_VALUE_SYMBOLS`, the values from those), so the asked symbol stands once. For ``recall`` and
``lookup`` the length ``n`` counts key-value pairs; for the other tasks it counts the tokens before
``SEPARATOR``.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

import torch

from posenc_ref._checks import check_choice, check_int, check_positive_int

SEPARATOR, BLANK, VERB = 0, 1, 2
NUM_SPECIAL_TOKENS = 3


@dataclass(frozen=True)
class Example:
    """One example: the ``prompt`` the model reads and the ``answer`` it must produce (token ids)."""

    prompt: tuple[int, ...]
    answer: tuple[int, ...]


def vocabulary_size(num_symbols: int) -> int:
    """Number of token ids used by the tasks: the special tokens plus ``num_symbols`` symbols."""
    return NUM_SPECIAL_TOKENS + check_positive_int("num_symbols", num_symbols)


def _symbols(rng: random.Random, count: int, num_symbols: int) -> list[int]:
    return [NUM_SPECIAL_TOKENS + rng.randrange(num_symbols) for _ in range(count)]


def copy_example(rng: random.Random, length: int, num_symbols: int) -> Example:
    """Copy: prompt ``x_1 ... x_n SEP``, answer ``x_1 ... x_n``."""
    symbols = _symbols(rng, length, num_symbols)
    return Example(tuple(symbols) + (SEPARATOR,), tuple(symbols))


def reverse_example(rng: random.Random, length: int, num_symbols: int) -> Example:
    """Reverse: prompt ``x_1 ... x_n SEP``, answer ``x_n ... x_1``."""
    symbols = _symbols(rng, length, num_symbols)
    return Example(tuple(symbols) + (SEPARATOR,), tuple(reversed(symbols)))


def bites_example(rng: random.Random, length: int, num_symbols: int) -> Example:
    """Who acts on whom: ``n`` tokens with one ``VERB`` at a position ``v`` in ``1 .. n-2`` (0-based).

    The answer is ``(tokens[v - 1], tokens[v + 1])``: the agent, then the patient; the two are different
    symbols, so swapping them changes the answer. The other tokens are random symbols (they may repeat the
    agent or the patient: only the order around the verb tells them apart).
    """
    tokens = _symbols(rng, length, num_symbols)
    verb = rng.randrange(1, length - 1)
    tokens[verb] = VERB
    agent = tokens[verb - 1]
    patient = NUM_SPECIAL_TOKENS + rng.randrange(num_symbols - 1)
    if patient >= agent:  # a symbol other than the agent, uniformly
        patient += 1
    tokens[verb + 1] = patient
    return Example(tuple(tokens) + (SEPARATOR,), (agent, patient))


def recall_example(rng: random.Random, length: int, num_symbols: int) -> Example:
    """Associative recall: ``n`` pairs ``k v`` with distinct keys, ``SEP``, one of the keys; answer its value."""
    keys = [NUM_SPECIAL_TOKENS + index for index in rng.sample(range(num_symbols), length)]
    values = _symbols(rng, length, num_symbols)
    asked = rng.randrange(length)
    pairs = [token for pair in zip(keys, values, strict=True) for token in pair]
    return Example(tuple(pairs) + (SEPARATOR, keys[asked]), (values[asked],))


LOOKUP_VALUE_SYMBOLS = 8
"""The symbols ``lookup`` draws its values from (the last ones); its keys are the others."""


def lookup_example(rng: random.Random, length: int, num_symbols: int) -> Example:
    """Associative recall with keys and values apart: ``n`` pairs ``k v``, distinct keys from the first
    ``num_symbols - LOOKUP_VALUE_SYMBOLS`` symbols, values from the last :data:`LOOKUP_VALUE_SYMBOLS`; ``SEP``,
    one of the keys; answer its value."""
    key_symbols = num_symbols - LOOKUP_VALUE_SYMBOLS
    keys = [NUM_SPECIAL_TOKENS + index for index in rng.sample(range(key_symbols), length)]
    values = [NUM_SPECIAL_TOKENS + key_symbols + rng.randrange(LOOKUP_VALUE_SYMBOLS) for _ in range(length)]
    asked = rng.randrange(length)
    pairs = [token for pair in zip(keys, values, strict=True) for token in pair]
    return Example(tuple(pairs) + (SEPARATOR, keys[asked]), (values[asked],))


@dataclass(frozen=True)
class Task:
    """A task: how to make one example, and the sizes it implies.

    Attributes:
        name: the task's name in :data:`TASKS`.
        make_example: ``(rng, length, num_symbols) -> Example``.
        prompt_size, answer_size: ``length -> `` the number of prompt and answer tokens.
        min_length: the smallest valid ``length``.
        min_symbols: the smallest valid ``num_symbols``.
        summary: one line for tables and legends.
        key_symbols: ``num_symbols -> `` how many symbols the distinct keys are drawn from (the largest valid
            ``length``), for the tasks with keys; ``None`` for the others.
    """

    name: str
    make_example: Callable[[random.Random, int, int], Example]
    prompt_size: Callable[[int], int]
    answer_size: Callable[[int], int]
    min_length: int
    min_symbols: int
    summary: str
    key_symbols: Callable[[int], int] | None = None

    def sequence_length(self, length: int) -> int:
        """Prompt plus answer: the number of positions a model reads for an input of size ``length``."""
        return self.prompt_size(length) + self.answer_size(length)

    def check_length(self, length: int, num_symbols: int) -> None:
        """Raise if no example of this size exists: too short, too few symbols, or too few distinct keys."""
        check_int("length", length, minimum=self.min_length)
        check_int("num_symbols", num_symbols, minimum=self.min_symbols)
        if self.key_symbols is not None and length > self.key_symbols(num_symbols):
            raise ValueError(f"task {self.name!r} needs length <= {self.key_symbols(num_symbols)}, the symbols its "
                             f"distinct keys are drawn from with num_symbols={num_symbols}; got length={length}")


def _plus_separator(length: int) -> int:
    return length + 1


def _same(length: int) -> int:
    return length


TASKS: dict[str, Task] = {
    "copy": Task("copy", copy_example, _plus_separator, _same, 1, 1, "repeat the input"),
    "reverse": Task("reverse", reverse_example, _plus_separator, _same, 1, 1, "repeat the input backwards"),
    "bites": Task("bites", bites_example, _plus_separator, lambda length: 2, 3, 2,
                  "name who acts (before the verb) and on whom (after it)"),
    "recall": Task("recall", recall_example, lambda length: 2 * length + 2, lambda length: 1, 1, 1,
                   "give the value stored after the asked key", key_symbols=lambda num_symbols: num_symbols),
    "lookup": Task("lookup", lookup_example, lambda length: 2 * length + 2, lambda length: 1, 1,
                   LOOKUP_VALUE_SYMBOLS + 1, "give the value stored under the asked key (keys and values apart)",
                   key_symbols=lambda num_symbols: num_symbols - LOOKUP_VALUE_SYMBOLS),
}


@dataclass(frozen=True)
class TaskBatch:
    """A batch of examples of one task and one length.

    Attributes:
        prompts: ``(batch, prompt_len)`` int64.
        answers: ``(batch, answer_len)`` int64.
    """

    task: str
    length: int
    prompts: torch.Tensor
    answers: torch.Tensor


def make_batch(
    task: str,
    length: int,
    batch_size: int,
    *,
    rng: random.Random | int,
    num_symbols: int = 16,
    device: torch.device | str = "cpu",
) -> TaskBatch:
    """``batch_size`` examples of ``task`` with input size ``length``, drawn from ``rng``.

    Args:
        task: a name in :data:`TASKS`.
        length: the input size ``n`` (pairs for ``"recall"`` and ``"lookup"``, tokens otherwise).
        batch_size: number of examples, >= 1.
        rng: a :class:`random.Random` (advanced by the call: consecutive calls give new examples) or an int
            seed (a fresh generator: the same seed gives the same batch).
        num_symbols: the number of content symbols.
        device: where the tensors go.

    Returns:
        A :class:`TaskBatch` with ``prompts`` ``(batch, prompt_len)`` and ``answers`` ``(batch, answer_len)``.

    Raises:
        TypeError, ValueError: an unknown task, a length or ``num_symbols`` the task does not allow, a bad
            ``batch_size``, or an ``rng`` that is neither a ``random.Random`` nor an int.
    """
    check_choice("task", task, TASKS)
    spec = TASKS[task]
    spec.check_length(length, num_symbols)
    check_positive_int("batch_size", batch_size)
    if isinstance(rng, int) and not isinstance(rng, bool):
        rng = random.Random(rng)
    if not isinstance(rng, random.Random):
        raise TypeError(f"rng must be a random.Random or an int seed, got {type(rng).__name__}")
    examples = [spec.make_example(rng, length, num_symbols) for _ in range(batch_size)]
    prompts = torch.tensor([example.prompt for example in examples], dtype=torch.int64, device=device)
    answers = torch.tensor([example.answer for example in examples], dtype=torch.int64, device=device)
    return TaskBatch(task, length, prompts, answers)  # (batch, prompt_len), (batch, answer_len)
