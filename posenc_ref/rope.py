r"""Rotary position embedding (RoPE), its two feature layouts and its long-context scaling rules.

RoPE (Su et al. 2021, RoFormer) encodes a position by rotating queries and keys instead of adding a vector
to the embeddings. The ``head_dim`` features of a query or key are split into ``head_dim / 2`` pairs; pair
``i`` is a point in the plane, rotated by the angle ``m * omega_i`` where ``m`` is the token's position and

    omega_i = inv_freq[i] = base ** (-2 i / d),    i = 0, ..., d/2 - 1,    d = head_dim.

Writing the rotation of the whole vector as the block-diagonal matrix ``R(m)``, the attention logit of a
query at position ``m`` and a key at position ``n`` is

    <R(m) q, R(n) k> = <q, R(m)^T R(n) k> = <q, R(n - m) k>,

so it depends on the positions only through ``m - n``: RoPE is a relative encoding built from absolute
rotations. A rotation keeps the norm, position 0 is the identity and ``R(m) R(n) = R(m + n)``.

Two layouts say which features form a pair:

- ``"interleaved"``: pairs ``(2i, 2i+1)``, as in RoFormer and Meta's original Llama code;
- ``"half"``: pairs ``(i, i + d/2)``, as in GPT-NeoX and Hugging Face's Llama (``rotate_half``).

They differ by the fixed permutation :func:`rope_permutation`.

Partial rotary embedding rotates only the first ``rotary_dim`` features of each head and passes the others
through unchanged, with frequencies ``base ** (-2i / rotary_dim)``: GPT-J's ``rotary_dim``, GPT-NeoX's
``rotary_pct`` and Hugging Face's ``partial_rotary_factor`` (``rotary_dim = int(head_dim * factor)``). The
logit is then a rotated part that depends on ``m - n`` plus a part that ignores positions.

Long-context scaling rules change the frequencies ``omega_i`` (and sometimes scale ``cos``/``sin`` by an
``attention_factor``) so that a model trained on ``L = original_max_position_embeddings`` positions can read
longer sequences. They live in the registry :data:`ROPE_SCALING_RULES`, one small pure function per rule,
with the parameter names of Hugging Face transformers' ``rope_parameters`` (``rope_scaling``).
:func:`rope_angle_ratio` says, pair by pair, how far a rule lets the angles go beyond the trained ones.

The positions of a batch: :func:`padded_positions` numbers the tokens of a left-padded batch as Hugging Face's
``generate`` does, and :func:`packed_positions` and :func:`packed_document_mask` describe several documents
packed into one row, as Hugging Face's ``DataCollatorWithFlattening`` and its masks do.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

from posenc_ref._checks import (
    check_choice,
    check_even_dim,
    check_int,
    check_positions,
    check_positive_float,
    check_positive_int,
    check_same_dtype_and_device,
    check_tensor,
)

ROPE_LAYOUTS = ("interleaved", "half")

# The rules are computed in float64 and rounded once to float32, the dtype of the returned frequencies.
_RULE_DTYPE = torch.float64


# ----------------------------------------------------------------------------------------------------------
# Small checks this module needs beyond posenc_ref._checks
# ----------------------------------------------------------------------------------------------------------


def _check_base(name: str, value: Any) -> float:
    """The base must exceed 1 so that the frequencies decrease and log(base) (used by YaRN) is positive."""
    value = check_positive_float(name, value)
    if not value > 1.0:
        raise ValueError(f"{name} must be > 1 (frequencies base ** (-2i/d) must decrease), got {value}")
    return value


def _check_factor(name: str, value: Any) -> float:
    """A context-extension factor is a real number >= 1 (1 means no extension)."""
    value = check_positive_float(name, value)
    if value < 1.0:
        raise ValueError(f"{name} must be a real number >= 1 (the context-length ratio), got {value}")
    return value


def _check_bool(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool (True or False), got {value!r} of type {type(value).__name__}")
    return value


def _check_optional_positive_float(name: str, value: Any) -> float | None:
    return None if value is None else check_positive_float(name, value)


def _check_device(name: str, tensor: torch.Tensor, device: torch.device) -> None:
    if tensor.device != device:
        raise ValueError(f"{name} is on {tensor.device} but must be on {device}; nothing is moved silently")


# ----------------------------------------------------------------------------------------------------------
# Frequencies and the registry of scaling rules
# ----------------------------------------------------------------------------------------------------------


def _unscaled_inv_freq(dim: int, base: float) -> torch.Tensor:
    """omega_i = base ** (-2i/d) for i = 0 .. d/2 - 1, in float64."""
    exponents = torch.arange(0, dim, 2, dtype=_RULE_DTYPE) / dim  # (dim/2,)
    return base**-exponents


def _linear_rule(dim: int, base: float, params: Mapping[str, Any], seq_len: int | None) -> tuple[torch.Tensor, float]:
    """Position interpolation (Chen et al. 2023): positions are squeezed by ``factor`` s.

    omega_i' = omega_i / s, i.e. position m is rotated as position m / s of the original model.
    attention_factor = 1. Parameters: ``factor``.
    """
    inv_freq = _unscaled_inv_freq(dim, base) / params["factor"]
    return inv_freq.to(torch.float32), 1.0


def _dynamic_rule(
    dim: int, base: float, params: Mapping[str, Any], seq_len: int | None
) -> tuple[torch.Tensor, float]:
    """Dynamic NTK-aware scaling (bloc97 and emozilla 2023; used in Peng et al. 2023): grow the base with length.

    With L = original_max_position_embeddings, s = factor and l = seq_len (the length being read):
    for l <= L the frequencies are unchanged; for l > L the base becomes

        base' = base * (s * l / L - (s - 1)) ** (d / (d - 2)),    omega_i' = base' ** (-2i/d),

    so the lowest frequency is stretched by about s * l / L - (s - 1) while omega_0 = 1 stays. This is the
    form of Hugging Face transformers (with s = 1 it is the plain NTK-aware rule with scale l / L).
    attention_factor = 1. Parameters: ``factor``, ``original_max_position_embeddings``; needs ``seq_len``.
    Raises ValueError for d = 2, where the exponent d / (d - 2) is undefined.
    """
    if dim == 2:
        raise ValueError("dim must be >= 4 for 'dynamic' scaling (its exponent d / (d - 2) is undefined at d = 2)")
    original_length = params["original_max_position_embeddings"]
    factor = params["factor"]
    length = max(seq_len, original_length)
    scaled_base = base * (factor * length / original_length - (factor - 1)) ** (dim / (dim - 2))
    return _unscaled_inv_freq(dim, scaled_base).to(torch.float32), 1.0


def _yarn_correction_dim(rotations: float, dim: int, base: float, original_length: int) -> float:
    """The (fractional) pair index i whose wavelength 2 pi base^(2i/d) fits ``rotations`` times in L."""
    return dim * math.log(original_length / (rotations * 2 * math.pi)) / (2 * math.log(base))


def _yarn_rule(dim: int, base: float, params: Mapping[str, Any], seq_len: int | None) -> tuple[torch.Tensor, float]:
    """YaRN (Peng et al. 2023): interpolate only the pairs that rotate few times over the original context.

    With L = original_max_position_embeddings, s = factor, pair i makes r_i = L / (2 pi base^(2i/d))
    rotations over L. The pair indices where r equals beta_fast and beta_slow are

        i_fast = d ln(L / (2 pi beta_fast)) / (2 ln base),   i_slow = d ln(L / (2 pi beta_slow)) / (2 ln base),

    rounded outwards (floor, ceil) when ``truncate``, then clipped to [0, d - 1] (the bound d - 1, not
    d/2 - 1, is the one of the authors' code and of Hugging Face). With the ramp
    gamma_i = clip((i - i_fast) / (i_slow - i_fast), 0, 1),

        omega_i' = (1 - gamma_i) * omega_i + gamma_i * omega_i / s,

    so pairs with r_i > beta_fast keep their frequency (extrapolation), pairs with r_i < beta_slow are
    interpolated as in the linear rule, and the ramp is linear in i in between (as in the authors' code; the
    paper writes the ramp linear in r). attention_factor = 0.1 ln(s) + 1 (the paper's sqrt(1/t)) unless
    given. Parameters: ``factor``, ``original_max_position_embeddings``, optional ``beta_fast`` (32),
    ``beta_slow`` (1), ``attention_factor``, ``truncate`` (True).
    """
    factor = params["factor"]
    original_length = params["original_max_position_embeddings"]
    low = _yarn_correction_dim(params["beta_fast"], dim, base, original_length)
    high = _yarn_correction_dim(params["beta_slow"], dim, base, original_length)
    if params["truncate"]:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001  # a ramp of width 0 would divide by 0; this makes it a step
    pair_index = torch.arange(dim // 2, dtype=_RULE_DTYPE)  # (dim/2,)
    ramp = ((pair_index - low) / (high - low)).clamp(0.0, 1.0)  # (dim/2,)
    inv_freq = _unscaled_inv_freq(dim, base)
    inv_freq = (1 - ramp) * inv_freq + ramp * inv_freq / factor
    attention_factor = params["attention_factor"]
    if attention_factor is None:
        attention_factor = 0.1 * math.log(factor) + 1.0
    return inv_freq.to(torch.float32), float(attention_factor)


def _llama3_rule(dim: int, base: float, params: Mapping[str, Any], seq_len: int | None) -> tuple[torch.Tensor, float]:
    """Llama 3.1's rule (Meta 2024): interpolate by wavelength band.

    With L = original_max_position_embeddings, s = factor, the wavelength lambda_i = 2 pi / omega_i and the
    band edges lambda_high = L / high_freq_factor < lambda_low = L / low_freq_factor:

        omega_i' = omega_i                                  if lambda_i < lambda_high   (high frequencies)
        omega_i' = omega_i / s                              if lambda_i > lambda_low    (low frequencies)
        omega_i' = (1 - g_i) omega_i / s + g_i omega_i      otherwise,
        g_i = (L / lambda_i - low_freq_factor) / (high_freq_factor - low_freq_factor),

    which is continuous at both edges. attention_factor = 1. Parameters: ``factor``,
    ``original_max_position_embeddings``, ``low_freq_factor``, ``high_freq_factor`` (Llama 3.1: 8, 8192, 1, 4).
    """
    factor = params["factor"]
    original_length = params["original_max_position_embeddings"]
    low_freq_factor, high_freq_factor = params["low_freq_factor"], params["high_freq_factor"]
    inv_freq = _unscaled_inv_freq(dim, base)
    wavelength = 2 * math.pi / inv_freq  # (dim/2,)
    smooth = (original_length / wavelength - low_freq_factor) / (high_freq_factor - low_freq_factor)
    blended = (1 - smooth) * inv_freq / factor + smooth * inv_freq
    scaled = torch.where(wavelength > original_length / low_freq_factor, inv_freq / factor, blended)
    scaled = torch.where(wavelength < original_length / high_freq_factor, inv_freq, scaled)
    return scaled.to(torch.float32), 1.0


ROPE_SCALING_RULES: dict[str, Callable[[int, float, Mapping[str, Any], int | None], tuple[torch.Tensor, float]]] = {
    "linear": _linear_rule,
    "dynamic": _dynamic_rule,
    "yarn": _yarn_rule,
    "llama3": _llama3_rule,
}

# The one table of parameter names: for each rule, the required names and the optional names with defaults.
_SCALING_PARAMETERS: dict[str, tuple[tuple[str, ...], dict[str, Any]]] = {
    "linear": (("factor",), {}),
    "dynamic": (("factor", "original_max_position_embeddings"), {}),
    "yarn": (
        ("factor", "original_max_position_embeddings"),
        {"beta_fast": 32.0, "beta_slow": 1.0, "attention_factor": None, "truncate": True},
    ),
    "llama3": (("factor", "original_max_position_embeddings", "low_freq_factor", "high_freq_factor"), {}),
}

_PARAMETER_CHECKS: dict[str, Callable[[str, Any], Any]] = {
    "factor": _check_factor,
    "original_max_position_embeddings": check_positive_int,
    "beta_fast": check_positive_float,
    "beta_slow": check_positive_float,
    "attention_factor": _check_optional_positive_float,
    "truncate": _check_bool,
    "low_freq_factor": check_positive_float,
    "high_freq_factor": check_positive_float,
}


def _validated_scaling(scaling: Any) -> tuple[str, dict[str, Any]]:
    """Check a ``scaling`` dict against the table of names; return its type and its parameters with defaults."""
    if not isinstance(scaling, Mapping):
        raise TypeError(f"scaling must be None or a dict with a 'type' key, got {type(scaling).__name__}")
    if "type" not in scaling:
        raise ValueError(f"scaling must have a 'type' key, one of {', '.join(map(repr, ROPE_SCALING_RULES))}")
    scaling_type = check_choice("scaling['type']", scaling["type"], ROPE_SCALING_RULES)
    required, optional = _SCALING_PARAMETERS[scaling_type]
    allowed = ", ".join(repr(name) for name in ("type", *required, *optional))
    given = set(scaling) - {"type"}
    missing = [name for name in required if name not in given]
    if missing:
        raise ValueError(f"scaling of type {scaling_type!r} is missing {missing}; its keys are {allowed}")
    unknown = sorted(str(name) for name in given - set(required) - set(optional))
    if unknown:
        raise ValueError(f"scaling of type {scaling_type!r} has unknown keys {unknown}; allowed keys are {allowed}")
    params = dict(optional) | {name: scaling[name] for name in given}
    for name in given:
        params[name] = _PARAMETER_CHECKS[name](f"scaling[{name!r}]", params[name])
    _check_parameter_order(params, "beta_slow", "beta_fast")
    _check_parameter_order(params, "low_freq_factor", "high_freq_factor")
    return scaling_type, params


def _check_parameter_order(params: Mapping[str, Any], smaller: str, larger: str) -> None:
    if smaller in params and not params[smaller] < params[larger]:
        raise ValueError(
            f"scaling[{smaller!r}] must be < scaling[{larger!r}], got {params[smaller]} and {params[larger]}"
        )


def rope_frequencies(
    dim: int, *, base: float = 10000.0, scaling: Mapping[str, Any] | None = None, seq_len: int | None = None
) -> tuple[torch.Tensor, float]:
    """The rotation frequencies ``inv_freq`` of RoPE and the factor that scales ``cos`` and ``sin``.

    Without scaling, ``inv_freq[i] = omega_i = base ** (-2i/d)`` for ``i = 0 .. d/2 - 1`` and
    ``attention_factor = 1``. ``scaling`` is ``None`` or a dict ``{"type": ..., **parameters}`` with a type
    of :data:`ROPE_SCALING_RULES` and Hugging Face's parameter names:

    - ``"linear"``: ``factor``;
    - ``"dynamic"``: ``factor``, ``original_max_position_embeddings``; needs ``seq_len``;
    - ``"yarn"``: ``factor``, ``original_max_position_embeddings``, optional ``beta_fast``, ``beta_slow``,
      ``attention_factor``, ``truncate``;
    - ``"llama3"``: ``factor``, ``original_max_position_embeddings``, ``low_freq_factor``, ``high_freq_factor``.

    Each rule's docstring gives its formula. Computed in float64, returned as float32.

    Args:
        dim: the rotated dimension d (the head dimension), positive and even.
        base: the base of the geometric frequencies, > 1.
        scaling: the long-context rule and its parameters, or None.
        seq_len: the sequence length being read; used (and required) by "dynamic" only.

    Returns:
        ``(inv_freq, attention_factor)``: a float32 tensor of shape (dim/2,) and a float.

    Raises:
        TypeError / ValueError: odd or non-positive ``dim``, ``base <= 1``, a ``scaling`` that is not a dict,
        an unknown type, missing or unknown keys, ``factor < 1``, ``beta_slow >= beta_fast``,
        ``low_freq_factor >= high_freq_factor``, "dynamic" without ``seq_len``, ``seq_len`` for another rule.
    """
    check_even_dim("dim", dim)
    base = _check_base("base", base)
    if seq_len is not None:
        check_positive_int("seq_len", seq_len)
    scaling_type, params = (None, {}) if scaling is None else _validated_scaling(scaling)
    if scaling_type == "dynamic" and seq_len is None:
        raise ValueError("seq_len is required by scaling of type 'dynamic' (its frequencies depend on the length)")
    if scaling_type != "dynamic" and seq_len is not None:
        used_by = "no scaling" if scaling_type is None else f"scaling of type {scaling_type!r}"
        raise ValueError(f"seq_len is used only by scaling of type 'dynamic'; leave it None for {used_by}")
    if scaling_type is None:
        return _unscaled_inv_freq(dim, base).to(torch.float32), 1.0
    return ROPE_SCALING_RULES[scaling_type](dim, base, params, seq_len)


def _check_frequency_vector(name: str, value: Any) -> torch.Tensor:
    check_tensor(name, value, ndim=1, floating=True)
    if value.numel() == 0 or not bool((value > 0).all()):
        raise ValueError(f"{name} must hold positive frequencies (one per pair), got {value.tolist()}")
    return value


def rope_angle_ratio(
    inv_freq: torch.Tensor, original_inv_freq: torch.Tensor, *, original_length: int, length: int
) -> torch.Tensor:
    """Per pair, the largest angle met on ``length`` tokens over the largest angle met in training.

    A sequence of n tokens has offsets up to n - 1, so pair i reaches the angle (n - 1) omega_i. With
    L = ``original_length`` and omega = ``original_inv_freq`` in training, and l = ``length`` and
    omega' = ``inv_freq`` when reading,

        ratio_i = (l - 1) omega'_i / ((L - 1) omega_i).

    A ratio <= 1 means that pair i meets no angle it did not meet in training. A ratio above 1 matters only
    for a pair that did not complete a turn in training, (L - 1) omega_i < 2 pi: a pair that did has met
    every angle modulo 2 pi. Position interpolation (omega' = omega / s, l = s L) gives
    (s L - 1) / (s (L - 1)), just above 1, for every pair; unscaled frequencies give (l - 1) / (L - 1).

    Args:
        inv_freq: the frequencies used at ``length``, (pairs,), positive.
        original_inv_freq: the frequencies used in training, (pairs,), positive.
        original_length: the trained length L, >= 2.
        length: the length read, >= 2.

    Returns:
        float64 tensor (pairs,).

    Raises:
        TypeError / ValueError: frequencies that are not 1-D floating tensors of one length with positive
        entries, lengths that are not ints >= 2.
    """
    _check_frequency_vector("inv_freq", inv_freq)
    _check_frequency_vector("original_inv_freq", original_inv_freq)
    if inv_freq.shape != original_inv_freq.shape:
        raise ValueError(f"inv_freq has {inv_freq.shape[0]} pairs but original_inv_freq has "
                         f"{original_inv_freq.shape[0]}; they must match")
    check_int("original_length", original_length, minimum=2)
    check_int("length", length, minimum=2)
    reached = (length - 1) * inv_freq.to(torch.float64)  # (pairs,)
    trained = (original_length - 1) * original_inv_freq.to(torch.float64)  # (pairs,)
    return reached / trained


# ----------------------------------------------------------------------------------------------------------
# Applying the rotation
# ----------------------------------------------------------------------------------------------------------


def _angle_dtype(dtype: torch.dtype) -> torch.dtype:
    """Angles m * omega_i reach 1e5 and more: float32 at least, float64 for float64 inputs."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def _cos_sin(
    positions: torch.Tensor, inv_freq: torch.Tensor, dtype: torch.dtype, attention_factor: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos(m omega_i) and sin(m omega_i), times attention_factor, for every position m and pair i."""
    angles = positions.to(dtype)[:, None] * inv_freq.to(dtype)[None, :]  # (seq, head_dim/2)
    return angles.cos() * attention_factor, angles.sin() * attention_factor


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layout: str) -> torch.Tensor:
    """Rotate each feature pair (a, b) of x to (a cos - b sin, a sin + b cos); cos, sin are (seq, head_dim/2)."""
    x_angle = x.to(cos.dtype)
    if layout == "interleaved":
        pairs = x_angle.unflatten(-1, (-1, 2))  # (batch, heads, seq, head_dim/2, 2)
        first, second = pairs[..., 0], pairs[..., 1]  # (batch, heads, seq, head_dim/2)
        rotated = torch.stack((first * cos - second * sin, first * sin + second * cos), dim=-1)
        rotated = rotated.flatten(-2)  # (batch, heads, seq, head_dim)
    else:
        first, second = x_angle.chunk(2, dim=-1)  # (batch, heads, seq, head_dim/2)
        rotated = torch.cat((first * cos - second * sin, second * cos + first * sin), dim=-1)
    return rotated.to(x.dtype)


def _rotate_leading(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layout: str, rotary_dim: int
) -> torch.Tensor:
    """Rotate the first rotary_dim features of x and pass the others through (partial rotary embedding)."""
    if rotary_dim == x.shape[-1]:
        return _rotate(x, cos, sin, layout)
    rotated, passed = x[..., :rotary_dim], x[..., rotary_dim:]  # (..., rotary_dim), (..., head_dim - rotary_dim)
    return torch.cat((_rotate(rotated, cos, sin, layout), passed), dim=-1)


def _check_rotary_dim(rotary_dim: Any, head_dim: int) -> int:
    """None means every feature; otherwise an even int from 2 to head_dim."""
    if rotary_dim is None:
        return head_dim
    if isinstance(rotary_dim, bool) or not isinstance(rotary_dim, int):
        raise TypeError(f"rotary_dim must be an int or None, got {rotary_dim!r} of type {type(rotary_dim).__name__}")
    if not (2 <= rotary_dim <= head_dim and rotary_dim % 2 == 0):
        raise ValueError(
            f"rotary_dim must be None or an even int from 2 to head_dim = {head_dim} (the number of leading "
            f"features rotated, int(head_dim * partial_rotary_factor)), got {rotary_dim}"
        )
    return rotary_dim


def _check_inv_freq(inv_freq: Any, head_dim: int, device: torch.device, rotary_dim: int | None = None) -> torch.Tensor:
    check_tensor("inv_freq", inv_freq, ndim=1, floating=True)
    rotary_dim = head_dim if rotary_dim is None else rotary_dim
    if inv_freq.shape[0] != rotary_dim // 2:
        which = "head_dim" if rotary_dim == head_dim else "rotary_dim"
        raise ValueError(f"inv_freq must have {which} / 2 = {rotary_dim // 2} entries, got {inv_freq.shape[0]}")
    _check_device("inv_freq", inv_freq, device)
    return inv_freq


def _check_rope_input(name: str, x: Any) -> int:
    """x is (batch, heads, seq, head_dim), floating, with an even head_dim; return head_dim."""
    check_tensor(name, x, ndim=4, floating=True)
    head_dim = x.shape[-1]
    if head_dim == 0 or head_dim % 2:
        raise ValueError(
            f"{name}.shape[-1] (head_dim) must be a positive even int (features come in pairs), got {head_dim}"
        )
    return head_dim


def apply_rope(
    x: torch.Tensor,
    positions: torch.Tensor | None = None,
    *,
    base: float = 10000.0,
    inv_freq: torch.Tensor | None = None,
    layout: str = "interleaved",
    attention_factor: float = 1.0,
    rotary_dim: int | None = None,
) -> torch.Tensor:
    """Rotate every feature pair of x at position m by the angle m * omega_i.

    For pair i = (a, b) of a vector at position m (pairs (2i, 2i+1) for ``layout="interleaved"``, pairs
    (i, i + d/2) for ``layout="half"``), with c = attention_factor:

        a' = c (a cos(m omega_i) - b sin(m omega_i)),    b' = c (a sin(m omega_i) + b cos(m omega_i)),

    so that <R(m) q, R(n) k> depends on m - n only. Angles, cos and sin are float32 (float64 when x is
    float64), cos and sin are multiplied by attention_factor as Hugging Face does, and the result has x's dtype.

    With ``rotary_dim = r < head_dim`` (partial rotary embedding: GPT-J's ``rotary_dim``, GPT-NeoX's
    ``rotary_pct`` and Hugging Face's ``partial_rotary_factor``, r = int(head_dim * factor)), only features
    0 .. r - 1 are rotated, in the given layout among themselves, with omega_i = base ** (-2i / r); features
    r .. head_dim - 1 pass through unchanged (and are not multiplied by attention_factor, as in Hugging Face).

    Args:
        x: queries or keys, (batch, heads, seq, head_dim), floating, head_dim even.
        positions: 1-D integer tensor (seq,) of non-negative positions m on x's device; default arange(seq).
        base: the frequency base, omega_i = base ** (-2i/d); leave at its default when giving inv_freq.
        inv_freq: frequencies (head_dim/2,), e.g. from :func:`rope_frequencies` with a scaling rule.
        layout: one of :data:`ROPE_LAYOUTS`.
        attention_factor: the factor c > 0 multiplying cos and sin (YaRN's mscale).
        rotary_dim: the number r of leading features rotated, an even int from 2 to head_dim; None (the
            default) rotates all of them. ``inv_freq``, when given, then has r / 2 entries.

    Returns:
        The rotated tensor, (batch, heads, seq, head_dim), in x's dtype.

    Raises:
        TypeError / ValueError: x not a 4-D floating tensor or with an odd head_dim, an unknown layout,
        positions not a 1-D integer tensor of length seq, both base and inv_freq given, inv_freq of the wrong
        length or device, attention_factor <= 0, rotary_dim odd, below 2 or above head_dim.
    """
    head_dim = _check_rope_input("x", x)
    check_choice("layout", layout, ROPE_LAYOUTS)
    attention_factor = check_positive_float("attention_factor", attention_factor)
    rotary_dim = _check_rotary_dim(rotary_dim, head_dim)
    if inv_freq is None:
        inv_freq, _ = rope_frequencies(rotary_dim, base=base)
        inv_freq = inv_freq.to(x.device)
    elif base != 10000.0:
        raise ValueError(f"give one of base and inv_freq, not both (got base={base} and an inv_freq tensor)")
    else:
        _check_inv_freq(inv_freq, head_dim, x.device, rotary_dim)
    seq = x.shape[-2]
    if positions is None:
        positions = torch.arange(seq, device=x.device)
    check_positions("positions", positions, seq)
    _check_device("positions", positions, x.device)
    cos, sin = _cos_sin(positions, inv_freq, _angle_dtype(x.dtype), attention_factor)
    return _rotate_leading(x, cos, sin, layout, rotary_dim)


def rope_permutation(head_dim: int) -> torch.Tensor:
    """The index P = [0, 2, 4, ..., d-2, 1, 3, 5, ..., d-1] that turns the interleaved layout into the half one.

    ``apply_rope(x, layout="interleaved")[..., P] == apply_rope(x[..., P], layout="half")``: P moves the
    first member of every interleaved pair (2i, 2i+1) to slot i and the second to slot i + d/2, which is
    exactly the half layout's pair i, with the same frequency omega_i.

    Why a checkpoint conversion permutes the rows of W_q and W_k: a head computes q = W_q h and k = W_k h,
    one output feature per row. Reordering the rows by P gives q[P] = W_q[P, :] h, so a model trained with
    the interleaved layout runs unchanged in code that uses the half layout once the rows of W_q and W_k of
    every head are permuted by P; the logits stay the same because <q[P], k[P]> = <q, k> for any common
    permutation. W_v and W_o are not rotated and stay as they are. (Hugging Face's Llama conversion script
    does this when importing Meta's interleaved checkpoints.)

    Args:
        head_dim: the head dimension d, positive and even.

    Returns:
        int64 tensor of shape (head_dim,).
    """
    check_even_dim("head_dim", head_dim)
    return torch.cat((torch.arange(0, head_dim, 2), torch.arange(1, head_dim, 2)))


# ----------------------------------------------------------------------------------------------------------
# The positions of a batch: padding and packing
# ----------------------------------------------------------------------------------------------------------


def padded_positions(attention_mask: torch.Tensor) -> torch.Tensor:
    """The positions of a padded batch: every row numbers its real tokens 0, 1, 2, ... and its pads 0.

        positions[b, t] = (mask[b, 0] + ... + mask[b, t]) - 1   where mask[b, t] = 1,   0 where it is 0,

    which is how Hugging Face's ``generate`` builds ``position_ids`` from ``attention_mask``. A left-padded
    row then gives its real tokens the positions they have without padding; ``arange(seq)`` would shift them
    by the number of pads. The pads' positions do not matter as long as the mask hides them.

    Args:
        attention_mask: (batch, seq) integer or bool tensor, 1 (True) for a real token, 0 for a pad.

    Returns:
        int64 tensor (batch, seq) on the mask's device.

    Raises:
        TypeError / ValueError: a mask that is not a 2-D integer or bool tensor, or holds values other than 0
        and 1.
    """
    check_tensor("attention_mask", attention_mask, ndim=2)
    if attention_mask.dtype.is_floating_point or attention_mask.dtype.is_complex:
        raise TypeError(f"attention_mask must be an integer or bool tensor, got dtype {attention_mask.dtype}")
    mask = attention_mask.long()
    if not bool(((mask == 0) | (mask == 1)).all()):
        raise ValueError(f"attention_mask must hold only 0 and 1, got values {mask.unique().tolist()}")
    return ((mask.cumsum(dim=-1) - 1) * mask).long()  # (batch, seq)


def _check_lengths(lengths: Any) -> list[int]:
    if isinstance(lengths, (str, bytes)) or not hasattr(lengths, "__iter__"):
        raise TypeError(f"lengths must be a sequence of ints (one per document), got {type(lengths).__name__}")
    lengths = [check_positive_int(f"lengths[{index}]", length) for index, length in enumerate(lengths)]
    if not lengths:
        raise ValueError("lengths must name at least one document")
    return lengths


def packed_positions(lengths: Any, *, device: torch.device | str | None = None) -> torch.Tensor:
    """Positions of documents packed one after another into one row: each document counts from 0 again.

    ``packed_positions([3, 2]) == tensor([0, 1, 2, 0, 1])``, the ``position_ids`` of Hugging Face's
    ``DataCollatorWithFlattening``. With restarting positions and :func:`packed_document_mask`, each
    document is computed exactly as if it were alone.

    Args:
        lengths: the number of tokens of each document, positive ints.
        device: where to build the result.

    Returns:
        int64 tensor (sum(lengths),).

    Raises:
        TypeError / ValueError: lengths that are not a non-empty sequence of positive ints.
    """
    lengths = _check_lengths(lengths)
    return torch.cat([torch.arange(length, device=device) for length in lengths])  # (total,)


def packed_document_mask(lengths: Any, *, device: torch.device | str | None = None) -> torch.Tensor:
    """Which (query, key) pairs of a packed row belong to one document: a block-diagonal bool matrix.

    ``mask[i, j]`` is True when tokens i and j lie in the same document. Combine it with the causal rule
    (``causal=True`` in :func:`posenc_ref.attention.attention`) for a decoder: this is the mask Hugging Face
    builds when ``position_ids`` restart and no ``attention_mask`` is given.

    Args:
        lengths: the number of tokens of each document, positive ints.
        device: where to build the result.

    Returns:
        bool tensor (sum(lengths), sum(lengths)).

    Raises:
        TypeError / ValueError: lengths that are not a non-empty sequence of positive ints.
    """
    lengths = _check_lengths(lengths)
    document = torch.repeat_interleave(torch.arange(len(lengths), device=device),
                                       torch.tensor(lengths, device=device))  # (total,): document of each token
    return document[:, None] == document[None, :]  # (total, total)


# ----------------------------------------------------------------------------------------------------------
# The module
# ----------------------------------------------------------------------------------------------------------


class RotaryEmbedding(nn.Module):
    """RoPE for attention: rotates queries and keys, caching cos(m omega_i) and sin(m omega_i).

    Holds ``inv_freq`` (rotary_dim/2,) and ``attention_factor`` from :func:`rope_frequencies`, and a cos/sin
    cache (``cos_cached``, ``sin_cached``, each (length, rotary_dim/2), already times ``attention_factor``);
    all are non-persistent buffers, so the state dict is empty. The cache grows on demand with no cap (to
    the next power of two at least as long as max(positions) + 1) and is rebuilt for a new dtype or device.

    With ``scaling={"type": "dynamic", ...}`` the frequencies depend on the length read: while
    n = max(positions) + 1 <= original_max_position_embeddings they are the unscaled ones; beyond, they are
    recomputed for seq_len = n, as Hugging Face's dynamic RoPE does when the length grows past the original
    one. Unlike Hugging Face, which keeps the frequencies of the longest length seen until a call drops back
    below original_max_position_embeddings, the frequencies here always follow the current n.

    Args:
        head_dim: the head dimension d, positive and even.
        base: the frequency base.
        scaling: a scaling rule and its parameters, as in :func:`rope_frequencies`.
        layout: one of :data:`ROPE_LAYOUTS`.
        rotary_dim: the number of leading features rotated (partial rotary embedding, as in
            :func:`apply_rope`), an even int from 2 to head_dim; None (the default) rotates all of them.
    """

    inv_freq: torch.Tensor
    cos_cached: torch.Tensor
    sin_cached: torch.Tensor

    def __init__(
        self,
        head_dim: int,
        *,
        base: float = 10000.0,
        scaling: Mapping[str, Any] | None = None,
        layout: str = "interleaved",
        rotary_dim: int | None = None,
    ) -> None:
        super().__init__()
        self.head_dim = check_even_dim("head_dim", head_dim)
        self.rotary_dim = _check_rotary_dim(rotary_dim, head_dim)
        self.base = _check_base("base", base)
        self.layout = check_choice("layout", layout, ROPE_LAYOUTS)
        scaling_type = None if scaling is None else _validated_scaling(scaling)[0]
        self.scaling = None if scaling is None else dict(scaling)
        self._dynamic_original_length: int | None = None
        seq_len = None
        if scaling_type == "dynamic":
            self._dynamic_original_length = seq_len = scaling["original_max_position_embeddings"]
        self._frequency_length = seq_len  # the seq_len the current inv_freq serves ("dynamic" only)
        self._set_frequencies(seq_len)
        self.register_buffer("inv_freq", self._float32_inv_freq.clone(), persistent=False)
        self.register_buffer("cos_cached", torch.empty(0, self.rotary_dim // 2), persistent=False)
        self.register_buffer("sin_cached", torch.empty(0, self.rotary_dim // 2), persistent=False)

    def extra_repr(self) -> str:
        partial = "" if self.rotary_dim == self.head_dim else f", rotary_dim={self.rotary_dim}"
        return f"head_dim={self.head_dim}{partial}, base={self.base}, scaling={self.scaling}, layout={self.layout!r}"

    def _set_frequencies(self, seq_len: int | None) -> None:
        # A float32 copy outside the buffers: module.half() or .to(bfloat16) casts buffers, and frequencies
        # rounded to 8 bits of mantissa would put large angles m * omega_i far off.
        self._float32_inv_freq, self.attention_factor = rope_frequencies(
            self.rotary_dim, base=self.base, scaling=self.scaling, seq_len=seq_len
        )

    def _update_dynamic_frequencies(self, length: int) -> None:
        """For "dynamic" scaling, recompute inv_freq when the length served changes; drop the stale cache."""
        if self._dynamic_original_length is None:
            return
        frequency_length = max(length, self._dynamic_original_length)
        if frequency_length == self._frequency_length:
            return
        self._set_frequencies(frequency_length)
        self.inv_freq = self._float32_inv_freq.to(self.inv_freq.device)
        self._frequency_length = frequency_length
        self.cos_cached = self.cos_cached[:0]
        self.sin_cached = self.sin_cached[:0]

    def _ensure_cache(self, length: int, dtype: torch.dtype, device: torch.device) -> None:
        stale = self.cos_cached.dtype != dtype or self.cos_cached.device != device
        if not stale and self.cos_cached.shape[0] >= length:
            return
        # Growing to a power of two keeps token-by-token decoding from rebuilding the table at every step.
        cached_length = 1 << max(length - 1, 0).bit_length()
        positions = torch.arange(cached_length, device=device)
        self.cos_cached, self.sin_cached = _cos_sin(
            positions, self._float32_inv_freq.to(device), dtype, self.attention_factor
        )  # (cached_length, head_dim/2) each

    def cos_sin(
        self, positions: torch.Tensor, dtype: torch.dtype, device: torch.device
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """cos(m omega_i) and sin(m omega_i), times attention_factor, for the given positions.

        Angles are float32 (float64 when ``dtype`` is float64); the results are returned in ``dtype``.

        Args:
            positions: 1-D integer tensor (seq,) of non-negative positions m, on ``device``.
            dtype: a floating dtype for the results.
            device: the device of the results (and of ``positions``).

        Returns:
            ``(cos, sin)``, each of shape (seq, rotary_dim/2).
        """
        check_tensor("positions", positions, ndim=1)
        check_positions("positions", positions, positions.shape[0])
        device = torch.device(device)
        _check_device("positions", positions, device)
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            raise TypeError(f"dtype must be a floating torch.dtype, got {dtype!r}")
        length = int(positions.max()) + 1 if positions.numel() else 0
        self._update_dynamic_frequencies(length)
        self._ensure_cache(length, _angle_dtype(dtype), device)
        return self.cos_cached[positions].to(dtype), self.sin_cached[positions].to(dtype)  # (seq, rotary_dim/2)

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, *, positions: torch.Tensor | None = None, offset: int = 0
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Rotate queries and keys by their positions, as :func:`apply_rope` with this module's frequencies.

        Args:
            q: queries (batch, heads, seq, head_dim).
            k: keys (batch, kv_heads, seq, head_dim), same batch, seq, dtype and device as q (the number of
                heads may differ, as in grouped-query attention).
            positions: 1-D integer tensor (seq,); default ``arange(seq) + offset``.
            offset: the position of the first token when ``positions`` is not given (cached decoding).

        Returns:
            ``(q_rotated, k_rotated)`` with the shapes and dtype of q and k.

        Raises:
            TypeError / ValueError: as :func:`apply_rope`, plus mismatched q and k, a head_dim other than the
            module's, a negative offset, or both positions and a non-zero offset.
        """
        for name, tensor in (("q", q), ("k", k)):
            if _check_rope_input(name, tensor) != self.head_dim:
                raise ValueError(f"{name}.shape[-1] must be head_dim = {self.head_dim}, got {tensor.shape[-1]}")
        check_same_dtype_and_device(q=q, k=k)
        if (q.shape[0], q.shape[2]) != (k.shape[0], k.shape[2]):
            raise ValueError(f"k must have q's batch and seq sizes, got q {tuple(q.shape)} and k {tuple(k.shape)}")
        offset = check_int("offset", offset, minimum=0)
        seq = q.shape[2]
        if positions is None:
            positions = torch.arange(offset, offset + seq, device=q.device)
        elif offset:
            raise ValueError(f"give positions or offset, not both (got positions and offset={offset})")
        check_positions("positions", positions, seq)
        cos, sin = self.cos_sin(positions, _angle_dtype(q.dtype), q.device)
        return (_rotate_leading(q, cos, sin, self.layout, self.rotary_dim),
                _rotate_leading(k, cos, sin, self.layout, self.rotary_dim))
