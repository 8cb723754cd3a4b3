"""Embedding caches: a bounded in-memory LRU and an optional on-disk SQLite store.

On disk, each namespace (model fingerprint, precision, preprocessing version, kind) is its own SQLite file, so a
changed model or preprocessing never meets old entries. SQLite serialises concurrent writers (WAL journal, busy
timeout); every row carries a digest of its bytes, and a row that fails its check is deleted and recomputed.
"""
from __future__ import annotations

import hashlib
import sqlite3
import threading
import warnings
import weakref
from collections import OrderedDict
from pathlib import Path
from typing import Dict, Iterable, List, Mapping, Optional, Union

import numpy as np


class MemoryCache:
    """Least-recently-used map from item key to feature row, holding at most ``capacity_bytes`` of rows."""

    def __init__(self, capacity_bytes: int) -> None:
        self.capacity_bytes = capacity_bytes
        self.nbytes = 0
        self._rows: "OrderedDict[str, np.ndarray]" = OrderedDict()

    def get_many(self, keys: Iterable[str]) -> Dict[str, np.ndarray]:
        found = {}
        for key in keys:
            row = self._rows.get(key)
            if row is not None:
                self._rows.move_to_end(key)
                found[key] = row
        return found

    def put_many(self, rows: Mapping[str, np.ndarray]) -> None:
        """Store copies of ``rows`` (so that no batch array outlives its last cached row), evicting the oldest."""
        for key, row in rows.items():
            previous = self._rows.pop(key, None)
            if previous is not None:
                self.nbytes -= previous.nbytes
            self._rows[key] = row.copy()
            self.nbytes += row.nbytes
        while self.nbytes > self.capacity_bytes and self._rows:
            self.nbytes -= self._rows.popitem(last=False)[1].nbytes

    def __len__(self) -> int:
        return len(self._rows)


def text_key(text: str) -> str:
    """Cache key of a text: a digest of its UTF-8 bytes (short, whatever the text's length)."""
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).hexdigest()


def _row_digest(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=16).digest()


class DiskCache:
    """Feature rows of one namespace in ``<root>/<namespace>.sqlite``; safe for several processes at once, and for
    several threads of one process (which share one connection, one call at a time)."""

    def __init__(self, root: Union[str, Path], namespace: str) -> None:
        self.path = Path(root).expanduser() / f"{namespace}.sqlite"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._connection: Optional[sqlite3.Connection] = None
        self._lock = threading.Lock()

    def _connect(self) -> sqlite3.Connection:
        if self._connection is None:
            try:
                self._connection = self._open()
            except sqlite3.DatabaseError as error:
                corrupt = self.path.with_suffix(".sqlite.corrupt")
                warnings.warn(f"embedding cache {self.path} is unreadable ({error}); moved to {corrupt}, starting afresh")
                self.path.replace(corrupt)
                self._connection = self._open()
            # a connection sits in a reference cycle with its statement cache, so only the cyclic garbage collector
            # would free it, at any later time; close it as soon as this cache is gone instead
            weakref.finalize(self, self._connection.close)
        return self._connection

    def _open(self) -> sqlite3.Connection:
        connection = sqlite3.connect(self.path, timeout=120, isolation_level=None, check_same_thread=False)
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute(
            "CREATE TABLE IF NOT EXISTS rows (key TEXT PRIMARY KEY, dtype TEXT, dim INTEGER, data BLOB, digest BLOB)"
        )
        return connection

    def get_many(self, keys: List[str]) -> Dict[str, np.ndarray]:
        """Rows found for ``keys``; rows failing their integrity check are deleted and left out."""
        with self._lock:
            return self._get_many(keys)

    def _get_many(self, keys: List[str]) -> Dict[str, np.ndarray]:
        connection, found, corrupt = self._connect(), {}, []
        for start in range(0, len(keys), 500):
            batch = keys[start:start + 500]
            query = f"SELECT key, dtype, dim, data, digest FROM rows WHERE key IN ({','.join('?' * len(batch))})"
            for key, dtype, dim, data, digest in connection.execute(query, batch):
                try:
                    row = np.frombuffer(data, dtype=np.dtype(dtype))
                    valid = _row_digest(data) == digest and row.shape == (dim,)
                except (TypeError, ValueError):
                    valid = False
                if valid:
                    found[key] = row
                else:
                    corrupt.append(key)
        if corrupt:
            warnings.warn(f"{len(corrupt)} corrupt entries in {self.path} will be recomputed")
            connection.executemany("DELETE FROM rows WHERE key = ?", [(key,) for key in corrupt])
        return found

    def put_many(self, rows: Mapping[str, np.ndarray]) -> None:
        """Store rows (replacing any existing row with the same key) in one transaction."""
        records = []
        for key, row in rows.items():
            data = np.ascontiguousarray(row).tobytes()
            records.append((key, row.dtype.str, row.shape[0], data, _row_digest(data)))
        with self._lock:
            connection = self._connect()
            connection.execute("BEGIN IMMEDIATE")
            try:
                connection.executemany("INSERT OR REPLACE INTO rows VALUES (?, ?, ?, ?, ?)", records)
                connection.execute("COMMIT")
            except BaseException:
                connection.execute("ROLLBACK")
                raise
