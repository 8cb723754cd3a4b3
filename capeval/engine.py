"""The embedding engine: cached, deduplicated, batched and sharded computation of "rows computed from a key".

A :class:`RowProducer` says how rows of one kind are made: the key of an item (equal keys share one row), what
determines the rows (the on-disk cache namespace), how missing items are grouped into batches, and how a batch is
run through its model. The engine does the rest for any model: rows come from the in-memory cache, then the on-disk
cache, and only the rest are computed. Under ``accelerate launch`` the batches to compute are dealt out over the
processes and the rows gathered back on every process. Batches are formed from the whole request before they are
dealt, so each item is computed in the same batch, hence bit for bit the same whatever the number of processes, as
long as each process runs the same number of intra-op threads.
"""
from __future__ import annotations

import hashlib
import os
import time
import warnings
from abc import ABC, abstractmethod
from typing import Any, Dict, Generic, Iterator, List, Mapping, Optional, Sequence, Tuple, TypeVar, Union

import numpy as np
import torch
from accelerate.utils import gather_object
from tqdm.auto import tqdm

from capeval.cache import DiskCache, MemoryCache
from capeval.inputs import InputError
from capeval.runtime import process_state

DISK_WRITE_SECONDS = 5.0
"""While a request runs, the rows it has computed are written to the on-disk cache after each batch that ends this
long or longer after the last write, and when the request ends or fails: an interrupted run (an error,
``KeyboardInterrupt``) keeps what it computed, and a killed one loses at most this long plus the batch in flight."""

Item = TypeVar("Item")
Batch = List[Tuple[str, Any]]
"""One planned batch: (key, payload) pairs; the payload is what :meth:`RowProducer.encode` reads."""


class RowProducer(ABC, Generic[Item]):
    """How the rows of one kind (``"image"``, ``"text"``, region features...) are computed for one model."""

    kind: str
    """Name of the rows (cache file prefix, ``EmbeddingEngine.encoded`` key, progress label)."""

    @abstractmethod
    def key(self, item: Item) -> str:
        """The cache key of ``item``; items with equal keys share one row."""

    @abstractmethod
    def cache_key(self) -> str:
        """Everything that determines the rows (model fingerprint, dtype, code versions, settings); hashed into the
        on-disk namespace, so rows computed under other settings are never served."""

    @abstractmethod
    def plan(self, items: Mapping[str, Item]) -> List[Batch]:
        """The batches that compute ``items`` (key -> item, every key once), each a list of (key, payload)."""

    @abstractmethod
    def encode(self, batches: List[List[Any]]) -> Iterator[Sequence[np.ndarray]]:
        """One ``(len(batch), dim)`` array per batch of payloads, in order (may prepare the next batch meanwhile);
        a producer of ragged rows (read with :meth:`EmbeddingEngine.row_list`) yields a list of 1-D arrays."""

    def abandon(self) -> None:
        """Stop the work :meth:`encode` started for a request that will not be finished (default: none to stop)."""


def fixed_size_batches(items: Mapping[str, Any], size: int) -> List[Batch]:
    """``items`` in their order, cut into batches of ``size`` (key, item) pairs."""
    pairs = list(items.items())
    return [pairs[start:start + size] for start in range(0, len(pairs), size)]


def to_rows(features: torch.Tensor) -> np.ndarray:
    """Model output as NumPy rows: fp16 stays fp16 (a reference fp16 arithmetic may continue in NumPy); other dtypes
    become float32."""
    if features.dtype == torch.float16:
        return features.cpu().numpy()
    return features.float().cpu().numpy()


