"""Model files from a local folder, the Hugging Face hub or the authors' original files, pinned revisions, and
content fingerprints.

Model-independent: each model family's loader resolves its folder here and names the files it needs; the pinned
revisions are those of :data:`capeval.registry.MODELS`, the original files those of
:data:`capeval.originals.SOURCES` (fetched and converted by :mod:`capeval.fetch`).
"""
from __future__ import annotations

import hashlib
import json
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Optional, Sequence, Union

from capeval.options import local_model_problem
from capeval.originals import SOURCES
from capeval.registry import MODELS

ModelRef = Union[str, "os.PathLike[str]"]
PROVENANCE_NAME = "capeval_provenance.json"
"""The record, in a folder built from original files, of what it was converted from (:mod:`capeval.fetch`)."""


class ModelNotAvailableError(OSError):
    """The model could not be found locally and cannot be downloaded now."""


def pinned_revision(model: ModelRef, revision: Optional[str]) -> Optional[str]:
    """``revision`` if given; else capeval's pinned revision of a known hub model (:data:`capeval.registry.MODELS`,
    which the result signature records); ``None`` for local folders and other models."""
    if revision is None and not Path(model).expanduser().is_dir() and str(model) in MODELS:
        return MODELS[str(model)].revision
    return revision


def resolve_model_folder(
    model: ModelRef, revision: Optional[str], allow_patterns: Sequence[str], converter: str, parameter: str = "model"
) -> Path:
    """The folder of ``model``, in this order: a local folder as-is; for a registry model at its pinned revision,
    its folder built from the original files in capeval's cache (:mod:`capeval.fetch`); the hub snapshot at
    ``revision`` holding the files matching ``allow_patterns`` (the local cache when offline); else, for a model
    with original files, those files downloaded, checked and converted now (never when offline). ``converter``
    names the script that writes such folders, and ``parameter`` the argument that takes one (``regions`` for a
    scorer's detector)."""
    problem = local_model_problem(model, converter)
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

    try:
        return Path(snapshot_download(name, revision=revision, allow_patterns=list(allow_patterns),
                                      local_files_only=fetch.offline()))
    except LocalEntryNotFoundError as error:
        unreachable = True
        hub_problem = (f"model {name!r} (revision {revision!r}) is not in the local Hugging Face cache and the hub "
                       "cannot be reached (HF_HUB_OFFLINE is set or there is no network).")
        cause = error
    except Exception as error:  # repository or revision errors from the hub
        unreachable = False
        hub_problem = f"cannot load model {name!r} at revision {revision!r}: {error}"
        cause = error
    if from_originals and not fetch.offline():
        try:
            return fetch.fetch_model(name)
        except fetch.OriginalUnavailableError as error:
            raise fetch.OriginalUnavailableError(f"{error} (The hub: {' '.join(str(cause).split())})") from None
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


def folder_fingerprint(folder: Path, suffixes: Sequence[str] = (".json", ".txt", ".safetensors")) -> str:
    """Content hash of the files of ``folder`` with these suffixes (names and bytes, in name order), leaving out
    the provenance record of a folder converted from original files (when and by which capeval version)."""
    hasher = hashlib.blake2b(digest_size=16)
    for path in sorted(p for p in folder.iterdir() if p.is_file() and p.suffix in set(suffixes)
                       and p.name != PROVENANCE_NAME):
        hasher.update(path.name.encode())
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 24), b""):
                hasher.update(block)
    return hasher.hexdigest()
