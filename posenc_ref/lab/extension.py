r"""Context extension on trained models: chapter 5's RoPE scaling rules, applied to models of chapter 6.

A rotary decoder trained on sequences of at most :math:`L'` tokens (the longest training *sequence*: prompt,
separator and answer of a task of size L) is read at a longer size sL with one of these rules, each a change
of its frequencies :math:`\omega_i = b^{-2i/d}` (:mod:`posenc_ref.rope`), with
:math:`s' = \text{seq}(sL) / L'` the factor between the longest sequences:

=========== ============================================================================================
``none``    the trained frequencies: positions beyond :math:`L'` are extrapolated
``pi``      position interpolation, :math:`\omega_i / s'` (Chen et al. 2023)
``ntk``     NTK-aware scaling, the base :math:`b\,s'^{d/(d-2)}`: pair i is divided by :math:`s'^{2i/(d-2)}`
``yarn``    YaRN (Peng et al. 2023): fast pairs kept, slow pairs interpolated, a ramp between, and the
            attention factor :math:`0.1 \ln s' + 1`
``dynamic`` dynamic NTK: at each sequence length :math:`l > L'` the base
            :math:`b\,(l / L')^{d/(d-2)}`, the NTK-aware rule with the factor the input needs
=========== ============================================================================================

Each is scored as it is (zero-shot) and after a short fine-tune at the longer size; the ALiBi and
position-free decoders are scored at the same sizes, with and without the same fine-tune, as references.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from posenc_ref._checks import check_choice, check_positive_float, check_positive_int
from posenc_ref.attention import POSITION_KINDS, RopePosition
from posenc_ref.lab import sweep
from posenc_ref.lab.length_generalization import load_trained_model
from posenc_ref.lab.models import TinyTransformer
from posenc_ref.lab.results import write_results
from posenc_ref.lab.settings import LengthGeneralizationSettings, Run
from posenc_ref.lab.tasks import TASKS
from posenc_ref.lab.train import evaluate, resolve_device, train_model

EXTENSION_METHODS: tuple[str, ...] = ("none", "pi", "ntk", "yarn", "dynamic")
"""The context-extension rules compared (see the module docstring)."""


def rope_extension(method: str, *, factor: float, original_length: int, head_dim: int,
                   base: float = 10000.0) -> dict[str, Any]:
    """The RoPE options ``{"base": ..., "scaling": ...}`` of ``method`` for a model trained on sequences of
    ``original_length`` tokens, read at ``factor`` times that length.

    Raises:
        ValueError: an unknown method, a factor below 1, a bad length or head_dim.
    """
    check_choice("method", method, EXTENSION_METHODS)
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not factor >= 1:
        raise ValueError(f"factor must be a real number >= 1, got {factor!r}")
    check_positive_int("original_length", original_length)
    check_positive_int("head_dim", head_dim)
    if method == "none":
        return {"base": base, "scaling": None}
    if method == "pi":
        return {"base": base, "scaling": {"type": "linear", "factor": float(factor)}}
    if method == "ntk":
        return {"base": base * factor ** (head_dim / (head_dim - 2)), "scaling": None}
    if method == "yarn":
        return {"base": base, "scaling": {"type": "yarn", "factor": float(factor),
                                          "original_max_position_embeddings": original_length}}
    # Dynamic NTK with factor 1: base * (l / L')^(d / (d - 2)) at each length l > L', the base below.
    return {"base": base, "scaling": {"type": "dynamic", "factor": 1.0,
                                      "original_max_position_embeddings": original_length}}


def with_rope_extension(model: TinyTransformer, method: str, *, factor: float, original_length: int) -> TinyTransformer:
    """A copy of a trained rotary ``model`` whose every layer reads positions with ``method``.

    The weights are copied (the original is untouched); only the rotary frequencies change: a
    :class:`~posenc_ref.attention.RopePosition` has no parameters.

    Raises:
        ValueError: ``model`` is not a rotary model; what :func:`rope_extension` raises.
    """
    if model.position_name != "rope":
        raise ValueError(f"context extension rescales rotary models; got position={model.position_name!r}")
    extended = copy.deepcopy(model)
    for block in extended.blocks:
        attention = block.attention
        trained: RopePosition = attention.position
        options = rope_extension(method, factor=factor, original_length=original_length,
                                 head_dim=attention.head_dim, base=trained.base)
        attention.position = RopePosition(attention.d_model, attention.num_heads, layout=trained.layout,
                                          **options)
    return extended.to(next(model.parameters()).device)



def model_input_length(task: str, length: int, *, causal: bool) -> int:
    """The number of tokens a model reads for an input of size ``length``: the sequence, less the last answer
    token for a decoder (:func:`posenc_ref.lab.train.model_inputs`)."""
    return TASKS[task].sequence_length(length) - int(causal)


@dataclass(frozen=True)
class ExtensionSettings:
    """The context-extension grid on the decoders of a length-generalization sweep.

    Attributes:
        factors: the sizes read, as multiples s of the training size L.
        methods: rules of :data:`EXTENSION_METHODS` applied to the rotary decoder.
        references: other decoders scored at the same sizes (no rule to apply).
        finetune_steps: optimiser steps of the short fine-tune on sizes from the task's smallest up to sL
            (the training run's optimiser and batch size; 10 warm-up steps).
        finetune_learning_rate: its peak learning rate.
    """

    factors: tuple[int, ...] = (2, 3)
    methods: tuple[str, ...] = EXTENSION_METHODS
    references: tuple[str, ...] = ("alibi", "none")
    finetune_steps: int = 150
    finetune_learning_rate: float = 1e-3

    def __post_init__(self) -> None:
        if not self.factors or any(isinstance(f, bool) or not isinstance(f, int) or f < 2 for f in self.factors):
            raise ValueError(f"factors must be a non-empty sequence of ints >= 2, got {self.factors!r}")
        if not self.methods:
            raise ValueError("methods must name at least one rule")
        for method in self.methods:
            check_choice("methods", method, EXTENSION_METHODS)
        for reference in self.references:
            check_choice("references", reference, tuple(name for name in POSITION_KINDS if name != "rope"))
        check_positive_int("finetune_steps", self.finetune_steps)
        check_positive_float("finetune_learning_rate", self.finetune_learning_rate)


EXTENSION_COLUMNS: tuple[str, ...] = (
    "task", "position", "method", "factor", "finetuned", "seed", "length", "accuracy", "train_length",
    "finetune_steps", "examples",
)
"""The columns of ``extension.csv``: one score of one decoder, read with one rule at one size."""


@dataclass(frozen=True)
class _ExtensionJob:
    settings: LengthGeneralizationSettings
    extension: ExtensionSettings
    models_dir: str
    task: str
    position: str
    seed: int
    device: str

    @property
    def key(self) -> str:
        return f"extension-{self.task}-{self.position}-seed{self.seed}"


def _extend_and_score(job: _ExtensionJob) -> list[dict[str, Any]]:
    """Score one trained decoder at every factor, with every rule (rotary) and after each fine-tune."""
    settings, extension = job.settings, job.extension
    device = torch.device(job.device)
    run = Run(job.task, "decoder", job.position, False, job.seed)
    trained = load_trained_model(job.models_dir, settings, run, retrain=True).to(device)
    train_length = settings.train_length
    original_length = model_input_length(job.task, train_length, causal=True)
    methods = extension.methods if job.position == "rope" else ("none",)
    rows = []

    def score(model: TinyTransformer, method: str, factor: int, finetuned: bool) -> None:
        for length in (train_length, factor * train_length):
            accuracy = evaluate(model, job.task, length, num_examples=settings.eval_examples, seed=job.seed,
                                num_symbols=settings.num_symbols, device=device)
            rows.append({"task": job.task, "position": job.position, "method": method, "factor": factor,
                         "finetuned": finetuned, "seed": job.seed, "length": length, "accuracy": accuracy,
                         "train_length": train_length,
                         "finetune_steps": extension.finetune_steps if finetuned else 0,
                         "examples": settings.eval_examples})

    for factor in extension.factors:
        longest = model_input_length(job.task, factor * train_length, causal=True)
        for method in methods:
            model = (with_rope_extension(trained, method, factor=longest / original_length,
                                         original_length=original_length)
                     if job.position == "rope" else copy.deepcopy(trained))
            score(model, method, factor, finetuned=False)
            tune = dataclasses.replace(settings.train_settings(job.task), max_length=factor * train_length,
                                       max_steps=extension.finetune_steps, warmup_steps=10,
                                       learning_rate=extension.finetune_learning_rate,
                                       check_every=extension.finetune_steps)
            train_model(model, job.task, tune, seed=job.seed + 1000 * factor, device=device, progress=False)
            score(model, method, factor, finetuned=True)
    return rows


def run_context_extension(
    settings: LengthGeneralizationSettings,
    *,
    models_dir: str | Path,
    out_dir: str | Path,
    extension: ExtensionSettings = ExtensionSettings(),
    device: torch.device | str = "cpu",
    jobs: int = 1,
    threads: int = 1,
    progress: bool = True,
    command: Sequence[str] | None = None,
) -> list[dict[str, Any]]:
    """Score the trained decoders of a sweep at ``factor * L`` with each rule, before and after a fine-tune.

    ``models_dir`` is the output folder of
    :func:`~posenc_ref.lab.length_generalization.run_length_generalization` run with
    ``settings`` (ideally with ``save_models=True``); its rotary decoders (and the reference kinds') of every task
    and seed are read, and those whose weights were not saved are trained again from their seed. Each (task, kind, seed) is one run of :func:`posenc_ref.lab.sweep.run_sweep`, saved in
    ``out_dir/runs/`` as it finishes (resumable); the rows go to ``out_dir/extension.csv`` with the columns of
    :data:`EXTENSION_COLUMNS`, and ``out_dir/provenance.json`` records the command, versions and wall time.

    Raises:
        ValueError: the settings have no decoder or no rotary kind, or lack a reference kind.
    """
    if "decoder" not in settings.models or "rope" not in settings.positions:
        raise ValueError("context extension needs the sweep's rotary decoders: settings.models must include "
                         "'decoder' and settings.positions 'rope'")
    missing = [name for name in extension.references if name not in settings.positions]
    if missing:
        raise ValueError(f"references {missing} are not among the sweep's kinds {list(settings.positions)}")
    device = resolve_device(device)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    started = time.time()
    version = sweep.code_version()
    jobs_list = [_ExtensionJob(settings, extension, str(models_dir), task, position, seed, str(device))
                 for task in settings.tasks for position in ("rope", *extension.references)
                 for seed in settings.seeds]
    computed = 0
    record = {"length_generalization": json.loads(json.dumps(dataclasses.asdict(settings))),
              "extension": json.loads(json.dumps(dataclasses.asdict(extension)))}

    def note_provenance() -> None:
        sweep.provenance(out_dir, command=list(sys.argv if command is None else command), settings=record,
                         device=str(device), jobs=jobs, threads=threads, started=started, runs=len(jobs_list),
                         runs_this_invocation=computed, version=version)

    def count(job: _ExtensionJob, result: Any) -> None:
        nonlocal computed
        computed += 1
        note_provenance()  # after every run, so an interrupted invocation keeps its time

    results = sweep.run_sweep(jobs_list, _extend_and_score, folder=out_dir, key=lambda job: job.key, jobs=jobs,
                              threads=threads, progress=progress, on_result=count)
    rows = [row for job_rows in results for row in job_rows]
    write_results(rows, out_dir / "extension.csv", EXTENSION_COLUMNS)
    note_provenance()
    return rows
