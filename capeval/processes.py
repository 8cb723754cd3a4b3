"""How capeval starts its worker processes (image and video decoding, image file checks): ``fork`` on Linux, quietly,
and each bound to the life of the process that started it (:class:`ParentWatch`).

``spawn`` and ``forkserver`` import the user's main module again in every worker, which fails in a script without an
``if __name__ == "__main__":`` guard (as under ``accelerate launch``); a forked worker runs only capeval's own loop.
Imports neither torch nor PIL, so the input layer can use it.
"""
from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import sys
import threading
import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing.context import BaseContext
from typing import Iterator, Optional

PARENT_POLL_SECONDS = 0.5
"""How often a worker's watch thread checks that the process that started it is alive."""

_PR_SET_PDEATHSIG = 1
"""``prctl``'s option from ``<linux/prctl.h>``: a signal the kernel sends this process when its parent thread ends."""


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


@dataclass(frozen=True)
class ParentWatch:
    """Ends a worker process as soon as the process that started it dies, however it died (``SIGKILL`` included):
    made in the parent just before the workers start (:meth:`here`), called in each worker first thing (it is the
    DataLoader's ``worker_init_fn``; file-check processes call it before their loop).

    In the worker, on Linux, the kernel is asked to send it ``SIGKILL`` when its parent ends (``prctl``'s
    ``PR_SET_PDEATHSIG``), but only when the parent forked it from its main thread: the signal follows the *thread*
    that forked, and a worker forked from another thread (capeval validates chunks in a background thread, which ends
    with each call) would be killed with that thread while its process lives on. Everywhere, a daemon thread of the
    worker checks every :data:`PARENT_POLL_SECONDS` that its parent process is the one that started it (a dead
    parent's children are adopted by another process) and ends the worker at once otherwise; the same check is made
    once at the start, for a parent that died before the worker got this far.
    """

    parent: int
    from_main_thread: bool

    @classmethod
    def here(cls) -> "ParentWatch":
        """The watch of workers started now, from this process and thread."""
        return cls(os.getpid(), threading.current_thread() is threading.main_thread())

    def __call__(self, worker_id: Optional[int] = None) -> None:
        """Arm the watch in this worker (``worker_id``: the DataLoader's, unused)."""
        if self.from_main_thread and sys.platform.startswith("linux"):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != self.parent:
            os._exit(1)
        threading.Thread(target=self._watch, name="capeval-parent-watch", daemon=True).start()

    def _watch(self) -> None:
        while os.getppid() == self.parent:
            time.sleep(PARENT_POLL_SECONDS)
        os._exit(1)
