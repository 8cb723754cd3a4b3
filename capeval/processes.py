"""How capeval starts its worker processes (image decoding, image file checks): ``fork`` on Linux, quietly.

``spawn`` and ``forkserver`` import the user's main module again in every worker, which fails in a script without an
``if __name__ == "__main__":`` guard (as under ``accelerate launch``); a forked worker runs only capeval's own loop.
Imports neither torch nor PIL, so the input layer can use it.
"""
from __future__ import annotations

import multiprocessing
import sys
import warnings
from contextlib import contextmanager
from multiprocessing.context import BaseContext
from typing import Iterator


def worker_context() -> BaseContext:
    """``fork`` on Linux, else the platform's default start method."""
    if sys.platform.startswith("linux"):
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context()


_FORK_WITH_THREADS = r"This process \(pid=\d+\) is multi-threaded, use of fork\(\) may lead to deadlocks"


@contextmanager
def forking_quietly() -> Iterator[None]:
    """Start worker processes inside this block without the ``DeprecationWarning`` that ``os.fork`` gives from
    Python 3.12 on whenever the process has other threads, as a scoring process always has (validation threads,
    torch's and the tokenizer's pools). PyTorch's DataLoader forks the same way on Linux; capeval's workers run only
    their loop and the reading, hashing and decoding of media with PIL or PyAV and NumPy, and neither the tokenizer's
    nor torch's pools are used in them (torch re-initialises its pool after a fork)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_FORK_WITH_THREADS, category=DeprecationWarning)
        yield
