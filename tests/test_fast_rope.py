"""apply_rope_fused: the Triton kernel (through Triton's CPU interpreter), its backward, the torch fallback."""

from __future__ import annotations

import inspect
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from posenc_ref.fast import apply_rope_fused, apply_rope_torch, fast_attention
from posenc_ref.fast.rope_fused import rope_implementation, rotate_without_autograd

REPO = Path(__file__).resolve().parents[1]
# One rounding to the output dtype costs at most half an ulp: 2^-8 relative for bfloat16 (8-bit
# significand), 2^-11 for float16; the kernel's float32 arithmetic adds ~1e-6. Tolerances: one full ulp.
TOLERANCE = {
    torch.float32: {"atol": 1e-5, "rtol": 1e-5},
    torch.bfloat16: {"atol": 1e-5, "rtol": 2.0**-7},
    torch.float16: {"atol": 1e-5, "rtol": 2.0**-10},
}


def plain_rope(x: torch.Tensor, positions: torch.Tensor, inv_freq: torch.Tensor, layout: str,
               factor: float) -> torch.Tensor:
    """Pairs as complex numbers times factor * e^{i m omega}; angles m * omega in float32 (the contract),
    everything else in float64."""
    x = x.double()
    half = x.shape[-1] // 2
    if layout == "interleaved":
        z = torch.complex(x[..., 0::2], x[..., 1::2])
    else:
        z = torch.complex(x[..., :half], x[..., half:])
    angles = (positions.float()[:, None] * inv_freq.float()[None, :]).double()  # (seq, head_dim/2)
    z = z * factor * torch.polar(torch.ones_like(angles), angles)
    out = torch.empty_like(x)
    if layout == "interleaved":
        out[..., 0::2], out[..., 1::2] = z.real, z.imag
    else:
        out[..., :half], out[..., half:] = z.real, z.imag
    return out


def inv_freq_for(head_dim: int) -> torch.Tensor:
    return 10000.0 ** (-torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)


@pytest.mark.parametrize("layout", ["interleaved", "half"])
@pytest.mark.parametrize("implementation", ["torch", "auto"])
def test_torch_fallback_rotates_like_complex_multiplication(layout, implementation):
    generator = torch.Generator().manual_seed(0)
    q = torch.randn(2, 7, 3, 8, generator=generator).transpose(1, 2)  # (2, 3, 7, 8), not contiguous
    k = torch.randn(2, 3, 11, 8, generator=generator)
    inv_freq, q_positions, k_positions = inv_freq_for(8), torch.arange(4, 11), torch.arange(11)
    assert rope_implementation(q, implementation) == "torch"  # no CUDA, no interpreter in this process
    q_rot, k_rot = apply_rope_fused(q, k, inv_freq, q_positions=q_positions, k_positions=k_positions,
                                    layout=layout, attention_factor=1.3, implementation=implementation)
    torch.testing.assert_close(q_rot.double(), plain_rope(q, q_positions, inv_freq, layout, 1.3), atol=1e-5,
                               rtol=1e-5)
    torch.testing.assert_close(k_rot.double(), plain_rope(k, k_positions, inv_freq, layout, 1.3), atol=1e-5,
                               rtol=1e-5)


def test_triton_without_cuda_or_interpreter_is_refused():
    q = torch.zeros(1, 1, 2, 4)
    with pytest.raises(ValueError, match="implementation='triton' cannot run"):
        apply_rope_fused(q, q, inv_freq_for(4), q_positions=torch.arange(2), k_positions=torch.arange(2),
                         implementation="triton")
    with pytest.raises(ValueError, match="implementation='triton' cannot run"):
        fast_attention(q, q, q, position="rope", inv_freq=inv_freq_for(4), implementation="triton")


@pytest.mark.parametrize(
    ("changes", "error", "message"),
    [
        ({"inv_freq": torch.ones(3)}, ValueError, "inv_freq must have head_dim / 2 = 2"),
        ({"q_positions": torch.arange(3)}, ValueError, "q_positions must have 2 entries"),
        ({"k_positions": torch.arange(5.0)}, TypeError, "k_positions must be an integer tensor"),
        ({"layout": "neox"}, ValueError, "layout must be one of"),
        ({"attention_factor": -1.0}, ValueError, "attention_factor"),
        ({"k": torch.zeros(1, 1, 5, 4, dtype=torch.float64)}, TypeError, "k has dtype"),
        ({"q": torch.zeros(1, 2, 4)}, ValueError, "q must have 4 dimensions"),
        ({"implementation": "cuda"}, ValueError, "implementation must be one of"),
    ],
)
def test_apply_rope_fused_rejects_bad_arguments(changes, error, message):
    arguments = {"q": torch.zeros(1, 1, 2, 4), "k": torch.zeros(1, 1, 5, 4), "inv_freq": torch.ones(2),
                 "q_positions": torch.arange(2), "k_positions": torch.arange(5)}
    arguments.update(changes)
    with pytest.raises(error, match=message):
        apply_rope_fused(arguments.pop("q"), arguments.pop("k"), arguments.pop("inv_freq"), **arguments)


