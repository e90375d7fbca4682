"""A grid of independent runs that survives interruption: each result is saved as it finishes.

A sweep is a list of jobs, each named by a ``key`` (a file name). :func:`run_sweep` calls ``work(job)`` for every
job whose result is not yet in ``folder/runs/<key>.json``, writes each result there as soon as it is
computed (to a temporary file, then renamed, so a killed process leaves no half-written result), and shows one
progress bar of runs done and left with the estimated time to go. Run it again after an interruption and it
continues where it stopped; the results come back in the order of the jobs.

With ``jobs > 1`` the runs go to that many worker processes (``spawn``ed: a fresh interpreter each, so no
state leaks between runs), each with ``threads`` torch threads. A run must therefore depend on its job only
(its own seeds), never on the order in which runs execute; then the results do not depend on ``jobs``.

:func:`provenance` describes what produced a results file: the command, the package versions, the commit,
the machine and the wall time of every invocation that contributed.
"""

from __future__ import annotations

import concurrent.futures
import datetime
import json
import multiprocessing
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tqdm import tqdm

from posenc_ref._checks import check_positive_int

RUNS_FOLDER = "runs"


def result_path(folder: str | Path, key: str) -> Path:
    """Where the result of the job named ``key`` is kept: ``folder/runs/<key>.json``.

    Raises:
        ValueError: ``key`` is empty or holds a character other than letters, digits, ``-``, ``_``, ``.``, ``+``.
    """
    if not key or not all(character.isalnum() or character in "-_.+" for character in key) or key[0] == ".":
        raise ValueError(f"a job key must be a file name of letters, digits and -_.+ ; got {key!r}")
    return Path(folder) / RUNS_FOLDER / f"{key}.json"


def _write_atomically(path: Path, payload: Any) -> None:
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(json.dumps(payload, indent=1) + "\n")
    os.replace(temporary, path)


def load_result(folder: str | Path, key: str) -> Any | None:
    """The saved result of ``key``, or None if it has not finished."""
    path = result_path(folder, key)
    return json.loads(path.read_text()) if path.exists() else None


def _initialise_worker(threads: int) -> None:
    import torch

    torch.set_num_threads(threads)


def run_sweep(
    jobs_list: Sequence[Any],
    work: Callable[[Any], Any],
    *,
    folder: str | Path,
    key: Callable[[Any], str],
    jobs: int = 1,
    threads: int = 1,
    progress: bool = True,
    on_result: Callable[[Any, Any], None] | None = None,
) -> list[Any]:
    """Run ``work(job)`` for every job not already saved; return every result in the order of ``jobs_list``.

    Args:
        jobs_list: the jobs (picklable when ``jobs > 1``).
        work: a module-level function of one job returning a JSON-serialisable result.
        folder: where ``runs/`` is kept (created if missing).
        key: the file name of a job's result; distinct jobs need distinct keys.
        jobs: worker processes; 1 runs in this process.
        threads: torch threads of each worker process (``jobs > 1``).
        progress: one progress bar (runs done / total, estimated time left) on stderr.
        on_result: called with ``(job, result)`` for each run as it finishes (not for saved ones).

    Raises:
        ValueError: two jobs with one key, a bad ``jobs``/``threads``; whatever ``work`` raises (the results
            finished before it stay saved).
    """
    check_positive_int("jobs", jobs)
    check_positive_int("threads", threads)
    keys = [key(job) for job in jobs_list]
    repeated = sorted({name for name in keys if keys.count(name) > 1})
    if repeated:
        raise ValueError(f"job keys must be distinct; repeated: {repeated}")
    (Path(folder) / RUNS_FOLDER).mkdir(parents=True, exist_ok=True)
    paths = [result_path(folder, name) for name in keys]
    pending = [index for index, path in enumerate(paths) if not path.exists()]
    bar = tqdm(total=len(jobs_list), initial=len(jobs_list) - len(pending), unit="run", disable=not progress,
               desc="runs", dynamic_ncols=True)

    def finish(index: int, result: Any) -> None:
        _write_atomically(paths[index], result)
        bar.update(1)
        if on_result is not None:
            on_result(jobs_list[index], result)

    try:
        if jobs == 1 or len(pending) <= 1:
            for index in pending:
                finish(index, work(jobs_list[index]))
        else:
            context = multiprocessing.get_context("spawn")
            with concurrent.futures.ProcessPoolExecutor(max_workers=min(jobs, len(pending)), mp_context=context,
                                                        initializer=_initialise_worker,
                                                        initargs=(threads,)) as pool:
                futures = {pool.submit(work, jobs_list[index]): index for index in pending}
                try:
                    for future in concurrent.futures.as_completed(futures):
                        finish(futures[future], future.result())
                except BaseException:
                    for future in futures:
                        future.cancel()
                    raise
    finally:
        bar.close()
    return [json.loads(path.read_text()) for path in paths]


