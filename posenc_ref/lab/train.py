r"""Training and evaluating the tiny transformers of :mod:`posenc_ref.lab.models` on :mod:`posenc_ref.lab.tasks`.

One sequence layout serves both model kinds. The model reads the prompt followed by the answer slots and
predicts the answer tokens:

- **decoder** (causal), trained with teacher forcing: it reads ``prompt + answer[:-1]`` and the logits at
  the last prompt token and at each answer token but the last predict the next answer token;
- **encoder** (bidirectional): it reads ``prompt + BLANK * answer_len`` and fills every slot at once.

The loss is the cross-entropy of the answer tokens. The score is **exact match**: an example counts only if
every answer token is the arg-max of its logits. For the decoder this equals greedy decoding: if every
teacher-forced prediction is right, greedy decoding reproduces the answer token by token, and if one is
wrong, greedy decoding makes that error too (the prefix before it being the same).

A second score, **per-token accuracy**, is the share of answer tokens that are right. On long answers exact
match compounds the per-token errors (0.99 per token is about 0.79 over 24 tokens), so the two are reported
side by side.

Training draws every batch at one length, uniformly from ``min_length .. max_length``, from a
:class:`random.Random` seeded with the run's seed (the model's initial weights come from
``torch.manual_seed``, set by the caller). The learning rate rises linearly for ``warmup_steps``, then stays
(``schedule="constant"``) or follows a half cosine down to ``final_learning_rate_factor`` of its peak at
``max_steps`` (``"cosine"``).

Every ``check_every`` steps the model is scored on ``check_examples`` held-out examples *at every training
length*, drawn from a stream of their own (never a training batch). Training stops early once the exact match
reaches ``target_accuracy`` at every training length on ``patience`` checks in a row: one lucky check does not
stop it, and neither does success at the longest length alone (a model can copy 8 symbols and fail 6).
Whether a run *fitted* is decided afterwards, on the scoring examples of :func:`score` at every training
length, not by this stopping rule.
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass

import torch
from torch import nn
from tqdm import tqdm

from posenc_ref._checks import (
    check_choice,
    check_int,
    check_positive_float,
    check_positive_int,
    check_probability,
)
from posenc_ref.lab.models import TinyTransformer
from posenc_ref.lab.tasks import BLANK, TASKS, TaskBatch, make_batch


def resolve_device(device: torch.device | str) -> torch.device:
    """``"cpu"``, ``"cuda"`` (or ``"cuda:N"``), or ``"auto"`` (CUDA when available) as a ``torch.device``.

    Raises:
        ValueError: an unknown name, or CUDA asked for where none is available.
    """
    if isinstance(device, str) and device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError) as error:
        raise ValueError(f"device must be 'cpu', 'cuda', 'cuda:N' or 'auto'; got {device!r}") from error
    check_choice("device type", resolved.type, ("cpu", "cuda"))
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device={device!r}: no CUDA device is available here")
    return resolved


def model_inputs(batch: TaskBatch, *, causal: bool) -> torch.Tensor:
    """The tokens a model reads, ``(batch, prompt_len + answer_len - causal)`` (see the module docstring)."""
    if causal:
        return torch.cat((batch.prompts, batch.answers[:, :-1]), dim=1)  # (batch, prompt + answer - 1)
    slots = torch.full_like(batch.answers, BLANK)  # (batch, answer_len)
    return torch.cat((batch.prompts, slots), dim=1)  # (batch, prompt + answer)


def answer_logits(model: TinyTransformer, batch: TaskBatch) -> torch.Tensor:
    """The logits that predict the answer tokens, ``(batch, answer_len, vocabulary_size)``."""
    logits = model(model_inputs(batch, causal=model.causal))  # (batch, seq, vocabulary)
    prompt_len, answer_len = batch.prompts.shape[1], batch.answers.shape[1]
    start = prompt_len - 1 if model.causal else prompt_len
    return logits[:, start:start + answer_len]  # (batch, answer_len, vocabulary)


def exact_match(logits: torch.Tensor, answers: torch.Tensor) -> torch.Tensor:
    """``(batch,)`` bool: True where the arg-max of every answer position equals the answer token."""
    return (logits.argmax(dim=-1) == answers).all(dim=1)  # (batch, answer_len) -> (batch,)


def correct_tokens(logits: torch.Tensor, answers: torch.Tensor) -> torch.Tensor:
    """``(batch, answer_len)`` bool: True where the arg-max of an answer position equals its answer token."""
    return logits.argmax(dim=-1) == answers  # (batch, answer_len)


SCHEDULES = ("constant", "cosine")
"""Learning-rate schedules after the warm-up (see the module docstring)."""


@dataclass(frozen=True)
class TrainSettings:
    """How to train one model.

    Attributes:
        min_length, max_length: the range of input sizes drawn for training batches (inclusive).
        max_steps: the most optimiser steps.
        batch_size: examples per step.
        learning_rate: AdamW's peak learning rate, reached after ``warmup_steps`` linear steps.
        warmup_steps: linear warm-up from 0.
        weight_decay: AdamW's decoupled weight decay.
        schedule: ``"constant"`` or ``"cosine"`` after the warm-up (:data:`SCHEDULES`).
        final_learning_rate_factor: the cosine schedule's learning rate at ``max_steps``, as a share of the peak.
        target_accuracy: stop when the held-out exact match reaches it at every training length...
        patience: ...on this many checks in a row.
        check_every: steps between checks (and progress-bar updates).
        check_examples: held-out examples scored at each training length at each check.
        num_symbols: content symbols of the task.
        clip_norm: gradient-norm clipping threshold.
    """

    min_length: int
    max_length: int
    max_steps: int = 1000
    batch_size: int = 64
    learning_rate: float = 3e-3
    warmup_steps: int = 50
    weight_decay: float = 0.0
    schedule: str = "constant"
    final_learning_rate_factor: float = 0.1
    target_accuracy: float = 0.99
    patience: int = 3
    check_every: int = 50
    check_examples: int = 256
    num_symbols: int = 16
    clip_norm: float = 1.0

    def __post_init__(self) -> None:
        check_positive_int("min_length", self.min_length)
        check_int("max_length", self.max_length, minimum=self.min_length)
        check_positive_int("max_steps", self.max_steps)
        check_positive_int("batch_size", self.batch_size)
        check_positive_float("learning_rate", self.learning_rate)
        check_int("warmup_steps", self.warmup_steps, minimum=0)
        if isinstance(self.weight_decay, bool) or not isinstance(self.weight_decay, (int, float)) \
                or self.weight_decay < 0:
            raise ValueError(f"weight_decay must be a real number >= 0, got {self.weight_decay!r}")
        check_choice("schedule", self.schedule, SCHEDULES)
        if check_probability("final_learning_rate_factor", self.final_learning_rate_factor) == 0:
            raise ValueError(f"final_learning_rate_factor must be in (0, 1], got {self.final_learning_rate_factor}")
        if check_probability("target_accuracy", self.target_accuracy) == 0:
            raise ValueError(f"target_accuracy must be in (0, 1), got {self.target_accuracy}")
        check_positive_int("patience", self.patience)
        check_positive_int("check_every", self.check_every)
        check_positive_int("check_examples", self.check_examples)
        check_positive_int("num_symbols", self.num_symbols)
        check_positive_float("clip_norm", self.clip_norm)


@dataclass(frozen=True)
class TrainResult:
    """What one training run did: ``steps`` taken, the last training ``loss``, the lowest held-out exact match
    over the training lengths at the last check (``accuracy``), whether the stopping rule was met
    (``reached_target``), and the wall time in ``seconds`` (checks included)."""

    steps: int
    loss: float
    accuracy: float
    reached_target: bool
    seconds: float


def learning_rate_factor(step: int, settings: TrainSettings) -> float:
    r"""The learning rate of optimiser step ``step`` (from 0) as a share of the peak.

    Warm-up: :math:`(s + 1) / w` for :math:`s < w`. Then 1 (``"constant"``), or, with :math:`f` the final
    factor and :math:`S` the step budget,
    :math:`f + (1 - f)\,\tfrac{1}{2}\bigl(1 + \cos(\pi\,\tfrac{s - w}{S - w})\bigr)` (``"cosine"``),
    which is 1 at the end of the warm-up and :math:`f` at step :math:`S`.
    """
    warmup = settings.warmup_steps
    if step < warmup:
        return (step + 1) / warmup
    if settings.schedule == "constant" or settings.max_steps <= warmup:
        return 1.0
    progress = min(1.0, (step - warmup) / (settings.max_steps - warmup))
    final = settings.final_learning_rate_factor
    return final + (1 - final) * 0.5 * (1 + math.cos(math.pi * progress))


def train_model(
    model: TinyTransformer,
    task: str,
    settings: TrainSettings,
    *,
    seed: int = 0,
    device: torch.device | str = "cpu",
    progress: bool = True,
    description: str | None = None,
) -> TrainResult:
    """Train ``model`` on ``task`` in place (see the module docstring); returns a :class:`TrainResult`.

    Args:
        model: a :class:`~posenc_ref.lab.models.TinyTransformer` whose vocabulary covers the task's tokens.
        task: a name in :data:`posenc_ref.lab.tasks.TASKS`.
        settings: lengths, steps, optimiser and stopping rule.
        seed: seeds the stream of training batches.
        device: where the model is moved and the batches are made.
        progress: show a tqdm progress bar (it writes to stderr: turn it off where stderr must stay empty).
        description: the progress bar's label.

    Raises:
        TypeError, ValueError: an unknown task, a length range the task does not allow, a bad device or seed.
    """
    check_choice("task", task, TASKS)
    TASKS[task].check_length(settings.min_length, settings.num_symbols)
    TASKS[task].check_length(settings.max_length, settings.num_symbols)
    check_int("seed", seed)
    device = resolve_device(device)
    model.to(device).train()
    optimiser = torch.optim.AdamW(model.parameters(), lr=settings.learning_rate,
                                  weight_decay=settings.weight_decay)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimiser, lambda step: learning_rate_factor(step, settings))
    rng = random.Random(seed)
    check_rng = random.Random(f"check/{seed}/{task}")
    loss_value, accuracy, reached, steps, passed_in_a_row = float("nan"), float("nan"), False, 0, 0
    begin = time.perf_counter()
    with tqdm(total=settings.max_steps, desc=description, disable=not progress, leave=False) as bar:
        for steps in range(1, settings.max_steps + 1):
            length = rng.randint(settings.min_length, settings.max_length)
            batch = make_batch(task, length, settings.batch_size, rng=rng, num_symbols=settings.num_symbols,
                               device=device)
            logits = answer_logits(model, batch)  # (batch, answer_len, vocabulary)
            loss = nn.functional.cross_entropy(logits.flatten(0, 1), batch.answers.flatten())
            optimiser.zero_grad(set_to_none=True)
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), settings.clip_norm)
            optimiser.step()
            schedule.step()
            bar.update(1)
            if steps % settings.check_every == 0 or steps == settings.max_steps:
                loss_value = loss.item()
                accuracy = min(_held_out_check(model, task, settings, check_rng, device).values())
                bar.set_postfix(loss=f"{loss_value:.3f}", lowest_exact=f"{accuracy:.3f}")
                passed_in_a_row = passed_in_a_row + 1 if accuracy >= settings.target_accuracy else 0
                if passed_in_a_row >= settings.patience:
                    reached = True
                    break
    model.eval()
    return TrainResult(steps, loss_value, accuracy, reached, time.perf_counter() - begin)


@torch.no_grad()
def _held_out_check(model: TinyTransformer, task: str, settings: TrainSettings, rng: random.Random,
                    device: torch.device) -> dict[int, float]:
    """``{length: exact match}`` on fresh held-out examples at every training length; leaves the model in
    training mode."""
    model.eval()
    accuracies = {}
    for length in range(settings.min_length, settings.max_length + 1):
        batch = make_batch(task, length, settings.check_examples, rng=rng, num_symbols=settings.num_symbols,
                           device=device)
        accuracies[length] = exact_match(answer_logits(model, batch), batch.answers).float().mean().item()
    model.train()
    return accuracies


@dataclass(frozen=True)
class Scores:
    """A model's scores on ``examples`` examples of one length: the share answered exactly (``exact_match``)
    and the share of answer tokens that are right (``token_accuracy``)."""

    exact_match: float
    token_accuracy: float
    examples: int


@torch.no_grad()
def score(
    model: TinyTransformer,
    task: str,
    length: int,
    *,
    num_examples: int = 256,
    batch_size: int = 256,
    seed: int = 0,
    num_symbols: int = 16,
    device: torch.device | str = "cpu",
) -> Scores:
    """Exact match and per-token accuracy of ``model`` on ``num_examples`` fresh examples of ``task`` at input
    size ``length``.

    The examples depend only on ``(seed, task, length)``, so every model is scored on the same examples, and
    never on the held-out check's examples nor on a training batch (their streams are seeded otherwise).

    Raises:
        TypeError, ValueError: an unknown task or a length it does not allow; the learned kind's error for
            inputs longer than its table.
    """
    check_choice("task", task, TASKS)
    TASKS[task].check_length(length, num_symbols)
    check_positive_int("num_examples", num_examples)
    check_positive_int("batch_size", batch_size)
    device = resolve_device(device)
    rng = random.Random(f"evaluate/{seed}/{task}/{length}")
    model.to(device).eval()
    exact, tokens, token_count, remaining = 0, 0, 0, num_examples
    while remaining:
        size = min(batch_size, remaining)
        batch = make_batch(task, length, size, rng=rng, num_symbols=num_symbols, device=device)
        right = correct_tokens(answer_logits(model, batch), batch.answers)  # (size, answer_len)
        exact += int(right.all(dim=1).sum())
        tokens += int(right.sum())
        token_count += right.numel()
        remaining -= size
    return Scores(exact / num_examples, tokens / token_count, num_examples)


def evaluate(
    model: TinyTransformer,
    task: str,
    length: int,
    *,
    num_examples: int = 256,
    batch_size: int = 256,
    seed: int = 0,
    num_symbols: int = 16,
    device: torch.device | str = "cpu",
) -> float:
    """The exact match of :func:`score` (same arguments, same examples, same errors)."""
    return score(model, task, length, num_examples=num_examples, batch_size=batch_size, seed=seed,
                 num_symbols=num_symbols, device=device).exact_match
