"""Downloads of single files that a user can trust: resumed after an interruption (HTTP ``Range``), with a progress
bar, a size check, a refusal of HTML pages served in place of the file, a free-space check and one clear error for
every way a transfer fails (the caller says which file it was about). URLs are ``http(s)://`` or ``file://`` (a file
on this machine, copied). A host that could not be reached is remembered for the rest of the process, so that the
next file from it fails at once instead of waiting for the network again. Google Drive files go through ``gdown``
(an optional dependency: ``capeval[gdrive]``), behind :class:`DriveClient`.

Model-independent: :mod:`capeval.fetch` says what to download and checks the sha256.
"""
from __future__ import annotations

import errno
import hashlib
import http.client
import os
import shutil
import socket
import sys
import urllib.error
import urllib.request
from inspect import signature
from pathlib import Path
from typing import Dict, Optional, Protocol
from urllib.parse import urlsplit

CHUNK_BYTES = 1 << 20
ATTEMPTS = 4
"""Transfers per file: an interrupted one is resumed from where it stopped this many times in all."""
TIMEOUT_SECONDS = 60.0
HTML_STARTS = (b"<!doctype html", b"<html", b"<head", b"<!--")


class TransferError(OSError):
    """A file could not be had; the message says from where, why, and what to do (the caller says which file)."""


class TransferInterrupted(TransferError):
    """The connection ended before the whole file came; the partial file is kept for the next attempt."""


class HostUnreachable(TransferError):
    """No connection could be made to the file's host (no network, a name that does not resolve, a refused or
    timed-out connection): nothing was transferred."""


UNREACHABLE: Dict[str, str] = {}
"""Host -> why it could not be reached, in this process (a later transfer from it fails at once)."""


def sha256_of(path: Path) -> str:
    """Hex sha256 of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(CHUNK_BYTES), b""):
            digest.update(block)
    return digest.hexdigest()


def looks_like_html(start: bytes) -> bool:
    """Whether the first bytes of a file are an HTML page (Google Drive's confirmation or quota pages, a login or
    error page) rather than the file."""
    return start.lstrip().lower().startswith(HTML_STARTS)


def check_free_space(folder: Path, needed: int) -> None:
    """Refuse to start a transfer of about ``needed`` more bytes into ``folder`` when its disk has less free."""
    free = shutil.disk_usage(folder).free
    if free < needed:
        raise TransferError(f"needs about {needed:,} bytes in {folder} but its disk has {free:,} free; free some "
                            "space or set CAPEVAL_CACHE (or HF_HOME) to a folder on a larger disk")


def _disk_full(path: Path) -> TransferError:
    free = shutil.disk_usage(path.parent).free
    return TransferError(f"the disk is full while writing {path} ({free:,} bytes free): free some space or "
                         "set CAPEVAL_CACHE (or HF_HOME) to a folder on a larger disk, then run the same command "
                         "again (the part already written is kept)")


def _progress_bar(total: Optional[int], initial: int, label: str):
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=initial, unit="B", unit_scale=True, unit_divisor=1024, desc=label,
                file=sys.stderr, leave=False, dynamic_ncols=True)


def _open(url: str, offset: int) -> http.client.HTTPResponse:
    request = urllib.request.Request(url, headers={"User-Agent": "capeval", "Accept-Encoding": "identity"})
    if offset:
        request.add_header("Range", f"bytes={offset}-")
    return urllib.request.urlopen(request, timeout=TIMEOUT_SECONDS)


def _expected_total(response: http.client.HTTPResponse, offset: int) -> Optional[int]:
    """The whole file's size from the response headers (``Content-Range`` of a 206, else ``Content-Length``)."""
    content_range = response.headers.get("Content-Range", "")
    if response.status == 206 and "/" in content_range and content_range.rsplit("/", 1)[1].isdigit():
        return int(content_range.rsplit("/", 1)[1])
    length = response.headers.get("Content-Length")
    return int(length) + offset if length is not None and length.isdigit() else None


def _transfer_once(url: str, part: Path, size: Optional[int], progress: bool) -> None:
    """One request, appended to ``part`` from its current length (``Range``); raises :class:`TransferInterrupted`
    when the body ends early."""
    offset = part.stat().st_size if part.exists() else 0
    if size is not None and offset == size:
        return
    try:
        response = _open(url, offset)
    except urllib.error.HTTPError as error:
        if error.code == 416 and offset:  # the part is complete or longer than the file: start again
            part.unlink()
            raise TransferInterrupted(f"{url} refused to resume at byte {offset:,}") from None
        raise
    with response:
        content_range = response.headers.get("Content-Range", "")
        if offset and response.status == 206 and not content_range.startswith(f"bytes {offset}-"):
            part.unlink()  # a part of another range than asked for: start again
            raise TransferInterrupted(f"{url} answered range {content_range!r} to bytes={offset}-")
        if offset and response.status != 206:  # the server ignored the range: the body is the whole file
            offset = 0
        kind = response.headers.get("Content-Type", "")
        total = _expected_total(response, offset)
        first = response.read(min(CHUNK_BYTES, 4096))
        if "text/html" in kind or (offset == 0 and looks_like_html(first)):
            title = first[:300].decode("utf-8", "replace").split("<title>")[-1].split("</title>")[0].strip()
            raise TransferError(f"{url} answered with an HTML page ({title[:80]!r}), not the file: the host "
                                "wants a confirmation, a login, or its download quota is used up")
        received = offset
        bar = _progress_bar(total, offset, part.name[:-len(".part")]) if progress else None
        try:
            with open(part, "r+b" if offset else "wb") as handle:
                handle.seek(offset)
                handle.truncate()
                block = first
                while block:
                    handle.write(block)
                    received += len(block)
                    if bar is not None:
                        bar.update(len(block))
                    block = response.read(CHUNK_BYTES)
        except (http.client.IncompleteRead, ConnectionError, socket.timeout) as error:
            raise TransferInterrupted(f"the transfer from {url} broke off after {received:,} bytes "
                                      f"({error.__class__.__name__})") from None
        except OSError as error:
            if error.errno == errno.ENOSPC:
                raise _disk_full(part) from None
            raise
        finally:
            if bar is not None:
                bar.close()
    if total is not None and received < total:
        raise TransferInterrupted(f"the transfer from {url} ended after {received:,} of {total:,} bytes")


