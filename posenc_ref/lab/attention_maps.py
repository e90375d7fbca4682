r"""What a trained model attends to: its attention maps, and how their entropy grows with the input length.

The **map** of head h in layer l is the matrix of softmax weights :math:`A_{ij}` of query i over key j, the
weights :func:`posenc_ref.attention.reference_attention` computes from the layer's own queries and keys.

Its **entropy** at query i is :math:`H_i = -\sum_j A_{ij} \ln A_{ij}` (nats, with :math:`0 \ln 0 = 0`): 0 when
the query looks at one key, :math:`\ln n_i` when it spreads evenly over its :math:`n_i` visible keys (all n in
an encoder, :math:`i + 1` in a decoder). A kind that keeps attention sharp beyond the training length keeps
:math:`H` near its in-range value as inputs grow; a kind whose attention dilutes follows :math:`\ln n`.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Sequence

import torch

from posenc_ref._checks import check_choice, check_positive_int, check_tensor
from posenc_ref.lab.models import TinyTransformer
from posenc_ref.lab.tasks import TASKS, make_batch
from posenc_ref.lab.train import model_inputs


@torch.no_grad()
def attention_maps(model: TinyTransformer, tokens: torch.Tensor, *,
                   positions: torch.Tensor | None = None) -> torch.Tensor:
    """The attention weights of every layer and head for ``tokens``: ``(layers, batch, heads, seq, seq)``.

    Args:
        model: a :class:`~posenc_ref.lab.models.TinyTransformer` (put in evaluation mode here).
        tokens: int64 ``(batch, seq)``.
        positions: ``(seq,)`` explicit positions (kinds that take them); a model with ``random_positions``
            draws them once here, so that every layer sees the draw the forward pass used.

    Raises:
        TypeError, ValueError: what the model's forward pass raises for these tokens and positions.
    """
    check_tensor("tokens", tokens, ndim=2)
    model.eval()
    if positions is None and model.random_positions is not None:
        positions = model.draw_positions(tokens.shape[1], device=tokens.device)  # (seq,)
    inputs: list[tuple[torch.Tensor, torch.Tensor | None]] = []

    def keep_input(module, args, kwargs):
        inputs.append((args[0], kwargs.get("positions")))

    hooks = [block.attention.register_forward_pre_hook(keep_input, with_kwargs=True) for block in model.blocks]
    try:
        model(tokens, positions)
    finally:
        for hook in hooks:
            hook.remove()
    maps = [block.attention.attention_weights(x, positions=layer_positions)  # (batch, heads, seq, seq)
            for block, (x, layer_positions) in zip(model.blocks, inputs, strict=True)]
    return torch.stack(maps)  # (layers, batch, heads, seq, seq)


def attention_entropy(weights: torch.Tensor) -> torch.Tensor:
    r"""The entropy :math:`-\sum_j A_{ij} \ln A_{ij}` of every row of ``weights`` ``(..., q_len, k_len)``, in
    nats: shape ``(..., q_len)``. Zero weights (masked keys) contribute 0.

    Raises:
        TypeError, ValueError: ``weights`` is not a floating tensor of at least 2 dimensions.
    """
    check_tensor("weights", weights, floating=True)
    if weights.dim() < 2:
        raise ValueError(f"weights must have at least 2 dimensions (queries, keys), got shape {tuple(weights.shape)}")
    terms = torch.where(weights > 0, weights * torch.log(weights.clamp_min(1e-38)), torch.zeros_like(weights))
    return -terms.sum(dim=-1)  # (..., q_len)


@torch.no_grad()
def entropy_by_length(model: TinyTransformer, task: str, lengths: Sequence[int], *, num_examples: int = 64,
                      seed: int = 0, num_symbols: int = 16) -> dict[int, dict[str, float]]:
    r"""Mean attention entropy of ``model`` on ``task`` at each input size in ``lengths``.

    For each length: ``num_examples`` fresh examples (the same for every model, as in
    :func:`posenc_ref.lab.train.evaluate`), the maps of every layer, head and query, and

    - ``"entropy"``: their mean entropy :math:`\bar H`;
    - ``"uniform"``: the mean of :math:`\ln n_i` over the same queries, the entropy of spreading evenly.

    Raises:
        ValueError: an unknown task, a length it does not allow, an empty ``lengths``.
    """
    check_choice("task", task, TASKS)
    check_positive_int("num_examples", num_examples)
    if not lengths:
        raise ValueError("lengths must name at least one input size")
    device = next(model.parameters()).device
    result = {}
    for length in lengths:
        TASKS[task].check_length(length, num_symbols)
        rng = random.Random(f"entropy/{seed}/{task}/{length}")
        batch = make_batch(task, length, num_examples, rng=rng, num_symbols=num_symbols, device=device)
        tokens = model_inputs(batch, causal=model.causal)  # (examples, seq)
        entropy = attention_entropy(attention_maps(model, tokens))  # (layers, examples, heads, seq)
        seq = tokens.shape[1]
        visible = [i + 1 for i in range(seq)] if model.causal else [seq] * seq
        result[length] = {"entropy": entropy.mean().item(),
                          "uniform": statistics.fmean(math.log(count) for count in visible)}
    return result