class EmbeddingEngine:
    """Rows of every producer's kind: memory cache, optional on-disk cache, then the model, sharded over processes."""

    def __init__(
        self,
        producers: Sequence[RowProducer],
        *,
        cache_dir: Union[str, "os.PathLike[str]", None] = None,
        memory_cache_bytes: int = 256 << 20,
        progress: bool = False,
    ) -> None:
        self.producers: Dict[str, RowProducer] = {producer.kind: producer for producer in producers}
        self.progress = progress
        self.state = process_state()
        self._memory = {kind: MemoryCache(memory_cache_bytes) for kind in self.producers}
        self._disk: Dict[str, DiskCache] = {}
        if cache_dir is not None:
            self._disk = {kind: DiskCache(cache_dir, self.cache_namespace(kind)) for kind in self.producers}
        self.encoded = {kind: 0 for kind in self.producers}
        """How many rows of each kind this engine has run through the model (for tests and reports)."""

    @property
    def memory_cache_nbytes(self) -> int:
        """Bytes of rows the memory caches hold now, all kinds together: at most ``memory_cache_bytes`` per kind,
        whatever the number of items scored."""
        return sum(cache.nbytes for cache in self._memory.values())

    def cache_namespace(self, kind: str) -> str:
        """On-disk namespace of ``kind``: the kind and a digest of its producer's :meth:`RowProducer.cache_key`."""
        digest = hashlib.blake2b(self.producers[kind].cache_key().encode(), digest_size=12).hexdigest()
        return f"{kind}-{digest}"

    def rows(self, kind: str, items: Sequence[Any]) -> np.ndarray:
        """One row per item of ``items`` (items with equal keys share their row), stacked."""
        return np.stack(self.row_list(kind, items))

    def row_list(self, kind: str, items: Sequence[Any]) -> List[np.ndarray]:
        """One 1-D row per item of ``items`` (items with equal keys share their row); rows may differ in length."""
        return self.request(kind, items).result()

    def rows_beside(self, background: Tuple[str, Sequence[Any]], *foreground: Tuple[str, Sequence[Any]]
                    ) -> Tuple[List[np.ndarray], ...]:
        """Row lists of ``background`` (kind, items), a kind whose producer works in other processes (image or video
        decoding), and of each ``foreground`` (kind, items), computed in this process while the background works.

        The foreground requests are made first, so that their planning (tokenisation) runs before the decoding
        workers take the cores rather than beside them; their rows are then computed while the workers decode.
        Returns the background's rows, then each foreground's."""
        requests: List[RowRequest] = []
        try:
            for kind, items in (*foreground, background):
                requests.append(self.request(kind, items))
            foreground_rows = [request.result() for request in requests[:-1]]
            return (requests[-1].result(), *foreground_rows)
        except BaseException:
            for request in requests:
                request.close()
            raise

    def request(self, kind: str, items: Sequence[Any]) -> "RowRequest":
        """Start computing the rows of ``items``: cache look-ups, planning and the start of this process's share of
        the work (a producer whose ``encode`` starts preparing batches when called, such as image decoding in
        worker processes, works while the caller does something else). :meth:`RowRequest.result` finishes;
        every process must finish its requests in the same order."""
        producer = self.producers[kind]
        keys = [producer.key(item) for item in items]
        by_key: Dict[str, Any] = {}
        for key, item in zip(keys, items):
            by_key.setdefault(key, item)
        unique = list(by_key)
        table = self._memory[kind].get_many(unique)
        missing = [key for key in unique if key not in table]
        disk = self._disk.get(kind)
        if disk is not None and missing:
            from_disk = disk.get_many(missing)
            self._memory[kind].put_many(from_disk)
            table.update(from_disk)
            missing = [key for key in missing if key not in table]
        if self.state.num_processes > 1:
            union = set().union(*gather_object([missing]))
            missing = [key for key in unique if key in union]
        mine: List[Batch] = []
        if missing:  # this process's share of the batches: every num_processes-th
            batches = producer.plan({key: by_key[key] for key in missing})
            mine = batches[self.state.process_index::self.state.num_processes]
        encoded = producer.encode([[payload for _, payload in batch] for batch in mine]) if mine else iter(())
        return RowRequest(self, producer, keys, table, mine, encoded, bool(missing))

    def _write(self, kind: str, rows: Dict[str, np.ndarray]) -> None:
        """Put ``rows`` in the on-disk cache of ``kind``, if there is one."""
        disk = self._disk.get(kind)
        if disk is not None and rows:
            disk.put_many(rows)

    def _store(self, kind: str, computed: Dict[str, np.ndarray],
               failure: Optional[Exception] = None) -> Dict[str, np.ndarray]:
        """Count this process's computed rows (already on disk); every process's rows, gathered, in memory.

        Under several processes the rows travel with each process's ``failure`` (its share's error, if any; only
        given there) in one gather, so a failed share does not leave the other processes waiting for its rows: if
        any process failed, every process raises, the failing one ``failure`` itself, the others the first failure,
        as an :class:`~capeval.inputs.InputError` with its message if it was one, else as a ``RuntimeError`` naming
        the process and the error."""
        self.encoded[kind] += len(computed)
        if self.state.num_processes > 1:
            record = None if failure is None else (isinstance(failure, InputError), repr(failure), str(failure))
            shares = gather_object([(record, computed)])
            if failure is not None:
                raise failure
            for index, (other_failure, _) in enumerate(shares):
                if other_failure is not None:
                    is_input_error, description, message = other_failure
                    raise InputError(message) if is_input_error else RuntimeError(
                        f"process {index} failed: {description}")
            for _, part in shares:
                computed.update(part)
        self._memory[kind].put_many(computed)
        return computed


