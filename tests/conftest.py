"""Fixtures shared by several test modules."""

import pytest
import torch


@pytest.fixture(scope="module")
def one_torch_thread():
    """Tiny tensors: one thread is fastest, and two threads on a loaded 2-core machine are much slower."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)
