"""Argument checks shared by every module.

Each check raises ``ValueError`` or ``TypeError`` with a message that names the argument, the value it
received and what is allowed, so that bad input fails at the call that caused it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch.utils.weak import WeakIdKeyDictionary


def check_int(name: str, value: Any, *, minimum: int | None = None) -> int:
    """Return ``value`` as an ``int``; reject bools, floats and values below ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {value!r} of type {type(value).__name__}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value}")
    return value


def check_positive_int(name: str, value: Any) -> int:
    return check_int(name, value, minimum=1)


def check_even_dim(name: str, value: Any) -> int:
    """A feature dimension that is split into (sin, cos) or rotation pairs must be positive and even."""
    check_positive_int(name, value)
    if value % 2:
        raise ValueError(f"{name} must be a positive even int (features come in pairs), got {value}")
    return value


def check_positive_float(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a real number, got {value!r} of type {type(value).__name__}")
    if not value > 0:
        raise ValueError(f"{name} must be > 0, got {value}")
    return float(value)


def check_probability(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a real number, got {value!r} of type {type(value).__name__}")
    if not 0.0 <= value < 1.0:
        raise ValueError(f"{name} must be in [0, 1), got {value}")
    return float(value)


def check_choice(name: str, value: Any, allowed: Iterable[Any]) -> Any:
    allowed = tuple(allowed)
    if value not in allowed:
        choices = ", ".join(repr(choice) for choice in allowed)
        raise ValueError(f"{name} must be one of {choices}; got {value!r}")
    return value


def check_tensor(name: str, value: Any, *, ndim: int | None = None, floating: bool = False) -> torch.Tensor:
    """Check that ``value`` is a tensor, optionally of a given rank and a floating dtype."""
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(value).__name__}")
    if ndim is not None and value.dim() != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions, got shape {tuple(value.shape)}")
    if floating and not value.is_floating_point():
        raise TypeError(f"{name} must have a floating dtype, got {value.dtype}")
    return value


def check_same_dtype_and_device(**tensors: torch.Tensor) -> None:
    """All tensors must share one dtype and one device: nothing is cast or moved silently."""
    names = list(tensors)
    first = tensors[names[0]]
    for name in names[1:]:
        other = tensors[name]
        if other.dtype != first.dtype:
            raise TypeError(f"{name} has dtype {other.dtype} but {names[0]} has {first.dtype}; they must match")
        if other.device != first.device:
            raise ValueError(
                f"{name} is on {other.device} but {names[0]} is on {first.device}; they must be on one device"
            )


_FOUND_NON_NEGATIVE = WeakIdKeyDictionary()  # positions tensor -> its version when found non-negative


def check_positions(name: str, positions: Any, length: int) -> torch.Tensor:
    """Positions are a 1-D integer tensor of ``length`` non-negative entries.

    Reading the minimum of a tensor on a GPU waits for the device (a synchronization), so a tensor found
    non-negative is remembered with its version counter, which every in-place change advances: a model that
    passes the same positions again is not checked, and not made to wait, again. (Inference-mode tensors
    have no version counter: they are checked every time.)
    """
    check_tensor(name, positions, ndim=1)
    if positions.dtype.is_floating_point or positions.dtype.is_complex or positions.dtype == torch.bool:
        raise TypeError(f"{name} must be an integer tensor, got dtype {positions.dtype}")
    if positions.shape[0] != length:
        raise ValueError(f"{name} must have {length} entries (the sequence length), got {positions.shape[0]}")
    remembered = not positions.is_inference()
    if remembered and _FOUND_NON_NEGATIVE.get(positions) == positions._version:
        return positions
    if length and int(positions.min()) < 0:
        raise ValueError(f"{name} must be >= 0, got a minimum of {int(positions.min())}")
    if remembered:
        _FOUND_NON_NEGATIVE[positions] = positions._version
    return positions
