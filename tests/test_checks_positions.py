"""Positions are checked once per version: a changed tensor is checked again, an unchanged one is not read."""

from __future__ import annotations

import pytest
import torch

from posenc_ref._checks import check_positions


def test_positions_are_checked_again_after_an_in_place_change():
    positions = torch.arange(6)
    check_positions("positions", positions, 6)
    positions[2] = -3  # an in-place change advances the version counter
    with pytest.raises(ValueError, match="positions must be >= 0, got a minimum of -3"):
        check_positions("positions", positions, 6)


def test_an_unchanged_tensor_is_not_read_again(monkeypatch):
    positions = torch.arange(6)
    check_positions("positions", positions, 6)
    reads = []
    original_min = torch.Tensor.min
    monkeypatch.setattr(torch.Tensor, "min", lambda self, *a, **k: reads.append(1) or original_min(self, *a, **k))
    check_positions("positions", positions, 6)
    assert reads == [], "a tensor found non-negative at this version was read again"
    check_positions("positions", torch.arange(6), 6)  # another tensor of the same values is read
    assert reads == [1]


def test_inference_tensors_are_checked_every_time():
    with torch.inference_mode():
        positions = torch.arange(4)
    check_positions("positions", positions, 4)
    with torch.inference_mode():
        positions[0] = -1
    with pytest.raises(ValueError, match="must be >= 0"):
        check_positions("positions", positions, 4)
