r"""Tiny transformers for the experiments of chapter 6: an encoder and a decoder with any position kind.

Both are a stack of pre-norm blocks (layer norm before each sub-layer, as in GPT-2) on token embeddings:

.. math::

    h^{(0)} = E[\text{tokens}] \;(+\, \mathrm{PE}), \qquad
    u = h + \operatorname{MHA}(\operatorname{LN}(h)), \qquad
    h' = u + W_2\, \operatorname{GELU}(W_1 \operatorname{LN}(u)),

followed by a final layer norm and a linear read-out to one logit per vocabulary entry. The encoder's
attention is bidirectional; the decoder's is causal (position p sees positions <= p).

Token embeddings and a learned position table start on **one scale**, :data:`EMBEDDING_STD` = 1:
:math:`\mathcal{N}(0, 1)` entries, the scale of the sinusoidal table's entries (its rows have norm
:math:`\sqrt{d/2}`, a token row :math:`\approx \sqrt{d}`) and of the original Transformer's embeddings after
their :math:`\sqrt{d}` factor. Hugging Face's GPT-2 keeps one scale too, its ``initializer_range`` of 0.02
for both tables (OpenAI's original code drew the position table with 0.01 and the token table with 0.02,
scales within a factor 2). What must not happen is a table 50 times smaller than the tokens it is added to:
after the first layer norm its rows are then a whisper under the tokens, and the model must first learn to
amplify them before it can tell positions apart.

Where the position enters depends on its kind, as in the models that made each kind known:

- absolute kinds (``"sinusoidal"``, ``"learned"``: every registered kind that overrides
  :meth:`~posenc_ref.attention.PositionKind.encode_input`) are added **once**, to the token embeddings,
  as in the original Transformer, GPT-2 and BERT; the attention layers then get ``position="none"``;
- relative and rotary kinds (``"shaw"``, ``"t5"``, ``"alibi"``, ``"rope"``) act inside **every** attention
  layer, as in T5, BLOOM and LLaMA (each layer has its own tables where the kind has parameters);
- ``"none"`` adds nothing anywhere.

**Randomized positions** (Ruoss et al., 2023), for the kinds that take explicit positions (absolute and
rotary): with ``random_positions = M``, every forward pass places the n tokens at a sorted random subset of
``0 .. M - 1`` (drawn from torch's generator) instead of at ``0 .. n - 1``, in training and in evaluation
alike. Trained on short inputs, the model has then met every position up to M and every gap between
positions; what stays in distribution on longer inputs is the order of the tokens, not their distances.

Every attention layer is a :class:`posenc_ref.attention.MultiHeadAttention`, so the registry
:data:`posenc_ref.attention.POSITION_KINDS` decides what kinds exist.
"""

from __future__ import annotations

import torch
from torch import nn

from posenc_ref._checks import check_choice, check_positive_int, check_tensor
from posenc_ref.attention import POSITION_KINDS, MultiHeadAttention, PositionKind, make_position_kind

MODEL_KINDS: dict[str, bool] = {"encoder": False, "decoder": True}
"""The two model kinds and whether their attention is causal."""

EMBEDDING_STD = 1.0
"""The standard deviation of the initial token embeddings and learned position rows (see the module doc)."""


def is_absolute(position: str) -> bool:
    """True for a position kind that is added to the input (it overrides ``PositionKind.encode_input``).

    Raises:
        ValueError: ``position`` is not in :data:`posenc_ref.attention.POSITION_KINDS`.
    """
    check_choice("position", position, POSITION_KINDS)
    return POSITION_KINDS[position].encode_input is not PositionKind.encode_input