def code_version() -> tuple[str | None, bool | None]:
    """``(commit, uncommitted changes in the package)`` of the checkout this package runs from, or
    ``(None, None)`` outside a git checkout. Take it when a sweep starts: the code that ran is the code then."""
    return git_commit(Path(__file__).resolve().parent)


def git_commit(directory: Path) -> tuple[str | None, bool | None]:
    """``(commit, uncommitted changes under directory)`` of the checkout holding ``directory``, or
    ``(None, None)`` outside a git checkout."""
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=directory, capture_output=True, text=True,
                                check=True, timeout=10).stdout.strip()
        # Changes to the package itself: edits elsewhere (a chapter, the README) do not change what ran.
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", "."], cwd=directory,
                               capture_output=True, text=True, check=True, timeout=10).stdout.strip() != ""
    except (OSError, subprocess.SubprocessError):
        return None, None
    return commit, dirty


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


# The CPU's vector instruction sets, which decide the kernels torch picks and so the rounding of every result.
VECTOR_FLAGS = ("sse4_1", "sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni",
                "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8", "asimd", "sve", "sve2")


def _cpu_flags() -> list[str]:
    """The vector instruction sets of :data:`VECTOR_FLAGS` that this CPU has (from /proc/cpuinfo), sorted."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                return sorted(set(line.split(":", 1)[1].split()) & set(VECTOR_FLAGS))
    except OSError:
        pass
    return []


def machine_description(device: str) -> dict[str, Any]:
    """The machine a sweep ran on: device, CPU model, its vector instruction sets and cores, the instruction set
    torch dispatches to, OS, and the GPU's name on CUDA."""
    import torch

    description = {"device": device, "cpu": _cpu_model(), "cpu_flags": _cpu_flags(),
                   "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(), "cores": os.cpu_count(),
                   "platform": platform.platform()}
    if device.startswith("cuda") and torch.cuda.is_available():
        description["gpu"] = torch.cuda.get_device_name(torch.device(device))
    return description


def provenance(folder: str | Path, *, command: Sequence[str], settings: dict[str, Any], device: str,
               jobs: int, threads: int, started: float, runs: int, runs_this_invocation: int,
               version: tuple[str | None, bool | None] | None = None) -> dict[str, Any]:
    """Record this invocation in ``folder/provenance.json`` and return the whole record.

    Called again by the same invocation (same ``started``), it updates that invocation's entry: a sweep
    records itself after every run, so an interrupted invocation keeps the time it ran until its last result.
    The record keeps the settings and one entry per invocation, each with its own command, commit (and whether
    the package's files had uncommitted changes), package versions (torch's build included), machine (CPU model
    and vector instruction sets), start, wall seconds and the runs it computed: a sweep interrupted and resumed
    on another machine or commit says which runs came from where, and reports the total wall time of all its
    parts. The top-level ``command``, ``versions``, ``commit`` and ``uncommitted_changes`` are the latest
    invocation's. ``version`` is the :func:`code_version` taken when the sweep started (default: now). An
    invocation that computed no run leaves an existing record as it is: a complete sweep started again (a
    study resumed over its finished parts) was not produced by that commit.
    """
    import numpy
    import torch

    path = Path(folder) / "provenance.json"
    previous = json.loads(path.read_text()) if path.exists() else {}
    if previous and runs_this_invocation == 0:
        return previous  # an invocation that computed nothing (the sweep was complete) produced none of it
    commit, dirty = code_version() if version is None else version
    versions = {"python": sys.version.split()[0], "torch": torch.__version__, "torch_git": torch.version.git_version,
                "numpy": numpy.__version__}
    invocation = {
        "started": datetime.datetime.fromtimestamp(started, datetime.UTC).isoformat(timespec="seconds"),
        "started_unix": started, "command": " ".join(command), "commit": commit, "uncommitted_changes": dirty,
        "versions": versions,
        "wall_seconds": round(time.time() - started, 1), "runs_computed": runs_this_invocation,
        "jobs": jobs, "threads": threads, "machine": machine_description(device),
    }
    earlier = previous.get("invocations", [])
    if earlier and earlier[-1].get("started_unix") == invocation["started_unix"]:
        earlier = earlier[:-1]  # this invocation, recorded at an earlier run: brought up to date
    invocations = [*earlier, invocation]
    record = {
        "command": " ".join(command), "settings": settings,
        "versions": versions,
        "commit": commit, "uncommitted_changes": dirty, "runs": runs,
        "wall_seconds": round(sum(entry["wall_seconds"] for entry in invocations), 1),
        "invocations": invocations,
    }
    _write_atomically(path, record)
    return record
