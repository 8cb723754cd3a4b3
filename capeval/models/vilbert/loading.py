"""Loading a converted ViLBERT: ``config.json`` (:class:`VilbertConfig`), ``model.safetensors`` (trunk weights named
as in the original checkpoint without ``bert.``) and ``vocab.txt`` (bert-base-uncased WordPiece), as
``conversion/convert_vilbert.py`` writes them, from a local folder or the hub; once per process per setting."""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Optional, Union

import torch
from safetensors.torch import load_file

from capeval.configuration import CONFIG_NAME, WEIGHTS_NAME
from capeval.folder_kinds import check_folder_kind
from capeval.hub import (LoadedModels, ModelRef, check_weights, folder_fingerprint, loaded_revision, model_name,
                         pinned_model_folder, pinned_revision)
from capeval.models.vilbert.configuration import VilbertConfig
from capeval.models.vilbert.modeling import VilbertModel
from capeval.models.vilbert.tokenization import VilbertTokenizer
from capeval.runtime import precision_dtype

VOCAB_FILE = "vocab.txt"
MODEL_FILES = (CONFIG_NAME, WEIGHTS_NAME, VOCAB_FILE)
CONVERTER = "conversion/convert_vilbert.py"


@dataclass(frozen=True)
class LoadedVilbert:
    """A ViLBERT trunk in eval mode, the tokenizer of its vocabulary, and where it came from."""

    model: VilbertModel
    tokenizer: VilbertTokenizer
    name: str
    revision: Optional[str]
    folder: Path

    @cached_property
    def fingerprint(self) -> str:
        """Content hash of the weights, config and vocabulary."""
        return folder_fingerprint(self.folder)


def load_vilbert_folder(folder: Union[str, Path], device: torch.device, dtype: torch.dtype,
                        name: Optional[str] = None, revision: Optional[str] = None) -> LoadedVilbert:
    """The model of a converted folder; every weight must be present and every stored weight used (strict)."""
    folder = Path(folder)
    check_folder_kind(folder, "vilbert")
    model = VilbertModel(VilbertConfig.load(folder))
    check_weights(folder, [WEIGHTS_NAME])
    model.load_state_dict(load_file(str(folder / WEIGHTS_NAME)), strict=True)
    return LoadedVilbert(model.to(device=device, dtype=dtype).eval(), VilbertTokenizer(folder / VOCAB_FILE),
                         name if name is not None else str(folder), revision, folder)


def model_folder(model: ModelRef, revision: Optional[str] = None) -> Path:
    """The folder of a ViLBERT model (hub id at ``revision``, else capeval's pinned one, or local folder) holding the
    files :func:`load_vilbert` reads, downloaded or converted now if need be."""
    return pinned_model_folder(model, revision, MODEL_FILES, CONVERTER)


_LOADED: LoadedModels[LoadedVilbert] = LoadedModels()
"""The ViLBERT models loaded in this process, by (model, revision, device, dtype)."""


def load_vilbert(model: ModelRef, revision: Optional[str], device: torch.device, precision: str) -> LoadedVilbert:
    """A hub id (at ``revision``, else capeval's pinned one) or local folder, loaded once per process per
    (model, revision, device, precision)."""
    name = model_name(model)
    revision = pinned_revision(name, revision)
    dtype = precision_dtype(precision)

    def build() -> LoadedVilbert:
        folder = model_folder(name, revision)
        return load_vilbert_folder(folder, device, dtype, name, loaded_revision(folder, revision))

    return _LOADED.get((name, revision, str(device), dtype), build)
