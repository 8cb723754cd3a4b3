"""Models built from their authors' original files (:data:`capeval.originals.SOURCES`): downloaded, checked,
converted with capeval's ``conversion`` code and kept in one cache folder, so that the next use needs no network.

The cache is ``$CAPEVAL_CACHE`` if set, else ``$HF_HOME/capeval`` (``HF_HOME`` defaulting, as for the Hugging Face
libraries, to ``$XDG_CACHE_HOME/huggingface``, i.e. ``~/.cache/huggingface``)::

    models/<namespace>--<name>/      a converted folder, with capeval_provenance.json (what it was converted from)
    downloads/<namespace>--<name>/   originals being downloaded (``*.part`` until complete; removed once converted)
    locks/<namespace>--<name>.lock   held while a process fetches the model

A converted folder appears at once and whole: the converter writes into a temporary folder that is renamed when
conversion and provenance are complete. The lock makes every other process (``accelerate launch`` ranks included)
wait for the one that fetches, then use its folder. ``HF_HUB_OFFLINE=1`` or ``CAPEVAL_OFFLINE=1`` forbid any
download; ``CAPEVAL_ORIGINALS_MIRROR`` takes every original from ``<mirror>/<file name>``, the mirror being a folder on
this machine, a ``file://`` URL or an ``http(s)://`` base URL.

An original that fails its checks (an HTML page, another size than recorded or far from the estimate, another
sha256) or does not convert is removed from the downloads folder, so that the next run downloads it again; a file the
user gave (``capeval download --original``) is never removed, and the message says what was wrong with it.
"""
from __future__ import annotations

import contextlib
import datetime
import importlib
import io
import json
import os
import shutil
import sys
import warnings
from pathlib import Path
from typing import Any, Dict, Iterator, List, Mapping, Optional

from capeval.hub import HUB_PROBES, PROVENANCE_NAME, ModelNotAvailableError, weights_problem
from capeval.originals import (NLTK_RESOURCES, SIZE_TOLERANCE, SOURCES, ModelSource, OriginalFile, accepted_sizes,
                               human_size, shown_size)
from capeval.transfers import (UNREACHABLE, GdownClient, HostUnreachable, TransferError, check_free_space,
                               download_url, drive_file_id, looks_like_html, sha256_of)
from capeval.version import __version__

MIRROR_VARIABLE = "CAPEVAL_ORIGINALS_MIRROR"
MIRROR_SCHEMES = ("http://", "https://", "file://")
LOCK_NOTICE_SECONDS = 5.0
ORIGINAL_ATTRIBUTE = "capeval_original"
"""The attribute that :func:`reading` sets on a converter's error: the path of the original file at fault."""


class OriginalUnavailableError(ModelNotAvailableError):
    """A model's original files could not be downloaded, checked or converted; the message names the model, the
    file, its URL and what to do."""


class _Unusable(Exception):
    """An original that was had but is not the file capeval converts: ``file`` (``None``: not one of them alone)
    and what is wrong."""

    def __init__(self, file: Optional[OriginalFile], problem: str) -> None:
        super().__init__(problem)
        self.file = file


@contextlib.contextmanager
def reading(path: str | os.PathLike[str]) -> Iterator[None]:
    """Converters read each original file inside this block: an error raised in it is marked as being about
    ``path`` (its :data:`ORIGINAL_ATTRIBUTE`, unless a block inside marked another file) and re-raised unchanged, so
    that :func:`fetch_model` names the file that does not convert."""
    try:
        yield
    except Exception as error:
        if getattr(error, ORIGINAL_ATTRIBUTE, None) is None:
            setattr(error, ORIGINAL_ATTRIBUTE, Path(path))
        raise


def _flag(variable: str) -> bool:
    return os.environ.get(variable, "").strip().lower() in ("1", "true", "yes", "on")


