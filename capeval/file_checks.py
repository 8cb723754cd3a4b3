"""Image files read, checked and hashed in worker processes for validation (:func:`capeval.inputs.iter_scoring_items`),
so that the scoring process handles paths and hashes only: :class:`FileChecks`."""
from __future__ import annotations

import os
import weakref
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Dict, Generator, List, Optional, Sequence, Tuple

from PIL import Image

from capeval.inputs import FileOutcome, InputError, file_key
from capeval.processes import ParentWatch, forking_quietly, worker_context


def _file_keys(files: Sequence[Tuple[str, int]], max_pixels: Optional[int]) -> List[FileOutcome]:
    """What a file-check process runs: the content hash of each (path, item index) file, or its error, in order,
    under the scoring process's ``PIL.Image.MAX_IMAGE_PIXELS`` (``max_pixels``)."""
    Image.MAX_IMAGE_PIXELS = max_pixels
    outcomes: List[FileOutcome] = []
    for path, index in files:
        try:
            outcomes.append(file_key(Path(path), index))
        except InputError as error:
            outcomes.append(error)
    return outcomes


def _check_files_until_closed(connection: Connection, watch: ParentWatch) -> None:
    """A file-check process: the outcomes of each group of files received on ``connection`` (with the scoring
    process's ``PIL.Image.MAX_IMAGE_PIXELS``), sent back, until the connection closes or the scoring process dies
    (``watch``)."""
    watch()
    while True:
        try:
            files, max_pixels = connection.recv()
        except EOFError:
            return
        connection.send(_file_keys(files, max_pixels))


Worker = Tuple[BaseProcess, Connection, int]
"""A file-check process, this side of its pipe and the process that started it."""


def _stop(workers: List[Worker]) -> None:
    """End the processes of ``workers`` that this process started, and forget them all (a forked copy's are its
    parent's)."""
    for process, connection, owner in workers:
        if owner == os.getpid():
            connection.close()
            process.terminate()
            process.join()
    workers.clear()


class FileChecks:
    """``processes`` worker processes that read image files, parse their headers and hash their contents, as
    :func:`validate_image` does, for :func:`iter_scoring_items`: the scoring process sends paths and gets back content
    hashes or errors, and spends its own time on neither the files' bytes nor PIL's header parsing.

    The processes start with the first check (``fork`` on Linux, :mod:`capeval.processes`) and persist until
    :meth:`close`, until this object is garbage collected, until the interpreter exits or until this process dies
    (:class:`~capeval.processes.ParentWatch`); a process forked from this one starts its own. None may be started
    inside a daemonic process (check in the caller's threads there). Every check runs under the caller's
    ``PIL.Image.MAX_IMAGE_PIXELS`` of the moment; image format plugins registered after the processes started are not
    known to them (nor to the decoding workers). One check runs at a time.
    """

    def __init__(self, processes: int) -> None:
        if processes < 1:
            raise ValueError("file checks need at least one process")
        self.processes = processes
        self._workers: List[Worker] = []
        self._checking = False
        weakref.finalize(self, _stop, self._workers)  # at exit too

    def check(self, files: Sequence[Tuple[str, int]]) -> Generator[FileOutcome, None, None]:
        """The content hash, or the :class:`InputError`, of each (path, item index) of ``files``, in order. Groups of
        files go to the processes one at a time each (so that no pipe fills while both sides write); a check given up
        before its end, or a process that dies, ends the processes (the next check starts new ones)."""
        if self._checking:
            raise RuntimeError("FileChecks runs one check at a time")
        self._checking = True
        size = max(8, min(64, -(-len(files) // (4 * self.processes))))
        groups = [files[first:first + size] for first in range(0, len(files), size)]
        arrived: Dict[int, List[FileOutcome]] = {}
        in_flight: Dict[Connection, int] = {}  # a busy process's connection -> its group
        sent = 0
        try:
            workers = self._started()
            for wanted in range(len(groups)):
                while wanted not in arrived:
                    for _, connection, _ in workers:
                        if sent < len(groups) and connection not in in_flight:
                            connection.send((list(groups[sent]), Image.MAX_IMAGE_PIXELS))
                            in_flight[connection] = sent
                            sent += 1
                    for connection in self._ready(list(in_flight)):
                        arrived[in_flight.pop(connection)] = connection.recv()
                yield from arrived.pop(wanted)
        finally:
            self._checking = False
            if in_flight:  # their outcomes would reach the next check
                self.close()

    def close(self) -> None:
        """End the processes (a later check starts new ones)."""
        _stop(self._workers)

    def _started(self) -> List[Worker]:
        if self._workers and self._workers[0][2] == os.getpid():
            return self._workers
        _stop(self._workers)
        context = worker_context()
        Image.init()  # every format plugin imported before the fork: an import that another thread of this process
        # holds at that moment would stay locked in the child (PIL imports its plugins on first use)
        watch = ParentWatch.here()
        with forking_quietly():
            for _ in range(self.processes):
                ours, theirs = context.Pipe()
                process = context.Process(target=_check_files_until_closed, args=(theirs, watch), daemon=True,
                                          name="capeval-file-checks")
                process.start()
                theirs.close()
                self._workers.append((process, ours, os.getpid()))
        return self._workers

    def _ready(self, connections: List[Connection]) -> List[Connection]:
        """The connections of ``connections`` with an outcome to read; a RuntimeError if a process has died."""
        while True:
            ready = wait(connections, timeout=1.0)
            if ready:
                return ready  # type: ignore[return-value]
            ended = [process for process, _, _ in self._workers if not process.is_alive()]
            if ended:
                raise RuntimeError(f"a file-check process ended unexpectedly (exit code {ended[0].exitcode})")