def test_torch_fallback_has_the_same_signature_and_result():
    q, k = torch.randn(1, 2, 3, 4), torch.randn(1, 2, 5, 4)
    options = {"q_positions": torch.arange(3), "k_positions": torch.arange(5), "layout": "half",
               "attention_factor": 0.9}
    for actual, expected in zip(apply_rope_torch(q, k, inv_freq_for(4), **options),
                                apply_rope_fused(q, k, inv_freq_for(4), implementation="torch", **options),
                                strict=True):
        torch.testing.assert_close(actual, expected, atol=0, rtol=0)


@pytest.mark.parametrize("layout", ["interleaved", "half"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
@pytest.mark.parametrize(("k_len", "query_offset"), [(6, 0), (6, 2), (9, 3)])  # together; apart (twice)
def test_rotation_for_inference_equals_the_torch_fallback(layout, dtype, k_len, query_offset):
    generator = torch.Generator().manual_seed(2)
    q = torch.randn(2, 6, 3, 8, generator=generator).to(dtype).transpose(1, 2)  # (2, 3, 6, 8), not contiguous
    k = torch.randn(2, 3, k_len, 8, generator=generator).to(dtype)
    expected = apply_rope_torch(q, k, inv_freq_for(8), q_positions=torch.arange(6) + query_offset,
                                k_positions=torch.arange(k_len), layout=layout, attention_factor=1.3)
    for _ in range(2):  # the second call reads the rotation tables kept by the first
        actual = rotate_without_autograd(q, k, inv_freq_for(8), query_offset=query_offset, layout=layout,
                                         attention_factor=1.3)
        for rotated, reference_rotated, x in zip(actual, expected, (q, k), strict=True):
            assert rotated.dtype == dtype and rotated.shape == x.shape
            torch.testing.assert_close(rotated, reference_rotated,
                                       **TOLERANCE.get(dtype, {"atol": 1e-12, "rtol": 1e-12}))
    changed = inv_freq_for(8) * 1.5  # new frequencies: new tables, not the kept ones
    actual = rotate_without_autograd(q, k, changed, query_offset=query_offset, layout=layout, attention_factor=1.3)
    expected = apply_rope_torch(q, k, changed, q_positions=torch.arange(6) + query_offset,
                                k_positions=torch.arange(k_len), layout=layout, attention_factor=1.3)
    torch.testing.assert_close(actual[0], expected[0], **TOLERANCE.get(dtype, {"atol": 1e-12, "rtol": 1e-12}))


@pytest.mark.parametrize("layout", ["interleaved", "half"])
def test_rotation_for_inference_reads_views_that_cannot_be_complex_numbers(layout):
    # an odd first element and odd strides: pairs that a complex view cannot read in place; the result is
    # still contiguous and equal to the fallback
    generator = torch.Generator().manual_seed(6)
    q = torch.randn(1, 2, 5, 9, generator=generator)[..., 1:]  # storage offset 1, row stride 9
    k = torch.randn(1, 2, 7, 17, generator=generator)[..., ::2][..., :8]  # feature stride 2
    actual = rotate_without_autograd(q, k, inv_freq_for(8), query_offset=2, layout=layout, attention_factor=0.8)
    expected = apply_rope_torch(q, k, inv_freq_for(8), q_positions=torch.arange(2, 7), k_positions=torch.arange(7),
                                layout=layout, attention_factor=0.8)
    for rotated, reference_rotated in zip(actual, expected, strict=True):
        assert rotated.is_contiguous()
        torch.testing.assert_close(rotated, reference_rotated, atol=1e-6, rtol=1e-6)


# ---------------------------------------------------------------------------------------------------------
# The Triton kernel itself, run by Triton's interpreter in a fresh process (TRITON_INTERPRET must be set
# before triton.jit decorates the kernel, i.e. before posenc_ref.fast.rope_triton is imported).
# ---------------------------------------------------------------------------------------------------------

INTERPRETER_SCRIPT = textwrap.dedent(
    """
    import json, sys
    import torch
    from posenc_ref.fast import rope_triton, apply_rope_fused, fast_attention
    from posenc_ref.fast.rope_fused import rope_implementation, rotate_without_autograd

    out_dir = sys.argv[1]
    generator = torch.Generator().manual_seed(0)
    report = {"interpreted": rope_triton.kernel_is_interpreted(), "cases": []}
    # (layout, dtype, head_dim, query heads): more heads than one program rotates (8) exercise the head groups
    cases = [("interleaved", torch.float32, 8, 3), ("half", torch.float32, 8, 3), ("half", torch.bfloat16, 12, 3),
             ("interleaved", torch.float16, 6, 3), ("interleaved", torch.bfloat16, 64, 3),
             ("interleaved", torch.float32, 8, 11), ("half", torch.float32, 16, 17)]
    for number, (layout, dtype, head_dim, q_heads) in enumerate(cases):
        # q: a transposed view; k: every other position of a longer tensor (both non-contiguous)
        q = torch.randn(2, 5, q_heads, head_dim, generator=generator).to(dtype).transpose(1, 2)
        k = torch.randn(2, 3, 14, head_dim, generator=generator).to(dtype)[:, :, ::2]
        inv_freq = 10000.0 ** (-torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
        inv_freq = inv_freq.repeat_interleave(2)[::2]  # same values, stride 2
        q_positions, k_positions = torch.arange(9, 19)[::2], torch.arange(7)  # q positions 9, 11, ..., stride 2
        poisoned = (torch.full(q.shape, float("nan"), dtype=dtype), torch.full(k.shape, float("nan"), dtype=dtype))
        q_rot, k_rot = rope_triton.rotate_query_key(q, k, inv_freq, q_positions, k_positions,
                                                    interleaved=layout == "interleaved", attention_factor=1.25,
                                                    out=poisoned)
        assert q_rot is poisoned[0] and k_rot is poisoned[1]
        torch.save({"q": q, "k": k, "inv_freq": inv_freq, "q_positions": q_positions, "k_positions": k_positions,
                    "q_rot": q_rot, "k_rot": k_rot, "layout": layout}, f"{out_dir}/case{number}.pt")
        report["cases"].append({"layout": layout, "dtype": str(dtype), "implementation": rope_implementation(q)})

    # autograd through the fused kernel: backward is the inverse rotation
    q = torch.randn(1, 2, 4, 8, generator=generator, requires_grad=True)
    k = torch.randn(1, 2, 6, 8, generator=generator, requires_grad=True)
    weights_q, weights_k = torch.randn(1, 2, 4, 8, generator=generator), torch.randn(1, 2, 6, 8, generator=generator)
    inv_freq = torch.tensor([1.0, 0.3, 0.1, 0.01])
    q_rot, k_rot = apply_rope_fused(q, k, inv_freq, q_positions=torch.arange(2, 6), k_positions=torch.arange(6),
                                    layout="interleaved", attention_factor=0.8, implementation="triton")
    report["grad_fn"] = type(q_rot.grad_fn).__name__
    ((q_rot * weights_q).sum() + (k_rot * weights_k).sum()).backward()
    torch.save({"q": q.detach(), "k": k.detach(), "weights_q": weights_q, "weights_k": weights_k,
                "inv_freq": inv_freq, "grad_q": q.grad, "grad_k": k.grad}, f"{out_dir}/grad.pt")

    # fast_attention(position="rope") through the kernel
    q, k, v = (torch.randn(1, 2, n, 8, generator=generator) for n in (5, 9, 9))
    out = fast_attention(q, k, v, position="rope", causal=True, inv_freq=inv_freq, layout="half",
                         implementation="triton")
    torch.save({"q": q, "k": k, "v": v, "inv_freq": inv_freq, "out": out}, f"{out_dir}/attention.pt")
    print(json.dumps(report))
    """
)


@pytest.fixture(scope="module")
def interpreter_run(tmp_path_factory):
    out_dir = tmp_path_factory.mktemp("triton_interpreter")
    environment = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(REPO)}
    result = subprocess.run([sys.executable, "-c", INTERPRETER_SCRIPT, str(out_dir)], env=environment,
                            capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1]), out_dir


