"""Model files from a local folder, the Hugging Face hub or the authors' original files, pinned revisions, the
checksums of converted weights, and content fingerprints.

Model-independent: each model family's loader resolves its folder here and names the files it needs; the pinned
revisions are those of :data:`capeval.registry.MODELS`, the original files those of
:data:`capeval.originals.SOURCES` (fetched and converted by :mod:`capeval.fetch`).
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Dict, Generic, Hashable, Iterator, Mapping, Optional, Sequence, TypeVar, Union

from capeval.configuration import WEIGHTS_NAME
from capeval.options import local_model_problem
from capeval.originals import SOURCES
from capeval.registry import MODELS

ModelRef = Union[str, "os.PathLike[str]"]
Loaded = TypeVar("Loaded")
PROVENANCE_NAME = "capeval_provenance.json"
"""The record, in a folder built from original files, of what it was converted from (:mod:`capeval.fetch`)."""
CHECKSUMS_NAME = "capeval_checksums.json"
"""The record, in a folder that capeval's converters (or ``capeval train bridge``) wrote, of each weight file's size
and sha256 (:func:`save_weights`), checked when the folder is loaded (:func:`check_weights`)."""
PROBE_SECONDS = 10.0
HUB_PROBES: Dict[str, Optional[str]] = {}
"""Hub endpoint -> why it could not be reached (``None``: it answered), asked once per process by
:func:`hub_unreachable`."""


class ModelNotAvailableError(OSError):
    """The model could not be found locally and cannot be downloaded now."""


class DamagedWeightsError(ModelNotAvailableError):
    """A weight file's bytes differ from the size and sha256 recorded when it was written; the message names the
    file and how to write it again."""


def model_name(model: ModelRef) -> str:
    """The name of a model as loaded-model tables key it and result signatures record it: a local folder's resolved
    absolute path, so that one folder has one name whatever the interface and working directory it was given from; a
    hub id as given."""
    folder = Path(model).expanduser()
    return str(folder.resolve()) if folder.is_dir() else str(model)


def pinned_revision(model: ModelRef, revision: Optional[str]) -> Optional[str]:
    """``revision`` if given; else capeval's pinned revision of a known hub model (:data:`capeval.registry.MODELS`,
    which the result signature records); ``None`` for local folders and other models."""
    if revision is None and not Path(model).expanduser().is_dir() and str(model) in MODELS:
        return MODELS[str(model)].revision
    return revision


def hub_unreachable() -> Optional[str]:
    """Why the Hugging Face hub (``HF_ENDPOINT``) cannot be reached, or ``None`` when it answers: one request with no
    retry, made once per process (huggingface_hub would otherwise retry each call for half a minute when there is no
    network), through huggingface_hub's own HTTP session and so its proxy settings."""
    from huggingface_hub import constants
    from huggingface_hub.utils import get_session

    endpoint = constants.ENDPOINT
    if endpoint not in HUB_PROBES:
        try:
            get_session().head(endpoint, timeout=PROBE_SECONDS)
            HUB_PROBES[endpoint] = None
        except Exception as error:  # requests', httpx's or httpx2's transport errors, by huggingface_hub version
            HUB_PROBES[endpoint] = f"{endpoint} cannot be reached ({' '.join(str(error).split())})"
    return HUB_PROBES[endpoint]


