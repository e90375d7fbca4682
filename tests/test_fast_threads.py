"""Small passes on one CPU thread: the setting is scoped, restored, and never changes a result."""

from __future__ import annotations

import threading

import pytest
import torch

from posenc_ref.attention import reference_attention
from posenc_ref.fast import alibi_window, fast_attention, threads
from posenc_ref.fast.threads import (
    SERIAL_ELEMENTS,
    each_on_one_thread,
    kernel_threads,
    serial_unless_large,
    torch_threads,
)


@pytest.fixture
def two_threads():
    with torch_threads(2):
        yield


def test_serial_block_runs_on_one_thread_and_restores_the_count(two_threads):
    with serial_unless_large(torch.device("cpu"), 1000):
        assert torch.get_num_threads() == 1
        with kernel_threads():
            assert torch.get_num_threads() == 2, "a large kernel gets the threads from before the block"
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == 2


def test_serial_block_restores_the_count_after_an_error(two_threads):
    with pytest.raises(RuntimeError, match="inside"), serial_unless_large(torch.device("cpu"), 1000):
        raise RuntimeError("inside")
    assert torch.get_num_threads() == 2
    with kernel_threads():  # outside any block: no change
        assert torch.get_num_threads() == 2


def test_large_work_other_devices_and_nested_blocks_keep_the_count(two_threads):
    with serial_unless_large(torch.device("cpu"), SERIAL_ELEMENTS + 1):
        assert torch.get_num_threads() == 2
    with serial_unless_large(torch.device("meta"), 1000):
        assert torch.get_num_threads() == 2
    with serial_unless_large(torch.device("cpu"), 1000):
        with serial_unless_large(torch.device("cpu"), 1000), kernel_threads():
            assert torch.get_num_threads() == 2, "the inner block remembers the count from before the outer one"
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == 2


def _inputs(position: str, length: int):
    generator = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(2, 4, length, 16, generator=generator) for _ in range(3))
    if position == "shaw":
        params = {"rel_k_table": torch.randn(9, 16, generator=generator) * 0.5,
                  "rel_v_table": torch.randn(9, 16, generator=generator) * 0.5}
    elif position == "t5":
        params = {"bias_table": torch.randn(16, 4, generator=generator), "max_distance": 20}
    else:
        params = {"inv_freq": 10000.0 ** (-torch.arange(0, 16, 2) / 16), "layout": "half"}
    return q, k, v, params


@pytest.mark.parametrize("position", ["shaw", "t5", "rope"])
@pytest.mark.parametrize("serial_elements", [0, SERIAL_ELEMENTS])  # never serial; serial for these sizes
def test_fast_paths_give_the_reference_result_serial_or_not_and_restore_the_count(position, serial_elements,
                                                                                   monkeypatch, two_threads):
    monkeypatch.setattr(threads, "SERIAL_ELEMENTS", serial_elements)
    q, k, v, params = _inputs(position, 75)
    with torch.no_grad():
        actual = fast_attention(q, k, v, position=position, causal=True, **params)
    assert torch.get_num_threads() == 2
    expected = reference_attention(q, k, v, position=position, causal=True, **params)
    torch.testing.assert_close(actual, expected, atol=1e-5, rtol=1e-5)


def _count_in_a_new_thread() -> int:
    """torch's thread count as a thread started now sees it (the process-wide default)."""
    seen = []
    thread = threading.Thread(target=lambda: seen.append(torch.get_num_threads()))
    thread.start()
    thread.join()
    return seen[0]


@pytest.mark.parametrize("caller_threads", [1, 2, 3])
def test_each_task_runs_once_on_one_thread_and_the_counts_are_restored(caller_threads):
    seen = {}  # task -> (Python thread, torch threads inside the task)
    lock = threading.Lock()

    def work(task):
        with lock:
            assert task not in seen, f"task {task} ran twice"
            seen[task] = (threading.get_ident(), torch.get_num_threads())

    with torch_threads(caller_threads):
        each_on_one_thread(work, range(10))
        assert torch.get_num_threads() == caller_threads
        assert _count_in_a_new_thread() == caller_threads, "the process-wide default is the caller's again"
    assert sorted(seen) == list(range(10))
    assert {threads for _, threads in seen.values()} == {1}
    assert len({ident for ident, _ in seen.values()}) <= caller_threads


def test_a_failing_task_raises_and_the_count_is_restored(two_threads):
    def work(task):
        if task == 3:
            raise ArithmeticError(f"task {task}")

    with pytest.raises(ArithmeticError, match="task 3"):
        each_on_one_thread(work, range(6))
    assert torch.get_num_threads() == 2
    assert _count_in_a_new_thread() == 2


@pytest.mark.parametrize(("caller_threads", "spread"), [(1, True), (3, True), (8, False)])
def test_alibi_window_heads_on_threads_give_the_same_bits_as_on_one(caller_threads, spread, monkeypatch):
    """Each head is written by its own task: any thread count must give exactly the one-thread result. The
    12 tasks (2 x 6 heads) are spread over the threads up to 6 threads (2 tasks each), run in turn above."""
    spread_calls = []
    spread_over = alibi_window.each_on_one_thread
    monkeypatch.setattr(alibi_window, "each_on_one_thread",
                        lambda *arguments: spread_calls.append(torch.get_num_threads()) or spread_over(*arguments))
    generator = torch.Generator().manual_seed(11)
    q, k, v = (torch.randn(2, 6, 300, 16, generator=generator) for _ in range(3))
    slopes = torch.tensor([1.0, 0.5, 0.25, 0.125, 1 / 16, 1 / 256])
    options = {"position": "alibi", "causal": True, "implementation": "window", "slopes": slopes}
    with torch.no_grad():
        with torch_threads(1):
            one = fast_attention(q, k, v, **options)
        with torch_threads(caller_threads):
            many = fast_attention(q, k, v, **options)
    assert torch.equal(one, many)
    assert spread_calls == [1, caller_threads] if spread else spread_calls == [1]
    torch.testing.assert_close(one, reference_attention(q, k, v, position="alibi", causal=True, slopes=slopes),
                               atol=1e-5, rtol=1e-5)
