"""posenc_ref: reference implementations of positional encodings for transformers.

Every name below is part of the course's contract: the book, the notebooks and the grader use them.
"""

from posenc_ref.attention import (
    POSITION_KINDS,
    MultiHeadAttention,
    attention,
    reference_attention,
    register_position_kind,
    relative_attention,
)
from posenc_ref.fast import fast_attention
from posenc_ref.learned import ConcatPositionalEncoding, LearnedPositionalEmbedding
from posenc_ref.relative import (
    ShawRelativePosition,
    T5RelativeBias,
    alibi_bias,
    alibi_slopes,
    relative_position_bucket,
    relative_positions,
)
from posenc_ref.rope import (
    ROPE_SCALING_RULES,
    RotaryEmbedding,
    apply_rope,
    packed_document_mask,
    packed_positions,
    padded_positions,
    rope_angle_ratio,
    rope_frequencies,
    rope_permutation,
)
from posenc_ref.sinusoidal import (
    SinusoidalPositionalEncoding,
    shift_matrix,
    sinusoidal_frequencies,
    sinusoidal_table,
)

__all__ = [
    "POSITION_KINDS",
    "ROPE_SCALING_RULES",
    "ConcatPositionalEncoding",
    "LearnedPositionalEmbedding",
    "MultiHeadAttention",
    "RotaryEmbedding",
    "ShawRelativePosition",
    "SinusoidalPositionalEncoding",
    "T5RelativeBias",
    "alibi_bias",
    "alibi_slopes",
    "apply_rope",
    "attention",
    "fast_attention",
    "packed_document_mask",
    "packed_positions",
    "padded_positions",
    "reference_attention",
    "register_position_kind",
    "relative_attention",
    "relative_position_bucket",
    "relative_positions",
    "rope_angle_ratio",
    "rope_frequencies",
    "rope_permutation",
    "shift_matrix",
    "sinusoidal_frequencies",
    "sinusoidal_table",
]
