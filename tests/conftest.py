"""Fixtures shared by several test modules."""

import gc

import pytest
import torch


@pytest.fixture(scope="module", autouse=True)
def garbage_collected_before_each_module():
    """Collect the garbage that earlier modules left, before a module starts.

    nbgrader's autograde, run in-process by some modules, executes notebooks with nbclient on an event loop
    that nbclient keeps for the thread; a cell whose output handling fails leaves a kernel-alive poll there,
    which fails on a later run and becomes garbage. Its finalizer logs the failure with a traceback, and on
    Python 3.11 formatting a traceback parses source with ``ast``: when the collector happens to run inside
    another ``ast.parse`` (the modules that read code with ``ast`` parse thousands of files), that parse fails
    with "AST constructor recursion depth mismatch". Collecting here runs such finalizers between modules.
    (The course's own runs use :func:`autograder.student.kernels.execute_in_own_loop`, which leaves nothing behind.)
    """
    gc.collect()
    yield


@pytest.fixture(scope="module")
def one_torch_thread():
    """Tiny tensors: one thread is fastest, and two threads on a loaded 2-core machine are much slower."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)