class TransformerBlock(nn.Module):
    """One pre-norm block: ``h + MHA(LN(h))``, then ``u + MLP(LN(u))``; ``(batch, seq, d)`` in and out."""

    def __init__(self, d_model: int, num_heads: int, feedforward_dim: int, *, position: str, causal: bool,
                 backend: str, **position_options) -> None:
        super().__init__()
        self.attention_norm = nn.LayerNorm(d_model)
        self.attention = MultiHeadAttention(d_model, num_heads, position=position, causal=causal,
                                            backend=backend, **position_options)
        self.feedforward_norm = nn.LayerNorm(d_model)
        self.feedforward = nn.Sequential(
            nn.Linear(d_model, feedforward_dim), nn.GELU(), nn.Linear(feedforward_dim, d_model)
        )

    def forward(self, hidden: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        hidden = hidden + self.attention(self.attention_norm(hidden), positions=positions)  # (batch, seq, d_model)
        return hidden + self.feedforward(self.feedforward_norm(hidden))  # (batch, seq, d_model)


class TinyTransformer(nn.Module):
    r"""A small transformer over token ids: encoder (``causal=False``) or decoder (``causal=True``).

    Args:
        vocabulary_size: number of token ids, >= 1.
        position: a name in :data:`posenc_ref.attention.POSITION_KINDS`.
        causal: decoder attention (position p sees positions <= p) instead of bidirectional attention.
        d_model: the model dimension d, divisible by ``num_heads``.
        num_heads: attention heads per layer.
        num_layers: number of blocks, >= 1.
        feedforward_dim: hidden width of each block's MLP; default ``4 * d_model``.
        backend: ``"reference"`` or ``"fast"``, passed to every :class:`MultiHeadAttention`.
        random_positions: M, the range of randomized positions (see the module docstring), at least the
            longest input; None (the default) places tokens at ``0 .. n - 1``. Only for kinds that take
            explicit positions (:attr:`~posenc_ref.attention.PositionKind.takes_positions`); a learned table
            needs ``max_len >= M``.
        **position_options: passed to the position kind: ``max_len`` (required for ``"learned"``: the rows
            of its table), ``max_distance`` (Shaw's clipping distance k; T5's bucket range),
            ``num_buckets``, ``bidirectional`` (T5; default ``not causal``, as in T5's decoder), ``base``,
            ``scaling``, ``layout`` (RoPE), ``base`` (sinusoidal).

    ``forward(tokens, positions=None)``: ``tokens`` int64 ``(batch, seq)`` -> logits
    ``(batch, seq, vocabulary_size)``; ``positions`` ``(seq,)`` places the tokens explicitly.

    Raises:
        TypeError, ValueError: a bad size, an unknown position kind or backend, an option the kind rejects
            (named by the kind), a missing ``max_len`` for ``"learned"``.
    """

    def __init__(self, vocabulary_size: int, *, position: str, causal: bool, d_model: int = 64,
                 num_heads: int = 4, num_layers: int = 2, feedforward_dim: int | None = None,
                 backend: str = "reference", random_positions: int | None = None, **position_options) -> None:
        super().__init__()
        check_positive_int("vocabulary_size", vocabulary_size)
        check_positive_int("num_layers", num_layers)
        if not isinstance(causal, bool):
            raise TypeError(f"causal must be a bool, got {causal!r}")
        feedforward_dim = 4 * d_model if feedforward_dim is None else check_positive_int("feedforward_dim",
                                                                                          feedforward_dim)
        if position == "t5":
            position_options.setdefault("bidirectional", not causal)
        check_choice("position", position, POSITION_KINDS)
        if random_positions is not None:
            check_positive_int("random_positions", random_positions)
            if not POSITION_KINDS[position].takes_positions:
                raise ValueError(f"random_positions needs a kind that takes explicit positions "
                                 f"{[name for name, kind in POSITION_KINDS.items() if kind.takes_positions]}; "
                                 f"got position={position!r}")
            if position == "learned" and position_options.get("max_len", random_positions) < random_positions:
                raise ValueError(f"random_positions={random_positions} needs a learned table of max_len >= "
                                 f"{random_positions}; got max_len={position_options['max_len']}")
        self.vocabulary_size, self.position_name, self.causal = vocabulary_size, position, causal
        self.random_positions = random_positions
        self.embedding = nn.Embedding(vocabulary_size, d_model)
        nn.init.normal_(self.embedding.weight, mean=0.0, std=EMBEDDING_STD)
        absolute = is_absolute(position)
        if position == "learned":
            position_options.setdefault("init_std", EMBEDDING_STD)
        # An absolute kind is built once, from the registry, and added to the embeddings.
        self.input_position = (make_position_kind(position, d_model, num_heads, **position_options)
                               if absolute else None)
        layer_position, layer_options = ("none", {}) if absolute else (position, position_options)
        self.blocks = nn.ModuleList(
            TransformerBlock(d_model, num_heads, feedforward_dim, position=layer_position, causal=causal,
                             backend=backend, **layer_options)
            for _ in range(num_layers)
        )
        self.final_norm = nn.LayerNorm(d_model)
        self.read_out = nn.Linear(d_model, vocabulary_size)

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        """Logits ``(batch, seq, vocabulary_size)`` for int64 ``tokens`` ``(batch, seq)``.

        ``positions`` ``(seq,)``: the position of each token (kinds that take explicit positions); by default
        ``0 .. seq - 1``, or a fresh sorted random draw from ``0 .. random_positions - 1``.

        Raises:
            TypeError, ValueError: ``tokens`` is not a 2-D int64 tensor of ids below ``vocabulary_size``;
                the learned kind's error when the input needs positions beyond ``max_len``; an input longer
                than ``random_positions``; bad ``positions``.
        """
        check_tensor("tokens", tokens, ndim=2)
        if tokens.dtype != torch.int64:
            raise TypeError(f"tokens must be an int64 tensor of token ids, got dtype {tokens.dtype}")
        if tokens.numel() and not 0 <= int(tokens.min()) <= int(tokens.max()) < self.vocabulary_size:
            raise ValueError(f"tokens must be ids in [0, {self.vocabulary_size}); got values in "
                             f"[{int(tokens.min())}, {int(tokens.max())}]")
        if positions is None and self.random_positions is not None:
            positions = self.draw_positions(tokens.shape[1], device=tokens.device)  # (seq,)
        hidden = self.embedding(tokens)  # (batch, seq, d_model)
        if self.input_position is not None:
            hidden = (self.input_position.encode_input(hidden, 0) if positions is None
                      else self.input_position.encode_input(hidden, 0, positions))  # (batch, seq, d_model)
            positions = None  # the layers of an absolute model attend without positions
        for block in self.blocks:
            hidden = block(hidden, positions)  # (batch, seq, d_model)
        return self.read_out(self.final_norm(hidden))  # (batch, seq, vocabulary_size)

    def draw_positions(self, length: int, *, device: torch.device | str = "cpu") -> torch.Tensor:
        """A sorted random subset of ``0 .. random_positions - 1`` of ``length`` entries, int64 ``(length,)``.

        Raises:
            ValueError: the model has no ``random_positions``, or ``length`` exceeds it.
        """
        if self.random_positions is None:
            raise ValueError("this model places tokens at 0 .. n - 1: it was built without random_positions")
        if length > self.random_positions:
            raise ValueError(f"an input of {length} tokens needs more than random_positions="
                             f"{self.random_positions} distinct positions; build the model with a larger range")
        return torch.randperm(self.random_positions)[:length].sort().values.to(device)  # (length,)

    def position_parameter_count(self) -> int:
        """Number of trained parameters that belong to the position kind (0 for fixed kinds)."""
        modules = [self.input_position] if self.input_position is not None else [
            block.attention.position for block in self.blocks]
        return sum(parameter.numel() for module in modules for parameter in module.parameters())


def build_model(model: str, vocabulary_size: int, position: str, **options) -> TinyTransformer:
    """A :class:`TinyTransformer` by model kind: ``"encoder"`` (bidirectional) or ``"decoder"`` (causal).

    ``options`` are the other arguments of :class:`TinyTransformer` (sizes, backend, position options).

    Raises:
        ValueError: ``model`` is not in :data:`MODEL_KINDS`; and what :class:`TinyTransformer` raises.
    """
    check_choice("model", model, MODEL_KINDS)
    return TinyTransformer(vocabulary_size, position=position, causal=MODEL_KINDS[model], **options)