def offline() -> bool:
    """Whether capeval may not touch the network: ``CAPEVAL_OFFLINE`` or ``HF_HUB_OFFLINE`` is set."""
    from huggingface_hub import constants

    return _flag("CAPEVAL_OFFLINE") or _flag("HF_HUB_OFFLINE") or bool(constants.HF_HUB_OFFLINE)


def cache_root() -> Path:
    """``$CAPEVAL_CACHE``, else ``$HF_HOME/capeval`` (``HF_HOME``: ``$XDG_CACHE_HOME/huggingface``, ``~/.cache``)."""
    if os.environ.get("CAPEVAL_CACHE"):
        return Path(os.environ["CAPEVAL_CACHE"]).expanduser()
    hf_home = os.environ.get("HF_HOME")
    if not hf_home:
        hf_home = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.join("~", ".cache"), "huggingface")
    return Path(hf_home).expanduser() / "capeval"


def _folder_name(model: str) -> str:
    return model.replace("/", "--")


def converted_folder(model: str) -> Path:
    """Where the converted folder of ``model`` is (or will be) kept."""
    return cache_root() / "models" / _folder_name(model)


def cached_model(model: str) -> Optional[Path]:
    """The complete converted folder of ``model`` in the cache, or ``None`` (its weights are checked when loaded,
    and :func:`fetch_model` builds a damaged one again)."""
    folder = converted_folder(model)
    return folder if (folder / PROVENANCE_NAME).is_file() else None


def read_provenance(folder: Path) -> Optional[Dict[str, Any]]:
    """What a converted folder was made from (``None`` for a folder capeval did not build from originals)."""
    path = Path(folder) / PROVENANCE_NAME
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def has_originals(model: str) -> bool:
    """Whether ``model`` can be built from original files."""
    return model in SOURCES and bool(SOURCES[model].files)


def _published_at(file: OriginalFile) -> str:
    """Where its authors publish ``file``: the URL, or the Google Drive folder and the file's path in it."""
    return file.url + (f" (the file {file.drive_path} in that Google Drive folder)" if file.drive_folder_id else "")


def manual_steps(model: str, source: ModelSource) -> str:
    """What a user can do by hand when the originals of ``model`` cannot be downloaded."""
    places = "; ".join(f"{file.name} from {_published_at(file)}" for file in source.files)
    return (f"By hand: download {places}; then run `capeval download {model} --original FILE...` with the "
            f"downloaded files, or put them in a folder (or on a web server) and set {MIRROR_VARIABLE} to it.")


def _unavailable(model: str, source: ModelSource, problem: str) -> OriginalUnavailableError:
    notice = f" {source.notice.format(model=model)}" if source.notice else ""
    return OriginalUnavailableError(f"model {model!r}: {problem}.{notice} {manual_steps(model, source)}")


def _unreachable(model: str, file: OriginalFile, problem: str) -> OriginalUnavailableError:
    """The short error of a download that found no network: what to run, and where."""
    return OriginalUnavailableError(
        f"model {model!r}: its original file {file.name} cannot be downloaded: {problem}. Run `capeval download "
        f"{model}` where there is network access (with the same HF_HOME or CAPEVAL_CACHE), or give its original "
        f"files: {MIRROR_VARIABLE}=<a folder holding them>, or `--original FILE...`")


def no_network() -> Optional[str]:
    """Why this process has no network, once found: the hub could not be reached and neither could the host of an
    original (each tried once in the process); ``None`` otherwise."""
    if not UNREACHABLE or all(why is None for why in HUB_PROBES.values()):
        return None
    host, why = next(iter(UNREACHABLE.items()))
    return f"there is no network (neither the hub nor {host} can be reached: {why})"


@contextlib.contextmanager
def _model_lock(model: str) -> Iterator[None]:
    """Hold the model's lock file; say once on stderr when another process holds it."""
    from filelock import FileLock, Timeout

    path = cache_root() / "locks" / f"{_folder_name(model)}.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(path))
    try:
        lock.acquire(timeout=LOCK_NOTICE_SECONDS)
    except Timeout:
        print(f"capeval: waiting for another process that is fetching {model} (lock {path})", file=sys.stderr)
        lock.acquire()
    try:
        yield
    finally:
        lock.release()