def test_interpreter_really_runs_the_triton_kernel(interpreter_run):
    report, _ = interpreter_run
    assert report["interpreted"] is True
    assert {case["implementation"] for case in report["cases"]} == {"triton"}
    assert report["grad_fn"].startswith("FusedRope")


@pytest.mark.parametrize("number", range(7))
def test_triton_kernel_overwrites_poisoned_outputs_with_the_rotation(interpreter_run, number):
    _, out_dir = interpreter_run
    case = torch.load(out_dir / f"case{number}.pt")
    layout = case["layout"]
    for name, positions in (("q", case["q_positions"]), ("k", case["k_positions"])):
        rotated = case[f"{name}_rot"]
        assert torch.isfinite(rotated).all(), "the kernel left poisoned (NaN) outputs unwritten"
        expected = plain_rope(case[name], positions, case["inv_freq"], layout, 1.25)
        torch.testing.assert_close(rotated.double(), expected, **TOLERANCE[rotated.dtype])


def test_fused_rope_backward_is_the_inverse_rotation(interpreter_run):
    _, out_dir = interpreter_run
    saved = torch.load(out_dir / "grad.pt")
    gradients = []
    for x, positions, weights in ((saved["q"], torch.arange(2, 6), saved["weights_q"]),
                                  (saved["k"], torch.arange(6), saved["weights_k"])):
        x = x.double().requires_grad_()
        (plain_rope(x, positions, saved["inv_freq"], "interleaved", 0.8) * weights.double()).sum().backward()
        gradients.append(x.grad)
    torch.testing.assert_close(saved["grad_q"].double(), gradients[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(saved["grad_k"].double(), gradients[1], atol=1e-5, rtol=1e-5)


def test_rope_attention_through_the_kernel_equals_reference(interpreter_run):
    from posenc_ref.attention import reference_attention

    _, out_dir = interpreter_run
    saved = torch.load(out_dir / "attention.pt")
    expected = reference_attention(saved["q"], saved["k"], saved["v"], position="rope", causal=True,
                                   inv_freq=saved["inv_freq"], layout="half")
    torch.testing.assert_close(saved["out"], expected, atol=1e-5, rtol=1e-5)


# ---------------------------------------------------------------------------------------------------------
# The compiled (not interpreted) kernel: built ahead of time for a Hopper GPU, on this CPU-only machine
# ---------------------------------------------------------------------------------------------------------


def hopper_ptx(interleaved: bool, dtype: str) -> str:
    """PTX of the kernel for sm_90, specialized as a launch on contiguous tensors would be: unit feature
    stride, 16-byte aligned pointers and row strides."""
    from triton import compile as triton_compile
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from posenc_ref.fast import rope_triton

    names = list(inspect.signature(rope_triton._rope_kernel.fn).parameters)
    constexprs = {"HALF": 64, "HALF_BLOCK": 64, "BLOCK_SEQ": 32, "HEADS_PER_PROGRAM": 8, "INTERLEAVED": interleaved}
    signature, attributes = {}, {}
    for index, name in enumerate(names):
        if name in constexprs:
            signature[name] = "constexpr"
        elif name.endswith("_stride_d"):
            signature[name], constexprs[name] = "constexpr", 1
        elif name.endswith("_ptr"):
            signature[name] = "*i64" if "positions" in name else "*fp32" if "inv_freq" in name else f"*{dtype}"
            attributes[(index,)] = [["tt.divisibility", 16]]
        elif name in ("attention_factor", "sign"):
            signature[name] = "fp32"
        else:
            signature[name] = "i32"
            if "stride" in name and "positions" not in name:
                attributes[(index,)] = [["tt.divisibility", 16]]
    source = ASTSource(fn=rope_triton._rope_kernel, signature=signature, attrs=attributes,
                       constexprs={(names.index(name),): value for name, value in constexprs.items()})
    compiled = triton_compile(source, target=GPUTarget("cuda", 90, 32))
    assert len(compiled.asm["cubin"]) > 0
    return compiled.asm["ptx"]


@pytest.mark.parametrize("layout", ["interleaved", "half"])
@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
def test_kernel_compiles_for_hopper_with_16_byte_loads_and_stores(layout, dtype):
    from posenc_ref.fast import rope_triton

    if rope_triton.kernel_is_interpreted():
        pytest.skip("TRITON_INTERPRET is set in this process: the kernel is interpreted, not compiled")
    ptx = hopper_ptx(layout == "interleaved", dtype)
    # Whole rows are loaded and the pairs split in registers, so even the interleaved layout reads 16 bytes
    # per instruction (a stride-2 gather of pair members would not vectorize).
    assert re.search(r"ld\.global(\.\w+)*\.v4\.b32", ptx), "row loads are not 16 bytes wide"
    assert re.search(r"st\.global(\.\w+)*\.v4\.b32", ptx), "row stores are not 16 bytes wide"
