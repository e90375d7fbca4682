"""The README's benchmark tables are the committed results files, recomputed here from the raw timings.

Each summary table (the Markdown that ``python -m posenc_ref.bench --runs N`` prints) follows a paragraph that
names its results file; every row's median, range and count of runs that met the target are recomputed from
that file's call times and peaks, and the paragraph must state the file's date, CPU and GPU (if any).
"""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ROW = re.compile(r"^\| (\w+) \| (\d+) \| (\w+) \| ([\d.]+) \(([\d.]+) to ([\d.]+)\) \| (<=|>=) ([\d.]+) \| "
                 r"(\d+) of (\d+) \|$")
RESULTS_PATH = re.compile(r"`(posenc_ref/results/[\w.-]+\.json)`")


def benchmark_tables() -> list[tuple[str, str, list[re.Match]]]:
    """(results path, text before the table, rows) for every summary table of the README's Benchmarks."""
    text = (ROOT / "README.md").read_text()
    section = text.split("\n## Benchmarks\n", 1)[1].split("\n## ", 1)[0]
    tables, before, rows = [], [], []
    for line in [*section.splitlines(), ""]:
        match = ROW.match(line)
        if match:
            rows.append(match)
        elif rows:  # the table ended: it belongs to the last results file named before it
            paths = RESULTS_PATH.findall("\n".join(before))
            tables.append((paths[-1] if paths else "", "\n".join(before), rows))
            before, rows = [line], []
        elif not line.startswith(("| ---", "| kind |")):
            before.append(line)
    return tables


def ratio(run: list[dict], variant: str, length: int, metric: str) -> float:
    """One run's ratio, from the call times and peaks of its records (not from the stored ratios)."""
    by_backend = {record["backend"]: record for record in run
                  if record["variant"] == variant and record["length"] == length}
    fast_times = by_backend["fast"]["times_ms"]
    if metric == "spread":
        return max(fast_times) / min(fast_times)
    if metric == "memory_ratio_vs_reference":
        return by_backend["reference"]["peak_mib"] / by_backend["fast"]["peak_mib"]
    # the RoPE rotation and the device copy move the same bytes: the bandwidth fraction is a ratio of times
    other = {"speed_vs_sdpa_nopos": "sdpa_nopos", "speedup_vs_reference": "reference",
             "fraction_of_copy_bandwidth": "device_copy", "speedup_vs_eager": "eager_rotate_half"}[metric]
    return statistics.median(by_backend[other]["times_ms"]) / statistics.median(fast_times)


def test_the_readme_has_a_summary_table_for_each_results_file_it_reports():
    tables = benchmark_tables()
    assert tables, "the Benchmarks section has no summary table"
    assert all(path for path, _, _ in tables), "every table must follow the paragraph naming its results file"


@pytest.mark.parametrize("table_index", range(len(benchmark_tables())))
def test_every_row_is_recomputed_from_its_results_file(table_index):
    path, paragraph, rows = benchmark_tables()[table_index]
    results = json.loads((ROOT / path).read_text())
    runs, machine = results["runs"], results["machine"]
    assert machine["date"][:10] in paragraph and machine["cpu"] in paragraph, (path, machine["date"], machine["cpu"])
    assert machine.get("gpu") is None or machine["gpu"] in paragraph, (path, machine["gpu"])
    for row in rows:
        variant, length, metric = row[1], int(row[2]), row[3]
        values = [ratio(run, variant, length, metric) for run in runs]
        target, at_most = float(row[8]), row[7] == "<="
        met = sum(value <= target if at_most else value >= target for value in values)
        shown = [f"{x:.2f}" for x in (statistics.median(values), min(values), max(values))]
        assert [row[4], row[5], row[6]] == shown, (path, row[0])
        assert (int(row[9]), int(row[10])) == (met, len(runs)), (path, row[0])