def mirror_base() -> Optional[str]:
    """The base URL of ``CAPEVAL_ORIGINALS_MIRROR`` (a folder given as its ``file://`` URL), ``None`` when unset;
    :class:`OriginalUnavailableError` when it is neither a folder nor an ``http(s)://`` or ``file://`` URL."""
    value = os.environ.get(MIRROR_VARIABLE, "").strip()
    if not value:
        return None
    if value.lower().startswith(MIRROR_SCHEMES):
        return value.rstrip("/")
    folder = Path(value).expanduser()
    if "://" in value or not folder.is_dir():
        raise OriginalUnavailableError(
            f"{MIRROR_VARIABLE}={value!r} is {'no URL capeval reads' if '://' in value else 'not a folder'}: give a "
            "folder holding the original files, a file:// URL or an http(s):// base URL")
    return folder.resolve().as_uri()


def local_mirror() -> bool:
    """Whether ``CAPEVAL_ORIGINALS_MIRROR`` is a folder on this machine (a path or ``file://`` URL): originals are
    copied from it even offline, as that is no download."""
    base = mirror_base()
    return base is not None and base.lower().startswith("file://")


def _mirror_url(file: OriginalFile) -> Optional[str]:
    """``<CAPEVAL_ORIGINALS_MIRROR>/<file name>``, when the variable is set."""
    base = mirror_base()
    return f"{base}/{file.name}" if base else None


def _download(file: OriginalFile, target: Path, progress: bool) -> str:
    """Download one original to ``target``; returns the URL it came from."""
    url = _mirror_url(file)
    if url is None:
        down = no_network()
        if down is not None:
            raise HostUnreachable(down)
    if url is None and file.drive_folder_id is not None:
        client = GdownClient()
        file_id = drive_file_id(client.list_folder(file.drive_folder_id), file.drive_path or file.name, file.url)
        part = target.with_name(target.name + ".part")
        check_free_space(target.parent, file.size or file.estimated_size)
        client.download(file_id, part, progress)
        os.replace(part, target)
        return f"https://drive.google.com/uc?id={file_id}"
    url = url or file.url
    download_url(url, target, file.size, file.estimated_size, progress)
    return url


def _checked(file: OriginalFile, path: Path, url: str) -> Dict[str, Any]:
    """The provenance record of a downloaded or given original, after its checks: not an HTML page, the recorded
    size (else a size within :data:`capeval.originals.SIZE_TOLERANCE` of the estimate) and sha256; raises
    :class:`_Unusable` saying what is wrong."""
    with open(path, "rb") as handle:
        start = handle.read(512)
    size = path.stat().st_size
    smallest, largest = accepted_sizes(file)
    problem = None
    if looks_like_html(start):
        problem = f"{path} is an HTML page, not {file.name} (a confirmation, login or quota page)"
    elif file.size is not None and size != file.size:
        problem = f"{path} has {size:,} bytes, not the {file.size:,} of {file.name} (truncated or another file)"
    elif not smallest <= size <= largest:
        problem = (f"{path} has {size:,} bytes, far from the {human_size(file.estimated_size)} estimated for "
                   f"{file.name} (its exact size is not recorded; a file more than {SIZE_TOLERANCE} times smaller or "
                   "larger is refused): truncated or another file")
    digest = sha256_of(path) if problem is None else None
    if digest is not None and file.sha256 is not None and digest != file.sha256:
        problem = f"{path} has sha256 {digest}, not the {file.sha256} of {file.name} (another or a corrupted file)"
    if problem is not None:
        raise _Unusable(file, problem)
    return {"name": file.name, "url": url, "published_at": file.url, "drive_path": file.drive_path, "size": size,
            "sha256": digest, "sha256_checked": file.sha256 is not None, "licence": file.licence}


