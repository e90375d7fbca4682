r"""How many CPU threads the small passes of a fast path use: one, when the work is too small to share.

Every ATen operation over more than a few ten thousand elements is a parallel loop: the calling thread
wakes the pool's other threads and waits for the last of them. On an idle CPU a wake costs microseconds; on
a CPU shared with other work (more runnable threads than cores) a woken thread waits for a time slice,
milliseconds, whatever the loop's size. Measured on a 2-core machine at load 4: an in-place add on 1.3 M
float32 elements takes about 11 ms with 2 threads and 0.2 to 0.4 ms with 1. A path made of one large
kernel (SDPA's flash kernel) and a dozen small passes (the band of :mod:`posenc_ref.fast.banded`, the RoPE
rotation) then spends most of its time, and most of its variance, on wakes.

:func:`serial_unless_large` runs a block of small passes on one thread (the torch setting, restored
after), unless they are large enough to share: ``elements`` above :data:`SERIAL_ELEMENTS`, where one pass
on one thread costs about as much as a wake. :func:`kernel_threads` gives a large kernel called inside
that block the threads it had before. ``torch.set_num_threads`` is process-wide: another Python thread
running torch operations at the same time sees the change too (a slower result, never a different one).

:func:`each_on_one_thread` goes further for work that splits into independent tasks (the heads of causal
ALiBi's window path): the tasks spread over the caller's threads, each task on one thread from its first
pass to its last. Instead of a wake and a wait at every pass of every task, the threads meet once, at the
end; on a busy CPU they then share what the other work leaves, instead of waiting for each other.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor

import torch

SERIAL_ELEMENTS = 1 << 23  # 8 M float32 elements (32 MiB): one pass on one thread takes a few ms

_threads_outside: contextvars.ContextVar[int | None] = contextvars.ContextVar("threads_outside", default=None)


@contextlib.contextmanager
def torch_threads(count: int) -> Iterator[None]:
    """``torch.set_num_threads(count)`` for the block, the previous count restored after (also on error)."""
    previous = torch.get_num_threads()
    if count == previous:
        yield
        return
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


@contextlib.contextmanager
def serial_unless_large(device: torch.device, elements: int) -> Iterator[None]:
    """One CPU thread for the block when ``elements`` (the size of its largest pass) is at most
    :data:`SERIAL_ELEMENTS`; no change on other devices, for larger work, or already inside such a block."""
    if device.type != "cpu" or elements > SERIAL_ELEMENTS or _threads_outside.get() is not None:
        yield
        return
    token = _threads_outside.set(torch.get_num_threads())
    try:
        with torch_threads(1):
            yield
    finally:
        _threads_outside.reset(token)


@contextlib.contextmanager
def kernel_threads() -> Iterator[None]:
    """Inside :func:`serial_unless_large`: the thread count from before it, for one large kernel."""
    outside = _threads_outside.get()
    if outside is None:
        yield
        return
    with torch_threads(outside):
        yield


def each_on_one_thread(work: Callable[[object], None], tasks: Iterable[object]) -> None:
    """``work(task)`` for every task, over as many Python threads as the caller has torch threads (at most one
    per task), each running torch on one thread; the tasks start in the given order (largest first balances
    the threads). Returns when every task has finished; the first error of a task is raised.

    The workers' ``torch.set_num_threads(1)`` sets their own OpenMP count and the process-wide defaults;
    the caller's count is set again after them, restoring those defaults.
    """
    tasks = list(tasks)
    caller_threads = torch.get_num_threads()
    workers = min(caller_threads, len(tasks))
    if workers <= 1:
        with torch_threads(1):
            for task in tasks:
                work(task)
        return

    def on_one_thread(task: object) -> None:
        torch.set_num_threads(1)
        work(task)

    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="posenc_ref")
    try:
        for future in [pool.submit(on_one_thread, task) for task in tasks]:
            future.result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)  # after an error: the tasks not started never start
        torch.set_num_threads(caller_threads)
