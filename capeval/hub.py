"""Model files from a local folder or the Hugging Face hub, pinned revisions, and content fingerprints.

Model-independent: each model family's loader resolves its folder here and names the files it needs; the pinned
revisions are those of :data:`capeval.registry.MODELS`.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Optional, Sequence, Union

from capeval.options import local_model_problem
from capeval.registry import MODELS

ModelRef = Union[str, "os.PathLike[str]"]


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
    """A local folder as-is, or the hub snapshot of ``model`` at ``revision`` holding the files matching
    ``allow_patterns`` (the local cache when offline); ``converter`` names the script that writes such folders, and
    ``parameter`` the argument that takes one (``regions`` for a scorer's detector)."""
    problem = local_model_problem(model, converter)
    if problem is not None:
        raise ModelNotAvailableError(problem)
    folder = Path(model).expanduser()
    if folder.is_dir():
        return folder
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        return Path(snapshot_download(str(model), revision=revision, allow_patterns=list(allow_patterns)))
    except LocalEntryNotFoundError as error:
        raise ModelNotAvailableError(
            f"model {model!r} (revision {revision!r}) is not in the local Hugging Face cache and the hub cannot be "
            "reached (HF_HUB_OFFLINE is set or there is no network). Run once with network access to cache it, or "
            f"pass {parameter}=<local folder> with a converted model (see {converter}). Cause: {error}"
        ) from None
    except Exception as error:  # repository or revision errors from the hub
        raise ModelNotAvailableError(f"cannot load model {model!r} at revision {revision!r}: {error}") from None


def folder_fingerprint(folder: Path, suffixes: Sequence[str] = (".json", ".txt", ".safetensors")) -> str:
    """Content hash of the files of ``folder`` with these suffixes (names and bytes, in name order)."""
    hasher = hashlib.blake2b(digest_size=16)
    for path in sorted(p for p in folder.iterdir() if p.is_file() and p.suffix in set(suffixes)):
        hasher.update(path.name.encode())
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 24), b""):
                hasher.update(block)
    return hasher.hexdigest()