def resolve_model_folder(
    model: ModelRef, revision: Optional[str], allow_patterns: Sequence[str], converter: str, parameter: str = "model"
) -> Path:
    """The folder of ``model``, in this order: a local folder as-is; for a registry model at its pinned revision,
    its folder built from the original files in capeval's cache (:mod:`capeval.fetch`); the hub snapshot at
    ``revision`` holding the files matching ``allow_patterns`` (the local cache when offline, or when the hub cannot
    be reached: :func:`hub_unreachable`); else, for a model with original files, those files downloaded, checked and
    converted now (offline, only from a mirror folder: :func:`capeval.fetch.local_mirror`). ``converter`` names the
    script that writes such folders, and ``parameter`` the argument that takes one (``regions`` for a scorer's
    detector)."""
    problem = local_model_problem(model, converter, parameter)
    if problem is not None:
        raise ModelNotAvailableError(problem)
    folder = Path(model).expanduser()
    if folder.is_dir():
        return folder
    from capeval import fetch

    name = str(model)
    from_originals = fetch.has_originals(name) and revision in (None, MODELS[name].revision)
    cached = fetch.cached_model(name) if from_originals else None
    if cached is not None:
        return cached
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    no_hub = None if fetch.offline() else hub_unreachable()
    try:
        return Path(snapshot_download(name, revision=revision, allow_patterns=list(allow_patterns),
                                      local_files_only=fetch.offline() or no_hub is not None))
    except LocalEntryNotFoundError as error:
        unreachable = True
        hub_problem = (f"model {name!r} (revision {revision!r}) is not in the local Hugging Face cache and the hub "
                       "cannot be reached (HF_HUB_OFFLINE is set or there is no network).")
        cause = no_hub or error
    except Exception as error:  # repository or revision errors from the hub
        unreachable = False
        hub_problem = f"cannot load model {name!r} at revision {revision!r}: {error}"
        cause = error
    if from_originals and (not fetch.offline() or fetch.local_mirror()):
        try:
            return fetch.fetch_model(name)
        except fetch.OriginalUnavailableError as error:
            if no_hub is not None and fetch.no_network() is not None:  # the error says that there is no network
                raise
            raise fetch.OriginalUnavailableError(f"{error} (Nor is it on the hub: {_first_line(cause)})") from None
    if from_originals:
        raise ModelNotAvailableError(
            f"{hub_problem} Nor is it in capeval's cache of models converted from their original files "
            f"({fetch.converted_folder(name)}), and capeval is offline, so they were not downloaded. On a machine "
            f"with network access and the same cache (HF_HOME or CAPEVAL_CACHE), run `capeval download {name}`, or "
            f"pass {parameter}=<local folder> with a converted model (see {converter}). Cause: {cause}")
    if name in SOURCES and SOURCES[name].no_original:
        hub_problem += f" It has no original files to build it from: {SOURCES[name].no_original}."
    if unreachable:
        raise ModelNotAvailableError(
            f"{hub_problem} Run once with network access to cache it, or pass {parameter}=<local folder> with a "
            f"converted model (see {converter}). Cause: {cause}") from None
    raise ModelNotAvailableError(hub_problem) from None


def _first_line(cause: object) -> str:
    """The first line of an error of the hub (huggingface_hub's go on with advice about tokens and repository
    names)."""
    return next((line.strip() for line in str(cause).splitlines() if line.strip()), type(cause).__name__)


def pinned_model_folder(model: ModelRef, revision: Optional[str], files: Sequence[str], converter: str,
                        parameter: str = "model") -> Path:
    """:func:`resolve_model_folder` of ``model`` at ``revision``, else at capeval's pinned revision
    (:func:`pinned_revision`): the folder each model family's loader reads, holding ``files``."""
    return resolve_model_folder(str(model), pinned_revision(str(model), revision), files, converter, parameter)


class LoadedModels(Generic[Loaded]):
    """The models a family's loader has loaded in this process, each kept under the key of what tells two loads
    apart (model, revision, device, precision, as the loader chooses) and built by the loader's own function the
    first time its key is asked for. One lock per table is held while an entry is built, so that threads asking for
    the same model at once load it once; another family's table (a CLIP tower that the Polos loader loads while
    it builds) has its own lock."""

    def __init__(self) -> None:
        self._kept: Dict[Hashable, Loaded] = {}
        self._lock = threading.Lock()

    def get(self, key: Hashable, build: Callable[[], Loaded]) -> Loaded:
        """The model kept under ``key``, built by ``build()`` and kept if there is none yet."""
        with self._lock:
            if key not in self._kept:
                self._kept[key] = build()
            return self._kept[key]

    def build_unkept(self, build: Callable[[], Loaded]) -> Loaded:
        """``build()`` under the table's lock, not kept: a model loaded with settings that are not to be shared."""
        with self._lock:
            return build()

    def clear(self) -> None:
        """Forget every kept model (the next :meth:`get` of each key loads it again)."""
        with self._lock:
            self._kept.clear()