def _convert(model: str, source: ModelSource, paths: Mapping[str, Path], records: List[Dict[str, Any]]) -> Path:
    """Convert the originals into a temporary folder, record the provenance, then rename it into place; raises
    :class:`_Unusable` naming the file that does not convert (``None`` when the converter did not say which)."""
    module, function = (source.converter or "").split(":")
    try:
        converter = getattr(importlib.import_module(module), function)
    except ImportError as error:
        raise _unavailable(model, source, f"capeval's conversion code ({module}) cannot be imported ({error}): "
                                          "install capeval with its `conversion` package") from None
    final = converted_folder(model)
    building = final.with_name(f".{final.name}.converting")
    shutil.rmtree(building, ignore_errors=True)  # left by a process that died converting
    building.parent.mkdir(parents=True, exist_ok=True)
    arguments: Dict[str, Any] = {file.argument: paths[file.name] for file in source.files}
    arguments.update(dict(source.arguments))
    arguments[source.output_argument] = building
    log = io.StringIO()
    try:
        with contextlib.redirect_stdout(log):
            converter(**arguments)
    except Exception as error:  # the converters' own errors, marked by `reading` with the file at fault
        shutil.rmtree(building, ignore_errors=True)
        marked = getattr(error, ORIGINAL_ATTRIBUTE, None)
        at_fault = [file for file in source.files
                    if marked is not None and paths[file.name].resolve() == marked.resolve()]
        problem = f"{type(error).__name__}: {' '.join(str(error).split())}"
        if not at_fault:
            raise _Unusable(None, problem) from None
        raise _Unusable(at_fault[0], f"{paths[at_fault[0].name]} does not convert ({problem})") from None
    provenance = {"model": model, "capeval": __version__, "converted": datetime.datetime.now(
        datetime.timezone.utc).isoformat(timespec="seconds"), "converter": source.converter,
        "arguments": dict(source.arguments), "originals": records, "conversion_log": log.getvalue()}
    (building / PROVENANCE_NAME).write_text(json.dumps(provenance, indent=2) + "\n", encoding="utf-8")
    shutil.rmtree(final, ignore_errors=True)  # an incomplete folder, or one rebuilt from files given by hand
    os.replace(building, final)
    return final


def _nltk_resource(resource: str) -> Optional[Path]:
    import nltk

    try:
        found = nltk.data.find(resource)
    except LookupError:
        return None
    return Path(getattr(found, "path", str(found)))


def nltk_data(package: str, model: str) -> Path:
    """Where NLTK's data ``package`` (needed with ``model``) is: found on NLTK's data path, else downloaded now with
    NLTK's downloader (into its default folder, or the first of ``NLTK_DATA``); never downloaded when offline or once
    this process found no network (:func:`no_network`)."""
    import nltk

    resource = NLTK_RESOURCES[package]
    found = _nltk_resource(resource)
    if found is not None:
        return found
    down = "capeval is offline (HF_HUB_OFFLINE or CAPEVAL_OFFLINE is set)" if offline() else no_network()
    if down is not None:
        raise ModelNotAvailableError(
            f"{model} needs NLTK's {package!r} data, which is not installed, and {down}: run `capeval download "
            f"{model}` where there is network access, with the same NLTK_DATA, or `python -m nltk.downloader "
            f"{package}`")
    try:
        nltk.download(package, quiet=True, raise_on_error=True)
    except Exception as error:  # NLTK's downloader reports failures as several exception types
        raise ModelNotAvailableError(f"{model} needs NLTK's {package!r} data, which could not be downloaded "
                                     f"({error}): run `python -m nltk.downloader {package}`") from None
    found = _nltk_resource(resource)
    if found is None:
        raise ModelNotAvailableError(f"NLTK downloaded {package!r}, but {resource} is not on NLTK's data path "
                                     f"({', '.join(nltk.data.path)}): set NLTK_DATA to the folder it went to")
    return found


