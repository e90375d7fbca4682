"""What every local worker imports, imported once into the fork server that forks them
(:mod:`autograder.executors.local`), so that a worker begins with it at the cost of a fork.

torch (the expected values of the varied items), its compiler (which ``torch.optim`` imports on first use),
the variants and the pipeline. ``OMP_NUM_THREADS`` defaults to 1 first, as in every worker and kernel
(:func:`autograder.student.kernels.kernel_environment`): numpy's and torch's thread pools start when they are
loaded, and a forked process keeps only the thread that forked it, so the fork server must hold no other.
"""

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch._dynamo  # noqa: F401 (imports torch first)

import autograder.pipeline
import autograder.variants  # noqa: F401