def loaded_revision(folder: Path, revision: Optional[str]) -> Optional[str]:
    """The revision a loaded model records (its result signatures show it): ``revision``, except for a folder that
    capeval built from original files, which records ``original-<first 12 hex digits of the sha256 of its first
    original file>`` (the checkpoint; its provenance file holds every original's sha256), so that two results show
    whether they were computed from the same original checkpoint."""
    path = Path(folder) / PROVENANCE_NAME
    if not path.is_file():
        return revision
    return f"original-{json.loads(path.read_text(encoding='utf-8'))['originals'][0]['sha256'][:12]}"


@contextmanager
def without_loading_bars() -> Iterator[None]:
    """transformers' "Loading weights" progress bar hidden while a model loads from a folder on disk (noise for a
    load of a second or two, printed by every process); its previous setting restored afterwards. Downloads keep
    huggingface_hub's bars."""
    from transformers.utils import logging as transformers_logging

    shown = transformers_logging.is_progress_bar_enabled()
    transformers_logging.disable_progress_bar()
    try:
        yield
    finally:
        if shown:
            transformers_logging.enable_progress_bar()


def save_weights(tensors: Mapping[str, Any], folder: Path, name: str = WEIGHTS_NAME,
                 metadata: Optional[Dict[str, str]] = None) -> Path:
    """Write ``tensors`` to the safetensors file ``folder/name`` and record its size and sha256 in the folder's
    :data:`CHECKSUMS_NAME` (every converter and ``capeval train bridge`` write weights through this, so that a
    damaged copy is refused when loaded); returns the file's path. Both files get the mode of any new file under the
    process's umask (safetensors writes ``0600``), so that a cache shared between users can be read by them."""
    from safetensors.torch import save_file

    path = Path(folder) / name
    save_file(dict(tensors), str(path), metadata=metadata)
    os.chmod(path, _new_file_mode())
    try:
        records = _read_checksums(Path(folder)) or {}
    except ValueError:  # a damaged record is written anew
        records = {}
    records[name] = _checksum_record(path)
    _write_checksums(Path(folder), records)
    return path


def _new_file_mode() -> int:
    """The mode ``open()`` gives a new file under the process's umask: ``0o666`` less the umask. The umask is read
    from ``/proc/self/status`` where Linux states it; elsewhere by setting it and putting it back (a file another
    thread creates in between would get ``0o022``)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            umask = next(int(line.split()[1], 8) for line in status if line.startswith("Umask:"))
    except (OSError, StopIteration, ValueError, IndexError):
        umask = os.umask(0o022)
        os.umask(umask)
    return 0o666 & ~umask


def _checksum_record(path: Path) -> Dict[str, Any]:
    """Size and sha256 of ``path``, and the modification time (ns) at which these were read from it."""
    from capeval.transfers import sha256_of

    before = path.stat()
    return {"size": before.st_size, "sha256": sha256_of(path), "checked_mtime_ns": before.st_mtime_ns}


def _read_checksums(folder: Path) -> Optional[Dict[str, Dict[str, Any]]]:
    """``{file name: record}`` of the folder's :data:`CHECKSUMS_NAME`, ``None`` when it has none; ``ValueError``
    naming the file when it cannot be read."""
    path = folder / CHECKSUMS_NAME
    if not path.is_file():
        return None
    try:
        files = json.loads(path.read_text(encoding="utf-8"))["files"]
        for name, record in files.items():
            if not (isinstance(record["size"], int) and isinstance(record["sha256"], str)):
                raise TypeError(name)
        return files
    except (ValueError, KeyError, TypeError, AttributeError) as error:  # UnicodeDecodeError is a ValueError
        raise ValueError(f"{path} is not a readable record of weight checksums ({type(error).__name__}: "
                         f"{error})") from None


def _write_checksums(folder: Path, files: Mapping[str, Mapping[str, Any]]) -> None:
    """Replace the folder's :data:`CHECKSUMS_NAME` atomically."""
    text = json.dumps({"about": "size and sha256 of each weight file as written; capeval checks them when it loads "
                                "the folder (checked_mtime_ns: the file's modification time when they last matched)",
                       "files": dict(sorted(files.items()))}, indent=2) + "\n"
    handle, temporary = tempfile.mkstemp(prefix=f".{CHECKSUMS_NAME}.", dir=folder)
    try:
        os.chmod(temporary, _new_file_mode())  # mkstemp makes it 0600
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(temporary, folder / CHECKSUMS_NAME)
    except BaseException:
        os.unlink(temporary)
        raise