def download_url(url: str, target: Path, size: Optional[int], estimated_size: int, progress: bool = True) -> None:
    """Download ``url`` to ``target`` through ``<target>.part``, resuming a part left by an earlier run and each
    interruption (up to :data:`ATTEMPTS` transfers); the part is renamed to ``target`` once complete. ``size``
    (when known) must be the file's size. A host found unreachable earlier in this process is not tried again
    (:class:`HostUnreachable`)."""
    host = urlsplit(url).netloc
    if host in UNREACHABLE:
        raise HostUnreachable(f"{host} cannot be reached ({UNREACHABLE[host]}, found earlier in this run)")
    part = target.with_name(target.name + ".part")
    have = part.stat().st_size if part.exists() else 0
    check_free_space(target.parent, max((size or estimated_size) - have, 0))
    for attempt in range(1, ATTEMPTS + 1):
        try:
            _transfer_once(url, part, size, progress)
            break
        except TransferInterrupted as error:
            if attempt == ATTEMPTS:
                raise TransferInterrupted(f"{error}; {ATTEMPTS} attempts failed. Run the same command again to "
                                          f"resume (the part is kept in {part})") from None
        except urllib.error.HTTPError as error:
            raise TransferError(f"{url} answered {error.code} {error.reason}") from None
        except (urllib.error.URLError, ConnectionError, socket.timeout) as error:
            reason = getattr(error, "reason", error)
            if not host:  # a file:// URL: the file is missing or unreadable
                raise TransferError(f"cannot read {urllib.request.url2pathname(urlsplit(url).path)} "
                                    f"({getattr(reason, 'strerror', None) or reason})") from None
            UNREACHABLE[host] = str(getattr(reason, "strerror", None) or reason)
            raise HostUnreachable(f"{host} cannot be reached ({UNREACHABLE[host]})") from None
    got = part.stat().st_size
    if size is not None and got != size:
        part.unlink()
        raise TransferError(f"{url} gave {got:,} bytes, but the file has {size:,}: a truncated or different file "
                            "(removed)")
    os.replace(part, target)


class DriveClient(Protocol):
    """What the fetcher needs from Google Drive: a shared folder's files by path, and one file's download."""

    def list_folder(self, folder_id: str) -> Dict[str, str]:
        """``{path in the folder: file id}`` of every file in the shared folder and its subfolders."""

    def download(self, file_id: str, target: Path, progress: bool) -> None:
        """Download one file to ``target``, through Drive's confirmation step for large files."""


class GdownClient:
    """:class:`DriveClient` through the ``gdown`` package (``pip install 'capeval[gdrive]'``)."""

    @staticmethod
    def _gdown():
        try:
            import gdown
        except ImportError:
            raise TransferError("Google Drive downloads need the gdown package: pip install 'capeval[gdrive]' "
                                "(or pip install gdown)") from None
        return gdown

    def list_folder(self, folder_id: str) -> Dict[str, str]:
        gdown = self._gdown()
        options = {"remaining_ok": True} if "remaining_ok" in signature(gdown.download_folder).parameters else {}
        try:
            listed = gdown.download_folder(id=folder_id, skip_download=True, quiet=True, **options)
        except Exception as error:  # gdown's and requests' errors, from a third-party service
            raise TransferError(f"cannot list the Google Drive folder {folder_id}: {error}") from None
        return {entry.path.replace(os.sep, "/"): entry.id for entry in listed or []}

    def download(self, file_id: str, target: Path, progress: bool) -> None:
        gdown = self._gdown()
        try:
            gdown.download(id=file_id, output=str(target), quiet=not progress, resume=True)
        except Exception as error:  # among them Drive's quota and permission pages (FileURLRetrievalError)
            raise TransferError(f"Google Drive would not serve file {file_id}: {error}") from None


def drive_file_id(listing: Dict[str, str], path: str, folder_url: str) -> str:
    """The id of the file at ``path`` in a listed Drive folder: by its path, else by its name when only one file
    has that name; an error listing what the folder holds otherwise."""
    if path in listing:
        return listing[path]
    name = path.rsplit("/", 1)[-1]
    matches = [file_id for listed, file_id in listing.items() if listed.rsplit("/", 1)[-1] == name]
    if len(matches) == 1:
        return matches[0]
    problem = "several files are" if matches else "no file is"
    shown = ", ".join(sorted(listing)[:20]) or "nothing"
    raise TransferError(f"{problem} called {name} in the Google Drive folder {folder_url} (it holds: {shown})")

