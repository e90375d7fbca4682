"""The benchmark's measurements: the CPU peak-memory probe and the records of one small case."""

from __future__ import annotations

import json

import pytest
import torch

from posenc_ref import bench

MIB = 2**20


def test_cpu_peak_counts_the_largest_simultaneous_allocation():
    def two_temporaries_one_after_the_other():
        first = torch.ones(MIB // 4)  # 1 MiB of float32
        total = first.sum()
        del first
        second = torch.ones(3 * MIB // 4)  # 3 MiB, allocated after the first was freed
        return total + second.sum()

    def two_at_once():
        first, second = torch.ones(MIB // 4), torch.ones(3 * MIB // 4)  # 1 + 3 MiB alive together
        return first.sum() + second.sum()

    sequential = bench.peak_mib(two_temporaries_one_after_the_other, torch.device("cpu"))
    together = bench.peak_mib(two_at_once, torch.device("cpu"))
    assert 3.0 <= sequential < 3.1
    assert 4.0 <= together < 4.1


def test_cpu_peak_ignores_memory_allocated_before_the_call():
    existing = torch.ones(4 * MIB)  # 16 MiB, alive before and after

    def reads_only():
        return existing.sum()

    assert bench.peak_mib(reads_only, torch.device("cpu")) < 0.1


@pytest.mark.parametrize("variant", ["shaw", "alibi"])
def test_attention_case_records_every_backend_with_consistent_ratios(variant):
    case = bench.Case(variant, 64, 2, 8, torch.float32, target_speedup=1e-9, target_memory_ratio=1e-9)
    records = bench.run_attention_case(case, torch.device("cpu"), {"reference": 1, "fast": 2})
    by_backend = {record["backend"]: record for record in records}
    assert set(by_backend) == {"reference", "fast", "sdpa_nopos"}
    fields = {"variant", "length", "backend", "device", "dtype", "median_ms", "peak_mib", "speedup_vs_reference",
              "memory_ratio_vs_reference", "tflops"}
    for record in records:
        assert fields <= set(record)
        assert record["variant"] == variant and record["length"] == 64 and record["device"] == "cpu"
        assert record["median_ms"] > 0 and record["peak_mib"] > 0
        reference = by_backend["reference"]
        assert record["speedup_vs_reference"] == pytest.approx(reference["median_ms"] / record["median_ms"])
        assert record["memory_ratio_vs_reference"] == pytest.approx(reference["peak_mib"] / record["peak_mib"])
        # 4 * heads * head_dim * visible causal pairs, per second
        flops = 4 * 2 * 8 * (64 * 65 / 2)
        assert record["tflops"] == pytest.approx(flops / (record["median_ms"] * 1e-3) / 1e12)
    assert by_backend["fast"]["targets_met"] is True
    json.dumps(records)  # the records are what --json writes


def test_table_and_targets_print_every_record_and_verdict():
    records = [
        {"variant": "alibi", "length": 4096, "backend": "fast", "dtype": "float32", "median_ms": 10.0,
         "peak_mib": 5.0, "speedup_vs_reference": 9.0, "memory_ratio_vs_reference": 40.0,
         "targets": {"speedup_vs_reference": 8.0, "memory_ratio_vs_reference": 50.0}},
    ]
    table = bench.format_table(records)
    assert "alibi" in table and "9.00" in table and "40.00" in table
    verdicts = bench.format_targets(records).splitlines()
    assert verdicts[0].endswith("met") and "NOT" not in verdicts[0]
    assert verdicts[1].endswith("NOT met")