def _rewrite_advice(folder: Path, what: str) -> str:
    """How to write ``what`` of ``folder`` again: ``capeval download`` for a folder capeval built from original
    files, else the conversion."""
    path = folder / PROVENANCE_NAME
    if path.is_file():
        model = json.loads(path.read_text(encoding="utf-8")).get("model")
        return (f"run `capeval download {model}`, which builds the folder again from its original files (they are "
                f"downloaded again)")
    return (f"write {what} again (re-run the conversion of conversion/convert_<model>.py, or `capeval train bridge`, "
            f"into this folder), or copy the folder again from where it came from")


def weights_problem(folder: Path, names: Optional[Sequence[str]] = None) -> Optional[str]:
    """What is wrong with the weight files ``names`` (default: every file recorded) of ``folder`` against its
    :data:`CHECKSUMS_NAME`, or ``None`` when they match or the folder records no checksum (a folder written by hand,
    by an older capeval, or a hub snapshot: loaded as it is).

    A file whose size and modification time are those recorded when its sha256 last matched is not hashed again
    (hashing reads the whole file: about half a second for a 600 MB file); any other is hashed, and when it matches,
    its modification time is recorded (where the folder is writable), so that each copy of a folder is hashed once.
    """
    folder = Path(folder)
    try:
        records = _read_checksums(folder)
    except ValueError as error:
        return str(error)
    if records is None:
        return None
    checked = False
    for name in records if names is None else [name for name in names if name in records]:
        record, path = records[name], folder / name
        if not path.is_file():
            return f"{path} is missing (the folder's {CHECKSUMS_NAME} records it)"
        status = path.stat()
        if status.st_size != record["size"]:
            return (f"{path} has {status.st_size:,} bytes, not the {record['size']:,} recorded in {CHECKSUMS_NAME} "
                    "when it was written (truncated, or another file)")
        if status.st_mtime_ns == record.get("checked_mtime_ns"):
            continue
        now = _checksum_record(path)
        if now["sha256"] != record["sha256"]:
            return (f"{path} has sha256 {now['sha256']}, not the {record['sha256']} recorded in {CHECKSUMS_NAME} "
                    "when it was written: its bytes are damaged or were changed")
        records[name] = now
        checked = True
    if checked:
        try:
            _write_checksums(folder, records)
        except OSError:  # a read-only folder: checked again on the next load
            pass
    return None


def check_weights(folder: Path, names: Optional[Sequence[str]] = None) -> None:
    """Raise :class:`DamagedWeightsError` naming the file and what to do when :func:`weights_problem` finds one."""
    problem = weights_problem(folder, names)
    if problem is not None:
        raise DamagedWeightsError(f"{problem}. Do not use these weights: {_rewrite_advice(Path(folder), 'them')}.")


def folder_fingerprint(folder: Path, suffixes: Sequence[str] = (".json", ".txt", ".safetensors")) -> str:
    """Content hash of the files of ``folder`` with these suffixes (names and bytes, in name order), leaving out
    the provenance record of a folder converted from original files (when and by which capeval version) and the
    record of its weights' checksums (which a load may update)."""
    hasher = hashlib.blake2b(digest_size=16)
    for path in sorted(p for p in folder.iterdir() if p.is_file() and p.suffix in set(suffixes)
                       and p.name not in (PROVENANCE_NAME, CHECKSUMS_NAME)):
        hasher.update(path.name.encode())
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 24), b""):
                hasher.update(block)
    return hasher.hexdigest()
