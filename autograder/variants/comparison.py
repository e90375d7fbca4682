r"""The varied item of chapter 6 (comparison): 6.4, the memory of Shaw's plain path.

Shaw's reference path materializes :math:`q_{b,h,i,f}\, a^K_{ij,f}` for every batch element :math:`b`, head
:math:`h`, query :math:`i`, key :math:`j` and feature :math:`f`: a tensor of shape
:math:`(B, H, n, n, d_\text{head})`; T5's bias is :math:`(H, n, n)`, broadcast over the batch. In float32 (4
bytes a number) and MiB (:math:`2^{20}` bytes) they take

.. math:: \frac{4\,B H n^2 d_\text{head}}{2^{20}} \quad\text{and}\quad \frac{4\,H n^2}{2^{20}}.

The byte counts come from tensors of those shapes (``torch.empty(..., device="meta")``, which allocates
nothing), so that the shapes, not the formula, decide.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from autograder.variants import Variant

ASSIGNMENT = "06_comparison"
MIB = 2**20


def float32_mib(*shape: int) -> float:
    """MiB of a float32 tensor of ``shape``, from a tensor on the meta device."""
    import torch

    tensor = torch.empty(*shape, dtype=torch.float32, device="meta")
    return tensor.numel() * tensor.element_size() / MIB


def _memory(parameters: Mapping[str, Any]) -> dict[str, Any]:
    b, h, n, d = (parameters[name] for name in ("batch", "heads", "tokens", "head_dim"))
    shaw, t5 = float32_mib(b, h, n, n, d), float32_mib(h, n, n)
    return {
        "EXPECTED": [shaw, t5],
        "MISTAKES": [
            ("a float32 number takes 4 bytes, not 32: these are bits", [shaw * 8, t5 * 8]),
            ("float32 takes 4 bytes a number, not 8", [shaw * 2, t5 * 2]),
            ("a MiB is 2**20 bytes, not 10**6", [shaw * MIB / 1e6, t5 * MIB / 1e6]),
            ("these are GiB; the question asks for MiB (2**20 bytes)", [shaw / 1024, t5 / 1024]),
            (("the first number is the (n, n, d_head) table of relative keys; the intermediate holds a copy for every "
             "batch element and head"),
             [float32_mib(n, n, d), t5]),
            ("the intermediate holds a row for every batch element, not only every head", [float32_mib(h, n, n, d), t5]),
            ("T5's bias has one matrix per head, shared by the batch: (heads, n, n)", [shaw, float32_mib(b, h, n, n)]),
            ("the intermediate holds a row for every head, and T5's bias has one matrix per head",
             [float32_mib(b, n, n, d), t5 / h]),
        ],
    }


VARIANTS = (Variant.of(ASSIGNMENT, "6.4", "shaw_memory_test", _memory),)
