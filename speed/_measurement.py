"""What the speed scripts measure around the work itself: wall and CPU seconds of a call, CPU seconds of worker
processes, peak memory (the process's resident set, and the proportional set size sampled over its process tree)
and the machine's fp32 matmul rate. torch is imported by the functions that use it, so that a script's ``--help``
imports none of it."""
from __future__ import annotations

import resource
import threading
import time
from typing import Callable, Dict, Tuple, TypeVar

Value = TypeVar("Value")


def cpu_seconds() -> float:
    """CPU seconds used so far by this process, over all its threads."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def worker_cpu_seconds() -> float:
    """CPU seconds used so far by this process's living child processes (DataLoader workers)."""
    import psutil

    total = 0.0
    for child in psutil.Process().children(recursive=True):
        try:
            times = child.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
    return total


def peak_rss_mb() -> float:
    """This process's own peak resident set size in MB: Linux's ``VmHWM`` (kB), which starts afresh in a new
    program. ``ru_maxrss`` does not: a child process starts from its parent's peak (a child of a 1.5 GB parent reports
    1.5 GB), so it is read only where ``/proc`` is missing."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def timed(run: Callable[[], Value]) -> Tuple[float, float, Value]:
    """(wall seconds, CPU seconds of this process over all its threads, value) of ``run()``; the device's queued work
    is waited for before the clock stops."""
    start, cpu_start = time.perf_counter(), cpu_seconds()
    import torch

    value = run()
    if torch.cuda.is_initialized():
        torch.cuda.synchronize()
    return time.perf_counter() - start, cpu_seconds() - cpu_start, value


class TreeMemorySampler:
    """Peak, over samples taken every ``interval`` seconds on a thread, of the PSS summed over this process and its
    living descendants (DataLoader workers): the memory the run holds, pages shared after a fork counted once."""

    def __init__(self, interval: float = 0.5) -> None:
        import psutil

        self._process = psutil.Process()
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample_until_stopped, daemon=True)
        self.peak_bytes = 0

    def _tree_pss(self) -> int:
        import psutil

        total = 0
        for process in [self._process, *self._process.children(recursive=True)]:
            try:
                total += process.memory_full_info().pss
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        return total

    def _sample_until_stopped(self) -> None:
        while True:
            self.peak_bytes = max(self.peak_bytes, self._tree_pss())
            if self._stop.wait(self._interval):
                return

    def __enter__(self) -> "TreeMemorySampler":
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()


def matmul_flops_per_second(threads: int, size: int = 2048, repeats: int = 10) -> float:
    """Best measured fp32 ``torch.matmul`` rate of two ``size`` x ``size`` matrices (2 n^3 FLOPs each)."""
    import torch

    torch.set_num_threads(threads)
    generator = torch.Generator().manual_seed(0)
    a = torch.randn(size, size, generator=generator)
    b = torch.randn(size, size, generator=generator)
    torch.matmul(a, b)
    best = min(timed(lambda: float(torch.matmul(a, b)[0, 0]))[0] for _ in range(repeats))
    return 2 * size ** 3 / best


def forward_rate(run: Callable[[], object], macs: int, repeats: int = 3) -> Dict[str, float]:
    """The best of ``repeats`` timed calls of ``run`` (a model forward on a ready batch) and the rate of its ``macs``
    multiply-accumulates, with the fp32 matmul rate measured right after it (on a shared machine the load moves
    between a run's start and its forwards): ``{"seconds", "flops", "flops_per_second", "matmul_flops_per_second"}``
    (two FLOPs a MAC)."""
    import torch

    seconds = min(timed(run)[0] for _ in range(repeats))
    return {"seconds": seconds, "flops": 2.0 * macs, "flops_per_second": 2.0 * macs / seconds,
            "matmul_flops_per_second": matmul_flops_per_second(torch.get_num_threads(), repeats=5)}
