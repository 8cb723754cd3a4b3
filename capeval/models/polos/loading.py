"""Loading a converted Polos folder, as ``conversion/convert_polos.py`` writes it: ``config.json``
(:class:`PolosConfig`), ``model.safetensors`` (the layer mix and the regressor, named as in the checkpoint),
``encoder/`` (the sentence encoder, a transformers folder) and ``clip/`` (a capeval CLIP folder, loaded by
capeval's CLIP loader); from a local folder or the hub, once per process per setting.

Images are read as the authors' code reads them (the wheel's dataset class, its README and validation scripts):
``Image.open(path).convert("RGB")`` before CLIP's transform, where CLIP-S and PAC-S convert after the crop
(:attr:`~capeval.models.clip.preprocessing.ImageTransform.rgb_at_load`, set on the backbone here, which also keys
the on-disk image rows apart from CLIP-S's).

The CLIP towers run at the scorer's precision (the wheel runs ``clip.load`` on CUDA, in fp16); the sentence encoder
and the regressor always run in float32, as in the wheel.
"""
from __future__ import annotations

import hashlib
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Dict, List, Optional, Tuple

import torch
from safetensors.torch import load_file

from capeval.configuration import CONFIG_NAME, WEIGHTS_NAME
from capeval.functional.polos import Layer
from capeval.folder_kinds import check_folder_kind, load_transformers_model
from capeval.hub import (LoadedModels, ModelRef, check_weights, folder_fingerprint, loaded_revision, model_name,
                         pinned_model_folder, pinned_revision)
from capeval.models.clip.loading import Backbone, load_backbone
from capeval.models.polos.configuration import CLIP_FOLDER, ENCODER_FOLDER, PolosConfig
from capeval.models.polos.modeling import PolosSentenceEncoder
from capeval.runtime import precision_dtype

if TYPE_CHECKING:  # transformers is imported by the loading, not by this module
    from transformers import PreTrainedTokenizerBase

CONVERTER = "conversion/convert_polos.py"
HUB_FILES = (CONFIG_NAME, WEIGHTS_NAME, f"{ENCODER_FOLDER}/*", f"{CLIP_FOLDER}/*")
FEED_FORWARD = "ff.0.ff.linear_{}"
"""The checkpoint's names of the regressor's linear layers (``ff`` is ``Sequential(FeedForward, Sigmoid)``, whose
``FeedForward.ff`` holds ``linear_1``, ``activation_1``, ``dropout_1``, ...)."""


@dataclass(frozen=True)
class LoadedPolos:
    """A Polos model: its sentence encoder and tokenizer, CLIP backbone, regressor layers and provenance."""

    sentence_encoder: PolosSentenceEncoder
    tokenizer: PreTrainedTokenizerBase
    backbone: Backbone
    layers: Tuple[Layer, ...]
    """The regressor's linear layers as float64 arrays, in order."""
    config: PolosConfig
    name: str
    revision: Optional[str]
    folder: Path
    fingerprint: str
    """Content hash of the folder's files, the encoder's and CLIP's included."""
    device: torch.device

    @property
    def max_tokens(self) -> int:
        """The longest token sequence the encoder's position embeddings hold (RoBERTa's positions start after the
        pad id: 512 for ``max_position_embeddings`` 514)."""
        config = self.sentence_encoder.encoder.config
        offset = self.sentence_encoder.pad_token_id + 1 if config.model_type in ("roberta", "xlm-roberta") else 0
        return int(config.max_position_embeddings) - offset


def regressor_layers(state: Dict[str, torch.Tensor]) -> List[Layer]:
    """The regressor's ``(weight, bias)`` pairs, ``linear_1``, ``linear_2``, ... as float64 arrays."""
    layers: List[Layer] = []
    while f"{FEED_FORWARD.format(len(layers) + 1)}.weight" in state:
        name = FEED_FORWARD.format(len(layers) + 1)
        layers.append((state[f"{name}.weight"].double().numpy(), state[f"{name}.bias"].double().numpy()))
    return layers


def load_polos_folder(folder: Path, device: torch.device, precision: str, name: Optional[str] = None,
                      revision: Optional[str] = None) -> LoadedPolos:
    """The model of a converted folder; every stored weight must be used and every weight present."""
    from transformers import AutoModel, AutoTokenizer

    check_folder_kind(folder, PolosConfig.model_type)
    config = PolosConfig.load(folder)
    check_weights(folder, [WEIGHTS_NAME])
    check_weights(folder / ENCODER_FOLDER, [WEIGHTS_NAME])
    encoder = load_transformers_model(AutoModel, folder / ENCODER_FOLDER)
    tokenizer = AutoTokenizer.from_pretrained(folder / ENCODER_FOLDER)
    tokenizer.model_max_length = sys.maxsize  # the scorer cuts at the encoder's positions itself
    sentence_encoder = PolosSentenceEncoder(config, encoder)
    state = load_file(str(folder / WEIGHTS_NAME))
    layers = regressor_layers(state)
    mix = {key: value for key, value in state.items() if key.startswith("scalar_mix.")}
    unused = sorted(set(state) - set(mix) - {f"{FEED_FORWARD.format(index)}.{part}"
                                               for index in range(1, len(layers) + 1) for part in ("weight", "bias")})
    expected = len(config.hidden_sizes) + 1
    if unused or len(layers) != expected:
        raise ValueError(f"{folder / WEIGHTS_NAME} does not match the Polos config: {len(layers)} regressor layers "
                         f"(expected {expected}), unused weights {unused}")
    if sentence_encoder.scalar_mix is not None:
        sentence_encoder.scalar_mix.load_state_dict({key[len("scalar_mix."):]: value for key, value in mix.items()})
    elif mix:
        raise ValueError(f"{folder / WEIGHTS_NAME} holds a layer mix but the config uses layer {config.layer}")
    backbone = load_backbone(folder / CLIP_FOLDER, None, device, precision)
    backbone = replace(backbone, image_transform=replace(backbone.image_transform, rgb_at_load=True))
    fingerprints = "|".join(folder_fingerprint(part) for part in (folder, folder / ENCODER_FOLDER, folder / CLIP_FOLDER))
    return LoadedPolos(sentence_encoder.to(device=device, dtype=torch.float32).eval(), tokenizer, backbone,
                       tuple(layers), config, name if name is not None else str(folder), revision, folder,
                       hashlib.blake2b(fingerprints.encode(), digest_size=16).hexdigest(), device)


def model_folder(model: ModelRef, revision: Optional[str] = None) -> Path:
    """The folder of a Polos model (hub id at ``revision``, else capeval's pinned one, or local folder) holding the
    files :func:`load_polos` reads, downloaded or converted now if need be."""
    return pinned_model_folder(model, revision, HUB_FILES, CONVERTER)


_LOADED: LoadedModels[LoadedPolos] = LoadedModels()
"""The Polos models loaded in this process, by (model, revision, device, dtype)."""


def load_polos(model: ModelRef, revision: Optional[str], device: torch.device, precision: str) -> LoadedPolos:
    """A hub id (at ``revision``, else capeval's pinned one) or local folder, loaded once per process per
    (model, revision, device, precision)."""
    name = model_name(model)
    revision = pinned_revision(name, revision)

    def build() -> LoadedPolos:
        folder = model_folder(name, revision)
        return load_polos_folder(folder, device, precision, name, loaded_revision(folder, revision))

    return _LOADED.get((name, revision, str(device), precision_dtype(precision)), build)
