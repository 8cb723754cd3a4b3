"""Every kind of worker process capeval starts (file checks, image and video decoding workers) ends as soon as the
process that started it dies, however it died: a scoring process is started here, starts its workers, and is killed
with SIGKILL while they are busy or idle; its workers must be gone soon after. A worker started from a thread that then
ends must live on while its process does (``PR_SET_PDEATHSIG`` follows the thread that forked)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import List

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

GONE_WITHIN_SECONDS = 20.0
"""A generous bound: the workers end at once (SIGKILL from the kernel) or within a poll of their watch thread."""

FILE_CHECKS = """
from capeval.file_checks import FileChecks
checks = FileChecks(2)
def start():
    list(checks.check([(IMAGE, 0)]))  # the processes start with the first check and then wait for the next
"""

BUSY_DECODERS = """
import time
import torch
from capeval.models.clip.decoding import as_is, started_workers
from capeval.processes import worker_context
class Slow(torch.utils.data.Dataset):
    def __len__(self):
        return 4
    def __getitem__(self, index):
        time.sleep(600)  # a long decode: the loader's own check of its parent runs only between items
loader = torch.utils.data.DataLoader(Slow(), batch_size=None, num_workers=2, collate_fn=as_is,
                                     multiprocessing_context=worker_context())
def start():
    global running
    running = started_workers(loader)
"""

SCRIPT = """
import multiprocessing, sys, threading, time
IMAGE = sys.argv[1]
{setup}
if sys.argv[2] == "thread":  # started from a thread that ends before the workers are listed
    thread = threading.Thread(target=start)
    thread.start()
    thread.join()
    time.sleep(1.0)
else:
    start()
print(" ".join(str(process.pid) for process in multiprocessing.active_children()), flush=True)
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for its new parent to reap it counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def _workers_of_killed_parent(setup: str, started_from: str, image: Path) -> List[int]:
    """Start a scoring process running ``setup``'s ``start()`` (from its main thread or from a thread that ends),
    check that its workers run, SIGKILL it; the workers still alive after :data:`GONE_WITHIN_SECONDS`."""
    script = SCRIPT.format(setup=textwrap.dedent(setup))
    parent = subprocess.Popen([sys.executable, "-c", script, str(image), started_from], stdout=subprocess.PIPE,
                              text=True, cwd=Path(__file__).resolve().parents[2],
                              env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    try:
        line = parent.stdout.readline()  # type: ignore[union-attr]
        workers = [int(pid) for pid in line.split()]
        assert len(workers) == 2, f"the scoring process listed {line!r}"
        assert all(map(_alive, workers))  # a worker started from a thread that ended lives on
    finally:
        parent.send_signal(signal.SIGKILL)
        parent.wait()
    deadline = time.monotonic() + GONE_WITHIN_SECONDS
    while any(map(_alive, workers)) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = [pid for pid in workers if _alive(pid)]
    for pid in left:  # do not leave them behind this test either
        os.kill(pid, signal.SIGKILL)
    return left


@pytest.mark.parametrize("started_from", ["main", "thread"])
@pytest.mark.parametrize("setup", [FILE_CHECKS, BUSY_DECODERS], ids=["file_checks", "busy_decoders"])
def test_workers_end_when_their_parent_is_killed(capeval_test_data: Path, setup: str, started_from: str) -> None:
    image = next((capeval_test_data / "flickr8k" / "images_224").glob("*.jpg"))
    assert _workers_of_killed_parent(setup, started_from, image) == []
