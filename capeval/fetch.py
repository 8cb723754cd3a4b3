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
download; ``CAPEVAL_ORIGINALS_MIRROR=<base URL>`` takes every original from ``<base URL>/<file name>``.
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

from capeval.hub import PROVENANCE_NAME, ModelNotAvailableError, weights_problem
from capeval.originals import NLTK_RESOURCES, SOURCES, ModelSource, OriginalFile, shown_size
from capeval.transfers import (GdownClient, TransferError, check_free_space, download_url, drive_file_id,
                               looks_like_html, sha256_of)
from capeval.version import __version__

MIRROR_VARIABLE = "CAPEVAL_ORIGINALS_MIRROR"
LOCK_NOTICE_SECONDS = 5.0


class OriginalUnavailableError(ModelNotAvailableError):
    """A model's original files could not be downloaded, checked or converted; the message names the model, the
    file, its URL and the steps to take by hand."""


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


def manual_steps(model: str, source: ModelSource) -> str:
    """What a user can do by hand when the originals of ``model`` cannot be downloaded."""
    places = "; ".join(f"{file.name} from {file.url}" + (f" (the file {file.drive_path} in that Google Drive folder)"
                                                         if file.drive_folder_id else "") for file in source.files)
    return (f"By hand: download {places}; then run `capeval download {model} --original FILE...` with the "
            f"downloaded files, or put them on a server and set {MIRROR_VARIABLE} to its base URL.")


def _unavailable(model: str, source: ModelSource, problem: str) -> OriginalUnavailableError:
    notice = f" {source.notice.format(model=model)}" if source.notice else ""
    return OriginalUnavailableError(f"model {model!r}: {problem}.{notice} {manual_steps(model, source)}")


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


def _mirror_url(file: OriginalFile) -> Optional[str]:
    """``<CAPEVAL_ORIGINALS_MIRROR>/<file name>``, when the variable is set."""
    base = os.environ.get(MIRROR_VARIABLE)
    return f"{base.rstrip('/')}/{file.name}" if base else None


def _download(model: str, file: OriginalFile, target: Path, progress: bool) -> str:
    """Download one original to ``target``; returns the URL it came from."""
    what = f"model {model!r}, file {file.name}"
    if _mirror_url(file) is None and file.drive_folder_id is not None:
        client = GdownClient()
        file_id = drive_file_id(client.list_folder(file.drive_folder_id), file.drive_path or file.name, file.url)
        part = target.with_name(target.name + ".part")
        check_free_space(target.parent, file.size or file.estimated_size, what)
        client.download(file_id, part, progress)
        os.replace(part, target)
        return f"https://drive.google.com/uc?id={file_id}"
    url = _mirror_url(file) or file.url
    download_url(url, target, file.size, file.estimated_size, what, progress)
    return url


def _checked(file: OriginalFile, path: Path, url: str) -> Dict[str, Any]:
    """The provenance record of a downloaded or given original, after its checks: not an HTML page, the known size
    and sha256. A file that fails them is removed when it was downloaded."""
    with open(path, "rb") as handle:
        start = handle.read(512)
    size = path.stat().st_size
    problem = None
    if looks_like_html(start):
        problem = f"{path} is an HTML page, not {file.name} (a confirmation, login or quota page)"
    elif file.size is not None and size != file.size:
        problem = f"{path} has {size:,} bytes, not the {file.size:,} of {file.name} (truncated or another file)"
    digest = sha256_of(path) if problem is None else None
    if digest is not None and file.sha256 is not None and digest != file.sha256:
        problem = f"{path} has sha256 {digest}, not the {file.sha256} of {file.name} (another or a corrupted file)"
    if problem is not None:
        raise TransferError(problem)
    return {"name": file.name, "url": url, "published_at": file.url, "drive_path": file.drive_path, "size": size,
            "sha256": digest, "sha256_checked": file.sha256 is not None, "licence": file.licence}


def _convert(model: str, source: ModelSource, paths: Mapping[str, Path], records: List[Dict[str, Any]]) -> Path:
    """Convert the originals into a temporary folder, record the provenance, then rename it into place."""
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
    except Exception as error:  # the converters' own errors name the key or file at fault
        shutil.rmtree(building, ignore_errors=True)
        raise _unavailable(model, source, f"its original files do not convert ({error})") from None
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
    NLTK's downloader (into its default folder, or the first of ``NLTK_DATA``); never downloaded when offline."""
    import nltk

    resource = NLTK_RESOURCES[package]
    found = _nltk_resource(resource)
    if found is not None:
        return found
    if offline():
        raise ModelNotAvailableError(
            f"{model} needs NLTK's {package!r} data, which is not installed, and capeval is offline (HF_HUB_OFFLINE "
            f"or CAPEVAL_OFFLINE is set): run `capeval download {model}` where there is network access, with the "
            f"same NLTK_DATA, or `python -m nltk.downloader {package}`")
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
    :class:`OriginalUnavailableError` naming the model, file, URL and the steps to take by hand."""
    source = SOURCES.get(model)
    if source is None or not source.files:
        why = source.no_original if source is not None else "capeval knows no original files of it"
        raise OriginalUnavailableError(f"model {model!r} cannot be built from original files: {why}")
    given = dict(originals or {})
    unknown = sorted(set(given) - {file.name for file in source.files})
    if unknown:
        raise OriginalUnavailableError(f"model {model!r} has no original file called {', '.join(unknown)} (its "
                                       f"files: {', '.join(file.name for file in source.files)})")
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
        for file in source.files:
            path = Path(given[file.name]) if file.name in given else downloads / file.name
            url = f"file:{path.resolve()}" if file.name in given else _mirror_url(file) or file.url
            try:
                if file.name not in given and not path.is_file():
                    if offline():
                        raise TransferError("capeval is offline (HF_HUB_OFFLINE or CAPEVAL_OFFLINE is set)")
                    downloads.mkdir(parents=True, exist_ok=True)
                    url = _download(model, file, path, progress)
                records.append(_checked(file, path, url))
            except TransferError as error:
                if file.name not in given and path.is_file():
                    path.unlink()
                raise _unavailable(model, source, f"its original file {file.name} ({shown_size(file)}) cannot be "
                                                  f"had: {error}") from None
            paths[file.name] = path
        try:
            converted = _convert(model, source, paths, records)
        finally:
            shutil.rmtree(downloads, ignore_errors=True)
        return converted