def fetch_model(model: str, originals: Optional[Mapping[str, Path]] = None, progress: bool = True) -> Path:
    """The converted folder of ``model``: from the cache, else built from its original files (downloaded, or taken
    from ``originals``, ``{file name: path}`` of files obtained by hand), checked and converted. Raises
    :class:`OriginalUnavailableError` naming the model, the file, where it came from and what to do."""
    source = SOURCES.get(model)
    if source is None or not source.files:
        why = source.no_original if source is not None else "capeval knows no original files of it"
        raise OriginalUnavailableError(f"model {model!r} cannot be built from original files: {why}")
    given = dict(originals or {})
    unknown = sorted(set(given) - {file.name for file in source.files})
    if unknown:
        raise OriginalUnavailableError(f"model {model!r} has no original file called {', '.join(unknown)} (its "
                                       f"files: {', '.join(file.name for file in source.files)})")
    mirror_base()  # a mirror that is neither a folder nor a URL capeval reads is refused before anything else
    with _model_lock(model):
        folder = cached_model(model)
        problem = weights_problem(folder) if folder is not None and not given else None
        if folder is not None and not given and problem is None:
            return folder
        if problem is not None:
            warnings.warn(f"model {model!r}: building its folder again from the original files, as the cached one "
                          f"is damaged: {problem}")
        downloads = cache_root() / "downloads" / _folder_name(model)
        paths: Dict[str, Path] = {}
        records = []
        origins: Dict[str, str] = {}
        try:
            for file in source.files:
                path = Path(given[file.name]) if file.name in given else downloads / file.name
                paths[file.name] = path
                url = origins[file.name] = (f"file:{path.resolve()}" if file.name in given
                                            else _mirror_url(file) or file.url)
                try:
                    if file.name not in given and not path.is_file():
                        if offline() and not local_mirror():
                            raise TransferError("capeval is offline (HF_HUB_OFFLINE or CAPEVAL_OFFLINE is set)")
                        downloads.mkdir(parents=True, exist_ok=True)
                        url = origins[file.name] = _download(file, path, progress)
                    records.append(_checked(file, path, url))
                except _Unusable:
                    if file.name not in given:
                        path.unlink()
                    raise
                except HostUnreachable as error:
                    raise _unreachable(model, file, no_network() or str(error)) from None
                except TransferError as error:
                    raise _unavailable(model, source, f"its original file {file.name} ({shown_size(file)}) cannot "
                                                      f"be had: {error}") from None
            try:
                return _convert(model, source, paths, records)
            finally:
                shutil.rmtree(downloads, ignore_errors=True)
        except _Unusable as error:
            raise _not_usable(model, origins, given, error) from None


def _not_usable(model: str, origins: Mapping[str, str], given: Mapping[str, Path],
                error: _Unusable) -> OriginalUnavailableError:
    """The error of an original that was had but failed its checks or its conversion: the file, where it came from,
    what is wrong and what to do (no URL to download it from by hand: that URL was tried)."""
    file = error.file
    if file is None:
        came = ", ".join(f"{name} from {origins[name]}" for name in origins)
        return OriginalUnavailableError(
            f"model {model!r}: its original files do not convert: {error}. Downloaded copies were removed from "
            f"capeval's downloads, files given with --original are left as they are ({came}): check that each is "
            "its authors' file")
    if file.name in given:
        remedy = (f"{given[file.name]} was given with --original and is left as it is: give the authors' {file.name} "
                  f"(published at {_published_at(file)})")
    elif _mirror_url(file) is not None:
        remedy = (f"The copy was removed from capeval's downloads: replace {file.name} on the mirror "
                  f"({origins[file.name]}) with its authors' file")
    else:
        remedy = (f"The copy was removed from capeval's downloads: run the same command to download it again; if it "
                  f"fails the same way, the file published at {origins[file.name]} is not the one capeval converts: "
                  f"give a copy of the original with `capeval download {model} --original FILE`")
    return OriginalUnavailableError(f"model {model!r}: its original file {file.name} is not usable: {error}. "
                                    f"{remedy}.")
