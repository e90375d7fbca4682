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


def test_targets_are_lower_bounds_except_the_spread():
    assert bench.target_met("speed_vs_sdpa_nopos", 0.81, 0.8)
    assert not bench.target_met("speed_vs_sdpa_nopos", 0.79, 0.8)
    assert bench.target_met("spread", 1.9, 2.0)
    assert not bench.target_met("spread", 2.1, 2.0)
    assert not bench.target_met("speed_vs_sdpa_nopos", None, 0.8), "a ratio that was not measured meets nothing"
    assert not bench.target_met("spread", float("nan"), 2.0)


def _synthetic_records(fast_times: list[float], baseline_times: list[float]) -> list[dict]:
    case = bench.Case("shaw", 2048, 8, 64, torch.float32)
    return [bench._record(case, backend, torch.device("cpu"), times, peak)
            for backend, times, peak in (("reference", [1000.0, 1100.0], 500.0), ("fast", fast_times, 5.0),
                                         ("sdpa_nopos", baseline_times, 1.0))]


@pytest.mark.parametrize(
    ("fast_times", "met"),
    [([300.0, 320.0, 310.0, 330.0, 305.0], True),  # 100 / 310 = 0.32x, spread 1.1
     ([400.0, 420.0, 410.0, 430.0, 405.0], False),  # 0.24x: too slow
     ([150.0, 310.0, 310.0, 310.0, 400.0], False)],  # 0.32x, but one call 2.7x another
)
def test_speed_against_sdpa_and_spread_decide_met_on_synthetic_timings(fast_times, met):
    records = _synthetic_records(fast_times, [100.0, 90.0, 100.0, 110.0, 100.0])
    case = bench.Case("shaw", 2048, 8, 64, torch.float32, target_speedup=1.0, target_vs_baseline=0.3,
                      target_spread=2.0)
    bench._add_ratios(records, case)
    fast = records[1]
    assert fast["speed_vs_sdpa_nopos"] == pytest.approx(100.0 / sorted(fast_times)[2])  # medians: 100, third of 5
    assert fast["spread"] == pytest.approx(max(fast_times) / min(fast_times))
    assert fast["targets"] == {"speedup_vs_reference": 1.0, "speed_vs_sdpa_nopos": 0.3, "spread": 2.0}
    assert fast["targets_met"] is met
    verdicts = bench.format_targets(records).splitlines()
    assert any("spread" in line and "(target <= 2.0)" in line for line in verdicts)
    assert sum(line.endswith("NOT met") for line in verdicts) == (0 if met else 1)


def test_backends_take_turns():
    order = []
    calls = {name: (lambda name=name: order.append(name)) for name in ("fast", "sdpa_nopos", "reference")}
    times = bench.time_in_turns(calls, torch.device("cpu"), {"fast": 3, "sdpa_nopos": 3, "reference": 1})
    assert order == ["fast", "sdpa_nopos", "reference", "fast", "sdpa_nopos", "fast", "sdpa_nopos"]
    assert [len(times[name]) for name in calls] == [3, 3, 1]


def test_results_file_holds_the_machine_the_command_and_the_records(tmp_path, monkeypatch):
    records = _synthetic_records([300.0, 310.0], [100.0, 100.0])
    monkeypatch.setattr(bench, "run", lambda device, quick: records)
    monkeypatch.setattr("sys.argv", ["bench", "--device", "cpu", "--quick"])
    path = tmp_path / "results.json"
    bench.main(["--device", "cpu", "--quick", "--results", str(path)])
    written = json.loads(path.read_text())
    machine = written["machine"]
    assert {"date", "cpu", "cpu_cores", "torch_threads", "torch", "command"} <= set(machine)
    assert machine["torch"] == torch.__version__ and machine["cpu_cores"] >= 1
    assert machine["command"] == "python -m posenc_ref.bench --device cpu --quick"
    assert [record["backend"] for record in written["runs"][0]] == ["reference", "fast", "sdpa_nopos"]
    assert len(written["runs"]) == 1 and machine["wall_s"] >= 0
    assert {"load_average_before", "load_average_after"} <= set(machine)


def test_runs_are_repeated_and_summarized_by_median_and_range(tmp_path, monkeypatch, capsys):
    fast_times = iter([[300.0, 300.0], [250.0, 250.0], [500.0, 500.0]])  # 0.33x, 0.40x, 0.20x of 100 ms

    def one_run(device, quick):
        records = _synthetic_records(next(fast_times), [100.0, 100.0])
        bench._add_ratios(records, bench.Case("shaw", 2048, 8, 64, torch.float32, target_vs_baseline=0.3))
        return records

    monkeypatch.setattr(bench, "run", one_run)
    path = tmp_path / "results.json"
    runs = bench.main(["--device", "cpu", "--runs", "3", "--results", str(path)])
    assert len(runs) == 3 and len(json.loads(path.read_text())["runs"]) == 3
    (row,) = bench.summarize_runs(runs)
    assert row["values"] == pytest.approx([1 / 3, 0.4, 0.2])
    assert (row["median"], row["low"], row["high"]) == pytest.approx((1 / 3, 0.2, 0.4))
    assert row["met_runs"] == 2, "0.33x and 0.40x meet 0.3x, 0.20x does not"
    assert "| shaw | 2048 | speed_vs_sdpa_nopos | 0.33 (0.20 to 0.40) | >= 0.3 | 2 of 3 |" in capsys.readouterr().out


def test_runs_below_one_are_refused(capsys):
    with pytest.raises(SystemExit):
        bench.main(["--device", "cpu", "--runs", "0"])
    assert "--runs must be >= 1, got 0" in capsys.readouterr().err


def test_the_reference_is_timed_after_the_fast_path_and_the_baseline_took_turns(monkeypatch):
    order = []

    def spy(name, real):
        def call(*arguments, **options):
            order.append(name)
            return real(*arguments, **options)
        return call

    monkeypatch.setattr(bench, "fast_attention", spy("fast", bench.fast_attention))
    monkeypatch.setattr(bench, "reference_attention", spy("reference", bench.reference_attention))
    monkeypatch.setattr(bench.F, "scaled_dot_product_attention", spy("sdpa_nopos", bench.F.scaled_dot_product_attention))
    monkeypatch.setattr(bench, "peak_mib", lambda call, device: 1.0)  # no profiled calls in the order
    bench.run_attention_case(bench.Case("t5", 32, 2, 8, torch.float32), torch.device("cpu"), {"reference": 2, "fast": 3})
    timed = order[-8:]  # after the warm-up calls: 3 turns, then the reference twice
    assert timed == ["fast", "sdpa_nopos"] * 3 + ["reference"] * 2, order
