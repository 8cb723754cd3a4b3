"""Embedding caches: a bounded in-memory LRU and an optional on-disk SQLite store.

On disk, each namespace (model fingerprint, precision, preprocessing version, kind) is its own SQLite file, so a
changed model or preprocessing never meets old entries. SQLite serialises concurrent writers (WAL journal, busy
timeout); every row carries a digest of its bytes, and a row that fails its check is deleted and recomputed; a
damaged file is set aside and a read-only folder is read without change (:class:`DiskCache`).
"""
from __future__ import annotations

import hashlib
import os
import sqlite3
import urllib.parse
import threading
import time
import warnings
import weakref
from collections import OrderedDict
from pathlib import Path
from typing import Dict, Iterable, List, Mapping, Optional, Union

import numpy as np

from capeval.inputs import InputError


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


def check_cache_dir(root: Union[str, "os.PathLike[str]"]) -> bool:
    """Make sure ``root`` can hold an on-disk cache, creating it if needed; returns whether it is writable (a
    read-only folder serves the rows it holds). :class:`~capeval.inputs.InputError` naming ``cache_dir`` when it is a
    file, cannot be created or cannot be read."""
    folder = Path(root).expanduser()
    if folder.exists() and not folder.is_dir():
        raise InputError(f"cache_dir={str(folder)!r} is not a folder")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise InputError(f"cache_dir={str(folder)!r} cannot be created: {error.strerror or error}") from None
    if not os.access(folder, os.R_OK | os.X_OK):
        raise InputError(f"cache_dir={str(folder)!r} cannot be read (permissions)")
    return os.access(folder, os.W_OK)


def _is_damage(error: sqlite3.Error) -> bool:
    """Whether SQLite's ``error`` says the file is damaged or not a database (rather than busy, read-only...)."""
    code = getattr(error, "sqlite_errorcode", None)
    return code is not None and code & 0xFF in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB)


def _is_read_only(error: sqlite3.Error) -> bool:
    code = getattr(error, "sqlite_errorcode", None)
    return code is not None and code & 0xFF in (sqlite3.SQLITE_READONLY, sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_PERM)


BUSY_SECONDS = 120.0
"""How long a process waits for another process's lock on a cache file."""


def _switch_to_wal(connection: sqlite3.Connection) -> None:
    """``PRAGMA journal_mode=WAL``, waiting while another process holds the file (SQLite answers this pragma
    "database is locked" at once, without its busy handler, when two processes create one cache together)."""
    deadline = time.monotonic() + BUSY_SECONDS
    while True:
        try:
            connection.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as error:
            code = getattr(error, "sqlite_errorcode", 0) & 0xFF
            if code not in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


