r"""``python -m posenc_ref.bench``: the fast attention paths against the reference, side by side, in one run.

Usage::

    python -m posenc_ref.bench [--device cpu|cuda] [--quick] [--runs N] [--json FILE] [--results FILE]

Every case runs the reference (:func:`posenc_ref.attention.reference_attention`, which materializes every
bias and relative tensor), the fast path (:func:`posenc_ref.fast.fast_attention`, ``implementation="auto"``)
and a baseline without positions (``sdpa_nopos``: ``scaled_dot_product_attention``, causal) on the same
inputs, in the same process. The fast path and the baseline take turns (fast, baseline, fast, ...), so
that a load that comes and goes on a shared machine weighs on both alike; their ratio is therefore measured
under the same conditions, and absolute times are noisy where ratios are much less so. The reference is
measured last, after them: at these sizes it allocates up to 10 GiB, and while the system takes those pages
back, for a second or so after, other calls ran up to 10x slower (measured on a 2-core VM: Shaw's fast
path, 471 ms against 42 to 69 ms right after it, and 74 ms against 41 a second later). ``--runs N``
repeats the whole measurement N times in the process and ends with the median and range of each target's
ratio over the runs, as a Markdown table, and in how many runs it was met.
``--results FILE`` writes the records of every run with the date, the machine (CPU model, cores, threads,
GPU), the load average before and after, the torch version, the command line and the wall time.

What is measured
----------------
- Attention is causal (a decoder) with batch 1, under ``torch.no_grad()``; the first call of each backend
  (which compiles FlexAttention on its first shape) is excluded from timing. ``median_ms`` is the median of
  the timed calls (CPU: ``time.perf_counter``; CUDA: CUDA events around 10 calls queued back to back after a
  synchronize, the time divided by 10). On CUDA the host launches kernels that the device runs later; as
  in a model's forward pass, the launches of the next call overlap the device's work on this one. Timing
  one call after a synchronize would leave the device idle while the host prepares each launch, and add
  that time to every call: at the first measurement on an H200 (2026-11-28,
  ``posenc_ref/results/bench_cuda_h200_first.json``) it put the RoPE kernel at 45% of the bandwidth of a
  device copy, which is a single launch.
- ``peak_mib`` is the peak of memory *allocated during one call* above what was allocated before it (the
  inputs), i.e. the working memory of the call including its output.

  - CUDA: ``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats``, minus the allocation before.
  - CPU: the PyTorch profiler with ``profile_memory=True`` records every allocation and free of the CPU
    allocator with the running total of bytes allocated since profiling started; the peak is the maximum
    of that running total over the call. This counts every byte obtained from torch's CPU allocator: the
    tensors, and also the scratch buffers of inductor's compiled FlexAttention kernel, which takes them from
    the same allocator (``at::getCPUAllocator()``); it misses only small stack arrays. ``tracemalloc``
    cannot be used (it does not see torch's allocator) and process RSS is too coarse for tens of MiB next
    to a torch import (and keeps the high-water mark of earlier cases).
- ``spread``: slowest over fastest timed call of a backend (how repeatable one call is).
- ``tflops``: useful attention FLOPs, 4 * batch * heads * head_dim * (number of visible (query, key) pairs)
  (two matrix products; causal pairs only), divided by the median time. ``gbps`` (RoPE rotation and device
  copy on CUDA): bytes read plus written, divided by the median time.

Targets (printed with each ratio and whether it is met): CPU (8 heads, head_dim 64, float32) -- against
SDPA without positions (``speed_vs_sdpa_nopos``, what an encoding costs over attention itself): RoPE and
ALiBi, T5 at L=4096 >= 0.9x, >= 0.8x, >= 0.8x, Shaw (k = 16) at L=2048 >= 0.3x with its timed calls within
2x of each other (``spread`` <= 2); against the reference: Shaw >= 5x faster and >= 20x less peak memory,
ALiBi and T5 >= 8x faster and >= 50x less memory. CUDA -- RoPE rotation >= 75% of device copy bandwidth and
>= 5x eager rotate-half; ALiBi/T5 at L=8192 bf16 >= 0.8x the speed of SDPA causal without bias; RoPE +
attention >= 0.9x SDPA without positions.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import math
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from posenc_ref.attention import reference_attention
from posenc_ref.fast import apply_rope_fused, fast_attention, fast_path_report
from posenc_ref.relative import alibi_slopes


@dataclass(frozen=True)
class Case:
    """One attention benchmark: position kind, sequence length, shape and dtype (batch 1, causal)."""

    variant: str
    length: int
    heads: int
    head_dim: int
    dtype: torch.dtype
    target_speedup: float | None = None  # vs reference
    target_memory_ratio: float | None = None  # reference peak / fast peak
    target_vs_baseline: float | None = None  # baseline time / fast time (speed relative to SDPA, no positions)
    target_spread: float | None = None  # slowest / fastest timed call of the fast path, at most


def cpu_cases() -> list[Case]:
    return [
        Case("shaw", 2048, 8, 64, torch.float32, target_speedup=5.0, target_memory_ratio=20.0,
             target_vs_baseline=0.3, target_spread=2.0),
        Case("alibi", 4096, 8, 64, torch.float32, target_speedup=8.0, target_memory_ratio=50.0,
             target_vs_baseline=0.8),
        Case("t5", 4096, 8, 64, torch.float32, target_speedup=8.0, target_memory_ratio=50.0,
             target_vs_baseline=0.8),
        Case("rope", 4096, 8, 64, torch.float32, target_vs_baseline=0.9),
    ]


def cuda_cases() -> list[Case]:
    return [
        Case("alibi", 8192, 16, 128, torch.bfloat16, target_vs_baseline=0.8),
        Case("t5", 8192, 16, 128, torch.bfloat16, target_vs_baseline=0.8),
        Case("rope", 8192, 16, 128, torch.bfloat16, target_vs_baseline=0.9),
        Case("shaw", 2048, 8, 64, torch.bfloat16),
    ]


# ---------------------------------------------------------------------------------------------------------
# Measuring
# ---------------------------------------------------------------------------------------------------------


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_ms(call: Callable[[], object], device: torch.device, repeats: int) -> list[float]:
    """Wall time of ``repeats`` calls, in ms (CUDA events on CUDA)."""
    return [time_one_ms(call, device) for _ in range(repeats)]


CUDA_CALLS_PER_TIMING = 10


def time_one_ms(call: Callable[[], object], device: torch.device) -> float:
    """Wall time of one call, in ms. CUDA: CUDA events around :data:`CUDA_CALLS_PER_TIMING` calls queued back
    to back after a synchronize, divided by their number (see the module docstring)."""
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        synchronize(device)
        start.record()
        for _ in range(CUDA_CALLS_PER_TIMING):
            call()
        end.record()
        synchronize(device)
        return start.elapsed_time(end) / CUDA_CALLS_PER_TIMING
    begin = time.perf_counter()
    call()
    return (time.perf_counter() - begin) * 1e3


def time_in_turns(calls: dict[str, Callable[[], object]], device: torch.device, repeats: dict[str, int]
                  ) -> dict[str, list[float]]:
    """Times of ``repeats[name]`` calls of each backend, taking turns: round r times every backend that still
    has calls left, in the order of ``calls``. A slow spell of a shared machine then falls on all of them."""
    times: dict[str, list[float]] = {name: [] for name in calls}
    for round_index in range(max(repeats.values(), default=0)):
        for name, call in calls.items():
            if round_index < repeats[name]:
                times[name].append(time_one_ms(call, device))
    return times


def _cpu_peak_bytes(call: Callable[[], object]) -> int:
    """Peak of the running total of CPU bytes allocated during ``call`` (see the module docstring)."""
    from torch.profiler import ProfilerActivity, profile

    # Kineto (the profiler's library) logs every start and stop on stderr at levels up to 5; 6 silences it.
    os.environ.setdefault("KINETO_LOG_LEVEL", "6")
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as profiler:
        result = call()
        del result
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "trace.json")
        profiler.export_chrome_trace(path)
        with open(path) as trace:
            events = json.load(trace)["traceEvents"]
    totals = [event["args"]["Total Allocated"] for event in events
              if event.get("name") == "[memory]" and event["args"].get("Device Type", 0) == 0]
    return max([0, *totals])


def peak_mib(call: Callable[[], object], device: torch.device) -> float:
    """Memory allocated during one call above what was allocated before it, in MiB."""
    if device.type == "cuda":
        synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        result = call()
        synchronize(device)
        del result
        return (torch.cuda.max_memory_allocated(device) - before) / 2**20
    return _cpu_peak_bytes(call) / 2**20


# ---------------------------------------------------------------------------------------------------------
# Attention cases
# ---------------------------------------------------------------------------------------------------------


def make_inputs(case: Case, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, dict]:
    generator = torch.Generator(device="cpu").manual_seed(0)

    def randn(*shape: int, scale: float = 1.0) -> torch.Tensor:
        return (torch.randn(*shape, generator=generator) * scale).to(device=device, dtype=case.dtype)

    shape = (1, case.heads, case.length, case.head_dim)
    q, k, v = randn(*shape), randn(*shape), randn(*shape)
    if case.variant == "alibi":
        params = {"slopes": alibi_slopes(case.heads).to(device)}
    elif case.variant == "t5":
        params = {"bias_table": randn(32, case.heads, scale=0.5)}
    elif case.variant == "shaw":
        params = {"rel_k_table": randn(33, case.head_dim, scale=0.02), "rel_v_table": randn(33, case.head_dim, scale=0.02)}
    elif case.variant == "rope":
        inv_freq = 10000.0 ** (-torch.arange(0, case.head_dim, 2, dtype=torch.float32) / case.head_dim)
        params = {"inv_freq": inv_freq.to(device), "layout": "half"}
    else:
        params = {}
    return q, k, v, params


def attention_flops(case: Case) -> float:
    visible_pairs = case.length * (case.length + 1) / 2  # causal
    return 4.0 * case.heads * case.head_dim * visible_pairs


def _record(case: Case, backend: str, device: torch.device, times: list[float], peak: float | None) -> dict:
    median = statistics.median(times)
    return {
        "variant": case.variant, "length": case.length, "backend": backend, "device": device.type,
        "dtype": str(case.dtype).removeprefix("torch."), "heads": case.heads, "head_dim": case.head_dim,
        "median_ms": median, "times_ms": times, "spread": max(times) / min(times), "peak_mib": peak,
        "tflops": attention_flops(case) / (median * 1e-3) / 1e12,
    }


def run_attention_case(case: Case, device: torch.device, repeats: dict[str, int], *, with_reference: bool = True
                       ) -> list[dict]:
    """Reference, fast and the no-position SDPA baseline on one case; ratios filled in."""
    q, k, v, params = make_inputs(case, device)
    calls = {
        "fast": lambda: fast_attention(q, k, v, position=case.variant, causal=True, **params),
        "sdpa_nopos": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True),
    }
    if with_reference:
        calls = {"reference": lambda: reference_attention(q, k, v, position=case.variant, causal=True, **params),
                 **calls}
    peaks = {}
    in_turns = {backend: call for backend, call in calls.items() if backend != "reference"}
    with torch.no_grad():
        for backend, call in in_turns.items():
            call()  # warm-up: compiles FlexAttention for this shape
            peaks[backend] = peak_mib(call, device)
            synchronize(device)
        times = time_in_turns(in_turns, device, {backend: repeats["fast"] for backend in in_turns})
        if with_reference:  # last: the GiBs it frees are taken back for a while after, slowing the next calls
            peaks["reference"] = peak_mib(calls["reference"], device)  # also its warm-up
            times["reference"] = time_ms(calls["reference"], device, repeats["reference"])
    records = [_record(case, backend, device, times[backend], peaks[backend]) for backend in calls]
    _add_ratios(records, case)
    return records


def _add_ratios(records: list[dict], case: Case) -> None:
    by_backend = {record["backend"]: record for record in records}
    reference, baseline = by_backend.get("reference"), by_backend.get("sdpa_nopos")
    for record in records:
        record["speedup_vs_reference"] = reference["median_ms"] / record["median_ms"] if reference else None
        record["memory_ratio_vs_reference"] = (reference["peak_mib"] / max(record["peak_mib"], 1e-9)
                                               if reference else None)
        record["speed_vs_sdpa_nopos"] = baseline["median_ms"] / record["median_ms"] if baseline else None
        record["targets"] = {}
        if record["backend"] != "fast":
            continue
        if case.target_speedup is not None:
            record["targets"]["speedup_vs_reference"] = case.target_speedup
        if case.target_memory_ratio is not None:
            record["targets"]["memory_ratio_vs_reference"] = case.target_memory_ratio
        if case.target_vs_baseline is not None:
            record["targets"]["speed_vs_sdpa_nopos"] = case.target_vs_baseline
        if case.target_spread is not None:
            record["targets"]["spread"] = case.target_spread
        record["targets_met"] = all(target_met(name, record[name], target)
                                    for name, target in record["targets"].items())


AT_MOST = ("spread",)  # targets that are upper bounds; every other target is a lower bound


def target_met(name: str, value: float | None, target: float) -> bool:
    """``value <= target`` for the upper bounds in :data:`AT_MOST`, ``value >= target`` otherwise; a value
    that was not measured (None) or is not a number meets nothing."""
    if value is None or not math.isfinite(value):
        return False
    return value <= target if name in AT_MOST else value >= target


# ---------------------------------------------------------------------------------------------------------
# RoPE rotation on CUDA: fused kernel vs device copy vs eager rotate-half
# ---------------------------------------------------------------------------------------------------------


def eager_rotate_half(q, k, inv_freq, q_positions, k_positions):
    """What an eager model does each forward (Hugging Face's Llama style): cos/sin from positions, then
    x * cos + rotate_half(x) * sin, for q and for k."""

    def rotate(x, positions):
        angles = positions.float()[:, None] * inv_freq[None, :]  # (seq, head_dim/2)
        angles = torch.cat((angles, angles), dim=-1)  # (seq, head_dim)
        cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
        first, second = x.chunk(2, dim=-1)
        return x * cos + torch.cat((-second, first), dim=-1) * sin

    return rotate(q, q_positions), rotate(k, k_positions)


def run_rope_rotation(device: torch.device, repeats: int) -> list[dict]:
    batch, heads, length, head_dim, dtype = 4, 32, 4096, 128, torch.bfloat16
    q = torch.randn(batch, heads, length, head_dim, device=device, dtype=dtype)
    k = torch.randn(batch, heads, length, head_dim, device=device, dtype=dtype)
    inv_freq = (10000.0 ** (-torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)).to(device)
    positions = torch.arange(length, device=device)
    moved = 2 * (q.numel() + k.numel()) * q.element_size()  # read q, k and write both
    source = torch.empty(2 * q.numel(), device=device, dtype=dtype)
    destination = torch.empty_like(source)
    calls = {
        "fast": lambda: apply_rope_fused(q, k, inv_freq, q_positions=positions, k_positions=positions,
                                         layout="half"),
        "eager_rotate_half": lambda: eager_rotate_half(q, k, inv_freq, positions, positions),
        "device_copy": lambda: destination.copy_(source),
    }
    records = []
    with torch.no_grad():
        for backend, call in calls.items():
            call()
            times = time_ms(call, device, repeats)
            median = statistics.median(times)
            records.append({
                "variant": "rope_rotation", "length": length, "backend": backend, "device": device.type,
                "dtype": "bfloat16", "heads": heads, "head_dim": head_dim, "batch": batch, "median_ms": median,
                "times_ms": times, "peak_mib": None, "gbps": moved / (median * 1e-3) / 1e9,
            })
    by_backend = {record["backend"]: record for record in records}
    fast = by_backend["fast"]
    fast["fraction_of_copy_bandwidth"] = fast["gbps"] / by_backend["device_copy"]["gbps"]
    fast["speedup_vs_eager"] = by_backend["eager_rotate_half"]["median_ms"] / fast["median_ms"]
    fast["targets"] = {"fraction_of_copy_bandwidth": 0.75, "speedup_vs_eager": 5.0}
    fast["targets_met"] = all(target_met(name, fast[name], target) for name, target in fast["targets"].items())
    return records


# ---------------------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------------------


def _format(value, digits: int = 2) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}" if math.isfinite(value) else str(value)
    return str(value)


def format_table(records: list[dict]) -> str:
    columns = [("variant", "variant"), ("length", "L"), ("backend", "backend"), ("dtype", "dtype"),
               ("median_ms", "median ms"), ("peak_mib", "peak MiB"), ("speedup_vs_reference", "x ref speed"),
               ("memory_ratio_vs_reference", "x ref memory"), ("speed_vs_sdpa_nopos", "x sdpa_nopos"),
               ("spread", "spread"), ("tflops", "TFLOP/s"), ("gbps", "GB/s")]
    rows = [[label for _, label in columns]]
    for record in records:
        digits = {"tflops": 3}
        rows.append([_format(record.get(key), digits.get(key, 2)) for key, _ in columns])
    widths = [max(len(row[i]) for row in rows) for i in range(len(columns))]
    lines = ["  ".join(cell.rjust(width) for cell, width in zip(row, widths, strict=True)) for row in rows]
    lines.insert(1, "-" * len(lines[0]))
    return "\n".join(lines)


def format_targets(records: list[dict]) -> str:
    lines = []
    for record in records:
        for name, target in record.get("targets", {}).items():
            verdict = "met" if target_met(name, record[name], target) else "NOT met"
            bound = "<=" if name in AT_MOST else ">="
            lines.append(f"{record['variant']:>14} L={record['length']:<5} {name}: {_format(record[name])} "
                         f"(target {bound} {target}) {verdict}")
    return "\n".join(lines)


def load_average() -> float | None:
    """The one-minute load average (runnable threads, this process's included), None where unknown."""
    with contextlib.suppress(OSError, AttributeError):
        return round(os.getloadavg()[0], 2)
    return None


def machine_description(device: torch.device) -> dict:
    """The date, the machine and the software a run was measured on."""
    cpu_model = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        with open("/proc/cpuinfo") as cpuinfo:
            names = [line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")]
        cpu_model = names[0] if names else cpu_model
    return {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "cpu": cpu_model, "cpu_cores": os.cpu_count(), "torch_threads": torch.get_num_threads(),
        "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
        "torch": torch.__version__, "python": platform.python_version(), "platform": platform.platform(),
        "command": " ".join(["python -m posenc_ref.bench", *sys.argv[1:]]),
    }


def run(device: torch.device, quick: bool) -> list[dict]:
    # --quick cuts the reference (seconds a call) to 2; the fast path and the baseline (0.1 s) keep 9 turns
    repeats = {"reference": 2 if quick else 5, "fast": 9 if quick else 20}
    records = []
    cases = cuda_cases() if device.type == "cuda" else cpu_cases()
    if device.type == "cuda":
        records += run_rope_rotation(device, repeats["fast"])
    for case in cases:
        print(f"... {case.variant} L={case.length} {str(case.dtype).removeprefix('torch.')}", flush=True)
        records += run_attention_case(case, device, repeats)
    return records


def summarize_runs(runs: list[list[dict]]) -> list[dict]:
    """Per target of every fast record: its values over the runs, their median, low and high, the target
    and how many runs met it. Runs are matched by (variant, length, backend)."""
    def key(record: dict) -> tuple:
        return record["variant"], record["length"], record["backend"]

    by_key = [{key(record): record for record in run} for run in runs]
    rows = []
    for record in runs[0]:
        for name, target in record.get("targets", {}).items():
            values = [records[key(record)][name] for records in by_key]
            rows.append({"variant": record["variant"], "length": record["length"], "metric": name,
                         "values": values, "median": statistics.median(values), "low": min(values),
                         "high": max(values), "target": target, "at_most": name in AT_MOST,
                         "met_runs": sum(target_met(name, value, target) for value in values)})
    return rows


def format_summary(rows: list[dict], runs: int) -> str:
    """The summary as a Markdown table: median (low to high) of each target's ratio over the runs."""
    lines = [f"| kind | L | ratio | median of {runs} (low to high) | target | met in |", "| --- | --- | --- | --- | --- | --- |"]
    for row in rows:
        bound = "<=" if row["at_most"] else ">="
        lines.append(f"| {row['variant']} | {row['length']} | {row['metric']} | {_format(row['median'])} "
                     f"({_format(row['low'])} to {_format(row['high'])}) | {bound} {row['target']} | "
                     f"{row['met_runs']} of {runs} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> list[list[dict]]:
    parser = argparse.ArgumentParser(prog="python -m posenc_ref.bench", description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default=None,
                        help="default: cuda when available, else cpu")
    parser.add_argument("--quick", action="store_true", help="fewer repeats (same lengths)")
    parser.add_argument("--runs", type=int, default=1, metavar="N",
                        help="repeat the whole measurement N times (>= 1) and summarize the targets over the runs")
    parser.add_argument("--json", metavar="FILE", help="write the records of every run as a JSON list of lists")
    parser.add_argument("--results", metavar="FILE",
                        help="write {machine, runs} as JSON: the date, CPU, cores, load, torch, command and wall "
                             "time with the records of every run")
    arguments = parser.parse_args(argv)
    if arguments.runs < 1:
        parser.error(f"--runs must be >= 1, got {arguments.runs}")
    name = arguments.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device is available")
    device = torch.device(name)
    print(f"device: {torch.cuda.get_device_name(device) if name == 'cuda' else 'cpu'}, torch {torch.__version__}, "
          f"threads {torch.get_num_threads()}")
    for position, path in fast_path_report(device).items():
        print(f"  {position:>5}: {path}")
    machine = machine_description(device)
    machine["load_average_before"] = load_average()
    began = time.perf_counter()
    runs = []
    for run_index in range(arguments.runs):
        if arguments.runs > 1:
            print(f"\nrun {run_index + 1} of {arguments.runs}", flush=True)
        records = run(device, arguments.quick)
        runs.append(records)
        print()
        print(format_table(records))
        print()
        print(format_targets(records))
    machine["wall_s"] = round(time.perf_counter() - began, 1)
    machine["load_average_after"] = load_average()
    if arguments.runs > 1:
        print()
        print(format_summary(summarize_runs(runs), arguments.runs))
    if arguments.json:
        with open(arguments.json, "w") as file:
            json.dump(runs, file, indent=1)
        print(f"wrote {arguments.json}")
    if arguments.results:
        with open(arguments.results, "w") as file:
            json.dump({"machine": machine, "runs": runs}, file, indent=1)
            file.write("\n")
        print(f"wrote {arguments.results}")
    return runs


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
