"""Which accelerated path can run where: Triton availability, autograd needs, and a report per device.

Nothing here computes attention; the other modules ask these questions before choosing a path.
"""

from __future__ import annotations

import functools
import os

import torch


@functools.cache
def triton_importable() -> bool:
    """True when ``import triton`` works (it is missing on some CPU-only installs)."""
    try:
        import triton.language  # noqa: F401
    except Exception:  # noqa: BLE001 -- any failure (missing package, broken driver lookup): no Triton here
        return False
    return True


def triton_interpret_requested() -> bool:
    """True when the environment asks Triton to interpret kernels on the CPU (``TRITON_INTERPRET=1``)."""
    return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes")


def triton_runs_on(device: torch.device | str) -> bool:
    """Whether the fused Triton RoPE kernel can run on tensors of ``device``.

    CUDA: Triton imports and CUDA is available. CPU: only through Triton's interpreter, which must have
    been requested (``TRITON_INTERPRET=1``) before the kernel module was imported, because ``triton.jit``
    decides at decoration time whether it compiles or interprets.
    """
    device = torch.device(device)
    if not triton_importable():
        return False
    if device.type == "cuda":
        return torch.cuda.is_available()
    if device.type == "cpu":
        from posenc_ref.fast import rope_triton

        return rope_triton.kernel_is_interpreted()
    return False


def needs_grad(*tensors: torch.Tensor | None) -> bool:
    """True when autograd will record an operation on any of ``tensors``."""
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


def default_device() -> torch.device:
    """CUDA when available, else CPU."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def fast_path_report(device: torch.device | str | None = None) -> dict[str, str]:
    """For each position kind, the path ``fast_attention(implementation="auto")`` takes on ``device``.

    ``device`` defaults to CUDA when available, else CPU. For the flex paths it says whether a compile has
    failed on that device in this process (compiling is tried on first use) and names the fallback used
    when autograd is needed on a device whose FlexAttention has no backward (CPU).

    Returns:
        ``{position: description}`` for "none", "rope", "alibi", "t5", "shaw".
    """
    from posenc_ref.fast import flex
    from posenc_ref.fast.banded import banded_available

    device = torch.device(device) if device is not None else default_device()
    rope = "fused Triton kernel" if triton_runs_on(device) else "torch rotation (no Triton on this device)"
    if flex.flex_available():
        compiled = "compiled"
        if not flex.compile_allowed(device):
            compiled += " (compile failed here for some dtype/head_dim: those use SDPA with a materialized bias)"
        bias = f"FlexAttention score_mod, {compiled} (SDPA with a materialized bias for small problems)"
        if not flex.flex_backward_supported(device):
            bias += "; SDPA with a materialized bias when autograd is needed (no flex backward here)"
    else:
        bias = "SDPA with a materialized bias (no FlexAttention in this torch)"
    t5, shaw = bias, "query-chunked relative attention (no (q, k, head_dim) tensor), plain torch ops"
    alibi = bias
    if banded_available(device):
        banded = "banded: far keys by SDPA's flash kernel, the band of offsets written out"
        shaw = f"{banded}; {shaw} when autograd is needed"
    if device.type == "cpu" and banded_available(device):
        t5 = f"{banded}; SDPA with a materialized bias when autograd is needed"
        alibi = (f"causal without autograd: window (per block of queries the diagonal square and a window of "
                 f"earlier keys by SDPA's flash kernel, the keys whose weights vanish dropped); otherwise {bias}")
    return {
        "none": "torch scaled_dot_product_attention",
        "rope": f"{rope}, then scaled_dot_product_attention",
        "alibi": alibi,
        "t5": t5,
        "shaw": shaw,
    }