class RowRequest:
    """Rows requested from an :class:`EmbeddingEngine`, being computed (see :meth:`EmbeddingEngine.request`)."""

    def __init__(self, engine: EmbeddingEngine, producer: RowProducer, keys: List[str], table: Dict[str, np.ndarray],
                 mine: List[Batch], encoded: Iterator[Sequence[np.ndarray]], gather: bool) -> None:
        self._engine, self._producer, self._keys, self._table = engine, producer, keys, table
        self._mine, self._encoded, self._gather = mine, encoded, gather

    def result(self) -> List[np.ndarray]:
        """One row per requested item, in order (this process's batches are run now, then rows are gathered).

        Under several processes a process whose share fails does not leave the others waiting for its rows: every
        process learns of the failure and raises, the failing one its own error, the others an error of the same
        kind (an :class:`~capeval.inputs.InputError` keeps its message, which names the item)."""
        engine, kind = self._engine, self._producer.kind
        try:
            computed, failure = self._compute(), None
        except Exception as error:
            if not (self._gather and engine.state.num_processes > 1):
                raise
            computed, failure = {}, error
        if self._gather:
            self._table.update(engine._store(kind, computed, failure))
        return [self._table[key] for key in self._keys]

    def _compute(self) -> Dict[str, np.ndarray]:
        """This process's batches, run; their rows are written to the on-disk cache as :data:`DISK_WRITE_SECONDS`
        says, and those computed before a failure are written before it propagates."""
        engine, kind = self._engine, self._producer.kind
        computed: Dict[str, np.ndarray] = {}
        unwritten: Dict[str, np.ndarray] = {}
        written_at = time.monotonic()
        try:
            label = kind.replace("_", " ")
            with tqdm(total=sum(map(len, self._mine)), desc=f"encoding {label}{'' if label.endswith('s') else 's'}",
                      unit="row", leave=False,
                      disable=not engine.progress or not engine.state.is_local_main_process) as bar:
                for features, batch in zip(self._encoded, self._mine):  # the producer's iterator runs to its end
                    rows = dict(zip((key for key, _ in batch), features))
                    computed.update(rows)
                    unwritten.update(rows)
                    bar.update(len(batch))
                    if time.monotonic() - written_at >= DISK_WRITE_SECONDS:
                        engine._write(kind, unwritten)
                        unwritten, written_at = {}, time.monotonic()
        except BaseException:
            try:
                engine._write(kind, unwritten)
            except Exception as write_error:  # the failure being raised matters more than this one
                warnings.warn(f"{len(unwritten)} computed {kind} rows could not be written to the on-disk cache "
                              f"({write_error})")
            finally:
                self.close()
            raise
        engine._write(kind, unwritten)
        return computed

    def close(self) -> None:
        """Give this request up: stop the producer's work on it (called by :meth:`result` when it fails)."""
        close = getattr(self._encoded, "close", None)
        if close is not None:
            close()
        self._producer.abandon()
