"""Load a converted SCAN model (``model.safetensors`` + ``config.json`` + ``vocab.json``, as written by
``conversion/convert_scan.py``) from a hub id or a local folder, once per process."""
from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Optional, Union

import torch
from safetensors.torch import load_file

from capeval.configuration import CONFIG_NAME, WEIGHTS_NAME
from capeval.folder_kinds import check_folder_kind
from capeval.hub import (LoadedModels, check_weights, folder_fingerprint, loaded_revision, model_name,
                         pinned_model_folder, pinned_revision)
from capeval.models.scan.configuration import ScanConfig
from capeval.models.scan.modeling import ScanModel
from capeval.models.scan.tokenization import VOCAB_NAME, ScanTokenizer
from capeval.runtime import DeviceLike, resolve_device

ModelRef = Union[str, "os.PathLike[str]"]
HUB_FILES = (CONFIG_NAME, WEIGHTS_NAME, VOCAB_NAME)


@dataclass(frozen=True)
class LoadedScan:
    """A SCAN model with its tokenizer, where it came from, and the device it runs on (float32, as trained)."""

    model: ScanModel
    tokenizer: ScanTokenizer
    name: str
    revision: Optional[str]
    folder: Path
    device: torch.device

    @property
    def config(self) -> ScanConfig:
        return self.model.config

    @cached_property
    def fingerprint(self) -> str:
        """Content hash of the model folder (keys the on-disk caches)."""
        return folder_fingerprint(self.folder)


def load_scan_model(folder: Union[str, Path], device: Union[str, torch.device] = "cpu") -> ScanModel:
    """Build a :class:`ScanModel` from ``config.json`` and load ``model.safetensors`` strictly (every weight present,
    no extra ones)."""
    folder = Path(folder)
    config = ScanConfig.load(folder)
    model = ScanModel(config)
    check_weights(folder, [WEIGHTS_NAME])
    state = load_file(str(folder / WEIGHTS_NAME))
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise ValueError(f"{folder / WEIGHTS_NAME} does not match config.json: missing {sorted(missing)}, "
                         f"unexpected {sorted(unexpected)}")
    return model.to(device).eval()


def model_folder(model: ModelRef, revision: Optional[str] = None) -> Path:
    """The folder of a SCAN model (hub id at ``revision``, else capeval's pinned one, or local folder) holding the
    files :func:`load_scan` reads, downloaded or converted now if need be."""
    return pinned_model_folder(model, revision, HUB_FILES, "conversion/convert_scan.py")


_LOADED: LoadedModels[LoadedScan] = LoadedModels()
"""The SCAN models loaded in this process with the installed Punkt parameters, by (model, revision, device)."""


def load_scan(model: ModelRef, revision: Optional[str] = None, device: DeviceLike = None,
              punkt=None) -> LoadedScan:
    """Load (or reuse) a SCAN model and its tokenizer from a hub id (at ``revision``, else capeval's pinned one) or a
    local folder; ``device`` defaults to Accelerate's process device.

    ``punkt`` are NLTK Punkt parameters for the tokenizer (default: the installed English ``punkt_tab``)."""
    name = model_name(model)
    revision = pinned_revision(name, revision)
    target = resolve_device(device)

    def build() -> LoadedScan:
        folder = model_folder(name, revision)
        check_folder_kind(folder, ScanConfig.model_type)
        tokenizer = ScanTokenizer.from_folder(folder, punkt)
        scan = load_scan_model(folder, target)
        if len(tokenizer) != scan.config.vocab_size:
            raise ValueError(f"{folder}: {VOCAB_NAME} has {len(tokenizer)} words, the embedding "
                             f"{scan.config.vocab_size} rows")
        return LoadedScan(scan, tokenizer, name, loaded_revision(folder, revision), folder, target)

    if punkt is not None:  # a tokenizer of the caller's own: loaded for this caller alone
        return _LOADED.build_unkept(build)
    return _LOADED.get((name, revision, str(target)), build)