class DiskCache:
    """Feature rows of one namespace in ``<root>/<namespace>.sqlite``; safe for several processes at once, and for
    several threads of one process (which share one connection, one call at a time).

    A folder this process cannot write to (a read-only file system, a shared cache of another user) is read as it is
    and never changed: new rows are not stored, with one warning. Damage found at any time (a file that is not a
    database, a malformed page met by a query) costs only the rows: the damaged file is set aside as
    ``<namespace>.sqlite.corrupt`` (when the folder is writable; otherwise the cache is no longer read) with one
    warning, and the missing rows are computed again.
    """

    def __init__(self, root: Union[str, "os.PathLike[str]"], namespace: str) -> None:
        self.path = Path(root).expanduser() / f"{namespace}.sqlite"
        self.writable = check_cache_dir(root)
        self._connection: Optional[sqlite3.Connection] = None
        self._lock = threading.Lock()
        self._closed = False
        """Whether the cache is no longer used (damaged and read-only)."""
        self._warned_read_only = False

    def _connect(self) -> Optional[sqlite3.Connection]:
        """The open connection, opened now if needed; ``None`` when there is nothing to read (a read-only folder
        without this namespace's file, or a damaged read-only file)."""
        if self._connection is None and not self._closed:
            try:
                self._connection = self._open()
            except sqlite3.DatabaseError as error:
                if not _is_damage(error):
                    raise
                self._set_aside(error)
                if self._closed:
                    return None
                self._connection = self._open()
            if self._connection is not None:
                # a connection sits in a reference cycle with its statement cache, so only the cyclic garbage
                # collector would free it, at any later time; close it as soon as this cache is gone instead
                weakref.finalize(self, self._connection.close)
        return self._connection

    def _open(self) -> Optional[sqlite3.Connection]:
        if not self.writable:
            if not self.path.is_file():
                return None
            uri = f"file:{urllib.parse.quote(str(self.path))}?mode=ro&immutable=1"
            connection = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
            connection.execute("SELECT count(*) FROM rows WHERE 0").fetchall()  # fails now on a damaged file
            return connection
        connection = sqlite3.connect(self.path, timeout=BUSY_SECONDS, isolation_level=None, check_same_thread=False)
        try:
            _switch_to_wal(connection)
            connection.execute(
                "CREATE TABLE IF NOT EXISTS rows (key TEXT PRIMARY KEY, dtype TEXT, dim INTEGER, data BLOB, digest BLOB)"
            )
        except BaseException:
            connection.close()
            raise
        return connection

    def _set_aside(self, error: sqlite3.Error) -> None:
        """After damage: move the file (and its journal) aside so that a fresh one starts, or, in a read-only folder,
        stop reading it. Warns once."""
        if self._connection is not None:
            self._connection.close()
            self._connection = None
        if not self.writable:
            self._closed = True
            warnings.warn(f"embedding cache {self.path} is damaged ({error}) and its folder is read-only; it is not "
                          "used, and every row is computed")
            return
        corrupt = self.path.with_name(self.path.name + ".corrupt")
        self.path.replace(corrupt)
        for suffix in ("-wal", "-shm"):
            self.path.with_name(self.path.name + suffix).unlink(missing_ok=True)
        warnings.warn(f"embedding cache {self.path} is damaged ({error}); moved to {corrupt}, its rows will be computed "
                      "again")

    def get_many(self, keys: List[str]) -> Dict[str, np.ndarray]:
        """Rows found for ``keys``; rows failing their integrity check are deleted (when writable) and left out."""
        with self._lock:
            connection = self._connect()
            if connection is None:
                return {}
            try:
                return self._get_many(connection, keys)
            except sqlite3.DatabaseError as error:
                if not _is_damage(error):
                    raise
                self._set_aside(error)
                return {}

    def _get_many(self, connection: sqlite3.Connection, keys: List[str]) -> Dict[str, np.ndarray]:
        found, corrupt = {}, []
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
            if self.writable:
                connection.executemany("DELETE FROM rows WHERE key = ?", [(key,) for key in corrupt])
        return found

    def put_many(self, rows: Mapping[str, np.ndarray]) -> None:
        """Store rows (replacing any existing row with the same key) in one transaction; in a read-only folder,
        nothing (one warning)."""
        records = []
        for key, row in rows.items():
            data = np.ascontiguousarray(row).tobytes()
            records.append((key, row.dtype.str, row.shape[0], data, _row_digest(data)))
        with self._lock:
            for attempt in range(2):  # a second time in a fresh file after damage
                if not self.writable or self._closed:
                    self._warn_read_only()
                    return
                connection = self._connect()
                assert connection is not None  # a writable folder always opens (or creates) its file
                try:
                    self._insert(connection, records)
                    return
                except sqlite3.DatabaseError as error:
                    if _is_read_only(error):
                        self.writable = False
                        continue
                    if not _is_damage(error) or attempt:
                        raise
                    self._set_aside(error)

    @staticmethod
    def _insert(connection: sqlite3.Connection, records: List[tuple]) -> None:
        connection.execute("BEGIN IMMEDIATE")
        try:
            connection.executemany("INSERT OR REPLACE INTO rows VALUES (?, ?, ?, ?, ?)", records)
            connection.execute("COMMIT")
        except BaseException:
            if connection.in_transaction:
                connection.execute("ROLLBACK")
            raise

    def _warn_read_only(self) -> None:
        if not self._warned_read_only:
            self._warned_read_only = True
            warnings.warn(f"embedding cache folder {self.path.parent} is read-only: its rows are used, new rows are not "
                          "stored")
