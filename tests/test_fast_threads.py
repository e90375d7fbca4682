"""Small passes on one CPU thread: the setting is scoped, restored, and never changes a result."""

from __future__ import annotations

import pytest
import torch

from posenc_ref.attention import reference_attention
from posenc_ref.fast import fast_attention, threads
from posenc_ref.fast.threads import SERIAL_ELEMENTS, kernel_threads, serial_unless_large, torch_threads


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
