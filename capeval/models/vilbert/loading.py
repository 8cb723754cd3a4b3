"""Loading a converted ViLBERT: ``config.json`` (:class:`VilbertConfig`), ``model.safetensors`` (trunk weights named
as in the original checkpoint without ``bert.``) and ``vocab.txt`` (bert-base-uncased WordPiece), as
``conversion/convert_vilbert.py`` writes them."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Union

import torch
from safetensors.torch import load_file

from capeval.models.vilbert.configuration import VilbertConfig
from capeval.models.vilbert.modeling import VilbertModel
from capeval.models.vilbert.tokenization import VilbertTokenizer

CONFIG_FILE, WEIGHTS_FILE, VOCAB_FILE = "config.json", "model.safetensors", "vocab.txt"
MODEL_FILES = (CONFIG_FILE, WEIGHTS_FILE, VOCAB_FILE)


@dataclass(frozen=True)
class LoadedVilbert:
    """A ViLBERT trunk in eval mode and the tokenizer of its vocabulary."""

    model: VilbertModel
    tokenizer: VilbertTokenizer


def load_vilbert_folder(folder: Union[str, Path], device: torch.device, dtype: torch.dtype) -> LoadedVilbert:
    """The model of a converted folder; every weight must be present and every stored weight used (strict)."""
    folder = Path(folder)
    missing = [name for name in MODEL_FILES if not (folder / name).is_file()]
    if missing:
        raise FileNotFoundError(f"{folder} is not a converted ViLBERT folder: missing {missing} "
                                "(see conversion/convert_vilbert.py)")
    model = VilbertModel(VilbertConfig.load(folder / CONFIG_FILE))
    model.load_state_dict(load_file(str(folder / WEIGHTS_FILE)), strict=True)
    return LoadedVilbert(model.to(device=device, dtype=dtype).eval(), VilbertTokenizer(folder / VOCAB_FILE))
